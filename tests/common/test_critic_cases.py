"""
sb3-contrib's three critics (``enable_critic_lstm``, ``shared_lstm``), read in one place
(:func:`~sb3_reset_ppo.common.recurrent.critic_variant`) by the window evaluation and the GRU policies' ``forward``:
which case a policy is in, and what each case does to the value's gradient and the critic's memory.
"""

from typing import Any

import pytest
import torch as th
from helpers import RandomEpisodeEnv
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.env_util import make_vec_env
from torch import nn

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.recurrent import critic_variant

CRITICS: dict[str, dict[str, Any]] = {
    "separate": {},
    "shared": {"shared_lstm": True, "enable_critic_lstm": False},
    "none": {"enable_critic_lstm": False},
}


def _model(policy: str, critic: str) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0)
    policy_kwargs = {"lstm_hidden_size": 4, "net_arch": [4], **CRITICS[critic]}
    return ResetPPO(policy, env, n_steps=8, batch_size=16, window_size=4, n_epochs=1, seed=0, policy_kwargs=policy_kwargs)


def _gradients(module: nn.Module | None) -> list[th.Tensor]:
    return [] if module is None else [p.grad for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy"])
@pytest.mark.parametrize("critic", list(CRITICS))
def test_critic_variant_names_the_case_and_its_layer(policy: str, critic: str) -> None:
    model = _model(policy, critic)
    variant = critic_variant(model.policy)
    assert variant.kind == critic
    # The critic's own recurrent layer only when it has one; the features layer only without a recurrent layer
    assert variant.rnn is model.policy.lstm_critic and (variant.rnn is not None) == (critic == "separate")
    assert variant.linear is model.policy.critic and (variant.linear is not None) == (critic == "none")
    if variant.rnn is not None:
        cell = nn.GRU if policy == "MlpGruPolicy" else nn.LSTM
        assert isinstance(variant.rnn, cell) and variant.rnn is not model.policy.lstm_actor


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy"])
@pytest.mark.parametrize("critic", list(CRITICS))
def test_value_gradient_reaches_only_the_critics_own_layers(policy: str, critic: str) -> None:
    # In every case the value loss never trains the actor's recurrent layer (shared: its output is detached); it
    # trains the critic's own recurrent layer (separate) or its features layer (none)
    model = _model(policy, critic)
    model.learn(16)
    samples = next(model.rollout_buffer.get(None))
    model.policy.zero_grad(set_to_none=True)  # learn() leaves its last gradients
    values, _, _ = evaluate_windows(model.policy, samples)
    values.sum().backward()
    variant = critic_variant(model.policy)
    assert all(g.abs().sum() == 0 for g in _gradients(model.policy.lstm_actor))
    assert all(g.abs().sum() > 0 for g in _gradients(variant.rnn)) and len(_gradients(variant.rnn)) == (
        0 if variant.rnn is None else len(list(variant.rnn.parameters()))
    )
    assert len(_gradients(variant.linear)) == (0 if variant.linear is None else 2)
    assert all(g.abs().sum() > 0 for g in _gradients(variant.linear))


@pytest.mark.parametrize("critic", list(CRITICS))
def test_gru_forward_gives_each_critic_its_memory(critic: str) -> None:
    model = _model("MlpGruPolicy", critic)
    policy = model.policy
    generator = th.Generator().manual_seed(0)
    # 2 envs, one step; memory (hidden,) of shape (n_layers, n_envs, hidden)
    obs = th.randn((2, 3), generator=generator)
    pi, vf = (th.randn((1, 2, 4), generator=generator),), (th.randn((1, 2, 4), generator=generator),)
    _, values, _, states = policy.forward(obs, RNNStates(pi, vf), th.zeros(2))
    values.sum().backward()
    assert all(g.abs().sum() == 0 for g in _gradients(policy.lstm_actor))
    if critic == "separate":
        # Its own memory, carried from its own input
        assert not th.equal(states.vf[0], states.pi[0]) and len(states.vf) == 1
    elif critic == "shared":
        # The actor's memory, detached
        assert th.equal(states.vf[0], states.pi[0]) and not states.vf[0].requires_grad and states.pi[0].requires_grad
    else:
        # Unused: the actor's, as sb3-contrib stores it
        assert states.vf is states.pi
