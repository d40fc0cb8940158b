import copy
import itertools

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import examples
from helpers import filled_window_buffer as _filled_buffer
from hypothesis import given, settings
from hypothesis import strategies as st
from window_weights import brute_force_step_weights

from sb3_reset_ppo import WindowRolloutBuffer, WindowSettings, window_weights
from sb3_reset_ppo.common.epochs import epoch_window_starts, plan_epoch, window_order
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.windows import RolloutWindowStats


@st.composite
def rollouts(draw: st.DrawFn) -> tuple[np.ndarray, int, int]:
    n_steps = draw(st.integers(1, 24))
    n_envs = draw(st.integers(1, 3))
    window_size = draw(st.integers(1, n_steps))
    window_stride = draw(st.integers(1, 30))
    density = draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
    flags = draw(st.lists(st.floats(0, 1), min_size=n_steps * n_envs, max_size=n_steps * n_envs))
    episode_starts = (np.array(flags).reshape(n_steps, n_envs) < density).astype(np.float32)
    return episode_starts, window_size, window_stride


@settings(max_examples=examples(150), deadline=None)
@given(rollouts(), st.sampled_from(["reset", "mask"]), st.sampled_from(["uniform", "importance", "kept_mean"]))
def test_window_weights_match_brute_force(rollout: tuple[np.ndarray, int, int], boundary: str, weighting: str) -> None:
    episode_starts, window_size, window_stride = rollout
    expected = brute_force_step_weights(episode_starts, window_size, boundary, weighting, window_stride)
    actual = window_weights(episode_starts, window_size, boundary, weighting, window_stride, "inside")
    assert actual.shape == episode_starts.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    # 1-D input: one env
    actual_1d = window_weights(episode_starts[:, 0], window_size, boundary, weighting, window_stride, "inside")
    assert actual_1d.shape == (episode_starts.shape[0],)
    np.testing.assert_allclose(actual_1d, expected[:, 0], rtol=1e-6, atol=1e-6)


