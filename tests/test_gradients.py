"""Backpropagation through time stops at a boundary; dropped slots contribute no gradient."""

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv
from stable_baselines3.common.env_util import make_vec_env
from torch import nn

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.unroll import evaluate_windows, unroll_lstm
from sb3_reset_ppo.common.windows import kept_slots, slot_resets


def _random_windows(n_windows: int, window_size: int, layers: int, hidden: int, inputs: int, seed: int):
    generator = th.Generator().manual_seed(seed)
    features = th.randn(n_windows, window_size, inputs, generator=generator, requires_grad=True)
    memory = (
        th.randn(n_windows, window_size, layers, hidden, generator=generator),
        th.randn(n_windows, window_size, layers, hidden, generator=generator),
    )
    episode_starts = (th.rand(n_windows, window_size, generator=generator) < 0.25).float()
    return features, memory, episode_starts


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_gradient_is_zero_before_last_reset(layers: int, seed: int) -> None:
    th.manual_seed(seed)
    window_size = 8
    lstm = nn.LSTM(5, 6, num_layers=layers)
    features, memory, episode_starts = _random_windows(12, window_size, layers, 6, 5, seed)
    resets = slot_resets(episode_starts)
    outputs = unroll_lstm(lstm, features, memory, episode_starts, resets)
    checked_zero = checked_nonzero = 0
    for window in range(12):
        for slot in range(window_size):
            (grad,) = th.autograd.grad(outputs[window, slot].sum(), features, retain_graph=True)
            reset_slots = [i for i in range(1, slot + 1) if resets[window, i]]
            last_reset = reset_slots[-1] if reset_slots else 0
            # Exactly zero before the last reset of the window up to this slot, and for other windows
            assert th.all(grad[window, :last_reset] == 0)
            assert th.all(grad[:window] == 0) and th.all(grad[window + 1 :] == 0)
            # Non-zero from the last reset on (the test can fail)
            assert th.all(grad[window, last_reset : slot + 1].abs().sum(dim=-1) > 0)
            assert th.all(grad[window, slot + 1 :] == 0)
            checked_zero += last_reset
            checked_nonzero += 1
    assert checked_zero > 0


def test_carrying_memory_without_reset_would_leak_gradient() -> None:
    # Control for the test above: without episode starts (no reset, no SB3 rule) gradient flows back to slot 0.
    lstm = nn.LSTM(3, 4)
    features, memory, _ = _random_windows(2, 6, 1, 4, 3, 0)
    no_starts = th.zeros(2, 6)
    outputs = unroll_lstm(lstm, features, memory, no_starts, slot_resets(no_starts))
    (grad,) = th.autograd.grad(outputs[0, 5].sum(), features)
    assert grad[0, 0].abs().sum() > 0


def test_reset_slot_restarts_from_recorded_memory() -> None:
    # Where the reset flag is set but SB3's episode-start rule is not applied (flags given separately),
    # the slot must run from the recorded memory of its step, not from the carried one.
    lstm = nn.LSTM(3, 4)
    features, memory, _ = _random_windows(3, 5, 1, 4, 3, 1)
    resets = th.zeros(3, 5, dtype=th.bool)
    resets[:, 2] = True
    outputs = unroll_lstm(lstm, features, memory, th.zeros(3, 5), resets)
    # Reference: a fresh run from slot 2 with the recorded memory of slot 2
    fresh = unroll_lstm(lstm, features[:, 2:], (memory[0][:, 2:], memory[1][:, 2:]), th.zeros(3, 3), None)
    th.testing.assert_close(outputs[:, 2:], fresh)
    carried = unroll_lstm(lstm, features, memory, th.zeros(3, 5), None)
    assert not th.allclose(outputs[:, 2:], carried[:, 2:])


def _policy_windows(boundary: str):
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=3, env_kwargs=dict(max_length=5))
    model = ResetPPO(
        "MlpLstmPolicy", env, n_steps=24, window_size=8, boundary=boundary, seed=3, policy_kwargs={"lstm_hidden_size": 8}
    )
    model.learn(2 * 24 * 2)
    return model, next(model.rollout_buffer.get(None))


def test_policy_gradient_stops_at_boundary_end_to_end() -> None:
    model, samples = _policy_windows("reset")
    observations = samples.observations.clone().requires_grad_(True)
    _, log_prob, _ = evaluate_windows(
        model.policy, observations, samples.actions, samples.lstm_states, samples.episode_starts, samples.resets
    )
    windows, slots = th.nonzero(samples.resets, as_tuple=True)
    assert len(windows) > 0
    for window, reset_slot in zip(windows.tolist()[:10], slots.tolist()[:10], strict=True):
        later = [s for s in range(reset_slot + 1, 8) if samples.resets[window, s]]
        last = later[0] - 1 if later else 7
        (grad,) = th.autograd.grad(log_prob[window, last], observations, retain_graph=True)
        assert th.all(grad[window, :reset_slot] == 0)
        assert grad[window, reset_slot].abs().sum() > 0


def test_mask_mode_dropped_slots_contribute_no_gradient() -> None:
    model, samples = _policy_windows("mask")
    dropped = ~samples.kept
    assert dropped.any()

    def gradients(batch) -> list[th.Tensor]:
        model.policy.optimizer.zero_grad()
        model._minibatch_loss(batch, clip_range=0.2, clip_range_vf=0.1).loss.backward()
        return [p.grad.clone() if p.grad is not None else th.zeros_like(p) for p in model.policy.parameters()]

    before = gradients(samples)
    # Scramble everything a dropped slot holds: data, targets, actions, observations
    generator = th.Generator().manual_seed(0)

    def scramble(tensor: th.Tensor) -> th.Tensor:
        noise = th.randn(tensor.shape, generator=generator) * 10
        mask = dropped.reshape(*dropped.shape, *([1] * (tensor.dim() - 2)))
        return th.where(mask, noise.to(tensor.dtype), tensor)

    scrambled = samples._replace(
        observations=scramble(samples.observations),
        advantages=scramble(samples.advantages),
        returns=scramble(samples.returns),
        old_log_prob=scramble(samples.old_log_prob),
        old_values=scramble(samples.old_values),
        actions=th.where(dropped[..., None], 1 - samples.actions, samples.actions),
    )
    after = gradients(scrambled)
    assert any(g.abs().sum() > 0 for g in before)
    for grad_before, grad_after in zip(before, after, strict=True):
        th.testing.assert_close(grad_before, grad_after, rtol=1e-5, atol=1e-7)
    # Control: scrambling a kept slot does change the gradient
    kept_scrambled = samples._replace(advantages=th.where(samples.kept, -samples.advantages * 3, samples.advantages))
    changed = gradients(kept_scrambled)
    assert any(not th.allclose(a, b) for a, b in zip(before, changed, strict=True))


def test_kept_mask_from_resets() -> None:
    resets = th.tensor([[False, False, True, False, True], [False, False, False, False, False]])
    assert kept_slots(resets, "mask").tolist() == [[True, True, False, False, False], [True] * 5]
    assert kept_slots(resets, "reset").all()
    np.testing.assert_array_equal(slot_resets(th.ones(1, 3)).numpy(), [[False, True, True]])
