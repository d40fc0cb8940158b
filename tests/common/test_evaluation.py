"""
An independent oracle: ``evaluate_windows`` against sb3-contrib's own ``policy.evaluate_actions``.

sb3-contrib evaluates a batch of sequences that each start from a given memory and apply SB3's
episode-start rule at every step: exactly reset-and-continue over a window (the memory a reset restores is
the recorded one times ``1 - episode_start``, i.e. zero). So on the same windows, from the same recorded
memory, both must give the same values, log-probabilities, entropies and parameter gradients, for every
policy variant.
"""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, assert_close_named
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples

BOX = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

VARIANTS: dict[str, dict[str, Any]] = {
    "separate-critic-lstm": {},
    "shared-lstm": dict(policy_kwargs={"shared_lstm": True, "enable_critic_lstm": False}),
    "no-critic-lstm": dict(policy_kwargs={"enable_critic_lstm": False}),
    "three-layers": dict(policy_kwargs={"n_lstm_layers": 3}),
    "no-bias": dict(policy_kwargs={"n_lstm_layers": 2, "lstm_kwargs": {"bias": False}}),
    "separate-extractors": dict(policy_kwargs={"share_features_extractor": False}),
    "gsde": dict(action_space=BOX, use_sde=True, sde_sample_freq=4),
    "box-actions": dict(action_space=BOX),
    "multidiscrete": dict(action_space=spaces.MultiDiscrete([3, 2])),
    "dict-observations": dict(
        policy="MultiInputLstmPolicy", obs_kind="dict", policy_kwargs={"features_extractor_kwargs": {"cnn_output_dim": 8}}
    ),
    # Dropout between layers draws random masks: windows without episode starts (sb3-contrib then makes one
    # fused call, as ResetPPO does) and the same seed give the same masks
    "dropout-training": dict(policy_kwargs={"n_lstm_layers": 2, "lstm_kwargs": {"dropout": 0.3}}, long_episodes=True),
    # The GRU policies: sb3-contrib's evaluate_actions with the GRU policy's step-by-step _process_sequence
    "gru": dict(policy="MlpGruPolicy"),
    "gru-shared": dict(policy="MlpGruPolicy", policy_kwargs={"shared_lstm": True, "enable_critic_lstm": False}),
    "gru-no-critic-gru": dict(policy="MlpGruPolicy", policy_kwargs={"enable_critic_lstm": False}),
    "gru-no-bias-three-layers": dict(
        policy="MlpGruPolicy", policy_kwargs={"n_lstm_layers": 3, "lstm_kwargs": {"bias": False}}
    ),
    "gru-gsde": dict(policy="MlpGruPolicy", action_space=BOX, use_sde=True, sde_sample_freq=4),
    "gru-dict-observations": dict(
        policy="MultiInputGruPolicy", obs_kind="dict", policy_kwargs={"features_extractor_kwargs": {"cnn_output_dim": 8}}
    ),
    "gru-dropout-training": dict(
        policy="MlpGruPolicy", policy_kwargs={"n_lstm_layers": 2, "lstm_kwargs": {"dropout": 0.3}}, long_episodes=True
    ),
}


def _model_and_windows(variant: dict[str, Any]) -> tuple[ResetPPO, WindowRolloutBufferSamples]:
    """A trained model's windows, inside the rollout (every slot real; clipped windows: ``test_coverage.py``)."""
    variant = dict(variant)
    env_kwargs: dict[str, Any] = dict(action_space=variant.pop("action_space", None), obs_kind=variant.pop("obs_kind", "box"))
    if variant.pop("long_episodes", False):
        env_kwargs.update(min_length=1000, max_length=1000)
    policy = variant.pop("policy", "MlpLstmPolicy")
    policy_kwargs = {"lstm_hidden_size": 8, "net_arch": [8], **variant.pop("policy_kwargs", {})}
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=env_kwargs)
    model = ResetPPO(
        policy, env, n_steps=16, batch_size=60, n_epochs=2, window_size=6, window_stride=1, window_coverage="inside",
        seed=0, policy_kwargs=policy_kwargs, **variant,
    )  # fmt: skip
    # Two rollouts with training in between: windows start from non-zero memory of a trained policy
    model.learn(2 * 16 * 2)
    return model, next(model.rollout_buffer.get(None))


