"""ResetPPO as a drop-in RecurrentPPO: settings, save/load, SB3 integrations, bad input."""

import os
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, small_reset_ppo
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize
from window_weights import brute_force_step_weights

from sb3_reset_ppo import DictWindowRolloutBuffer, ResetPPO, WindowRolloutBuffer

# batch_size counts transitions: 4 windows of 4
SMALL: dict[str, Any] = dict(
    n_steps=16, batch_size=16, n_epochs=2, window_size=4, policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]}
)


def _env(n_envs: int = 2, **kwargs: Any):
    return make_vec_env(RandomEpisodeEnv, n_envs=n_envs, seed=0, env_kwargs=kwargs)


def _predict_sequence(model: RecurrentPPO, observations: np.ndarray) -> np.ndarray:
    state, starts, actions = None, np.ones(2, dtype=bool), []
    for obs in observations:
        action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        starts = np.zeros(2, dtype=bool)
        actions.append(action)
    return np.array(actions)


@pytest.mark.parametrize(
    "boundary,weighting,window_size", [("mask", "importance", 3), ("reset", "uniform", 5), ("mask", "kept_mean", 4)]
)
def test_save_load_round_trip(tmp_path: Path, boundary: str, weighting: str, window_size: int) -> None:
    settings = {**SMALL, "window_size": window_size, "batch_size": 4 * window_size}
    model = ResetPPO("MlpLstmPolicy", _env(), boundary=boundary, weighting=weighting, seed=1, **settings)
    model.learn(64)
    model.save(tmp_path / "model.zip")
    loaded = ResetPPO.load(tmp_path / "model.zip", env=_env())
    assert (loaded.window_size, loaded.boundary, loaded.weighting) == (window_size, boundary, weighting)
    assert isinstance(loaded.rollout_buffer, WindowRolloutBuffer)
    assert loaded.rollout_buffer.window_size == window_size and loaded.rollout_buffer.boundary == boundary
    observations = np.random.default_rng(0).normal(size=(6, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_predict_sequence(model, observations), _predict_sequence(loaded, observations))
    for p, q in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True):
        assert th.equal(p, q)
    loaded.learn(32, reset_num_timesteps=False)
    assert loaded.num_timesteps == 96


