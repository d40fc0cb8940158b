"""Attention-memory policies in ResetPPO: exactness before any update, predict as collection, save/load, errors."""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from trxl_reference import reference_sequence

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.attention_buffers import AttentionWindowRolloutBuffer
from sb3_reset_ppo.reset_ppo.trxl_policies import MlpTrXLPolicy, TrXLActorCriticPolicy

N_STEPS = 16
MEMORY_LENGTH = 4
# Small sizes: two layers so that the stored inputs of a layer above the embedding are read
TRXL_KWARGS: dict[str, Any] = dict(memory_length=MEMORY_LENGTH, trxl_dim=8, n_trxl_layers=2, n_attention_heads=2, net_arch=[8])
ENCODINGS = pytest.mark.parametrize("positional_encoding", ["none", "learned", "sinusoidal"])
GATED = pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
CRITICS = pytest.mark.parametrize(
    "critic",
    [dict(), dict(shared_trxl=True, enable_critic_trxl=False), dict(enable_critic_trxl=False)],
    ids=["separate", "shared", "none"],
)


def rolled_out_model(
    policy: str = "MlpTrXLPolicy",
    obs_kind: str = "box",
    window_size: int = 6,
    policy_kwargs: dict | None = None,
    action_space: spaces.Space | None = None,
    **kwargs: Any,
) -> ResetPPO:
    """A model after two rollouts at learning rate 0 on short episodes (1 to 4 steps: many starts inside windows)."""
    # Every other episode truncated: the critic's memory values the terminal observations
    env_kwargs = dict(obs_kind=obs_kind, max_length=4, action_space=action_space, truncate=True)
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=env_kwargs)
    model = ResetPPO(
        policy,
        env,
        learning_rate=0.0,
        n_steps=N_STEPS,
        batch_size=3 * window_size,
        n_epochs=1,
        window_size=window_size,
        seed=0,
        policy_kwargs={**TRXL_KWARGS, **(policy_kwargs or {})},
        **kwargs,
    )
    # Two rollouts: the second starts mid-episode, with memory carried in from the first
    model.learn(2 * N_STEPS * 2)
    return model


def largest_errors(model: ResetPPO, epochs: int = 3, batch_size: int | None = None) -> tuple[float, float]:
    """
    The largest difference between a recomputed log-prob (value) and the rollout's over ``epochs`` epochs, checking
    on the way that the windows cross episode starts and read non-zero memory.
    """
    policy = model.policy
    assert isinstance(policy, TrXLActorCriticPolicy)
    batches = [samples for _ in range(epochs) for samples in model.rollout_buffer.get(batch_size)]
    assert any(bool(samples.resets.any()) for samples in batches)
    log_prob_error = value_error = 0.0
    for samples in batches:
        assert samples.attention is not None and samples.attention.memory_pi.abs().sum() > 0
        with th.no_grad():
            values, log_prob, _ = policy.evaluate_windows(samples)
            losses = model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None)
        # The kept slots (reset mode: every real slot); padding slots, never trained, attend to other keys than the
        # step they repeat
        kept = samples.kept
        if model.boundary == "reset":
            assert samples.n_real_slots is None or int(kept.sum()) == samples.n_real_slots
        log_prob_error = max(log_prob_error, float((log_prob - samples.old_log_prob).abs()[kept].max()))
        value_error = max(value_error, float((values - samples.old_values).abs()[kept].max()))
        assert float(losses.approx_kl) < 1e-8
        assert float(losses.clip_fraction) == 0.0
    return log_prob_error, value_error


