"""MaskableResetPPO's collection with masks: a Discrete policy samples without sb3-contrib's distribution objects."""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomMaskEnv
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import MaskableResetPPO
from sb3_reset_ppo.common import categorical
from sb3_reset_ppo.maskable import policies

N_ENVS = 64


def _model(policy: str = "MlpLstmPolicy", action_space: spaces.Space | None = None, n_envs: int = 2) -> MaskableResetPPO:
    env_kwargs = dict(action_space=action_space or spaces.Discrete(5), obs_kind="box")
    env = make_vec_env(RandomMaskEnv, n_envs=n_envs, seed=0, env_kwargs=env_kwargs)
    policy_kwargs: dict[str, Any] = {"net_arch": [8]}
    if "TrXL" in policy:
        policy_kwargs.update(trxl_dim=8, n_trxl_layers=1, n_attention_heads=2, memory_length=3)
    else:
        policy_kwargs["lstm_hidden_size"] = 8
    return MaskableResetPPO(
        policy, env, n_steps=16, batch_size=12, n_epochs=2, window_size=6, seed=0, policy_kwargs=policy_kwargs
    )


def _slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collection without the fast path: sb3-contrib's masked distribution objects."""
    monkeypatch.setattr(policies, "maskable_categorical", lambda policy: False)


def _step(model: MaskableResetPPO, masks: np.ndarray, deterministic: bool, seed: int) -> tuple[th.Tensor, th.Tensor]:
    """One collection step of the model's envs from their first observation and memory, at a given generator state."""
    obs = th.as_tensor(model._last_obs) * 3
    starts = th.ones(N_ENVS)
    th.manual_seed(seed)
    with th.no_grad():
        actions, _, log_prob, _ = model.policy(
            obs, model._last_lstm_states, starts, deterministic=deterministic, action_masks=masks
        )
    return actions, log_prob


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy", "MlpTrXLPolicy"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_fast_path_draws_the_distributions_actions_and_log_probs(
    policy: str, deterministic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same actions from the same generator state and the same log-probs, bit for bit: large logits and rows with
    # a single valid action included
    model = _model(policy, n_envs=N_ENVS)
    model._setup_learn(0)
    with th.no_grad():
        for parameter in model.policy.action_net.parameters():
            parameter.mul_(40.0)
    rng = np.random.default_rng(0)
    masks = rng.random((N_ENVS, 5)) < 0.5
    masks[np.arange(N_ENVS), rng.integers(0, 5, N_ENVS)] = True
    masks[:8] = False
    masks[np.arange(8), np.arange(8) % 5] = True
    calls: list[int] = []

    def counted(*args: Any) -> tuple[th.Tensor, th.Tensor]:
        calls.append(1)
        return categorical.masked_categorical_sample(*args)

    monkeypatch.setattr(policies, "masked_categorical_sample", counted)
    fast = [_step(model, masks, deterministic, seed) for seed in range(4)]
    assert len(calls) == 4
    _slow_path(monkeypatch)
    slow = [_step(model, masks, deterministic, seed) for seed in range(4)]
    assert len(calls) == 4
    for (actions, log_prob), (wanted_actions, wanted_log_prob) in zip(fast, slow, strict=True):
        assert actions.shape == wanted_actions.shape == (N_ENVS,) and actions.dtype == wanted_actions.dtype
        assert th.equal(actions, wanted_actions) and th.equal(log_prob, wanted_log_prob)
        assert masks[np.arange(N_ENVS), actions.numpy()].all()
        assert bool((log_prob[:8] == 0).all())
    # Draws differ between generator states (the comparison is not of constants)
    assert deterministic or len({tuple(actions.tolist()) for actions, _ in fast}) > 1


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpTrXLPolicy"])
def test_learning_with_the_fast_path_is_bitwise_the_distributions(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two rollouts and their updates: the same parameters, rollouts and log-probs with the fast path and without
    def learn() -> tuple[MaskableResetPPO, dict[str, th.Tensor]]:
        model = _model(policy).learn(32)
        return model, {name: tensor.clone() for name, tensor in model.policy.state_dict().items()}

    fast_model, fast = learn()
    _slow_path(monkeypatch)
    slow_model, slow = learn()
    assert fast.keys() == slow.keys()
    assert all(th.equal(fast[name], slow[name]) for name in fast)
    for name in ("actions", "log_probs", "action_masks"):
        assert np.array_equal(getattr(fast_model.rollout_buffer, name), getattr(slow_model.rollout_buffer, name)), name


@pytest.mark.parametrize("action_space", [spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3)])
def test_other_action_spaces_sample_from_the_distribution(action_space: spaces.Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast path covers Discrete only: MultiDiscrete and MultiBinary build sb3-contrib's distributions
    def refuse(*args: object) -> None:
        raise AssertionError("the fast path sampled a non-Discrete action")

    monkeypatch.setattr(policies, "masked_categorical_sample", refuse)
    model = _model(action_space=action_space).learn(16)
    assert model.rollout_buffer.masks_stored