def test_load_recurrent_ppo_checkpoint(tmp_path: Path) -> None:
    source = RecurrentPPO("MlpLstmPolicy", _env(), n_steps=16, batch_size=16, seed=0, policy_kwargs={"lstm_hidden_size": 8})
    source.learn(32)
    source.save(tmp_path / "recurrent.zip")
    # RecurrentPPO's arguments keep their meaning: batch_size=16 transitions is one window of 16
    model = ResetPPO.load(tmp_path / "recurrent.zip", env=_env())
    assert (model.batch_size, model.n_epochs, model.n_steps) == (16, source.n_epochs, 16)
    # ResetPPO's own settings take its defaults: windows of min(batch_size, n_steps), full coverage
    settings = (model.window_size, model.window_coverage, model.boundary, model.weighting, model.window_stride)
    assert settings == ("batch", "full", "reset", "uniform", None)
    assert model.window_length == 16 and model.rollout_buffer.window_stride == 16
    observations = np.random.default_rng(1).normal(size=(5, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_predict_sequence(source, observations), _predict_sequence(model, observations))
    before = [p.clone() for p in model.policy.parameters()]
    model.learn(32, reset_num_timesteps=False)
    assert model.num_timesteps == 64
    assert any(not th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_load_recurrent_ppo_checkpoint_with_short_rollout(tmp_path: Path) -> None:
    source = RecurrentPPO("MlpLstmPolicy", _env(), n_steps=8, batch_size=8, policy_kwargs={"lstm_hidden_size": 8})
    source.save(tmp_path / "short.zip")
    # The default window follows n_steps and batch_size: 8 steps here
    model = ResetPPO.load(tmp_path / "short.zip", env=_env())
    assert model.window_length == 8
    model.learn(16)
    # A window longer than the rollout is refused, naming n_steps
    with pytest.raises(ValueError, match=r"window_size must be at most n_steps=8"):
        ResetPPO.load(tmp_path / "short.zip", env=_env(), window_size=16)


def test_dict_observations_use_dict_buffer() -> None:
    model = ResetPPO("MultiInputLstmPolicy", _env(obs_kind="dict"), **{**SMALL, "policy_kwargs": {"lstm_hidden_size": 8}})
    assert isinstance(model.rollout_buffer, DictWindowRolloutBuffer)
    model.learn(32)
    sample = next(model.rollout_buffer.get(2 * 4))
    assert isinstance(sample.observations, dict)
    # Distinct steps of the 2 windows (at most 8); SB3 wraps the env in VecTransposeImage: channel first
    assert sample.observations["image"].shape[1:] == (1, 36, 36)
    assert sample.observations["image"].shape[0] == int(th.unique(sample.slot_steps).numel()) <= 8
    # Images stay compact (the observation space's dtype) until the minibatch is preprocessed
    assert sample.observations["image"].dtype == th.uint8


class _RecordingCallback(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.calls = {"rollout_start": 0, "step": 0, "training_end": 0}

    def _on_rollout_start(self) -> None:
        self.calls["rollout_start"] += 1

    def _on_step(self) -> bool:
        self.calls["step"] += 1
        return True

    def _on_training_end(self) -> None:
        self.calls["training_end"] += 1


def test_callbacks_progress_bar_and_checkpoints(tmp_path: Path) -> None:
    callback = _RecordingCallback()
    checkpoints = CheckpointCallback(save_freq=16, save_path=str(tmp_path), name_prefix="reset")
    model = ResetPPO("MlpLstmPolicy", _env(), **SMALL)
    model.learn(64, callback=[callback, checkpoints], progress_bar=True)
    assert callback.calls == {"rollout_start": 2, "step": 32, "training_end": 1}
    saved = sorted(os.listdir(tmp_path))
    assert saved and all(name.startswith("reset") for name in saved)
    ResetPPO.load(tmp_path / saved[-1], env=_env()).learn(32, reset_num_timesteps=False)


def test_tensorboard_logs_window_diagnostics(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = ResetPPO("MlpLstmPolicy", _env(), tensorboard_log=str(tmp_path), **SMALL)
    model.learn(64)
    run_dirs = list(tmp_path.iterdir())
    assert [d.name for d in run_dirs] == ["ResetPPO_1"]
    events = EventAccumulator(str(run_dirs[0]))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in ("kept_slot_fraction", "episode_start_weight", "untrained_step_fraction", "windows_with_reset"):
        assert f"train/{key}" in tags
    for key in ("policy_gradient_loss", "value_loss", "entropy_loss", "approx_kl", "clip_fraction", "loss"):
        assert f"train/{key}" in tags


@pytest.mark.parametrize("coverage", ["inside", "full"])
@pytest.mark.parametrize("window_stride", [1, None])
@pytest.mark.parametrize("boundary", ["reset", "mask"])
def test_logged_diagnostics_equal_window_weights(boundary: str, window_stride: int | None, coverage: str) -> None:
    model = ResetPPO(
        "MlpLstmPolicy", _env(), boundary=boundary, window_stride=window_stride, window_coverage=coverage, **SMALL
    )
    model.set_logger(configure(None, []))
    model.learn(32)
    model.logger.name_to_value.clear()
    model.train()
    logged = dict(model.logger.name_to_value)
    starts = model.rollout_buffer.episode_starts
    # Shares over all windows of the rollout: the expected shares of an epoch, whatever the stride
    weights = brute_force_step_weights(starts, 4, boundary, "uniform", window_stride or 4, coverage)
    counts = brute_force_step_weights(starts, 4, boundary, "uniform", 1, coverage)
    # Real slots of all windows: inside, 13 windows of 4 per env; full, every step in 4 windows (clipped ones shorter)
    real_slots = 2 * (16 - 4 + 1) * 4 if coverage == "inside" else 2 * 16 * 4
    assert logged["train/kept_slot_fraction"] == pytest.approx(counts.sum() / real_slots)
    assert logged["train/untrained_step_fraction"] == pytest.approx(np.mean(weights == 0))
    assert logged["train/episode_start_weight"] == pytest.approx(weights[starts > 0].mean() / weights.mean(), rel=1e-5)
    if boundary == "reset":
        assert logged["train/kept_slot_fraction"] == 1.0
    else:
        assert logged["train/kept_slot_fraction"] < 1.0


def test_target_kl_stops_early() -> None:
    model = ResetPPO("MlpLstmPolicy", _env(), target_kl=1e-9, learning_rate=1e-2, **{**SMALL, "n_epochs": 10})
    model.learn(32)
    # The first minibatch of the first epoch has kl 0; an update then exceeds the tiny target in epoch 1
    assert model._n_updates <= 2


def test_clip_range_vf_vecnormalize_and_gsde() -> None:
    env = VecNormalize(_env(action_space=spaces.Box(-1, 1, (2,), dtype=np.float32), truncate=True))
    model = ResetPPO("MlpLstmPolicy", env, clip_range_vf=lambda progress: 0.1 + 0.1 * progress, use_sde=True, **SMALL)
    model.set_logger(configure(None, []))
    model.learn(32)
    # train() evaluates the schedule and passes the value to every minibatch's loss
    passed: list[float | None] = []
    minibatch_loss = model._minibatch_loss

    def spy(samples: Any, clip_range: float, clip_range_vf: float | None) -> Any:
        passed.append(clip_range_vf)
        return minibatch_loss(samples, clip_range, clip_range_vf)

    model._minibatch_loss = spy  # type: ignore[method-assign]
    model.train()
    expected = 0.1 + 0.1 * model._current_progress_remaining
    assert passed and all(value == pytest.approx(expected) for value in passed)
    assert model.logger.name_to_value["train/clip_range_vf"] == pytest.approx(expected)
    # ... where it clips: with moved parameters, a tiny clip range changes the value loss
    samples = next(model.rollout_buffer.get(None))
    with th.no_grad():
        clipped = minibatch_loss(samples, 0.2, 1e-6).value_loss
        unclipped = minibatch_loss(samples, 0.2, None).value_loss
    assert not th.allclose(clipped, unclipped)
    assert "train/std" in model.logger.name_to_value
    assert isinstance(env.obs_rms, RunningMeanStd) and env.obs_rms.count > 32


def test_cnn_policy_trains() -> None:
    kwargs = {"features_extractor_kwargs": {"features_dim": 8}, "lstm_hidden_size": 8}
    model = ResetPPO("CnnLstmPolicy", _env(obs_kind="image"), **{**SMALL, "policy_kwargs": kwargs})
    before = [p.clone() for p in model.policy.parameters()]
    model.learn(32)
    assert any(not th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_batch_size_larger_than_an_epoch_warns_once_at_the_users_line() -> None:
    # Inside coverage, stride 4: 3 or 4 windows of 4 per env and epoch, at most 32 transitions
    with pytest.warns(UserWarning, match=r"batch_size=400 is more than an epoch holds \(32 transitions") as record:
        model = ResetPPO("MlpLstmPolicy", _env(), window_coverage="inside", **{**SMALL, "batch_size": 400})
        model.learn(32)
    assert sum("batch_size" in str(w.message) for w in record) == 1
    assert record[0].filename == __file__
    assert [int(batch.kept.numel()) for batch in model.rollout_buffer.get(400)] in ([24], [28], [32])
    # With every window every epoch, 2 * 13 windows of 4
    with pytest.warns(UserWarning, match="104 transitions"):
        ResetPPO("MlpLstmPolicy", _env(), window_stride=1, window_coverage="inside", **{**SMALL, "batch_size": 400})


@pytest.mark.parametrize("batch_size", [18, 3, 16, 8])
def test_batch_size_counts_transitions(batch_size: int) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = ResetPPO(
            "MlpLstmPolicy", _env(), window_stride=1, window_coverage="inside", **{**SMALL, "batch_size": batch_size}
        )
    messages = [str(w.message) for w in record if "window_size=4" in str(w.message)]
    assert all(w.filename == __file__ for w in record if "window_size=4" in str(w.message))
    # 2 envs x 13 windows x 4 steps = 104 transitions per epoch; a minibatch holds at least one window's worth
    full = max(batch_size, 4)
    expected = []
    if batch_size < 4:
        expected.append(f"batch_size={batch_size} is smaller than window_size=4: each minibatch holds 4 transitions "
                        "(one window's worth), more than batch_size")  # fmt: skip
    elif batch_size % 4:
        expected.append(f"batch_size={batch_size} is not a multiple of window_size=4: minibatch edges cut windows, and "
                        "the later piece of a cut window starts from the memory stored for its first step (as "
                        "RecurrentPPO cuts sequences at minibatch edges)")  # fmt: skip
    elif 104 % full:
        # The remainder left out begins at a random place: minibatch edges then cut windows as well
        expected.append(f"batch_size={batch_size} is a multiple of window_size=4, but an epoch whose transitions are not "
                        "a multiple of it is cut into minibatches from a random place: minibatch edges cut windows, and "
                        "the later piece of a cut window starts from the memory stored for its first step (as "
                        "RecurrentPPO cuts sequences at minibatch edges)")  # fmt: skip
    if 104 % full:
        expected.append(f"You have specified a mini-batch size of {batch_size}, but because an epoch holds 104 transitions "
                        "(n_envs=2, n_steps=16, window_size=4, window_stride=1, window_coverage='inside'), each epoch "
                        f"trains {104 // full} minibatch(es) of {full} transitions and leaves {104 % full} out, each "
                        "transition with the same probability (every minibatch is full: a shorter one would weigh more "
                        "after gradient clipping). We recommend a batch_size that is a factor of the epoch's "
                        "transitions.")  # fmt: skip
    assert messages == expected
    model.learn(32)
    for _ in range(20):
        sizes = [int(batch.kept.numel() if batch.n_real_slots is None else batch.n_real_slots)
                 for batch in model.rollout_buffer.get(model.batch_size)]  # fmt: skip
        # Every minibatch holds `full` transitions; the remainder is left out
        assert sizes == [full] * (104 // full)


def _warnings_of(**kwargs: Any) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ResetPPO("MlpLstmPolicy", _env(n_envs=1), **kwargs)
    return [str(w.message) for w in record]


def test_a_remainder_that_cuts_windows_is_warned_about() -> None:
    # One env, 64 steps, windows of 16 (a divisor of n_steps and batch_size) and batch_size=48: every epoch holds 64
    # transitions, trains 48 from a random offset and leaves 16 out, so minibatch edges cut a window in most epochs
    messages = _warnings_of(n_steps=64, batch_size=48, window_size=16)
    assert any("batch_size=48 is a multiple of window_size=16" in m and "minibatch edges cut windows" in m for m in messages)
    model = ResetPPO("MlpLstmPolicy", _env(n_envs=1), n_steps=64, batch_size=48, window_size=16)
    model.learn(64)
    rows = [int(batch.slot_steps.shape[0]) for _ in range(30) for batch in model.rollout_buffer.get(48)]
    assert max(rows) > 48 // 16  # more rows than whole windows: a window was cut
    # Dividing settings cut nothing and say nothing about it
    assert not any("cut windows" in m for m in _warnings_of(n_steps=64, batch_size=32, window_size=16))


def test_an_epoch_of_fewer_slots_than_batch_size_is_one_minibatch_and_warned_as_such() -> None:
    # Inside coverage, 10 steps, windows of 4, stride 4: an epoch holds 8 transitions (phases 0 to 2) or 4 (phase 3).
    # An epoch of 8 trains one minibatch of 6 and leaves 2 out; an epoch of 4 trains its 4 as one minibatch, divided
    # by the rollout's normaliser, 6, as every minibatch (nothing is left out of it)
    kwargs: dict[str, Any] = dict(n_steps=10, batch_size=6, window_size=4, window_coverage="inside")
    messages = [m for m in _warnings_of(**kwargs) if "An epoch holds 4 to 8 transitions" in m]
    assert len(messages) == 1 and messages[0].endswith(
        "an epoch of fewer than 6 transitions is trained whole, as one minibatch whose loss is divided by the same number "
        "as every other minibatch's"
    )
    model = ResetPPO("MlpLstmPolicy", _env(n_envs=1), **kwargs)
    model.learn(10)
    sizes = set()
    for _ in range(40):
        batches = list(model.rollout_buffer.get(6))
        assert len(batches) == 1 and batches[0].loss_normaliser == 6
        sizes.add(int(batches[0].kept.sum()))
    assert sizes == {4, 6}


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"window_size": 0}, ValueError, "window_size must be a positive int, got 0"),
        ({"window_size": -3}, ValueError, "window_size must be a positive int, got -3"),
        ({"window_size": 4.0}, TypeError, "window_size must be a positive int, got 4.0"),
        ({"window_size": 17}, ValueError, "window_size must be at most n_steps=16"),
        ({"boundary": "truncate"}, ValueError, r"boundary must be one of \('reset', 'mask'\), got 'truncate'"),
        (
            {"weighting": "inverse"},
            ValueError,
            r"weighting must be one of \('uniform', 'importance', 'kept_mean'\), got 'inverse'",
        ),
        ({"window_stride": 0}, ValueError, r"window_stride must be a positive int, got 0; or None \(window_size\)"),
        ({"window_stride": 2.0}, TypeError, "window_stride must be a positive int, got 2.0"),
        ({"batch_size": 0}, ValueError, "batch_size must be a positive int"),
        ({"batch_size": 2.5}, TypeError, "batch_size must be a positive int"),
        # Named as itself, not through the window_size it derives
        ({"n_steps": 0}, ValueError, "n_steps must be a positive int, got 0"),
        ({"n_steps": 0, "window_size": 4}, ValueError, "n_steps must be a positive int, got 0"),
        ({"n_steps": 8.0}, TypeError, "n_steps must be a positive int, got 8.0"),
        ({"clip_range_vf": -0.1}, ValueError, "clip_range_vf must be positive"),
        ({"consecutive_windows": 0}, ValueError, "consecutive_windows must be a positive int, got 0; or 'auto'"),
        ({"consecutive_windows": "all"}, TypeError, "consecutive_windows must be a positive int, got 'all'"),
        ({"policy_kwargs": {"lstm_kwargs": {"bidirectional": True}}}, ValueError, "bidirectional=True"),
    ],
)
def test_bad_input(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ResetPPO("MlpLstmPolicy", _env(), **{**SMALL, **kwargs})


def test_consecutive_windows_auto_follows_observations_and_overlap() -> None:
    kwargs = {**SMALL, "policy_kwargs": {"lstm_hidden_size": 8, "features_extractor_kwargs": {"features_dim": 8}}}
    assert ResetPPO("MlpLstmPolicy", _env(), window_stride=1, **SMALL).rollout_buffer.consecutive_windows == 1
    images = _env(obs_kind="image")
    # Runs pay off only where windows overlap: ceil(window_size / window_stride) windows cover one window's steps
    assert ResetPPO("CnnLstmPolicy", images, window_stride=1, **kwargs).rollout_buffer.consecutive_windows == 4
    assert ResetPPO("CnnLstmPolicy", images, window_stride=3, **kwargs).rollout_buffer.consecutive_windows == 2
    assert ResetPPO("CnnLstmPolicy", images, **kwargs).rollout_buffer.consecutive_windows == 1
    dict_kwargs = {**SMALL, "policy_kwargs": {"lstm_hidden_size": 8}}
    dict_model = ResetPPO("MultiInputLstmPolicy", _env(obs_kind="dict"), window_stride=1, **dict_kwargs)
    assert dict_model.rollout_buffer.consecutive_windows == 4
    assert ResetPPO("MlpLstmPolicy", _env(), consecutive_windows=3, **SMALL).rollout_buffer.consecutive_windows == 3


def test_non_recurrent_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"policy must be a RecurrentActorCriticPolicy subclass.*got ActorCriticPolicy"):
        ResetPPO(ActorCriticPolicy, _env(), **SMALL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"policy 'MlpPolicy' is unknown to ResetPPO.*'MlpLstmPolicy'"):
        ResetPPO("MlpPolicy", _env(), **SMALL)


def test_string_env_and_single_env() -> None:
    import sb3_reset_ppo.envs  # registers CueRecall-v0

    model = ResetPPO("MlpLstmPolicy", "CueRecall-v0", window_coverage="inside", **SMALL)
    # 13 window starts, every 4 steps from a random phase: at most 4 windows per epoch
    assert model.n_envs == 1 and model.rollout_buffer.n_windows == 4
    inside = ResetPPO("MlpLstmPolicy", "CueRecall-v0", window_stride=1, window_coverage="inside", **SMALL)
    assert inside.rollout_buffer.n_windows == 13
    # Full coverage: 19 window starts (-3 .. 15), every 4 steps: at most 5 windows (clipped ones shorter)
    assert ResetPPO("MlpLstmPolicy", "CueRecall-v0", window_coverage="full", **SMALL).rollout_buffer.n_windows == 5
    model.learn(32)
    assert isinstance(gym.make("CueRecall-v0").unwrapped, sb3_reset_ppo.envs.CueRecallEnv)


def test_optimizer_steps_with_foreach_kernels_and_the_same_parameters() -> None:
    # train() lets an optimizer left at foreach=None use torch's _foreach kernels on the CPU: bitwise the
    # same parameters as the per-parameter loop, and an explicit choice is kept
    models = {}
    for name, optimizer_kwargs in (("default", {}), ("loop", {"foreach": False})):
        policy_kwargs = {**SMALL["policy_kwargs"], "optimizer_kwargs": optimizer_kwargs}
        model = ResetPPO("MlpLstmPolicy", _env(), seed=3, **{**SMALL, "policy_kwargs": policy_kwargs})
        model.learn(64)
        models[name] = model
    assert [group["foreach"] for group in models["default"].policy.optimizer.param_groups] == [True]
    assert [group["foreach"] for group in models["loop"].policy.optimizer.param_groups] == [False]
    for default, loop in zip(models["default"].policy.parameters(), models["loop"].policy.parameters(), strict=True):
        assert th.equal(default, loop)


def test_window_arguments_are_validated_once_and_again_only_when_load_changes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sb3_reset_ppo import WindowSettings

    calls: list[tuple[Any, ...]] = []
    validated = WindowSettings.validated.__func__  # type: ignore[attr-defined]

    def counting(cls: type[WindowSettings], *args: Any, **kwargs: Any) -> WindowSettings:
        calls.append(args)
        return validated(cls, *args, **kwargs)

    monkeypatch.setattr(WindowSettings, "validated", classmethod(counting))
    model = ResetPPO("MlpLstmPolicy", _env(), n_steps=16, batch_size=16, window_size=4)
    assert len(calls) == 1 and model.window_length == 4
    model.save(tmp_path / "model")
    calls.clear()
    # load() builds the model with the defaults, then sets the saved arguments: they are validated once more
    loaded = ResetPPO.load(tmp_path / "model", env=_env(), window_size=8)
    assert loaded.window_length == 8 and calls[-1][0] == 8
    with pytest.raises(ValueError, match="window_size must be at most n_steps=16"):
        ResetPPO.load(tmp_path / "model", env=_env(), window_size=17)


def test_batch_size_below_window_size_says_what_it_uses() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        small_reset_ppo(batch_size=2, window_size=4)
    messages = [str(w.message) for w in caught]
    assert any("smaller than window_size=4" in m and "each minibatch holds 4 transitions" in m for m in messages), messages
    assert not any("not a multiple" in m for m in messages)
