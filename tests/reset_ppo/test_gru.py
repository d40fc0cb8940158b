"""
GRU policies: usable by name, memory ``(hidden,)`` stored and predicted, collection identical to RecurrentPPO's,
save/load, determinism, VecNormalize and gSDE (the zoo: test_readme.py). Exactness, gradients and fresh memory
are tested for both cells in test_exactness.py, test_gradients.py, test_unroll.py and test_fresh_memory.py.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecNormalize
from torch import nn

from sb3_reset_ppo import CnnGruPolicy, MlpGruPolicy, MultiInputGruPolicy, ResetPPO

SMALL: dict[str, Any] = dict(
    n_steps=16, batch_size=16, n_epochs=2, window_size=4, seed=0, policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]}
)


def _env(n_envs: int = 2, seed: int = 0, **env_kwargs: Any) -> Any:
    return make_vec_env(RandomEpisodeEnv, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs)


@pytest.mark.parametrize(
    "policy,policy_class,obs_kind",
    [
        ("MlpGruPolicy", MlpGruPolicy, "box"),
        ("CnnGruPolicy", CnnGruPolicy, "image"),
        ("MultiInputGruPolicy", MultiInputGruPolicy, "dict"),
    ],
)
@pytest.mark.parametrize(
    "policy_kwargs",
    [{}, {"enable_critic_lstm": False}, {"shared_lstm": True, "enable_critic_lstm": False}, {"n_lstm_layers": 2}],
    ids=["separate-critic", "no-critic-gru", "shared-gru", "two-layers"],
)
def test_gru_policies_by_name(policy: str, policy_class: type, obs_kind: str, policy_kwargs: dict[str, Any]) -> None:
    kwargs = {**SMALL, "policy_kwargs": {**SMALL["policy_kwargs"], **policy_kwargs}}
    if obs_kind != "box":
        kwargs["policy_kwargs"]["features_extractor_kwargs"] = {"features_dim" if obs_kind == "image" else "cnn_output_dim": 8}
    model = ResetPPO(policy, _env(obs_kind=obs_kind), **kwargs)
    assert type(model.policy) is policy_class
    recurrent = [module for module in model.policy.modules() if isinstance(module, nn.RNNBase)]
    # No LSTM is left over; the critic has its own GRU unless it shares or has none
    assert recurrent and all(type(module) is nn.GRU for module in recurrent)
    assert len(recurrent) == (1 if "enable_critic_lstm" in policy_kwargs else 2)
    assert model.policy.lstm_actor.num_layers == policy_kwargs.get("n_lstm_layers", 1)
    # The optimizer holds exactly the policy's parameters (the LSTMs' were replaced)
    optimized = {id(p) for group in model.policy.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in model.policy.parameters()}
    before = [p.clone() for p in model.policy.lstm_actor.parameters()]
    model.learn(2 * 16 * 2)
    assert all(not th.equal(a, b) for a, b in zip(before, model.policy.lstm_actor.parameters(), strict=True))


def test_buffer_stores_the_hidden_state_only() -> None:
    models = {cell: ResetPPO(f"Mlp{cell}Policy", _env(), **SMALL) for cell in ("Lstm", "Gru")}
    for model in models.values():
        model.learn(32)
    lstm, gru = (models[cell].rollout_buffer for cell in ("Lstm", "Gru"))
    assert gru.cell_states_pi.size == 0 and gru.cell_states_vf.size == 0
    assert np.abs(gru.hidden_states_pi).sum() > 0

    def memory_bytes(buffer: Any) -> int:
        return sum(getattr(buffer, f"{name}_states_{side}").nbytes for name in ("hidden", "cell") for side in ("pi", "vf"))

    assert memory_bytes(gru) * 2 == memory_bytes(lstm)
    samples = next(gru.get(None))
    assert len(samples.lstm_states.pi) == len(samples.lstm_states.vf) == 1


def test_buffer_rejects_a_state_of_the_other_cell() -> None:
    model = ResetPPO("MlpGruPolicy", _env(), **SMALL)
    hidden = th.zeros(1, 2, 8)
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    with pytest.raises(ValueError, match=r"stores GRU memory \('hidden',\), got a state tuple of 2"):
        model.rollout_buffer.add(
            np.zeros((2, 3)), np.zeros((2, 1)), np.zeros(2), np.zeros(2), th.zeros(2), th.zeros(2),
            lstm_states=RNNStates((hidden, hidden), (hidden, hidden)),
        )  # fmt: skip


def test_predict_state_is_hidden_only_and_resets_at_episode_start() -> None:
    model = ResetPPO("MlpGruPolicy", _env(), **SMALL)
    model.learn(32)
    observations = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    _, state = model.predict(observations, deterministic=True)
    assert isinstance(state, tuple) and len(state) == 1 and state[0].shape == (1, 2, 8)
    assert np.abs(state[0]).sum() > 0
    # Carried memory changes the output; an episode start resets it: the same as starting from no state
    _, carried = model.predict(observations, state=state, deterministic=True)
    assert carried is not None and not np.allclose(carried[0], state[0])
    _, reset = model.predict(observations, state=state, episode_start=np.array([True, True]), deterministic=True)
    assert reset is not None
    np.testing.assert_allclose(reset[0], state[0], rtol=1e-6, atol=1e-7)
    # predict's memory is the policy's: the same as a step of the GRU from the previous memory
    features = model.policy.extract_features(th.as_tensor(observations))
    assert isinstance(features, th.Tensor)
    with th.no_grad():
        _, expected = model.policy.lstm_actor(features[None], th.as_tensor(state[0]))
    np.testing.assert_allclose(carried[0], expected.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"state must be None or \(hidden,\)"):
        model.predict(observations, state=(state[0], state[0]))
    # A list of one array is accepted, like a tuple
    _, from_list = model.predict(observations, state=[state[0]], deterministic=True)  # type: ignore[arg-type]
    assert from_list is not None
    np.testing.assert_array_equal(from_list[0], carried[0])


def _buffer_arrays(model: Any) -> dict[str, np.ndarray]:
    buffer = model.rollout_buffer
    names = ["observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns"]
    names += ["hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf"]
    return {name: np.array(getattr(buffer, name)) for name in names}


@pytest.mark.parametrize("use_sde", [False, True])
def test_collection_equals_recurrent_ppos(use_sde: bool) -> None:
    # ResetPPO collects with a copy of RecurrentPPO.collect_rollouts generalised to any memory tuple: with an LSTM,
    # the buffers must be identical, truncations (bootstrapped rewards) and gSDE included
    kwargs: dict[str, Any] = dict(n_steps=24, batch_size=32, seed=3, use_sde=use_sde, sde_sample_freq=4)
    kwargs["policy_kwargs"] = {"lstm_hidden_size": 8, "net_arch": [8]}
    box = spaces.Box(-1, 1, (2,), dtype=np.float32)
    models = [
        algo("MlpLstmPolicy", _env(seed=3, truncate=True, action_space=box), **kwargs) for algo in (RecurrentPPO, ResetPPO)
    ]
    rollouts: list[list[dict[str, np.ndarray]]] = [[], []]
    for model, arrays in zip(models, rollouts, strict=True):
        # Actions are sampled from torch's global generator: the same draws for both
        th.manual_seed(3)
        _, callback = model._setup_learn(4 * 24 * 2, None)
        # Two rollouts without updates: the second starts mid-episode, from the memory the first left
        for _ in range(2):
            assert model.collect_rollouts(model.env, callback, model.rollout_buffer, 24)  # type: ignore[arg-type]
            arrays.append(_buffer_arrays(model))
    for expected, actual in zip(*rollouts, strict=True):
        assert np.abs(expected["hidden_states_pi"]).sum() > 0
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_truncations_are_bootstrapped_with_the_gru_memory() -> None:
    def collect(bootstrap: bool) -> dict[str, np.ndarray]:
        model = ResetPPO("MlpGruPolicy", _env(truncate=True), **SMALL)
        if not bootstrap:
            model._bootstrap_truncations = lambda *args: None  # type: ignore[method-assign]
        model.set_logger(configure(None, []))
        model.learn(16 * 2)
        return _buffer_arrays(model)

    with_bootstrap, without = collect(True), collect(False)
    np.testing.assert_array_equal(with_bootstrap["observations"], without["observations"])
    # (n_steps, n_envs); the rollout's last step is left out (whether it ends an episode is in the next rollout)
    added = (with_bootstrap["rewards"] - without["rewards"])[:-1]
    # A step is the last of its episode when the next step starts one: only those can be bootstrapped
    ends = with_bootstrap["episode_starts"][1:] > 0.5
    assert np.all(added[~ends] == 0)
    assert np.count_nonzero(added) > 0


def test_save_load_round_trip_and_set_parameters(tmp_path: Path) -> None:
    model = ResetPPO("MlpGruPolicy", _env(), **SMALL)
    model.learn(64)
    model.save(tmp_path / "gru")
    loaded = ResetPPO.load(tmp_path / "gru", env=_env())
    assert type(loaded.policy) is MlpGruPolicy and isinstance(loaded.policy.lstm_actor, nn.GRU)
    fresh = ResetPPO("MlpGruPolicy", _env(), **{**SMALL, "seed": 9})
    fresh.set_parameters(str(tmp_path / "gru.zip"))
    observations = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    state = (np.random.default_rng(2).normal(size=(1, 2, 8)).astype(np.float32),)
    expected = model.predict(observations, state=state, deterministic=True)
    for other in (loaded, fresh):
        actions, new_state = other.predict(observations, state=state, deterministic=True)
        np.testing.assert_array_equal(actions, expected[0])
        assert new_state is not None and expected[1] is not None
        np.testing.assert_array_equal(new_state[0], expected[1][0])
    # The loaded model continues training (its memory set up as a GRU's)
    loaded.learn(32, reset_num_timesteps=False)
    assert len(loaded._last_lstm_states.pi) == 1


@pytest.mark.parametrize("policy_name", ["MlpLstmPolicy", "MlpGruPolicy"])
@pytest.mark.parametrize(
    "recurrent_kwargs",
    [
        {"lstm_hidden_size": 6, "n_lstm_layers": 2},
        {"lstm_hidden_size": 5, "shared_lstm": True, "enable_critic_lstm": False},
        {"lstm_hidden_size": 7, "enable_critic_lstm": False, "lstm_kwargs": {"bias": False}},
    ],
)
def test_policy_only_save_load_keeps_the_recurrent_arguments(
    tmp_path: Path, policy_name: str, recurrent_kwargs: dict[str, Any]
) -> None:
    # sb3-contrib's policies do not save their recurrent arguments: `Policy.load` rebuilt default-sized layers
    model = ResetPPO(policy_name, _env(), **{**SMALL, "policy_kwargs": {"net_arch": [8], **recurrent_kwargs}})
    model.policy.save(str(tmp_path / "policy.pth"))
    loaded = type(model.policy).load(str(tmp_path / "policy.pth"))
    for name in ("lstm_actor", "lstm_critic"):
        ours, theirs = getattr(model.policy, name), getattr(loaded, name)
        assert type(ours) is type(theirs)
        if ours is not None:
            assert (theirs.hidden_size, theirs.num_layers, theirs.bias) == (ours.hidden_size, ours.num_layers, ours.bias)
    assert (loaded.shared_lstm, loaded.enable_critic_lstm) == (model.policy.shared_lstm, model.policy.enable_critic_lstm)
    observations = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    starts = np.array([False, True])
    expected, expected_state = model.policy.predict(observations, episode_start=starts, deterministic=True)
    actions, state = loaded.predict(observations, episode_start=starts, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    assert state is not None and expected_state is not None
    for ours_state, theirs_state in zip(expected_state, state, strict=True):
        np.testing.assert_array_equal(theirs_state, ours_state)


def test_training_is_deterministic() -> None:
    def parameters() -> list[th.Tensor]:
        model = ResetPPO("MlpGruPolicy", _env(), **SMALL)
        model.learn(64)
        return [p.detach().clone() for p in model.policy.parameters()]

    for first, second in zip(parameters(), parameters(), strict=True):
        assert th.equal(first, second)


def test_vecnormalize_and_gsde() -> None:
    env = VecNormalize(_env(action_space=spaces.Box(-1, 1, (2,), dtype=np.float32), truncate=True))
    model = ResetPPO("MlpGruPolicy", env, use_sde=True, burn_in=2, memory_refresh=1, **SMALL)
    model.set_logger(configure(None, []))
    model.learn(64)
    assert "train/std" in model.logger.name_to_value and "train/memory_staleness" in model.logger.name_to_value


@pytest.mark.parametrize(
    "lstm_kwargs,match",
    [({"proj_size": 2}, "proj_size=2, which a GRU does not have"), ({"bidirectional": True}, "bidirectional=True")],
)
def test_unsupported_gru_options(lstm_kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ResetPPO("MlpGruPolicy", _env(), **{**SMALL, "policy_kwargs": {"lstm_hidden_size": 8, "lstm_kwargs": lstm_kwargs}})


def test_zoo_config_entry_selects_the_gru_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The zoo's train through main() in this process (tests/docs/test_readme.py runs the GRU command with python -m)
    import sys

    from sb3_reset_ppo.zoo import main

    config = tmp_path / "gru.yml"
    config.write_text(
        "CueRecall-v0:\n  n_envs: 2\n  n_timesteps: 256\n  policy: 'MlpGruPolicy'\n  n_steps: 32\n  batch_size: 64\n"
        '  policy_kwargs: "dict(lstm_hidden_size=16, n_lstm_layers=2)"\n'
    )
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main() names the zoo's scripts through sys.argv
    main(
        ["train", "--algo", "reset_ppo", "--env", "CueRecall-v0"]
        + ["--conf-file", str(config), "-f", str(tmp_path / "logs"), "--seed", "0", "--eval-freq", "-1"]
    )
    model = ResetPPO.load(tmp_path / "logs" / "reset_ppo" / "CueRecall-v0_1" / "CueRecall-v0.zip")
    assert isinstance(model.policy, MlpGruPolicy)
    assert model.policy.lstm_actor.num_layers == 2 and model.policy.lstm_actor.hidden_size == 16


def test_callbacks_see_recurrent_ppos_locals() -> None:
    # ResetPPO's collect_rollouts is RecurrentPPO's: a callback reading its locals (lstm_states, ...) keeps working
    from stable_baselines3.common.callbacks import BaseCallback

    class Spy(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.keys: set[str] = set()
            self.memory_lengths: set[int] = set()

        def _on_step(self) -> bool:
            self.keys |= set(self.locals)
            self.memory_lengths.add(len(self.locals["lstm_states"].pi))
            return True

    spies = {}
    for name, algo, policy in (
        ("rppo", RecurrentPPO, "MlpLstmPolicy"),
        ("lstm", ResetPPO, "MlpLstmPolicy"),
        ("gru", ResetPPO, "MlpGruPolicy"),
    ):
        spies[name] = Spy()
        kwargs = {key: value for key, value in SMALL.items() if algo is ResetPPO or key != "window_size"}
        algo(policy, _env(truncate=True), **kwargs).learn(32, callback=spies[name])
    # The names sb3-contrib's truncation loop leaves behind live in ResetPPO's _bootstrap_truncations
    expected = spies["rppo"].keys - {"idx", "done_", "terminal_obs", "terminal_lstm_state", "terminal_value"}
    assert expected <= spies["lstm"].keys and expected <= spies["gru"].keys
    assert spies["lstm"].memory_lengths == {2} and spies["gru"].memory_lengths == {1}