def test_design_examples() -> None:
    n_steps, window_size = 64, 16
    episode_starts = np.zeros(n_steps)
    episode_starts[[0, 10, 30, 55]] = 1
    reset = window_weights(episode_starts, window_size, "reset", window_stride=1, window_coverage="inside")
    positions = np.arange(n_steps)
    closed_form = np.minimum.reduce(
        [positions + 1, np.full(n_steps, window_size), n_steps - positions, np.full(n_steps, n_steps - window_size + 1)]
    )
    np.testing.assert_array_equal(reset, closed_form)

    mask = window_weights(episode_starts, window_size, "mask", window_stride=1, window_coverage="inside")
    # k steps into an episode that began inside the rollout: at most k + 1
    for start, end in [(10, 30), (30, 55)]:
        assert np.all(mask[start:end] <= np.arange(end - start) + 1)
        assert mask[start] == 1
    # The episode beginning in the last W - 1 steps is never trained
    assert np.all(mask[55:] == 0)
    # Importance weighting: every trained step has total weight 1
    importance = window_weights(episode_starts, window_size, "mask", "importance", 1, "inside")
    np.testing.assert_allclose(importance[mask > 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(window_weights(episode_starts, window_size, "reset", "importance", 1, "inside"), 1.0, rtol=1e-6)


def test_window_weights_defaults_are_resetppos() -> None:
    # One set of defaults: full coverage, stride window_size, reset, uniform: every step once per epoch
    episode_starts = np.zeros(40)
    episode_starts[[0, 9, 31]] = 1
    np.testing.assert_array_equal(window_weights(episode_starts, 16), 1.0)
    settings = WindowSettings.validated(16, n_steps=40)
    assert (settings.window_coverage, settings.window_stride, settings.boundary, settings.weighting) == (
        "full",
        16,
        "reset",
        "uniform",
    )
    with pytest.raises(TypeError, match="window_size must be an int"):
        window_weights(episode_starts, "batch")  # type: ignore[arg-type]


def test_small_buffer_example_from_the_suggestion() -> None:
    # Window 4: the first step of an episode that starts mid-rollout counts once when masked, 4 times with reset
    episode_starts = np.array([1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0])
    assert window_weights(episode_starts, 4, "mask", window_stride=1, window_coverage="inside")[3] == 1
    assert window_weights(episode_starts, 4, "reset", window_stride=1, window_coverage="inside")[3] == 4
    assert window_weights(episode_starts, 4, "reset", window_stride=1, window_coverage="inside")[7] == 4


def test_diagnostics_match_definitions() -> None:
    rng = np.random.default_rng(0)
    episode_starts = (rng.random((40, 3)) < 0.15).astype(np.float32)
    episode_starts[0] = 1
    for boundary in ("reset", "mask"):
        for weighting in ("uniform", "importance"):
            config = WindowSettings.validated(8, boundary, weighting, 1, "inside")
            stats = RolloutWindowStats(th.as_tensor(episode_starts.T.copy()), config)
            diagnostics = stats.diagnostics(th.as_tensor(episode_starts.T.copy()))
            weights = brute_force_step_weights(episode_starts, 8, boundary, weighting)
            counts = brute_force_step_weights(episode_starts, 8, boundary, "uniform")
            n_windows = 3 * (40 - 8 + 1)
            assert diagnostics["train/kept_slot_fraction"] == pytest.approx(counts.sum() / (n_windows * 8))
            assert diagnostics["train/untrained_step_fraction"] == pytest.approx(np.mean(weights == 0))
            starts = episode_starts > 0
            assert diagnostics["train/episode_start_weight"] == pytest.approx(
                weights[starts].mean() / weights.mean(), rel=1e-5
            )
            with_reset = sum(episode_starts[t + 1 : t + 8, e].any() for e in range(3) for t in range(40 - 8 + 1))
            assert diagnostics["train/windows_with_reset"] == pytest.approx(with_reset / n_windows)
    assert RolloutWindowStats(th.as_tensor(episode_starts.T.copy()), WindowSettings.validated(8, window_stride=1)).diagnostics(
        th.as_tensor(episode_starts.T.copy())
    )["train/kept_slot_fraction"] == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", True, 65])
def test_window_weights_rejects_bad_window_size(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="window_size"):
        window_weights(np.zeros(64), bad)  # type: ignore[arg-type]


def test_window_weights_rejects_bad_modes_and_shapes() -> None:
    with pytest.raises(ValueError, match="boundary"):
        window_weights(np.zeros(8), 4, boundary="truncate")
    with pytest.raises(ValueError, match="weighting"):
        window_weights(np.zeros(8), 4, weighting="inverse")
    with pytest.raises(ValueError, match="window_stride"):
        window_weights(np.zeros(8), 4, window_stride=0)
    with pytest.raises(ValueError, match="episode_starts"):
        window_weights(np.zeros((2, 2, 2)), 1)


def _obs(batch: WindowRolloutBufferSamples) -> th.Tensor:
    assert isinstance(batch.observations, th.Tensor)
    return batch.observations


@settings(max_examples=examples(40), deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 3),
    st.data(),
    st.sampled_from(["reset", "mask"]),
    st.sampled_from(["uniform", "importance", "kept_mean"]),
)
def test_buffer_epoch_holds_the_windows_of_a_phase_with_brute_force_fields(
    n_steps: int, n_envs: int, data: st.DataObject, boundary: str, weighting: str
) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    stride = data.draw(st.integers(1, 14))
    batch_size = data.draw(st.integers(1, 6 * window_size))
    buffer = _filled_buffer(n_steps, n_envs, window_size, boundary, weighting, stride)
    episode_starts = buffer.episode_starts  # (n_steps, n_envs)
    # Counts of importance weighting: over all windows, one at every step
    counts = brute_force_step_weights(episode_starts, window_size, boundary, "uniform", 1)
    n_starts = n_steps - window_size + 1
    effective = min(stride, n_starts)
    full = max(batch_size, window_size)
    covered: dict[tuple[int, int], list[int]] = {}
    # The same epoch, planned from a copy of the buffer's generator: each row's slot in its window
    sampler = buffer.sampler()
    plan = plan_epoch(
        n_steps, n_envs, sampler.settings, batch_size, sampler.consecutive_windows, copy.deepcopy(buffer.generator)
    )
    batches = list(buffer.get(batch_size=batch_size))
    real_per_batch = [int(batch.kept.numel() if batch.n_real_slots is None else batch.n_real_slots) for batch in batches]
    # Every minibatch holds `full` real slots (or the whole epoch, when it holds fewer)
    n_slots = (n_starts // effective + (n_starts % effective > 0)) * n_envs * window_size
    assert real_per_batch == [full] * len(batches) or len(batches) == 1
    for batch, (first, last) in zip(batches, itertools.pairwise(plan.minibatch_edges), strict=True):
        row_offsets = plan.offsets[first:last]
        # Every slot's observation (the step id), gathered from the minibatch's distinct steps
        distinct = _obs(batch)[:, 0].long()
        assert th.equal(distinct, th.unique(distinct))
        ids = distinct[batch.slot_steps]
        lengths = (ids[:, 1:] - ids[:, :-1] == 1).sum(dim=1) + 1
        # Recorded memory of each row's slot 0 is its step's, and window_starts names that step
        assert th.equal(batch.lstm_states.pi[0][:, 0, 0].long(), ids[:, 0])
        assert th.equal(batch.window_starts, ids[:, 0])
        assert th.equal(batch.lstm_states.vf[1][:, 0, 1].long(), ids[:, 0])
        for row, row_ids in enumerate(ids.tolist()):
            offset, length = int(row_offsets[row]), int(lengths[row])
            # Slots of a row are consecutive steps of one env (then padding repeats the last)
            assert row_ids[:length] == list(range(row_ids[0], row_ids[0] + length))
            assert all(step == row_ids[length - 1] for step in row_ids[length:])
            env, start = divmod(row_ids[0] - offset, n_steps)
            covered.setdefault((env, start), []).extend(range(offset, offset + length))
            alive = True
            for slot in range(1, offset + 1):
                alive = alive and not (bool(episode_starts[start + slot, env]) and boundary == "mask")
            for slot, step in enumerate(range(start + offset, start + offset + length)):
                in_window = offset + slot
                reset = in_window >= 1 and bool(episode_starts[step, env])
                alive = alive and not (reset and boundary == "mask")
                # A row's slot 0 never resets (it starts from the memory stored for its step)
                assert bool(batch.resets[row, slot]) == (reset and slot >= 1)
                assert bool(batch.kept[row, slot]) == alive
                expected_weight = float(alive) / (max(counts[step, env], 1) if weighting == "importance" else 1)
                assert float(batch.weights[row, slot]) == pytest.approx(expected_weight)
                assert float(batch.episode_starts[row, slot]) == episode_starts[step, env]
            assert not bool(batch.kept[row, length:].any()) and float(batch.weights[row, length:].sum()) == 0
    # Per env: windows starting at one phase p < stride and every `stride` steps from it, each slot at most once; the
    # slots left out are the epoch's remainder
    assert all(len(set(slots)) == len(slots) and set(slots) <= set(range(window_size)) for slots in covered.values())
    assert len(covered) <= buffer.n_windows
    for env in range(n_envs):
        starts = sorted(start for e, start in covered if e == env)
        assert len({start % effective for start in starts}) <= 1 and all(0 <= start < n_starts for start in starts)
    trained = sum(len(slots) for slots in covered.values())
    assert trained == sum(real_per_batch) and trained <= n_slots


@pytest.mark.parametrize("boundary", ["reset", "mask"])
@pytest.mark.parametrize("weighting", ["uniform", "importance"])
@pytest.mark.parametrize("n_steps,n_envs,window_size,stride", [(24, 2, 4, 4), (30, 1, 8, 3), (20, 3, 6, 20), (16, 2, 5, 1)])
def test_average_epoch_weights_converge_to_window_weights(
    boundary: str, weighting: str, n_steps: int, n_envs: int, window_size: int, stride: int
) -> None:
    # Many epochs drawn from the real buffer: the mean weight each step gets per epoch is window_weights (each epoch one
    # minibatch: the remainder a batch_size leaves out is tests/common/test_minibatch_weights.py's)
    buffer = _filled_buffer(n_steps, n_envs, window_size, boundary, weighting, stride)
    buffer.seed(0)
    n_epochs = 2000
    totals = th.zeros(n_envs * n_steps, dtype=th.float64)
    for _ in range(n_epochs):
        for batch in buffer.get(batch_size=None):
            ids = _obs(batch)[:, 0].long()[batch.slot_steps]
            totals.index_add_(0, ids.reshape(-1), batch.weights.reshape(-1).double())
    # (n_envs * n_steps,) -> (n_envs, n_steps) -> (n_steps, n_envs)
    mean = (totals / n_epochs).reshape(n_envs, n_steps).T.numpy()
    expected = window_weights(buffer.episode_starts, window_size, boundary, weighting, stride, "inside")
    # A step's weight per epoch is at most ceil(W / k) * 1 with mean `expected`: 2000 epochs give a standard
    # error below 0.03 even for the widest case here
    np.testing.assert_allclose(mean, expected, atol=0.06)
    # Steps never trained in expectation are never trained at all
    assert np.all(mean[expected == 0] == 0)
    # The control: these expectations are not those of every window every epoch (unless stride 1)
    if min(stride, n_steps - window_size + 1) > 1:
        every_window = window_weights(buffer.episode_starts, window_size, boundary, weighting, 1, "inside")
        assert np.abs(mean - every_window).max() > 0.5


def test_epoch_phases_are_uniform() -> None:
    # Each window start is drawn with probability 1 / stride per epoch
    generator = np.random.default_rng(0)
    n_steps, window_size, stride = 40, 8, 5
    hits = np.zeros(n_steps - window_size + 1)
    for _ in range(4000):
        starts, position, _ = epoch_window_starts(n_steps, 1, window_size, stride, generator, "inside")
        hits[starts] += 1
        assert np.array_equal(position, np.arange(starts.shape[0]))
    np.testing.assert_allclose(hits / 4000, 1 / stride, atol=0.03)


def _window_first_steps(batch: WindowRolloutBufferSamples) -> th.Tensor:
    """Flat step index of each window's first slot."""
    return _obs(batch)[batch.slot_steps[:, 0], 0].long()


def test_buffer_shuffles_anew_every_pass() -> None:
    buffer = _filled_buffer(32, 2, 4, "reset", "uniform")
    # 2 * 29 windows of 4 slots, minibatches of 2 windows: nothing left out
    orders = [th.cat([_window_first_steps(batch) for batch in buffer.get(batch_size=2 * 4)]) for _ in range(3)]
    assert sorted(orders[0].tolist()) == sorted(orders[1].tolist())
    assert not th.equal(orders[0], orders[1]) and not th.equal(orders[1], orders[2])
    # Not a rotation of one order (sb3-contrib's pseudo-shuffle)
    first = orders[0].tolist()
    rotations = [first[k:] + first[:k] for k in range(len(first))]
    assert orders[1].tolist() not in rotations


def test_buffer_order_follows_its_seed() -> None:
    def order(seed: int) -> list[int]:
        buffer = _filled_buffer(32, 2, 4, "reset", "uniform")
        buffer.seed(seed)
        return th.cat([_window_first_steps(batch) for batch in buffer.get(batch_size=8 * 4)]).tolist()

    assert order(3) == order(3)
    assert order(3) != order(4)


def test_buffer_phases_follow_its_seed() -> None:
    def phases(seed: int) -> list[list[int]]:
        buffer = _filled_buffer(64, 3, 8, "reset", "uniform", stride=8)
        buffer.seed(seed)
        return [sorted(_window_first_steps(next(buffer.get(None))).tolist()) for _ in range(4)]

    assert phases(3) == phases(3)
    assert phases(3) != phases(4)
    # Phases change from epoch to epoch
    assert len({tuple(epoch) for epoch in phases(3)}) > 1


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=4), st.integers(1, 8), st.integers(0, 1000))
def test_window_order_is_a_permutation_of_shuffled_runs(windows_per_env: list[int], consecutive: int, seed: int) -> None:
    env_of = np.repeat(np.arange(len(windows_per_env)), windows_per_env)
    position = np.concatenate([np.arange(n) for n in windows_per_env])
    n_windows = env_of.shape[0]
    order = window_order(env_of, position, consecutive, np.random.default_rng(seed))
    assert sorted(order.tolist()) == list(range(n_windows))
    # Chains: maximal stretches of the order that step by one window of the same env (adjacent runs may merge)
    chains, current = [], [int(order[0])]
    for previous, window in itertools.pairwise(order):
        if window == previous + 1 and env_of[window] == env_of[previous]:
            current.append(int(window))
        else:
            chains.append(current)
            current = [int(window)]
    chains.append(current)
    if consecutive == 1 and n_windows >= 10:
        # A shuffled permutation, not runs: few windows are followed by their successor
        assert len(chains) >= n_windows // 2
    # Every chain starts and ends on its env's grid of run cuts (one phase per env), or at the env's ends
    phases: dict[int, set[int]] = {}
    for chain in chains:
        env, first, last = int(env_of[chain[0]]), int(position[chain[0]]), int(position[chain[-1]])
        if first > 0:
            phases.setdefault(env, set()).add(first % consecutive)
        if last < windows_per_env[env] - 1:
            phases.setdefault(env, set()).add((last + 1) % consecutive)
    assert all(len(cuts) == 1 for cuts in phases.values()), phases


