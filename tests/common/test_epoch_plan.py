"""The pure epoch plan: minibatches cut from the epoch's sequence of windows by real slots."""

import copy
from collections import Counter

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_reset_ppo.common.epochs import (
    epoch_slot_range,
    epoch_window_starts,
    expected_epoch_slots,
    minibatch_cuts,
    plan_epoch,
    uniform_normaliser,
    window_order,
    window_units,
)
from sb3_reset_ppo.common.settings import WindowSettings, clip_windows


def _all_window_lengths(n_steps: int, window_size: int, coverage: str) -> np.ndarray:
    starts = np.arange(-(window_size - 1), n_steps) if coverage == "full" else np.arange(n_steps - window_size + 1)
    return clip_windows(starts, n_steps, window_size)[1]


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(
    n_steps=st.integers(1, 30),
    n_envs=st.integers(1, 3),
    data=st.data(),
    coverage=st.sampled_from(["full", "inside"]),
    consecutive=st.integers(1, 3),
)
def test_plan_rows_partition_the_epochs_windows_into_full_minibatches(
    n_steps: int, n_envs: int, data: st.DataObject, coverage: str, consecutive: int
) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    stride = data.draw(st.one_of(st.none(), st.integers(1, n_steps + window_size)))
    batch_size = data.draw(st.one_of(st.none(), st.integers(1, 2 * n_steps * n_envs)))
    config = WindowSettings.validated(window_size, window_stride=stride, window_coverage=coverage, n_steps=n_steps)
    seed = data.draw(st.integers(0, 100))
    plan = plan_epoch(n_steps, n_envs, config, batch_size, consecutive, np.random.default_rng(seed))
    # The same generator calls for the phases: the epoch's windows
    epoch = epoch_window_starts(
        n_steps, n_envs, window_size, config.window_stride, np.random.default_rng(seed), config.window_coverage
    )
    # Rows cover each window's real slots at most once, without crossing envs: the (window's first step, slot in the
    # window) pairs are the windows' less the epoch's remainder
    covered = []
    for start, length, offset, first in zip(plan.starts, plan.lengths, plan.offsets, plan.window_firsts, strict=True):
        assert 1 <= length <= window_size and start == first + offset
        assert start // n_steps == (start + length - 1) // n_steps == first // n_steps
        covered += [(int(first), int(offset) + slot) for slot in range(int(length))]
    expected = [(first, slot) for first, length in zip(epoch.starts.tolist(), epoch.lengths.tolist(), strict=True)
                for slot in range(length)]  # fmt: skip
    assert not Counter(covered) - Counter(expected)
    # Minibatches: every one holds exactly `full` real slots; the epoch's remainder is left out
    sizes = [int(plan.lengths[a:b].sum()) for a, b in zip(plan.minibatch_edges[:-1], plan.minibatch_edges[1:], strict=True)]
    n_slots = int(epoch.lengths.sum())
    full = None if batch_size is None else max(batch_size, window_size)
    if full is None or full >= n_slots:
        assert sizes == [n_slots]
    else:
        assert sizes == [full] * (n_slots // full)
    assert len(covered) == sum(sizes)
    # Every minibatch holds rows, and a cut window's pieces follow each other in the epoch's order (the first row may
    # be the later piece of a window whose earlier piece was left out)
    assert np.all(np.diff(plan.minibatch_edges) > 0)
    cut = np.flatnonzero(plan.offsets > 0)
    cut = cut[cut > 0]
    follows = plan.starts[cut - 1] + plan.lengths[cut - 1] == plan.starts[cut]
    # A row that does not follow its predecessor starts a minibatch after the left-out remainder: only the first row
    assert np.all(follows), (plan, cut)


def test_every_slot_is_left_out_with_the_same_probability() -> None:
    # n_steps=200, batch_size=64, W=64: 200 = 3 * 64 + 8, every epoch leaves 8 slots out
    n_steps, batch_size = 200, 64
    config = WindowSettings.validated("batch", n_steps=n_steps, batch_size=batch_size)
    generator = np.random.default_rng(0)
    counts = np.zeros(n_steps)
    n_epochs = 20_000
    for _ in range(n_epochs):
        plan = plan_epoch(n_steps, 1, config, batch_size, 1, generator)
        assert plan.n_minibatches == 3 and int(plan.lengths.sum()) == 192
        for start, length in zip(plan.starts, plan.lengths, strict=True):
            counts[start : start + length] += 1
    # Every step is trained with probability 192 / 200, wherever it stands in the rollout and in its window
    np.testing.assert_allclose(counts / n_epochs, 192 / 200, atol=4 * np.sqrt(0.04 * 0.96 / n_epochs))


def test_minibatch_cuts() -> None:
    generator = np.random.default_rng(0)
    offsets = np.zeros(4 * 64 + 10)
    for _ in range(20_000):
        n_minibatches, size, offset = minibatch_cuts(4 * 64 + 10, 64, generator)
        assert (n_minibatches, size) == (4, 64)
        offsets[offset] += 1
    # The offset is uniform over the epoch's slots
    assert offsets.min() > 0 and offsets.max() < 4 * 20_000 / offsets.shape[0]
    # No remainder: no draw; one minibatch when batch_size covers the epoch
    before = generator.bit_generator.state
    assert minibatch_cuts(256, 64, generator) == (4, 64, 0)
    assert minibatch_cuts(50, 64, generator) == (1, 50, 0) and minibatch_cuts(50, None, generator) == (1, 50, 0)
    assert generator.bit_generator.state == before


@pytest.mark.parametrize(
    "n_steps,n_envs,window_size,batch_size,consecutive",
    [(32, 2, 8, 16, 1), (64, 3, 16, 64, 1), (24, 2, 6, 6, 2), (128, 2, 128, 128, 1), (40, 1, 10, None, 1)],
)
def test_dividing_settings_keep_whole_windows_and_the_previous_minibatches(
    n_steps: int, n_envs: int, window_size: int, batch_size: int | None, consecutive: int
) -> None:
    # Full coverage, stride W, W dividing n_steps and batch_size: no window is cut, the generator is called as a plan
    # of whole windows calls it and the minibatches are the runs of batch_size // W units of the epoch's unit order
    config = WindowSettings.validated(window_size, n_steps=n_steps)
    for seed in range(20):
        generator = np.random.default_rng(seed)
        previous = copy.deepcopy(generator)
        plan = plan_epoch(n_steps, n_envs, config, batch_size, consecutive, generator)
        assert np.all(plan.offsets == 0)
        epoch = epoch_window_starts(n_steps, n_envs, window_size, window_size, previous, "full")
        units = window_units(epoch, window_size)
        unit_first = np.unique(units, return_index=True)[1]
        order = window_order(epoch.starts[unit_first] // n_steps, epoch.position[unit_first], consecutive, previous)
        # The generators are in the same state afterwards: no draw for a remainder
        assert generator.integers(1 << 30) == previous.integers(1 << 30)
        per_minibatch = len(order) if batch_size is None else batch_size // window_size
        for m, (a, b) in enumerate(zip(plan.minibatch_edges[:-1], plan.minibatch_edges[1:], strict=True)):
            unit_ids = order[m * per_minibatch : (m + 1) * per_minibatch]
            expected = [(int(epoch.starts[w]), int(epoch.lengths[w])) for u in unit_ids for w in np.flatnonzero(units == u)]
            assert list(zip(plan.starts[a:b].tolist(), plan.lengths[a:b].tolist(), strict=True)) == expected


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(n_steps=st.integers(1, 30), n_envs=st.integers(1, 3), data=st.data(), coverage=st.sampled_from(["full", "inside"]))
def test_epoch_slot_counts_match_brute_force(n_steps: int, n_envs: int, data: st.DataObject, coverage: str) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    stride = data.draw(st.integers(1, n_steps + window_size))
    batch_size = data.draw(st.one_of(st.none(), st.integers(1, 4 * n_steps)))
    config = WindowSettings.validated(window_size, window_stride=stride, window_coverage=coverage, n_steps=n_steps)
    lengths = _all_window_lengths(n_steps, window_size, coverage)
    k = min(stride, lengths.shape[0])
    # Per phase p: the windows at starts p, p + k, ... of every env
    per_phase = [n_envs * int(lengths[p::k].sum()) for p in range(k)]
    assert epoch_slot_range(n_steps, n_envs, config) == (min(per_phase), max(per_phase))
    assert expected_epoch_slots(n_steps, n_envs, config) == pytest.approx(np.mean(per_phase))
    full = None if batch_size is None else max(batch_size, window_size)
    expected = np.mean(per_phase) if full is None else min(full, np.mean(per_phase))
    assert uniform_normaliser(n_steps, n_envs, config, batch_size) == pytest.approx(expected)
