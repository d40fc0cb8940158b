"""
The statistics of the reports: rliable's interquartile mean and probability of improvement with stratified
bootstrap intervals, the two-sided Mann-Whitney test (:func:`mann_whitney`), Holm's adjustment, a run's score at a
wall-clock time (:func:`score_at_time`), and the pairing of runs that trained side by side on one machine (the only
wall-time ratios a report may print: machines differ in speed).
"""

import datetime
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Bootstrap resamples of the reports' intervals
REPS = 2000
# The Mann-Whitney permutation test (samples with ties): every split of the pooled runs into the two arms when there
# are at most this many (10 runs against 10: 184,756), else this many random splits
PERMUTATIONS = 200_000


def _rliable() -> tuple[Any, Any]:
    try:
        from rliable import library, metrics
    except ImportError as error:  # the compare / plots extras
        raise ImportError("the reports' statistics need rliable: pip install 'sb3-reset-ppo[compare]'") from error
    return library, metrics


def aggregate(
    score_dict: dict[str, np.ndarray], reps: int = REPS, baseline: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    """
    rliable's interquartile mean and mean over runs and tasks, with 95% stratified bootstrap intervals, and each
    variant's probability of improvement over ``baseline`` (its interval too).

    :param score_dict: Scores per variant, each of shape ``(n_runs, n_tasks)``
    :param reps: Bootstrap resamples
    :param baseline: The variant the others are compared with (None: no probabilities)
    :return: ``(point, interval, poi, poi_ci)``: ``point[v]`` is ``[IQM, mean]``, ``interval[v]`` their ``(2, 2)``
        intervals (rows low and high), ``poi`` and ``poi_ci`` keyed ``"v,baseline"`` (rliable's plots read that)
    """
    library, metrics = _rliable()
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int, got {reps!r}")
    if baseline is not None and baseline not in score_dict:
        raise ValueError(f"baseline {baseline!r} is not one of the variants {sorted(score_dict)}")
    # A fixed bootstrap seed, so the same runs give the same report. rliable 1.2's StratifiedBootstrap draws from
    # numpy's global generator (its random_state argument is not used for the resampling): seeded here, and the
    # caller's state restored afterwards
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002  (rliable samples from the global generator)
    try:
        return _estimates(library, metrics, score_dict, reps, baseline)
    finally:
        np.random.set_state(state)  # noqa: NPY002


def _estimates(
    library: Any, metrics: Any, score_dict: dict[str, np.ndarray], reps: int, baseline: str | None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])

    point, interval = library.get_interval_estimates(score_dict, iqm_and_mean, reps=reps)
    pairs = (
        {}
        if baseline is None
        else {f"{v},{baseline}": (score_dict[v], score_dict[baseline]) for v in score_dict if v != baseline}
    )
    poi, poi_ci = library.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps) if pairs else ({}, {})
    return point, interval, poi, poi_ci


def probability_triple(poi: dict[str, Any], poi_ci: dict[str, Any], pair: str) -> list[float]:
    """``[P, low, high]`` for one pair of rliable's probability-of-improvement estimates."""
    # rliable returns a scalar (or shape (1,)) estimate and a (2,) or (2, 1) interval
    low, high = np.asarray(poi_ci[pair]).reshape(-1)[:2]
    return [float(np.asarray(poi[pair]).reshape(-1)[0]), float(low), float(high)]


