"""Defects found by the reviews of issue 35 in the model, policies and checkpoints, each pinned by a test."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.checkpoints import check_checkpoint


def _model(**kwargs: object) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=kwargs.pop("n_envs", 2), seed=0)  # type: ignore[arg-type]
    settings: dict = dict(n_steps=16, batch_size=16, n_epochs=2, window_size=4, seed=0)
    settings.update(kwargs)
    settings.setdefault("policy_kwargs", {"lstm_hidden_size": 8, "net_arch": [8]})
    return ResetPPO(settings.pop("policy", "MlpLstmPolicy"), env, **settings)


def test_set_random_seed_none_leaves_the_window_generator_alone() -> None:
    # SB3's set_random_seed(None) does nothing; reseeding the window generator from OS entropy broke reproducibility
    model = _model()
    state = model.rollout_buffer.generator.bit_generator.state
    model.set_random_seed(None)
    assert model.rollout_buffer.generator.bit_generator.state == state
    model.set_random_seed(3)
    assert model.rollout_buffer.generator.bit_generator.state != state


def test_a_loaded_checkpoint_continues_the_window_generator(tmp_path: Path) -> None:
    model = _model()
    model.learn(64)
    model.save(tmp_path / "model")
    loaded = ResetPPO.load(tmp_path / "model", env=model.get_env())
    # The next phases and orders are the saved model's, not those of a fresh generator seeded alike
    assert loaded.rollout_buffer.generator.integers(1 << 30, size=8).tolist() == (
        model.rollout_buffer.generator.integers(1 << 30, size=8).tolist()
    )
    fresh = _model()
    assert fresh.rollout_buffer.generator.bit_generator.state != loaded.rollout_buffer.generator.bit_generator.state


def test_burn_in_only_steps_skip_autograd_in_the_features_extractor() -> None:
    model = _model(burn_in=6, window_size=4, n_steps=32, batch_size=8)
    model.learn(64 * 2)
    calls: list[tuple[bool, int]] = []
    handle = model.policy.features_extractor.register_forward_hook(
        lambda module, inputs, output: calls.append((th.is_grad_enabled(), int(output.shape[0])))
    )
    try:
        samples = next(model.rollout_buffer.get(8))
        assert samples.burn_in is not None
        model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None)
    finally:
        handle.remove()
    slot_steps = int(samples.slot_steps.unique().numel())
    distinct = int(samples.observations.shape[0])  # type: ignore[union-attr]
    assert distinct > slot_steps  # the burn-in reaches steps no slot holds
    # One call with gradient over the slots' steps, one without over the burn-in-only steps
    assert calls == [(True, slot_steps), (False, distinct - slot_steps)]


def test_burn_in_features_without_gradient_change_nothing_else() -> None:
    # The same loss and gradients as computing every feature with autograd (up to float rounding)
    from sb3_reset_ppo.common import unroll

    model = _model(burn_in=6, window_size=4, n_steps=32, batch_size=8, learning_rate=3e-3)
    model.learn(64 * 2)
    samples = next(model.rollout_buffer.get(8))
    assert samples.burn_in is not None

    def gradients(batch: object) -> list[th.Tensor]:
        model.policy.zero_grad()
        model._minibatch_loss(batch, clip_range=0.2, clip_range_vf=None).loss.backward()  # type: ignore[arg-type]
        return [p.grad.clone() for p in model.policy.parameters() if p.grad is not None]

    split = gradients(samples)
    # slot_steps=-1: every feature with autograd, as before the fix
    whole = gradients(samples._replace(burn_in=samples.burn_in._replace(slot_steps=-1)))
    for a, b in zip(split, whole, strict=True):
        th.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert unroll is not None


def test_refresh_and_burn_in_staleness_have_separate_keys() -> None:
    model = _model(memory_refresh=1, burn_in=4, learning_rate=3e-3)
    model.learn(32)
    model.set_logger(configure(None, []))
    model.train()
    logged = model.logger.name_to_value
    assert "train/memory_staleness" in logged and "train/burn_in_staleness" in logged


@pytest.mark.parametrize("cell,n_states", [("Lstm", 2), ("Gru", 1)])
def test_predict_rejects_a_wrong_state_with_a_value_error(cell: str, n_states: int) -> None:
    model = _model(policy=f"Mlp{cell}Policy", n_envs=3)
    observations = model.get_env().reset()  # type: ignore[union-attr]
    layers, hidden = 1, 8
    good = tuple(np.zeros((layers, 3, hidden), dtype=np.float32) for _ in range(n_states))
    model.predict(observations, state=good)  # type: ignore[arg-type]
    wrong_envs = tuple(np.zeros((layers, 2, hidden), dtype=np.float32) for _ in range(n_states))
    wrong_length = tuple(np.zeros((layers, 3, hidden), dtype=np.float32) for _ in range(3 - n_states))
    for state in (wrong_envs, wrong_length, np.zeros((layers, 3, hidden))):
        with pytest.raises(ValueError, match=r"state"):
            model.predict(observations, state=state)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(1, 3, 8\) for 3 observation"):
        model.predict(observations, state=wrong_envs)  # type: ignore[arg-type]


def test_a_gru_checkpoint_in_recurrent_ppo_says_to_use_reset_ppo(tmp_path: Path) -> None:
    model = _model(policy="MlpGruPolicy")
    model.save(tmp_path / "gru")
    contrib = RecurrentPPO.load(tmp_path / "gru", env=model.get_env())
    with pytest.raises(ValueError, match=r"ResetPPO\.load"):
        contrib.learn(32)


def test_a_checkpoint_cut_after_a_nested_archive_is_reported_as_truncated(tmp_path: Path) -> None:
    import zipfile

    model = _model()
    path = tmp_path / "model.zip"
    model.save(path)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        nested = next(info for info in archive.infolist() if info.filename == "policy.optimizer.pth")
    # Cut just after the nested torch archive's own zip directory: zip finds that one
    end = nested.header_offset + 30 + len(nested.filename) + nested.compress_size
    cut = tmp_path / "cut.zip"
    cut.write_bytes(data[: end - 11])
    with pytest.raises(ValueError, match="truncated") as error:
        check_checkpoint(cut)
    assert "data.pkl" not in str(error.value)  # the nested archive's members are not listed as the checkpoint's


def test_batch_size_below_window_size_says_what_it_uses() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model(batch_size=2, window_size=4)
    messages = [str(w.message) for w in caught]
    assert any("smaller than window_size=4" in m and "each minibatch holds 4 transitions" in m for m in messages), messages
    assert not any("not a multiple" in m for m in messages)
