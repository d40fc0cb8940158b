"""
The reports' statistics on the samples a comparison has when its first runs finish: empty, one run, all tied.
Each either gives a defined result or a ``ValueError`` naming the argument, never a library's exception.
"""

import itertools
import math
from typing import Any

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_reset_ppo.experiments import compare, stats


def _enumerated_p(arm: list[float], base: list[float]) -> float:
    """
    The oracle: the two-sided p-value of the Mann-Whitney U statistic (ties count one half), by enumerating every
    split of the pooled values into samples of the two sizes: the share of splits whose U is at least as far from its
    mean ``len(arm) * len(base) / 2`` as the observed one (in integers: twice U against twice its mean).
    """
    pooled = [*arm, *base]

    def twice_u(first: list[float], second: list[float]) -> int:
        return sum(2 if a > b else 1 if a == b else 0 for a in first for b in second)

    mean = len(arm) * len(base)
    observed = abs(twice_u(arm, base) - mean)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(arm)):
        first = [pooled[i] for i in chosen]
        second = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(twice_u(first, second) - mean) >= observed
        total += 1
    return hits / total


def test_mann_whitney_of_one_value_against_a_tie() -> None:
    # One run against tied values: scipy's permutation test refuses a sample of one value
    p, method = stats.mann_whitney([1.0], [1.0, 2.0, 3.0])
    assert method == "permutation" and p == pytest.approx(0.75) and p == pytest.approx(_enumerated_p([1.0], [1.0, 2.0, 3.0]))
    assert stats.mann_whitney([1.0, 2.0, 3.0], [1.0]) == (p, "permutation")
    # One run against one: two splits, both as far from the mean
    assert stats.mann_whitney([1.0], [2.0]) == (1.0, "exact")


# Sizes 0 to 6, values from a few integers: ties almost everywhere
_TIED_SAMPLES = st.lists(st.integers(0, 3).map(float), min_size=0, max_size=6)


@settings(max_examples=examples(300), deadline=None)
@given(_TIED_SAMPLES, _TIED_SAMPLES)
def test_mann_whitney_on_tiny_and_tied_samples_is_the_enumeration(arm: list[float], base: list[float]) -> None:
    p, method = stats.mann_whitney(arm, base)
    assert 0.0 <= p <= 1.0
    if not arm or not base or len(set(arm + base)) < 2:
        # Nothing to test: the documented marker (every split has the same statistic: p = 1)
        assert (p, method) == (1.0, "undefined")
    else:
        assert method == ("exact" if len(set(arm + base)) == len(arm + base) else "permutation")
    assert p == pytest.approx(_enumerated_p(arm, base), rel=1e-12)