def test_window_order_cuts_runs_at_a_random_phase() -> None:
    env_of, position = np.zeros(30, dtype=np.int64), np.arange(30)
    cut_phases = set()
    for seed in range(20):
        order = window_order(env_of, position, 4, np.random.default_rng(seed)).tolist()
        # Windows that start a run: not preceded in the order by the window before them
        starts = {window for i, window in enumerate(order) if window > 0 and (i == 0 or order[i - 1] != window - 1)}
        cut_phases |= {window % 4 for window in starts}
    assert cut_phases == {0, 1, 2, 3}


def test_consecutive_windows_share_steps() -> None:
    # 256 steps x 2 envs, so that random windows rarely share steps; both generators seeded, so the test is
    # deterministic (over 300 seeds the smallest ratio distinct_shuffled / distinct_runs was 3.8, the largest
    # distinct_runs 52.6)
    shuffled = _filled_buffer(256, 2, 8, "reset", "uniform")
    shuffled.seed(0)
    runs = _filled_buffer(256, 2, 8, "reset", "uniform")
    runs.seed(0)
    runs.consecutive_windows = 16
    distinct_shuffled = np.mean([_obs(b).shape[0] for b in shuffled.get(batch_size=32 * 8)])
    distinct_runs = np.mean([_obs(b).shape[0] for b in runs.get(batch_size=32 * 8)])
    # 32 windows of 8 slots in runs of 16: about 2 * (16 + 8 - 1) = 46 distinct steps instead of ~200
    assert distinct_runs <= 2 * (16 + 8 - 1) + 8
    assert distinct_shuffled > 2 * distinct_runs


def test_buffer_batch_larger_than_windows_gives_all() -> None:
    buffer = _filled_buffer(10, 2, 4, "reset", "uniform")
    batches = list(buffer.get(batch_size=1000))
    assert len(batches) == 1 and batches[0].slot_steps.shape[0] == buffer.n_windows == 14
    assert next(buffer.get(None)).slot_steps.shape[0] == 14


def test_buffer_refuses_sampling_before_full() -> None:
    buffer = WindowRolloutBuffer(
        8, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), (8, 1, 1, 2), "cpu", window_settings=WindowSettings.validated(4)
    )
    with pytest.raises(RuntimeError, match="full"):
        next(buffer.get(2))