def _oracle(model: ResetPPO, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """sb3-contrib's evaluate_actions on the windows: B sequences of W steps, batch-major as its buffer gives them."""
    n_windows, window_size = samples.slot_steps.shape
    # (B, W) -> (B * W,): the slots, window by window
    slot_steps = samples.slot_steps.reshape(-1)
    if isinstance(samples.observations, dict):
        observations: Any = {key: obs[slot_steps] for key, obs in samples.observations.items()}
    else:
        observations = samples.observations[slot_steps]
    # (B, W, action_dim) -> (B * W, action_dim)
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(model.action_space, spaces.Discrete):
        actions = actions.long().flatten()

    def states(memory: tuple[th.Tensor, ...]) -> tuple[th.Tensor, ...]:
        # (B, n_layers, H) -> (n_layers, B, H)
        return tuple(m.transpose(0, 1).contiguous() for m in memory)

    lstm_states = RNNStates(states(samples.lstm_states.pi), states(samples.lstm_states.vf))
    values, log_prob, entropy = model.policy.evaluate_actions(
        observations, actions, lstm_states, samples.episode_starts.reshape(-1)
    )
    shape = (n_windows, window_size)
    return values.reshape(shape), log_prob.reshape(shape), None if entropy is None else entropy.reshape(shape)


def _grads(model: ResetPPO, outputs: tuple[th.Tensor, th.Tensor, th.Tensor | None]) -> dict[str, th.Tensor]:
    values, log_prob, entropy = outputs
    generator = th.Generator().manual_seed(1)
    loss = (values * th.randn(values.shape, generator=generator)).sum()
    loss = loss + (log_prob * th.randn(log_prob.shape, generator=generator)).sum()
    if entropy is not None:
        loss = loss + entropy.sum()
    named = [(name, p) for name, p in model.policy.named_parameters() if p.requires_grad]
    grads = th.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {name: th.zeros_like(p) if g is None else g for (name, p), g in zip(named, grads, strict=True)}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_evaluate_windows_equals_sb3_contrib_evaluate_actions(name: str) -> None:
    model, samples = _model_and_windows(VARIANTS[name])
    model.policy.set_training_mode(True)
    if name.endswith("dropout-training"):
        assert not samples.episode_starts.any()
    else:
        assert samples.resets.any()  # windows cross episodes: the reset rule is exercised
    th.manual_seed(7)
    ours = evaluate_windows(model.policy, samples)
    th.manual_seed(7)
    theirs = _oracle(model, samples)
    for label, a, b in zip(("values", "log_prob", "entropy"), ours, theirs, strict=True):
        if b is None:
            assert a is None
            continue
        assert a is not None
        assert_close_named(a, b, label, rtol=1e-5, atol=1e-5)
    ours_grads, theirs_grads = _grads(model, ours), _grads(model, theirs)
    assert any(g.abs().sum() > 0 for g in theirs_grads.values())
    # atol 1e-5 as for the outputs: a gradient summed over many positions (a CNN bias) differs by a few 1e-6
    # between CPUs (AVX2 and AVX-512 kernels sum in different orders); a wrong memory or mask differs by far more
    for param_name, grad in theirs_grads.items():
        assert_close_named(ours_grads[param_name], grad, f"gradient of {param_name}", rtol=1e-4, atol=1e-5)


def test_oracle_sees_a_wrong_memory() -> None:
    # The control: the oracle started from zero memory instead of the recorded one disagrees
    model, samples = _model_and_windows({})
    zero = RNNStates(
        tuple(th.zeros_like(t) for t in samples.lstm_states.pi), tuple(th.zeros_like(t) for t in samples.lstm_states.vf)
    )
    _, log_prob, _ = _oracle(model, samples._replace(lstm_states=zero))
    _, ours, _ = evaluate_windows(model.policy, samples)
    assert not th.allclose(log_prob, ours, atol=1e-4)