def test_mann_whitney_refuses_what_is_not_a_sample() -> None:
    with pytest.raises(ValueError, match=r"arm must be a 1-D sequence of numbers, got shape \(1, 2\)"):
        stats.mann_whitney([[1.0, 2.0]], [1.0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"base holds NaN: \[1.0, nan\]"):
        stats.mann_whitney([0.0, 2.0], [1.0, math.nan])
    # Infinite scores have ranks: a defined answer
    assert stats.mann_whitney([math.inf, 1.0], [1.0, 2.0])[1] == "permutation"


def _one_run(seed: int, final: float) -> dict[str, Any]:
    """A finished run as ``compare.load`` gives it (two evaluations, trained beside the others)."""
    return {
        "env": "E", "seed": seed, "started": "2026-12-04T10:00:00Z", "seconds": 2.0, "host": "h", "machine": {},
        "commit": "c", "times": np.array([1.0, 2.0]), "eval_mean": np.array([final, final]), "final": final, "auc": final,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("arm", "base", "method"),
    [([1.0], [2.0], "exact"), ([1.0], [1.0], "undefined"), ([1.0], [1.0, 2.0, 3.0], "permutation")],
)
def test_a_compare_report_of_the_first_runs(arm: list[float], base: list[float], method: str) -> None:
    # The report after the first runs finish: one run per arm (or one against three with a tie)
    by_arm = {"a": [_one_run(s, v) for s, v in enumerate(arm)], "b": [_one_run(s, v) for s, v in enumerate(base)]}
    summary = compare.analyse(by_arm, "b", 100, 2)
    comparison = summary["comparisons"]["a"]
    assert comparison["p_method"] == {"final": method, "auc": method, "equal_time": method}
    assert all(0.0 <= p <= 1.0 for p in comparison["p_holm"].values())
    lines = compare.verdict(summary, seeds=1)
    assert "**not significant**" in lines[0] and "Mann-Whitney p = 1.000" in lines[0]
    if arm[0] < min(base):  # every pair behind: said in words, not as the interval 0.00 (0.00 to 0.00)
        assert "a was behind b in every pair of runs" in lines[0] and "(0.00 to 0.00)" not in lines[0]
    assert "use 10 or more seeds" in lines[-1]


# The other statistics: (n_runs, n_tasks) scores with no run, one run, all tied


def test_aggregate_of_one_run_and_of_tied_runs() -> None:
    point, interval, poi, poi_ci = stats.aggregate({"a": np.array([[3.0]]), "b": np.full((4, 1), 2.0)}, 50, "b")
    # One run: its score is the IQM, the mean and both ends of the interval
    assert point["a"].tolist() == [3.0, 3.0] and interval["a"].tolist() == [[3.0, 3.0], [3.0, 3.0]]
    # All tied: the same
    assert point["b"].tolist() == [2.0, 2.0] and interval["b"].tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert stats.probability_triple(poi, poi_ci, "a,b") == [1.0, 1.0, 1.0]
    # The same scores on both sides: P = 0.5 exactly
    _, _, poi, poi_ci = stats.aggregate({"a": np.full((3, 1), 2.0), "b": np.full((1, 1), 2.0)}, 50, "b")
    assert stats.probability_triple(poi, poi_ci, "a,b") == [0.5, 0.5, 0.5]


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (np.zeros((0, 1)), r"score_dict\['a'\] must hold at least one run and one task, got shape \(0, 1\)"),
        (np.zeros((2, 0)), r"score_dict\['a'\] must hold at least one run and one task, got shape \(2, 0\)"),
        (np.array([1.0, 2.0]), r"score_dict\['a'\] must be a \(n_runs, n_tasks\) array, got shape \(2,\)"),
        (np.zeros((2, 2)), r"score_dict's variants must have one number of tasks, got \{'a': 2, 'b': 1\}"),
    ],
)
def test_aggregate_refuses_scores_without_runs_naming_the_variant(scores: np.ndarray, message: str) -> None:
    # Before: NaN estimates (no run) or rliable's IndexError (a 1-D array, no task)
    with pytest.raises(ValueError, match=message):
        stats.aggregate({"a": scores, "b": np.array([[1.0], [2.0]])}, 50, "b")


def test_holm_of_no_one_and_tied_p_values() -> None:
    assert stats.holm([]) == [] and stats.holm([0.3]) == [0.3]
    assert stats.holm([0.02, 0.02, 0.02]) == pytest.approx([0.06, 0.06, 0.06])
    assert stats.holm([1.0, 1.0]) == [1.0, 1.0]
    for bad in (math.nan, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"p_values must lie in \[0, 1\]"):
            stats.holm([0.1, bad])


def test_score_at_time_of_no_one_and_tied_evaluations() -> None:
    # No evaluation: the score before the first, at any time
    assert stats.score_at_time(np.array([]), np.array([]), 5.0, 2, before_first=-1.0) == -1.0
    # One evaluation: before it, the score before the first; from it on (stopped), that evaluation
    assert stats.score_at_time(np.array([1.0]), np.array([3.0]), 0.5, 2, before_first=-1.0) == -1.0
    assert stats.score_at_time(np.array([1.0]), np.array([3.0]), 1.0, 2, before_first=-1.0) == 3.0
    # Evaluations at one time (tied times): the run stopped then, its final score the mean of the last two
    times, scores = np.array([1.0, 1.0, 1.0]), np.array([3.0, 4.0, 5.0])
    assert stats.score_at_time(times, scores, 1.0, 2, before_first=-1.0) == 4.5
    assert stats.score_at_time(times, scores, 0.9, 2, before_first=-1.0) == -1.0
    with pytest.raises(ValueError, match="final_evaluations must be a positive int, got 0"):
        stats.score_at_time(times, scores, 1.0, 0, before_first=-1.0)
    with pytest.raises(ValueError, match=r"times and scores must be 1-D of one length, got shapes \(3,\) and \(2,\)"):
        stats.score_at_time(times, scores[:2], 1.0, 2, before_first=-1.0)