@ENCODINGS
@GATED
@CRITICS
@pytest.mark.parametrize("window_stride,window_coverage", [(1, "inside"), (None, "full")], ids=["inside-stride1", "full"])
def test_recomputed_equals_rollout(
    positional_encoding: str, gated: bool, critic: dict, window_stride: int | None, window_coverage: str
) -> None:
    model = rolled_out_model(
        policy_kwargs=dict(positional_encoding=positional_encoding, gated=gated, **critic),
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    errors = largest_errors(model, batch_size=7)
    assert max(errors) < 1e-5, errors


@pytest.mark.parametrize("policy,obs_kind", [("MultiInputTrXLPolicy", "dict"), ("CnnTrXLPolicy", "image")])
def test_recomputed_equals_rollout_dict_and_image(policy: str, obs_kind: str) -> None:
    kwargs: dict[str, Any] = dict(features_extractor_kwargs=dict(features_dim=8)) if obs_kind == "image" else {}
    model = rolled_out_model(policy, obs_kind, policy_kwargs=kwargs)
    assert max(largest_errors(model, epochs=1)) < 1e-5


@pytest.mark.parametrize("weighting", ["uniform", "importance"])
def test_recomputed_equals_rollout_mask_boundary(weighting: str) -> None:
    model = rolled_out_model(boundary="mask", weighting=weighting, window_stride=None)
    assert max(largest_errors(model, batch_size=7)) < 1e-5


@pytest.mark.parametrize(
    "action_space", [spaces.Box(-1, 1, (2,)), spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3)], ids=str
)
def test_recomputed_equals_rollout_action_spaces(action_space: spaces.Space) -> None:
    model = rolled_out_model(action_space=action_space)
    assert max(largest_errors(model, epochs=1)) < 1e-5


def test_learns_cue_recall() -> None:
    # A few updates on the package's memory task (memory refreshed before the second epoch): the parameters move and
    # stay finite, the window diagnostics and the memory's staleness are logged
    import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecall-v0)

    env = make_vec_env("CueRecall-v0", n_envs=2, seed=0)
    model = ResetPPO(
        "MlpTrXLPolicy", env, n_steps=32, batch_size=32, n_epochs=2, memory_refresh=1, seed=0, policy_kwargs=TRXL_KWARGS
    )
    before = [parameter.detach().clone() for parameter in model.policy.parameters()]
    model.learn(128)
    after = list(model.policy.parameters())
    assert all(bool(th.isfinite(parameter).all()) for parameter in after)
    assert sum(not th.equal(old, new) for old, new in zip(before, after, strict=True)) == len(before)
    logged = model.logger.name_to_value
    assert "train/approx_kl" in logged and logged["train/kept_slot_fraction"] == 1.0
    assert 0 < logged["train/memory_staleness"] < 1


@GATED
def test_predict_equals_collection(gated: bool, tmp_path: Any) -> None:
    # predict(state, episode_start) over the rollout's observations, from the memory entering it, gives each step's
    # block inputs and count as collection stored them, and the memory collection ended with
    model = rolled_out_model(policy_kwargs=dict(gated=gated))
    buffer = model.rollout_buffer
    assert isinstance(buffer, AttentionWindowRolloutBuffer)
    for env in range(model.n_envs):
        # (E, K, L, D) -> (K, 1, L, D)
        state: Any = (buffer.block_inputs["pi"][env, :MEMORY_LENGTH, None], buffer.memory_counts[:1, env, None].T)
        for step in range(N_STEPS):
            _, state = model.predict(buffer.observations[step, env][None], state, buffer.episode_starts[step, env][None])
            memory, n_valid = state
            if step < N_STEPS - 1:
                np.testing.assert_allclose(memory[-1, 0], buffer.block_inputs["pi"][env, MEMORY_LENGTH + step], atol=1e-6)
                assert int(n_valid[0, 0]) == buffer.memory_counts[step + 1, env]
        final = model._last_lstm_states.pi
        np.testing.assert_allclose(memory[:, 0], final[0][:, env].numpy(), atol=1e-6)
        assert int(n_valid[0, 0]) == int(final[1][0, env])


