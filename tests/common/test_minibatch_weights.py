"""
Every step of the rollout gets the weight the documentation promises, in every setting, computed from the
minibatches the buffer actually yields (not from ``window_weights``).

A step's *effective gradient weight* in one epoch is the sum, over the slots that hold it, of the slot's weight divided
by what its minibatch's loss is divided by (``uniform``: ``samples.loss_normaliser``). Averaged over many epochs it
must equal the design document's expectation (``docs/design.md``, "Minibatches"): the brute-force per-epoch window
weights divided by ``min(max(batch_size, W), expected real slots per epoch)``. That is

- with full coverage in reset mode: the same for every step (``W / k`` over the normaliser);
- with inside coverage in reset mode: the ramp ``min(s + 1, W, T - s, T - W + 1) / k``;
- in mask mode with full coverage: the seed's pattern, ``min(j + 1, W) / k`` for a step ``j`` steps into an episode
  that began inside the rollout (``W / k`` in the episode the rollout began in).

A buffer whose clipped pieces form minibatches of their own, each averaged over its own real slots, weighs the
rollout's ends 2.36 times the mean at n_steps=200, batch_size=64: ``test_rollout_end_table_settings`` fails for it.
"""

import math

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv, examples, filled_window_buffer
from hypothesis import given, settings
from hypothesis import strategies as st
from window_weights import brute_force_effective_weights, brute_force_step_weights, brute_force_window_starts

from sb3_reset_ppo import ResetPPO, WindowRolloutBuffer
from sb3_reset_ppo.common.epochs import epoch_slot_range
from sb3_reset_ppo.common.settings import resolve_window_size
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples


def _expected_epoch_slots(n_steps: int, n_envs: int, window_size: int, stride: int, coverage: str) -> float:
    """Brute force: the real slots of all windows of a rollout (every start, clipped), over the stride."""
    starts = brute_force_window_starts(n_steps, window_size, coverage)
    slots = sum(min(start + window_size, n_steps) - max(start, 0) for start in starts)
    return n_envs * slots / min(stride, len(starts))


def _epoch_slot_range(n_steps: int, n_envs: int, window_size: int, stride: int, coverage: str) -> tuple[int, int]:
    """Brute force: fewest and most real slots of an epoch over the (per env) phases."""
    starts = brute_force_window_starts(n_steps, window_size, coverage)
    k = min(stride, len(starts))
    per_phase = [sum(min(t + window_size, n_steps) - max(t, 0) for t in starts[p::k]) for p in range(k)]
    return n_envs * min(per_phase), n_envs * max(per_phase)


def _effective_stride(n_steps: int, window_size: int, stride: int, coverage: str) -> int:
    n_starts = n_steps + window_size - 1 if coverage == "full" else n_steps - window_size + 1
    return min(stride, n_starts)


def _real_slots(batch: WindowRolloutBufferSamples) -> int:
    return int(batch.kept.numel() if batch.n_real_slots is None else batch.n_real_slots)


def _epoch_weights(
    buffer: WindowRolloutBuffer, batch_size: int | None, n_steps: int, n_envs: int
) -> tuple[np.ndarray, list[int]]:
    """One epoch from the buffer: each step's effective gradient weight (env-major) and each minibatch's real slots."""
    weights = np.zeros(n_envs * n_steps)
    sizes = []
    for batch in buffer.get(batch_size):
        assert isinstance(batch.observations, th.Tensor)
        # The step id of every slot, from the gathered observations (the buffer stores each step's flat id)
        ids = batch.observations[:, 0].long()[batch.slot_steps].numpy()
        slot_weights = batch.weights.double().numpy()
        if buffer.weighting == "uniform":
            assert batch.loss_normaliser is not None
            normaliser = batch.loss_normaliser
        else:
            normaliser = max(float(slot_weights.sum()), 1e-12)
        np.add.at(weights, ids.ravel(), slot_weights.ravel() / normaliser)
        sizes.append(_real_slots(batch))
    return weights, sizes


