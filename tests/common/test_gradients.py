"""
The fused unroll equals the design document's slot-by-slot unroll (values, input and parameter gradients); BPTT
stops at a boundary; dropped slots give no gradient. The unroll is the same for both boundaries (mask mode only
drops slots), so it is tested once.
"""

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv, assert_close_named, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_util import make_vec_env
from torch import nn
from unroll_reference import reference_unroll

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.layout import plan_reset_steps, slot_resets
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.unroll import unroll_rnn
from sb3_reset_ppo.common.windows import kept_slots

# Both recurrent layers share the unroll (a reset step each): every unroll test runs for both
RNNS = pytest.mark.parametrize("rnn_class", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])


def _random_windows(
    n_windows: int,
    window_size: int,
    layers: int,
    hidden: int,
    inputs: int,
    density: float,
    seed: int,
    rnn_class: type[nn.Module] = nn.LSTM,
):
    generator = th.Generator().manual_seed(seed)
    features = th.randn(n_windows, window_size, inputs, generator=generator, requires_grad=True)
    memory = (
        th.randn(n_windows, window_size, layers, hidden, generator=generator),
        th.randn(n_windows, window_size, layers, hidden, generator=generator),
    )
    episode_starts = (th.rand(n_windows, window_size, generator=generator) < density).float()
    # An LSTM's memory is (hidden, cell), a GRU's (hidden,)
    return features, memory if rnn_class is nn.LSTM else memory[:1], episode_starts


def _fused(rnn: nn.Module, features: th.Tensor, memory: tuple[th.Tensor, ...], episode_starts: th.Tensor) -> th.Tensor:
    n_windows, window_size = episode_starts.shape
    layout = plan_reset_steps(episode_starts.numpy())
    # (B, W, L, H) -> (B, L, H): the memory recorded for slot 0
    first = tuple(tensor[:, 0] for tensor in memory)
    # (B, W, F) -> (B * W, F)
    out = unroll_rnn(rnn, features.reshape(n_windows * window_size, -1), first, 1.0 - episode_starts[:, 0], layout)  # type: ignore[arg-type]
    # (B * W, H) -> (B, W, H)
    return out.reshape(n_windows, window_size, -1)


@settings(max_examples=examples(40), deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 9),
    st.integers(1, 2),
    st.sampled_from([0.0, 0.2, 0.6, 1.0]),
    st.integers(0, 10_000),
    st.booleans(),
    st.sampled_from([nn.LSTM, nn.GRU]),
)
def test_fused_unroll_equals_slot_by_slot_reference(
    n_windows: int, window_size: int, layers: int, density: float, seed: int, bias: bool, rnn_class: type[nn.Module]
) -> None:
    th.manual_seed(seed)
    lstm = rnn_class(3, 5, num_layers=layers, bias=bias)
    features, memory, episode_starts = _random_windows(n_windows, window_size, layers, 5, 3, density, seed, rnn_class)
    expected = reference_unroll(lstm, features, memory, episode_starts, "reset")
    actual = _fused(lstm, features, memory, episode_starts)
    th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    # Gradients agree too: with respect to the inputs and to every LSTM parameter
    weights = th.randn(expected.shape, generator=th.Generator().manual_seed(seed))
    wrt = [features, *lstm.parameters()]
    grads_expected = th.autograd.grad((expected * weights).sum(), wrt)
    grads_actual = th.autograd.grad((actual * weights).sum(), wrt)
    for name, grad_actual, grad_expected in zip(
        ["features"] + [n for n, _ in lstm.named_parameters()], grads_actual, grads_expected, strict=True
    ):
        assert_close_named(grad_actual, grad_expected, name, rtol=1e-4, atol=1e-5)


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.sampled_from([0.0, 0.3, 1.0]), st.integers(0, 10_000))
def test_reset_layout(n_windows: int, window_size: int, density: float, seed: int) -> None:
    starts = (np.random.default_rng(seed).random((n_windows, window_size)) < density).astype(np.float32)
    layout = plan_reset_steps(starts)
    n_resets = (starts[:, 1:] > 0).sum(axis=1)
    assert layout.row_length == window_size + n_resets.max(initial=0)
    positions = layout.slot_positions.numpy().reshape(n_windows, window_size)
    for window in range(n_windows):
        # Brute force: walk the row, inserting a reset step before every reset slot
        step, expected, reset_at = 0, [], []
        for slot in range(window_size):
            if slot >= 1 and starts[window, slot]:
                reset_at.append(step)
                step += 1
            expected.append(step * n_windows + window)
            step += 1
        assert positions[window].tolist() == expected
        flags = layout.reset_steps[:, window, 0]
        assert np.flatnonzero(flags.numpy()).tolist() == reset_at
    assert len(set(positions.reshape(-1).tolist())) == n_windows * window_size


@RNNS
def test_dropout_and_no_bias_match_reference(rnn_class: type[nn.Module]) -> None:
    th.manual_seed(0)
    features, memory, episode_starts = _random_windows(4, 6, 2, 5, 3, 0.3, 0, rnn_class)
    lstm = rnn_class(3, 5, num_layers=2, bias=False)
    th.testing.assert_close(
        _fused(lstm, features, memory, episode_starts), reference_unroll(lstm, features, memory, episode_starts, "reset")
    )
    # Dropout between layers is random: in eval mode it is off and both agree
    lstm = rnn_class(3, 5, num_layers=2, dropout=0.5).eval()
    th.testing.assert_close(
        _fused(lstm, features, memory, episode_starts), reference_unroll(lstm, features, memory, episode_starts, "reset")
    )