def test_save_load_round_trip(tmp_path: Any) -> None:
    model = rolled_out_model(policy_kwargs=dict(positional_encoding="learned", gated=True, n_trxl_layers=3))
    model.save(tmp_path / "model")
    loaded = ResetPPO.load(tmp_path / "model")
    assert isinstance(loaded.policy, TrXLActorCriticPolicy) and loaded.policy.memory_shape == (MEMORY_LENGTH, 3, 8)
    for (name, tensor), (loaded_name, loaded_tensor) in zip(
        model.policy.state_dict().items(), loaded.policy.state_dict().items(), strict=True
    ):
        assert name == loaded_name and th.equal(tensor, loaded_tensor)
    observation = model.rollout_buffer.observations[0]
    state = None
    loaded_state = None
    for _ in range(3):
        action, state = model.predict(observation, state, deterministic=True)
        loaded_action, loaded_state = loaded.predict(observation, loaded_state, deterministic=True)
        np.testing.assert_array_equal(action, loaded_action)
        assert state is not None and loaded_state is not None
        np.testing.assert_array_equal(state[0], loaded_state[0])
    # The policy alone (its constructor parameters hold the transformer's sizes)
    model.policy.save(tmp_path / "policy")
    policy = TrXLActorCriticPolicy.load(tmp_path / "policy")
    assert policy.memory_shape == (MEMORY_LENGTH, 3, 8) and policy.trxl_kwargs == model.policy.trxl_kwargs


def test_recurrent_ppo_refuses_attention_policies(tmp_path: Any) -> None:
    env = make_vec_env(RandomEpisodeEnv, n_envs=1, seed=0)
    with pytest.raises(TypeError, match=r"attention-memory policy.*RecurrentPPO.*sb3_reset_ppo\.ResetPPO"):
        RecurrentPPO(MlpTrXLPolicy, env, n_steps=8, policy_kwargs=TRXL_KWARGS)  # type: ignore[arg-type]
    model = ResetPPO("MlpTrXLPolicy", env, n_steps=8, batch_size=8, policy_kwargs=TRXL_KWARGS)
    model.save(tmp_path / "model")
    with pytest.raises(TypeError, match="RecurrentPPO cannot train, load or run it"):
        RecurrentPPO.load(tmp_path / "model")


def test_lstm_state_refused() -> None:
    model = ResetPPO(
        "MlpTrXLPolicy", make_vec_env(RandomEpisodeEnv, n_envs=1), n_steps=8, batch_size=8, policy_kwargs=TRXL_KWARGS
    )
    observation = np.zeros((2, 3), dtype=np.float32)
    lstm_state = (np.zeros((1, 2, 8), dtype=np.float32), np.zeros((1, 2, 8), dtype=np.float32))
    with pytest.raises(ValueError, match=r"memory of shape .* = \(4, 2, 2, 8\) .* \(hidden, cell\) state does not fit"):
        model.predict(observation, lstm_state)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(positional_encoding="absolute"),
            r"positional_encoding must be one of \('none', 'learned', 'sinusoidal'\), got 'absolute'",
        ),
        (dict(n_attention_heads=3), r"trxl_dim=8 must be a multiple of n_attention_heads=3"),
        (dict(memory_length=0), r"memory_length.*0"),
        (dict(trxl_ff_dim=-1), r"trxl_ff_dim.*-1"),
        (dict(shared_trxl=True), r"shared_trxl=True and enable_critic_trxl=True"),
    ],
)
def test_bad_policy_arguments(kwargs: dict, message: str) -> None:
    env = make_vec_env(RandomEpisodeEnv, n_envs=1)
    with pytest.raises(ValueError, match=message):
        ResetPPO("MlpTrXLPolicy", env, n_steps=8, batch_size=8, policy_kwargs={**TRXL_KWARGS, **kwargs})


def test_burn_in_not_implemented_yet() -> None:
    env = make_vec_env(RandomEpisodeEnv, n_envs=1)
    with pytest.raises(ValueError, match="burn_in=2 is not implemented for attention memory"):
        ResetPPO("MlpTrXLPolicy", env, n_steps=8, batch_size=8, policy_kwargs=TRXL_KWARGS, burn_in=2)


def test_memory_refresh_before_any_update_changes_nothing() -> None:
    model = rolled_out_model(memory_refresh=1, window_stride=None)
    staleness = model.rollout_buffer.refresh_memory(model.policy)
    assert float(staleness) < 1e-6
    assert max(largest_errors(model, batch_size=7)) < 1e-5