def _seed_mask_pattern(episode_starts: np.ndarray, window_size: int) -> np.ndarray:
    """min(j + 1, W) for a step j steps into an episode that began at step >= 1; W in the rollout's first episode."""
    n_steps, n_envs = episode_starts.shape
    pattern = np.full((n_steps, n_envs), float(window_size))
    for env in range(n_envs):
        began = None
        for step in range(n_steps):
            if step >= 1 and episode_starts[step, env]:
                began = step
            if began is not None:
                pattern[step, env] = min(step - began + 1, window_size)
    return pattern


def _inside_ramp(n_steps: int, window_size: int) -> np.ndarray:
    s = np.arange(n_steps)
    return np.minimum.reduce([s + 1, np.full(n_steps, window_size), n_steps - s, np.full(n_steps, n_steps - window_size + 1)])


def _check_average(
    n_steps: int,
    n_envs: int,
    window_size: int,
    boundary: str,
    weighting: str,
    stride: int | None,
    coverage: str,
    batch_size: int | None,
    density: float,
    seed: int,
    max_minibatches: int = 750,
) -> None:
    buffer = filled_window_buffer(
        n_steps, n_envs, window_size, boundary, weighting, stride,
        window_coverage=coverage, density=density, seed=seed, buffer_seed=seed,
    )  # fmt: skip
    episode_starts = buffer.episode_starts  # (n_steps, n_envs)
    resolved_stride = window_size if stride is None else stride
    k = _effective_stride(n_steps, window_size, resolved_stride, coverage)
    full = None if batch_size is None else max(batch_size, window_size)
    mean_slots = _expected_epoch_slots(n_steps, n_envs, window_size, resolved_stride, coverage)
    # Every minibatch holds `full` real slots but at most one
    first, sizes = _epoch_weights(buffer, batch_size, n_steps, n_envs)
    # Every minibatch holds exactly `full` real slots, or the epoch is one minibatch of all its slots (no more than that)
    assert sizes == [full] * len(sizes) or (len(sizes) == 1 and (full is None or sizes[0] <= full)), sizes
    if weighting != "uniform":
        return
    normaliser = mean_slots if full is None else min(full, mean_slots)
    # (n_steps, n_envs) -> (n_envs, n_steps) -> env-major flat
    window = brute_force_step_weights(episode_starts, window_size, boundary, "uniform", resolved_stride, coverage)
    window = window.T.reshape(-1)
    expected = brute_force_effective_weights(episode_starts, window_size, boundary, resolved_stride, coverage, batch_size)
    expected = expected.T.reshape(-1)
    # The documented closed forms (k = 1 totals over k) of the window weights
    closed = None
    if boundary == "reset":
        closed = np.full(n_steps, window_size) if coverage == "full" else _inside_ramp(n_steps, window_size)
        closed = np.tile(closed / k, n_envs)
    elif coverage == "full":
        closed = _seed_mask_pattern(episode_starts, window_size).T.reshape(-1) / k
    if closed is not None and (coverage == "full" or k == 1 or n_steps == window_size):
        # Full coverage: every window start is in exactly one phase; inside with k > 1 is the brute force only
        np.testing.assert_allclose(window, closed, rtol=1e-9, atol=1e-12)
    fewest, most = _epoch_slot_range(n_steps, n_envs, window_size, resolved_stride, coverage)
    if fewest == most:
        # Every epoch holds the same real slots N: each is trained with the same probability, floor(N / M) * M / N,
        # so the effective weights are the window weights times one number (docs/design.md)
        trained = 1.0 if full is None or most <= full else (most // full) * full / most
        np.testing.assert_allclose(expected, window * trained / normaliser, rtol=1e-9, atol=1e-12)
    if k == 1 and (full is None or most <= full or most % full == 0):
        # Every window every epoch, nothing left out: the weights are the same in every epoch, exactly
        np.testing.assert_allclose(first, expected, rtol=1e-9, atol=1e-12)
        return
    n_epochs = max(50, min(200, max_minibatches // max(len(sizes), 1)))
    total = first.copy()
    for _ in range(n_epochs - 1):
        total += _epoch_weights(buffer, batch_size, n_steps, n_envs)[0]
    mean = total / n_epochs
    # A step's weight in one epoch lies in [0, M] with mean `expected`, so its variance is at most M * expected
    bound = math.ceil(window_size / k) / normaliser
    tolerance = 6 * np.sqrt(bound * expected / n_epochs) + 1e-12
    assert np.all(np.abs(mean - expected) <= tolerance), (mean, expected, tolerance)
    assert np.all(mean[expected == 0] == 0)


@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(
    n_steps=st.integers(1, 24),
    n_envs=st.integers(1, 2),
    data=st.data(),
    boundary=st.sampled_from(["reset", "mask"]),
    weighting=st.sampled_from(["uniform", "uniform", "importance", "kept_mean"]),
    coverage=st.sampled_from(["full", "inside"]),
    density=st.sampled_from([0.0, 0.1, 0.3, 1.0]),
)
def test_effective_weights_equal_the_documented_expectation(
    n_steps: int, n_envs: int, data: st.DataObject, boundary: str, weighting: str, coverage: str, density: float
) -> None:
    # window_size as an int or derived from batch_size / n_steps as ResetPPO resolves it
    batch_size = data.draw(st.one_of(st.none(), st.integers(1, 3 * n_steps * n_envs)), label="batch_size")
    window_setting = data.draw(st.one_of(st.integers(1, n_steps), st.sampled_from(["batch", "rollout"])), label="window")
    window_size = resolve_window_size(window_setting, n_steps, batch_size)
    stride = data.draw(st.one_of(st.none(), st.integers(1, n_steps + window_size)), label="stride")
    seed = data.draw(st.integers(0, 1000), label="seed")
    _check_average(n_steps, n_envs, window_size, boundary, weighting, stride, coverage, batch_size, density, seed)


# Settings whose window length does not divide n_steps or whose stride is below the window
@pytest.mark.parametrize(
    "n_steps,batch_size,window_size,window_stride",
    [(200, 64, "batch", None), (65, 64, "batch", None), (100, 64, "batch", None), (64, 16, 16, 1), (128, 64, "batch", None)],
)
def test_rollout_end_table_settings(n_steps: int, batch_size: int, window_size: int | str, window_stride: int | None) -> None:
    # Through the public API: the model's own buffer, defaults otherwise (full coverage, reset, uniform)
    model = ResetPPO(
        "MlpLstmPolicy",
        RandomEpisodeEnv(),
        n_steps=n_steps,
        batch_size=batch_size,
        window_size=window_size,
        window_stride=window_stride,
        policy_kwargs={"lstm_hidden_size": 4, "net_arch": []},
        seed=0,
    )
    buffer = model.rollout_buffer
    assert isinstance(buffer, WindowRolloutBuffer) and isinstance(buffer.observations, np.ndarray)
    buffer.observations[:] = np.arange(n_steps, dtype=np.float32).reshape(n_steps, 1, 1)
    buffer.episode_starts[:] = 0.0
    buffer.episode_starts[[0, 37 % n_steps], 0] = 1.0
    buffer.full = True
    # Each epoch leaves out its remainder at a random place: the mean over epochs converges to the same weight for
    # every step
    full = max(batch_size, model.window_length)
    fewest, most = epoch_slot_range(n_steps, 1, model.window_settings)
    # Nothing left out (e.g. stride 1: 64 * 16 slots): every epoch's weights are the same, a few epochs suffice
    n_epochs = 20 if fewest == most and most % full == 0 else 1000
    total = np.zeros(n_steps)
    for _ in range(n_epochs):
        weights, sizes = _epoch_weights(buffer, batch_size, n_steps, 1)
        total += weights
        assert sizes == [full] * len(sizes), sizes
    relative = total / total.mean()
    # The same weight for every step, rollout ends included (2.36 at the ends for n_steps=200 with pieces as minibatches);
    # a step is trained at most once per epoch here, so its count is binomial: 6 standard errors
    trained = int(np.sum(sizes)) / (n_steps * model.window_length / model.window_settings.stride(n_steps))
    np.testing.assert_allclose(relative, 1.0, atol=6 * np.sqrt((1 - trained) / (trained * n_epochs)) + 1e-9)
