"""MaskableResetPPO: masks stored with each step and applied in every window, exactness, no invalid sample."""

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, RandomMaskEnv, check_valid, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sb3_contrib.common.maskable.utils import get_action_masks
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples

ACTION_SPACES = {
    "discrete": spaces.Discrete(4),
    "multidiscrete": spaces.MultiDiscrete([3, 2, 4]),
    "multibinary": spaces.MultiBinary(3),
}
SMALL = dict(n_steps=16, batch_size=12, n_epochs=2, window_size=6, seed=0)


def _model(
    policy: str = "MlpLstmPolicy", action: str = "discrete", obs_kind: str = "box", strict: bool = True, **kwargs: Any
) -> MaskableResetPPO:
    env_kwargs = dict(action_space=ACTION_SPACES[action], obs_kind=obs_kind, strict=strict)
    env = make_vec_env(RandomMaskEnv, n_envs=2, seed=0, env_kwargs=env_kwargs)
    policy_kwargs = {"lstm_hidden_size": 8, "net_arch": [8]}
    if policy.startswith("Cnn"):
        policy_kwargs["features_extractor_kwargs"] = {"features_dim": 8}
    return MaskableResetPPO(policy, env, policy_kwargs=policy_kwargs, **{**SMALL, **kwargs})


def _masked_oracle(model: MaskableResetPPO, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor]:
    """The policy's own masked ``evaluate_actions`` over the windows as sequences (MaskablePPO-style evaluation)."""
    assert samples.action_masks is not None and samples.n_real_slots is None
    n_windows, window_size = samples.slot_steps.shape
    slot_steps = samples.slot_steps.reshape(-1)
    if isinstance(samples.observations, dict):
        observations: Any = {key: obs[slot_steps] for key, obs in samples.observations.items()}
    else:
        observations = samples.observations[slot_steps]
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(model.action_space, spaces.Discrete):
        actions = actions.long().flatten()

    def states(memory: tuple[th.Tensor, ...]) -> tuple[th.Tensor, ...]:
        # (B, n_layers, H) -> (n_layers, B, H)
        return tuple(m.transpose(0, 1).contiguous() for m in memory)

    _, log_prob, entropy = model.policy.evaluate_actions(
        observations,
        actions,
        RNNStates(states(samples.lstm_states.pi), states(samples.lstm_states.vf)),
        samples.episode_starts.reshape(-1),
        samples.action_masks.reshape(n_windows * window_size, -1),
    )
    assert entropy is not None
    return log_prob.reshape(n_windows, window_size), entropy.reshape(n_windows, window_size)


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy", "CnnLstmPolicy", "MultiInputGruPolicy"])
@pytest.mark.parametrize("action", sorted(ACTION_SPACES))
@pytest.mark.parametrize(
    "settings_",
    [
        {"boundary": "reset"},
        {"boundary": "mask", "window_coverage": "inside"},
        {"window_stride": 1, "burn_in": 2},
        {"memory_refresh": 1},
    ],
    ids=["reset-full", "mask-inside", "stride1-burnin", "refresh"],
)
def test_every_slots_log_prob_and_entropy_are_the_masked_evaluation_of_the_rollout(
    policy: str, action: str, settings_: dict[str, Any]
) -> None:
    obs_kind = {"Mlp": "box", "Cnn": "image", "Mul": "dict"}[policy[:3]]
    model = _model(policy, action, obs_kind, learning_rate=0.0, **settings_)
    # Two rollouts: the second starts mid-episode from non-zero memory (learning rate 0: nothing changes)
    model.learn(2 * 16 * 2)
    buffer = model.rollout_buffer
    assert buffer.masks_stored and not bool(np.all(buffer.action_masks == 1))
    # Every stored action is valid under its stored mask
    check_valid(model.action_space, buffer.actions.reshape(32, -1), buffer.action_masks.reshape(32, -1))
    for samples in buffer.get(model.batch_size):
        assert samples.action_masks is not None
        with th.no_grad():
            _, log_prob, entropy = evaluate_windows(model.policy, samples)
        # Before any update every slot's log-prob is the rollout's (drawn from the masked distribution)
        th.testing.assert_close(log_prob, samples.old_log_prob, rtol=1e-5, atol=1e-5)
        assert entropy is not None and bool(th.isfinite(entropy).all())
    # Entropies and log-probs against the policy's masked evaluate_actions on the same windows (whole windows)
    whole = next(iter(buffer.get(None))) if model.window_coverage == "inside" else None
    if whole is not None and whole.n_real_slots is None and whole.burn_in is None:
        with th.no_grad():
            _, log_prob, entropy = evaluate_windows(model.policy, whole)
            oracle_log_prob, oracle_entropy = _masked_oracle(model, whole)
        th.testing.assert_close(log_prob, oracle_log_prob, rtol=1e-5, atol=1e-5)
        th.testing.assert_close(entropy, oracle_entropy, rtol=1e-5, atol=1e-5)


def test_masks_change_the_trained_log_probs() -> None:
    # The control: evaluated without the stored masks, the log-probs are not the rollout's
    model = _model(learning_rate=0.0)
    model.learn(32)
    samples = next(iter(model.rollout_buffer.get(None)))
    with th.no_grad():
        masked = evaluate_windows(model.policy, samples)[1]
        unmasked = evaluate_windows(model.policy, samples._replace(action_masks=None))[1]
    th.testing.assert_close(masked, samples.old_log_prob, rtol=1e-5, atol=1e-5)
    assert (unmasked - samples.old_log_prob).abs().max() > 1e-2