def probability_text(poi: dict[str, Any], poi_ci: dict[str, Any], pair: str) -> str:
    """``"P (low to high)"`` for one pair of rliable's probability-of-improvement estimates."""
    probability, low, high = probability_triple(poi, poi_ci, pair)
    return f"{probability:.3f} ({low:.3f} to {high:.3f})"


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (same order as given)."""
    order = np.argsort(p_values)
    adjusted = np.empty(len(p_values))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()


def interval_triple(point: float, low: float, high: float) -> list[float]:
    """``[point, low, high]`` as plain floats (the JSON summaries' form of an estimate with its interval)."""
    return [float(point), float(low), float(high)]


def significance(low: float, high: float, null: float) -> str:
    """``"better"`` / ``"worse"`` where a 95% interval excludes ``null`` (above / below), else ``"not significant"``."""
    return "better" if low > null else "worse" if high < null else "not significant"


def score_at(times: np.ndarray, scores: np.ndarray, at: float, before_first: float) -> float:
    """
    A run's score at a time: its last evaluation at or before ``at`` (``before_first`` before its first
    evaluation, e.g. the untrained policy's score).

    :param times: Time of each evaluation (ascending)
    :param scores: Score of each evaluation
    :param at: The time asked for
    :param before_first: The score before any evaluation
    """
    index = int(np.searchsorted(times, at, side="right")) - 1
    return before_first if index < 0 else float(scores[index])


def score_at_time(times: np.ndarray, scores: np.ndarray, at: float, final_evaluations: int, before_first: float) -> float:
    """
    A run's score when it is stopped at ``at`` seconds: the one rule of every equal-wall-clock comparison (the
    ``compare`` command's and the coverage study's). A run that has stopped by then (its last evaluation at or before
    ``at``) counts its final score, the mean of its last ``final_evaluations`` evaluations, the same number as the
    reports' final endpoint; a run still training counts its last evaluation at or before ``at``
    (:func:`score_at`), ``before_first`` before its first.

    :param times: Time of each evaluation (ascending; the last one is when the run stopped)
    :param scores: Score of each evaluation
    :param at: The time asked for
    :param final_evaluations: Evaluations the final score averages (fewer when the run has fewer)
    :param before_first: The score before any evaluation
    :return: The score
    :raises ValueError: ``final_evaluations`` is not a positive int, or ``times`` and ``scores`` differ in length
    """
    if isinstance(final_evaluations, bool) or not isinstance(final_evaluations, int) or final_evaluations < 1:
        raise ValueError(f"final_evaluations must be a positive int, got {final_evaluations!r}")
    times, scores = np.asarray(times, dtype=float), np.asarray(scores, dtype=float)
    if times.shape != scores.shape or times.ndim != 1:
        raise ValueError(f"times and scores must be 1-D of one length, got shapes {times.shape} and {scores.shape}")
    if len(times) and at >= times[-1]:
        return float(scores[-final_evaluations:].mean())
    return score_at(times, scores, at, before_first)


def mann_whitney(arm: Sequence[float], base: Sequence[float]) -> tuple[float, str]:
    """
    The two-sided Mann-Whitney U test of two samples: its p-value and the method that computed it.

    - ``"exact"``: no value occurs twice in the pooled sample: the exact distribution of U (scipy's
      ``mannwhitneyu(..., method="exact")``, at any sample size; scipy's default would switch to the normal
      approximation above 8 values per sample).
    - ``"permutation"``: with ties, the exact permutation distribution of the rank sum (midranks), enumerating
      every split of the pooled values into samples of the two sizes (at most :data:`PERMUTATIONS` of them).
    - ``"permutation (monte carlo)"``: with ties and more splits than that, :data:`PERMUTATIONS` random splits
      (seeded, so a report is reproducible; p = (hits + 1) / (splits + 1)).

    Two-sided in every case: the probability of a rank sum at least as far from its mean under the null as the
    observed one. ``(1.0, "undefined")`` when a sample is empty or every value is the same.

    :param arm: One sample
    :param base: The other sample
    :return: ``(p, method)``
    """
    from scipy.stats import mannwhitneyu, permutation_test, rankdata

    x, y = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    pooled = np.concatenate([x, y])
    if len(x) < 1 or len(y) < 1 or len(np.unique(pooled)) < 2:
        return 1.0, "undefined"
    if len(np.unique(pooled)) == len(pooled):
        return float(mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue), "exact"
    ranks = rankdata(pooled)  # midranks: the same for every split of the pooled values
    center = len(x) * (len(pooled) + 1) / 2

    def distance(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
        # The rank sum's distance from its mean under the null (two-sided)
        return np.abs(np.sum(a, axis=axis) - center)

    result = permutation_test(
        (ranks[: len(x)], ranks[len(x) :]), distance, permutation_type="independent", vectorized=True,
        n_resamples=PERMUTATIONS, batch=50_000, alternative="greater", random_state=np.random.default_rng(0),
    )  # fmt: skip
    exact = math.comb(len(pooled), len(x)) <= PERMUTATIONS
    return float(min(1.0, result.pvalue)), "permutation" if exact else "permutation (monte carlo)"


def timestamp(text: str) -> float:
    """
    Seconds since the epoch of a UTC time as ``run.json`` writes it: ``2026-12-04T10:00:00.123Z`` (runs recorded
    before milliseconds were: ``2026-12-04T10:00:00Z``).
    """
    layout = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.datetime.strptime(text, layout).replace(tzinfo=datetime.UTC).timestamp()


def run_interval(run: dict[str, Any]) -> tuple[float, float]:
    """A run's start and end, seconds since the epoch (``started`` and ``seconds`` of its ``run.json``)."""
    start = timestamp(run["started"])
    return start, start + float(run["seconds"])


def overlap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Seconds two runs' time intervals overlap."""
    (a0, a1), (b0, b1) = run_interval(a), run_interval(b)
    return max(0.0, min(a1, b1) - max(a0, b0))


def side_by_side(
    runs: Sequence[dict[str, Any]], others: Sequence[dict[str, Any]], same_seed: bool = True
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """
    Pairs (run of ``runs``, run of ``others``) of the same env (and seed, with ``same_seed``) that trained on the
    same machine (host and CPU, where recorded) at the same commit, their time intervals overlapping by at least
    half of the shorter: the only pairs whose wall times may be compared.
    """
    pairs = []
    for run in runs:
        if "started" not in run:
            continue
        for other in others:
            same = (
                "started" in other
                and other["env"] == run["env"]
                and (not same_seed or int(other["seed"]) == int(run["seed"]))
                and other.get("machine") == run.get("machine")
                and other.get("host") == run.get("host")
                and other.get("commit") == run.get("commit")
            )
            if same and overlap(run, other) >= 0.5 * min(float(run["seconds"]), float(other["seconds"])):
                pairs.append((run, other))
    return pairs
