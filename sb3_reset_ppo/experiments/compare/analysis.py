"""A comparison's numbers: its finished runs, and per arm the returns, times and probabilities of beating the baseline."""

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from sb3_reset_ppo.experiments import runner, stats
from sb3_reset_ppo.experiments.compare.settings import CompareSettings


class NothingToCompare(ValueError):
    """No finished runs of the baseline, or of every other arm, yet."""


# Fewer updates per run than this, and start-up weighs on a run's time as much as the updates: too short to judge speed
MIN_UPDATES = 10


def learn_seconds(run: dict[str, Any]) -> float:
    """A run's ``learn()`` seconds at its last evaluation (``runner.elapsed_seconds``), else its process's."""
    times = run.get("times")
    return float(times[-1]) if times is not None and len(times) else float(run["seconds"])


def _median_learn_seconds(runs: Iterable[dict[str, Any]]) -> float:
    return statistics.median(learn_seconds(run) for run in runs)


def _median_or_none(values: Iterable[float | None]) -> float | None:
    """The median of the values, None if any is None (a run whose log does not have it)."""
    known = list(values)
    return None if not known or any(value is None for value in known) else statistics.median(known)  # type: ignore[type-var]


def in_comparison(run: dict[str, Any], settings: CompareSettings) -> bool:
    """Whether a run's record is one of the comparison's: an arm's, of seeds ``0..seeds-1``."""
    return run["variant"] in {arm.name for arm in settings.arms} and int(run["seed"]) < settings.seeds


def load(settings: CompareSettings) -> dict[str, list[dict[str, Any]]]:
    """Each arm's finished runs, by seed, with ``times`` (``learn()`` seconds at each evaluation, None without a log)."""
    by_arm: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in settings.arms}
    for run in runner.load_runs(settings.out / "runs", settings.final_evaluations):
        if run["env"] == settings.env and in_comparison(run, settings):
            run["times"] = runner.elapsed_seconds(run)
            run["evaluation_seconds"] = runner.evaluation_seconds(run)
            run["updates"] = runner.updates(run)
            by_arm[run["variant"]].append(run)
    for arm_runs in by_arm.values():
        arm_runs.sort(key=lambda run: int(run["seed"]))
    return by_arm


def _runs_by_task(scores: Sequence[float]) -> np.ndarray:
    # (n_runs,) -> (n_runs, 1): rliable's (runs, tasks) layout, one task
    return np.array(scores, dtype=float)[:, None]


def analyse(by_arm: dict[str, list[dict[str, Any]]], baseline: str, reps: int, final_evaluations: int) -> dict[str, Any]:
    """
    The report's numbers: per arm the IQM (95% CI) of the final return and of the return over training and the median
    ``learn()`` seconds; per other arm the probability that it beats the baseline (at the end, over training and at
    equal time), with Holm-adjusted Mann-Whitney p-values, and its time ratio in runs that trained side by side.

    :param by_arm: Each arm's finished runs (:func:`load`); the other parameters are :class:`CompareSettings`' fields
    :raises NothingToCompare: the baseline or every other arm has no finished run
    """
    arms = {name: arm_runs for name, arm_runs in by_arm.items() if arm_runs}
    if baseline not in arms or len(arms) < 2:
        counts = {name: len(arm_runs) for name, arm_runs in by_arm.items()}
        raise NothingToCompare(
            f"nothing to compare yet: finished runs per arm {counts}; the "
            f"baseline {baseline!r} and at least one other arm need finished runs"
        )
    summary: dict[str, Any] = {"baseline": baseline, "reps": reps, "arms": {}, "comparisons": {}}
    tests: list[tuple[str, str, list[float], list[float]]] = []
    for key in ("final", "auc"):
        scores = {name: [run[key] for run in arm_runs] for name, arm_runs in arms.items()}
        point, interval, poi, poi_ci = stats.aggregate(
            {name: _runs_by_task(values) for name, values in scores.items()}, reps, baseline
        )
        for name in arms:
            entry = summary["arms"].setdefault(name, {"runs": len(arms[name])})
            entry[key] = stats.interval_triple(point[name][0], interval[name][0][0], interval[name][1][0])
            if name != baseline:
                summary["comparisons"].setdefault(name, {})[key] = stats.probability_triple(poi, poi_ci, f"{name},{baseline}")
                tests.append((name, key, scores[name], scores[baseline]))
    for name, arm_runs in arms.items():
        summary["arms"][name]["learn_seconds"] = _median_learn_seconds(arm_runs)
        summary["arms"][name]["evaluation_seconds"] = _median_or_none(run.get("evaluation_seconds") for run in arm_runs)
        known_updates = [run["updates"] for run in arm_runs if run.get("updates") is not None]
        summary["arms"][name]["updates"] = min(known_updates) if known_updates else None
        summary["arms"][name]["hosts"] = sorted({str(run.get("host", "?")) for run in arm_runs})
        if name == baseline:
            continue
        comparison = summary["comparisons"][name]
        pairs = stats.side_by_side(arm_runs, arms[baseline], same_seed=False)
        ratios = [learn_seconds(run) / learn_seconds(other) for run, other in pairs if learn_seconds(other) > 0]
        # Over pairs that trained side by side: all runs' medians would mix the loads of different times
        comparison["time_ratio"] = statistics.median(ratios) if ratios else None
        comparison["time_pairs"] = len(ratios)
        comparison["pair_ratios"] = [min(ratios), max(ratios)] if ratios else None
        comparison["equal_time"] = equal_time(arm_runs, arms[baseline], reps, final_evaluations)
        if comparison["equal_time"] is not None and comparison["equal_time"]["probability"] is not None:
            tests.append((name, "equal_time", *comparison["equal_time"].pop("scores")))
    results = [stats.mann_whitney(arm, base) for _, _, arm, base in tests]
    for (name, key, _, _), (p, method), p_holm in zip(tests, results, stats.holm([p for p, _ in results]), strict=True):
        for field, value in (("p", p), ("p_method", method), ("p_holm", p_holm)):
            summary["comparisons"][name].setdefault(field, {})[key] = value
    summary["tests"] = len(tests)
    return summary


def equal_time(
    arm_runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], reps: int, final_evaluations: int
) -> dict[str, Any] | None:
    """
    The probability that an arm beats the baseline when both stop at the faster arm's median ``learn()`` seconds.

    :param arm_runs: The arm's runs (:func:`load`, with ``times``); ``reps``, ``final_evaluations`` as in :func:`analyse`
    :return: ``seconds``, ``probability`` (None where a run has no evaluation by then) and ``scores``; None without logs
    """
    if any(run["times"] is None for run in [*arm_runs, *base_runs]):
        return None
    at = min(_median_learn_seconds(arm_runs), _median_learn_seconds(base_runs))

    def scores(group: list[dict[str, Any]]) -> list[float]:
        return [stats.score_at_time(run["times"], run["eval_mean"], at, final_evaluations, math.nan) for run in group]

    arm_scores, base_scores = scores(arm_runs), scores(base_runs)
    if any(math.isnan(value) for value in [*arm_scores, *base_scores]):
        return {"seconds": at, "probability": None}
    _, _, poi, poi_ci = stats.aggregate({"arm": _runs_by_task(arm_scores), "base": _runs_by_task(base_scores)}, reps, "base")
    return {
        "seconds": at,
        "probability": stats.probability_triple(poi, poi_ci, "arm,base"),
        "scores": (arm_scores, base_scores),
    }