@settings(max_examples=examples(60), deadline=None, derandomize=True)
@given(
    action=st.sampled_from(sorted(ACTION_SPACES)),
    policy=st.sampled_from(["MlpLstmPolicy", "MlpGruPolicy"]),
    seed=st.integers(0, 10_000),
    deterministic=st.booleans(),
)
def test_masked_actions_are_never_sampled(action: str, policy: str, seed: int, deterministic: bool) -> None:
    env = RandomMaskEnv(action_space=ACTION_SPACES[action])
    model = MaskableResetPPO(policy, env, n_steps=8, batch_size=8, seed=seed, policy_kwargs={"lstm_hidden_size": 4})
    rng = np.random.default_rng(seed)
    state = None
    for step in range(20):
        env.reset(seed=int(rng.integers(1 << 30)))
        obs = env.observation_space.sample()
        masks = env.action_masks()
        # One observation and eight at once (the same mask each)
        action_one, state = model.predict(obs, state, np.array([step == 0]), deterministic, action_masks=masks)
        check_valid(env.action_space, np.asarray(action_one)[None], masks[None])
        batch = np.stack([obs] * 8)
        actions, _ = model.predict(batch, None, None, deterministic, action_masks=np.stack([masks] * 8))
        check_valid(env.action_space, actions, np.stack([masks] * 8))


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy"])
@pytest.mark.parametrize("action", ["discrete", "multidiscrete"])
def test_use_masking_false_trains_exactly_as_reset_ppo(policy: str, action: str) -> None:
    kwargs = dict(n_steps=16, batch_size=12, n_epochs=2, window_size=6, seed=3, policy_kwargs={"lstm_hidden_size": 8})

    def env() -> Any:
        return make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=dict(action_space=ACTION_SPACES[action]))

    masked = MaskableResetPPO(policy, env(), **kwargs).learn(96, use_masking=False)
    plain = ResetPPO(policy, env(), **kwargs).learn(96)  # type: ignore[arg-type]
    for a, b in zip(masked.policy.parameters(), plain.policy.parameters(), strict=True):
        assert th.equal(a, b)
    np.testing.assert_array_equal(masked.rollout_buffer.actions, plain.rollout_buffer.actions)
    assert not masked.rollout_buffer.masks_stored


def test_training_with_masks_differs_from_training_without() -> None:
    trained = _model(seed=1).learn(64)
    unmasked = _model(seed=1, strict=False).learn(64, use_masking=False)
    assert any(not th.equal(a, b) for a, b in zip(trained.policy.parameters(), unmasked.policy.parameters(), strict=True))


def test_subproc_vec_env_masks() -> None:
    env = make_vec_env(RandomMaskEnv, n_envs=2, seed=0, vec_env_cls=SubprocVecEnv)
    try:
        model = MaskableResetPPO("MlpLstmPolicy", env, **SMALL, policy_kwargs={"lstm_hidden_size": 4})
        model.learn(32)
        masks = get_action_masks(env)
        assert masks.shape == (2, 2)
        check_valid(
            model.action_space, model.rollout_buffer.actions.reshape(32, -1), model.rollout_buffer.action_masks.reshape(32, -1)
        )
    finally:
        env.close()


def test_action_masker_wrapper() -> None:
    def only_left(env: gym.Env) -> np.ndarray:
        return np.array([True, False])

    model = MaskableResetPPO("MlpLstmPolicy", ActionMasker(gym.make("CartPole-v1"), only_left), **SMALL)
    model.learn(32)
    assert np.all(model.rollout_buffer.actions == 0)


def test_save_load_predicts_the_same(tmp_path: Path) -> None:
    model = _model("MlpGruPolicy").learn(32)
    model.save(tmp_path / "model")
    loaded = MaskableResetPPO.load(tmp_path / "model")
    obs = np.zeros((1, 3), dtype=np.float32)
    masks = np.array([[False, True, False, True]])
    for deterministic in (True,):
        a, state_a = model.predict(obs, None, None, deterministic, action_masks=masks)
        b, state_b = loaded.predict(obs, None, None, deterministic, action_masks=masks)
        np.testing.assert_array_equal(a, b)
        assert state_a is not None and state_b is not None
        np.testing.assert_allclose(state_a[0], state_b[0])
    assert isinstance(loaded, MaskableResetPPO) and loaded.window_coverage == model.window_coverage


def test_bad_input_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="action space Box"):
        MaskableResetPPO("MlpLstmPolicy", gym.make("Pendulum-v1"))
    with pytest.raises(ValueError, match="maskable recurrent policy"):
        from sb3_reset_ppo.reset_ppo.policies import MlpLstmPolicy

        MaskableResetPPO(MlpLstmPolicy, gym.make("CartPole-v1"))
    model = MaskableResetPPO("MlpLstmPolicy", gym.make("CartPole-v1"), **SMALL)
    with pytest.raises(ValueError, match="does not provide action_masks"):
        model.learn(16)
    with pytest.raises(TypeError, match="use_masking must be a bool"):
        model.learn(16, use_masking="yes")  # type: ignore[arg-type]
    # Without masks it trains as ResetPPO
    model.learn(16, use_masking=False)