def test_memory_refresh_recomputes_every_step() -> None:
    # With other parameters, the refreshed block inputs are those of the step-by-step reference over each env's rollout
    # from the memory entering it (chunks of window_size=6 steps: the chunk edges are crossed)
    model = rolled_out_model(memory_refresh=1)
    policy = model.policy
    assert isinstance(policy, TrXLActorCriticPolicy)
    with th.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.1 * th.randn_like(parameter))
    buffer = model.rollout_buffer
    assert isinstance(buffer, AttentionWindowRolloutBuffer)
    staleness = buffer.refresh_memory(policy)
    assert float(staleness) > 1e-3
    sampler = buffer.sampler()
    # (E * (K + T), L, D) -> (E, K + T, L, D)
    refreshed = sampler.block_inputs["pi"].reshape(model.n_envs, MEMORY_LENGTH + N_STEPS, 2, 8)
    for env in range(model.n_envs):
        with th.no_grad():
            features = policy.extract_features(th.as_tensor(buffer.observations[:, env]))
            _, expected = reference_sequence(
                policy.trxl_actor,
                features,
                th.as_tensor(buffer.episode_starts[:, env]),
                th.as_tensor(buffer.block_inputs["pi"][env, :MEMORY_LENGTH]),
                int(buffer.memory_counts[0, env]),
            )
        th.testing.assert_close(refreshed[env, MEMORY_LENGTH:], expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "source,target,message",
    [
        ("MlpLstmPolicy", "MlpTrXLPolicy", r"a ResetPPO checkpoint of an LSTM policy \(MlpLstmPolicy, CnnLstmPolicy or "),
        ("MlpGruPolicy", "MlpTrXLPolicy", r"a ResetPPO checkpoint of a GRU policy \(MlpGruPolicy, CnnGruPolicy or "),
        ("MlpTrXLPolicy", "MlpLstmPolicy", r"a ResetPPO checkpoint of an attention policy \(MlpTrXLPolicy, CnnTrXLPolicy or "),
        ("RecurrentPPO", "MlpTrXLPolicy", r"a RecurrentPPO checkpoint of an LSTM policy \(MlpLstmPolicy, CnnLstmPolicy or "),
        ("dict", "MlpTrXLPolicy", r"cannot load parameters of an LSTM policy \(MlpLstmPolicy, CnnLstmPolicy or "),
    ],
    ids=["lstm-into-trxl", "gru-into-trxl", "trxl-into-lstm", "recurrent-ppo-into-trxl", "lstm-dict-into-trxl"],
)
def test_parameters_of_another_memory_are_refused(source: str, target: str, message: str, tmp_path: Any) -> None:
    env = make_vec_env(RandomEpisodeEnv, n_envs=1, seed=0)
    kwargs: dict[str, Any] = dict(n_steps=8, batch_size=8)
    trxl_kwargs: dict[str, Any] = dict(policy_kwargs=TRXL_KWARGS)
    if source == "RecurrentPPO":
        RecurrentPPO("MlpLstmPolicy", env, **kwargs).save(tmp_path / "source")
    elif source != "dict":
        ResetPPO(source, env, **kwargs, **(trxl_kwargs if "TrXL" in source else {})).save(tmp_path / "source")
    model = ResetPPO(target, env, **kwargs, **(trxl_kwargs if "TrXL" in target else {}))
    before = {name: tensor.clone() for name, tensor in model.policy.state_dict().items()}
    target_kind = "attention" if "TrXL" in target else "LSTM"
    full = message + rf".* into this model's {target} \({target_kind} memory\): the parameters of attention memory"
    with pytest.raises(ValueError, match=full):
        if source == "dict":
            lstm = ResetPPO("MlpLstmPolicy", env, **kwargs)
            model.set_parameters({"policy": lstm.policy.state_dict()})
        else:
            model.set_parameters(str(tmp_path / "source.zip"))
    assert all(th.equal(before[name], tensor) for name, tensor in model.policy.state_dict().items())
