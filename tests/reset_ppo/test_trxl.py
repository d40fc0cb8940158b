"""Attention-memory policies in ResetPPO: exactness before any update, predict as collection, save/load, errors."""

from typing import Any

import pytest
import torch as th
from helpers import RandomEpisodeEnv
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

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
    **kwargs: Any,
) -> ResetPPO:
    """A model after two rollouts at learning rate 0 on short episodes (1 to 4 steps: many starts inside windows)."""
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=dict(obs_kind=obs_kind, max_length=4))
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
        # Real slots (reset mode: the kept ones); padding slots, never trained, attend to other keys than the step
        # they repeat
        real = samples.kept
        assert model.boundary == "reset" and (samples.n_real_slots is None or int(real.sum()) == samples.n_real_slots)
        log_prob_error = max(log_prob_error, float((log_prob - samples.old_log_prob).abs()[real].max()))
        value_error = max(value_error, float((values - samples.old_values).abs()[real].max()))
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
