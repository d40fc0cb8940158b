"""
``stats.aggregate``'s vectorised bootstrap gives rliable's estimates bit for bit (``tests/oracles/rliable_estimates.py``:
rliable's own path, one metric call per resample): the same resamples from the global generator, the same floats.
"""

from typing import Any

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from rliable import metrics
from rliable_estimates import iqm_and_mean, rliable_aggregate, rliable_resamples

from sb3_reset_ppo.experiments import stats


def assert_bitwise_equal(found: tuple[dict[str, Any], ...], expected: tuple[dict[str, Any], ...]) -> None:
    """Each estimate of ``found`` has the type, shape and bytes of ``expected``'s (``==`` to the last bit, not isclose)."""
    for got, want in zip(found, expected, strict=True):
        assert list(got) == list(want)
        for key in want:
            assert type(got[key]) is type(want[key]), key
            assert np.shape(got[key]) == np.shape(want[key]), key
            assert np.asarray(got[key]).tobytes() == np.asarray(want[key]).tobytes(), (key, got[key], want[key])


@st.composite
def score_dicts(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], str | None]:
    """1 to 3 variants of 1 to 12 runs on 1 to 3 tasks (one number of tasks), from few values (ties) or any floats."""
    tasks = draw(st.integers(1, 3))
    variants = draw(st.integers(1, 3))
    tied = st.integers(0, 4).map(lambda v: v / 3)
    wide = st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)
    values = draw(st.sampled_from([tied, wide]))
    score_dict = {}
    # Variants of one number of runs (as a study's arms have) or of any
    same_runs = draw(st.one_of(st.none(), st.integers(1, 12)))
    for index in range(variants):
        runs = draw(st.integers(1, 12)) if same_runs is None else same_runs
        cells = draw(st.lists(values, min_size=runs * tasks, max_size=runs * tasks))
        score_dict[f"v{index}"] = np.array(cells).reshape(runs, tasks)  # (runs * tasks,) -> (runs, tasks)
    baseline = draw(st.sampled_from([None, *score_dict]))
    return score_dict, baseline


@settings(max_examples=examples(200), deadline=None)
@given(score_dicts(), st.integers(1, 40))
def test_aggregate_is_rliables_estimates_bitwise(case: tuple[dict[str, np.ndarray], str | None], reps: int) -> None:
    score_dict, baseline = case
    before = np.random.get_state(legacy=False)  # noqa: NPY002
    found = stats.aggregate(score_dict, reps, baseline)
    # The global generator is left as it was
    after = np.random.get_state(legacy=False)  # noqa: NPY002
    assert np.array_equal(after["state"]["key"], before["state"]["key"]) and after["state"]["pos"] == before["state"]["pos"]
    assert_bitwise_equal(found, rliable_aggregate(score_dict, reps, baseline))


@settings(max_examples=examples(200), deadline=None)
@given(score_dicts(), st.integers(1, 40))
def test_the_resamples_and_their_metrics_are_rliables(case: tuple[dict[str, np.ndarray], str | None], reps: int) -> None:
    # Per resample, not only the interval's ends: rliable's draws, and its metric called on each of them
    score_dict, _ = case
    first, *others = score_dict.values()
    np.random.seed(0)  # noqa: NPY002
    (resamples,) = stats._resamples([first], reps)
    assert resamples.tobytes() == rliable_resamples([first], reps)[0].tobytes()
    expected = np.array([iqm_and_mean(resample) for resample in resamples])
    assert stats._resampled_iqm_and_mean(resamples).tobytes() == expected.tobytes()
    for other in others:
        np.random.seed(0)  # noqa: NPY002
        x, y = stats._resamples([first, other], reps)
        for found, want in zip((x, y), rliable_resamples([first, other], reps), strict=True):
            assert found.tobytes() == want.tobytes()
        probabilities = [[metrics.probability_of_improvement(a, b)] for a, b in zip(x, y, strict=True)]
        assert stats._resampled_probability_of_improvement(x, y).tobytes() == np.array(probabilities).tobytes()


@pytest.mark.parametrize("runs", [9, 30])
def test_aggregate_is_rliables_estimates_bitwise_on_more_runs(runs: int) -> None:
    # A middle half of 8 values and more: numpy sums it unrolled (pairwise), in the partition's order
    rng = np.random.default_rng(runs)
    score_dict = {"arm": rng.normal(size=(runs, 2)), "base": rng.normal(size=(runs + 1, 2)).round(1)}
    assert_bitwise_equal(stats.aggregate(score_dict, 300, "base"), rliable_aggregate(score_dict, 300, "base"))


def test_scores_the_vectorised_metrics_do_not_cover_take_rliables_path() -> None:
    # NaN (scipy's Mann-Whitney propagates it) and integer scores (trim_mean promotes after partitioning)
    scores = {"a": np.array([[1.0], [np.nan], [3.0]]), "b": np.array([[2.0], [1.0], [2.0]])}
    assert_bitwise_equal(stats.aggregate(scores, 30, "b"), rliable_aggregate(scores, 30, "b"))
    integers = {"a": np.array([[1, 4], [2, 2], [3, 0]]), "b": np.array([[2, 2], [1, 1], [2, 5]])}
    assert_bitwise_equal(stats.aggregate(integers, 30, "b"), rliable_aggregate(integers, 30, "b"))


def test_a_metric_summed_in_another_order_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The comparison sees the last bit: the IQM's middle half summed in sorted order, not in the partition's order,
    # moves this seeded case's interval by 5.6e-17
    def sorted_iqm_and_mean(resamples: np.ndarray) -> np.ndarray:
        reps, runs, tasks = resamples.shape
        flat = np.sort(resamples.reshape(reps, runs * tasks), axis=1)  # (reps, runs, tasks) -> (reps, runs * tasks)
        low = int(0.25 * flat.shape[1])
        iqm = np.mean(flat[:, low : flat.shape[1] - low], axis=1)
        return np.stack([iqm, np.mean(np.mean(resamples, axis=1), axis=1)], axis=1)

    score_dict = {"arm": np.random.default_rng(1).normal(size=(12, 3))}
    assert_bitwise_equal(stats.aggregate(score_dict, 200), rliable_aggregate(score_dict, 200))
    monkeypatch.setattr(stats, "_resampled_iqm_and_mean", sorted_iqm_and_mean)
    with pytest.raises(AssertionError):
        assert_bitwise_equal(stats.aggregate(score_dict, 200), rliable_aggregate(score_dict, 200))


def test_the_probability_of_many_runs_and_tasks_in_chunks_is_rliables() -> None:
    # 70 runs on 20 tasks: the pairs of runs are counted in chunks of 42 resamples (90 resamples: three chunks)
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 9, size=(90, 70, 20)).astype(float), rng.integers(0, 9, size=(90, 70, 20)).astype(float)
    expected = np.array([[metrics.probability_of_improvement(a, b)] for a, b in zip(x, y, strict=True)])
    assert stats._resampled_probability_of_improvement(x, y).tobytes() == expected.tobytes()