@RNNS
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_gradient_is_zero_before_last_reset(layers: int, seed: int, rnn_class: type[nn.Module]) -> None:
    th.manual_seed(seed)
    window_size = 8
    lstm = rnn_class(5, 6, num_layers=layers)
    features, memory, episode_starts = _random_windows(12, window_size, layers, 6, 5, 0.25, seed, rnn_class)
    resets = slot_resets(episode_starts)
    outputs = _fused(lstm, features, memory, episode_starts)
    checked_zero = 0
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
    assert checked_zero > 0


@RNNS
def test_reference_without_episode_starts_leaks_gradient(rnn_class: type[nn.Module]) -> None:
    # Control for the test above: with no episode start, gradient flows back to slot 0.
    lstm = rnn_class(3, 4)
    features, memory, _ = _random_windows(2, 6, 1, 4, 3, 0.0, 0, rnn_class)
    outputs = _fused(lstm, features, memory, th.zeros(2, 6))
    (grad,) = th.autograd.grad(outputs[0, 5].sum(), features)
    assert grad[0, 0].abs().sum() > 0


def _policy_windows(boundary: str, policy: str = "MlpLstmPolicy") -> tuple[ResetPPO, WindowRolloutBufferSamples]:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=3, env_kwargs=dict(max_length=5))
    model = ResetPPO(
        policy,
        env,
        n_steps=24,
        batch_size=32,
        window_size=8,
        window_stride=1,
        window_coverage="inside",  # the masking baseline's epochs: some steps only in dropped slots
        boundary=boundary,
        seed=3,
        policy_kwargs={"lstm_hidden_size": 8},
    )
    model.learn(2 * 24 * 2)
    return model, next(model.rollout_buffer.get(None))


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy"])
def test_policy_gradient_stops_at_boundary_end_to_end(policy: str) -> None:
    model, samples = _policy_windows("reset", policy)
    assert isinstance(samples.observations, th.Tensor)
    observations = samples.observations.clone().requires_grad_(True)
    _, log_prob, _ = evaluate_windows(model.policy, samples._replace(observations=observations))
    windows, slots = th.nonzero(samples.resets, as_tuple=True)
    assert len(windows) > 0
    for window, reset_slot in zip(windows.tolist()[:10], slots.tolist()[:10], strict=True):
        later = [s for s in range(reset_slot + 1, 8) if samples.resets[window, s]]
        last = later[0] - 1 if later else 7
        (grad,) = th.autograd.grad(log_prob[window, last], observations, retain_graph=True)
        rows = samples.slot_steps[window]
        assert th.all(grad[rows[:reset_slot]] == 0)
        assert grad[rows[reset_slot]].abs().sum() > 0


@pytest.mark.parametrize("policy", ["MlpLstmPolicy", "MlpGruPolicy"])
def test_mask_mode_dropped_slots_contribute_no_gradient(policy: str) -> None:
    model, samples = _policy_windows("mask", policy)
    dropped = ~samples.kept
    assert dropped.any()
    assert isinstance(samples.observations, th.Tensor)

    def gradients(batch: WindowRolloutBufferSamples) -> list[th.Tensor]:
        model.policy.optimizer.zero_grad()
        model._minibatch_loss(batch, clip_range=0.2, clip_range_vf=0.1).loss.backward()
        return [p.grad.clone() if p.grad is not None else th.zeros_like(p) for p in model.policy.parameters()]

    before = gradients(samples)
    generator = th.Generator().manual_seed(0)

    def scramble(tensor: th.Tensor, where: th.Tensor) -> th.Tensor:
        noise = th.randn(tensor.shape, generator=generator) * 10
        mask = where.reshape(*where.shape, *([1] * (tensor.dim() - where.dim())))
        return th.where(mask, noise.to(tensor.dtype), tensor)

    # Observation rows that only dropped slots hold (a step can be kept in another window)
    only_dropped = th.ones(samples.observations.shape[0], dtype=th.bool)
    only_dropped[samples.slot_steps[samples.kept]] = False
    assert only_dropped.any()
    scrambled = samples._replace(
        observations=scramble(samples.observations, only_dropped),
        advantages=scramble(samples.advantages, dropped),
        returns=scramble(samples.returns, dropped),
        old_log_prob=scramble(samples.old_log_prob, dropped),
        old_values=scramble(samples.old_values, dropped),
        actions=th.where(dropped[..., None], 1 - samples.actions, samples.actions),
    )
    after = gradients(scrambled)
    assert any(g.abs().sum() > 0 for g in before)
    for grad_before, grad_after in zip(before, after, strict=True):
        th.testing.assert_close(grad_before, grad_after, rtol=1e-5, atol=1e-7)
    # Control: changing a kept slot does change the gradient
    kept_changed = samples._replace(advantages=th.where(samples.kept, -samples.advantages * 3, samples.advantages))
    changed = gradients(kept_changed)
    assert any(not th.allclose(a, b) for a, b in zip(before, changed, strict=True))


def test_kept_mask_from_resets() -> None:
    resets = th.tensor([[False, False, True, False, True], [False, False, False, False, False]])
    assert kept_slots(resets, "mask").tolist() == [[True, True, False, False, False], [True] * 5]
    assert kept_slots(resets, "reset").all()
    np.testing.assert_array_equal(slot_resets(th.ones(1, 3)).numpy(), [[False, True, True]])
