"""The reports' statistics: rliable's estimates with bootstrap intervals, Mann-Whitney, Holm, and runs paired by time."""

import datetime
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Bootstrap resamples of the reports' intervals
REPS = 2000
# Splits of the pooled runs that the Mann-Whitney permutation test enumerates at most, else draws at random
PERMUTATIONS = 200_000


def _rliable() -> tuple[Any, Any]:
    try:
        from rliable import library, metrics
    except ImportError as error:  # the compare / plots extras
        raise ImportError('the reports\' statistics need rliable: in the clone, pip install -e ".[compare]"') from error
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
        intervals (rows low and high), ``poi`` and ``poi_ci`` keyed ``"v,baseline"``
    :raises ValueError: ``reps`` is not a positive int, ``baseline`` is not a variant, or the scores' shapes are wrong
    """
    library, metrics = _rliable()
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int, got {reps!r}")
    if baseline is not None and baseline not in score_dict:
        raise ValueError(f"baseline {baseline!r} is not one of the variants {sorted(score_dict)}")
    # rliable gives NaN estimates for no run, an IndexError for a 1-D array or for none of the baseline's tasks
    tasks = {}
    for name, scores in score_dict.items():
        shape = np.shape(scores)
        if len(shape) != 2:
            raise ValueError(f"score_dict[{name!r}] must be a (n_runs, n_tasks) array, got shape {shape}")
        if shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"score_dict[{name!r}] must hold at least one run and one task, got shape {shape}")
        tasks[name] = shape[1]
    if baseline is not None and len(set(tasks.values())) > 1:
        raise ValueError(f"score_dict's variants must have one number of tasks, got {tasks}")

    def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])

    others = [] if baseline is None else [(v, baseline) for v in score_dict if v != baseline]
    pairs = {f"{v},{base}": (score_dict[v], score_dict[base]) for v, base in others}
    # rliable's estimates to the last bit, its metrics evaluated on all resamples at once (tests/experiments/
    # test_stats_bootstrap.py); other scores (integers, NaN that scipy's Mann-Whitney propagates) take rliable's loop
    vectorised = all(
        isinstance(scores, np.ndarray) and scores.dtype == np.float64 and not np.isnan(scores).any()
        for scores in score_dict.values()
    )
    # A fixed bootstrap seed, so the same runs give the same report; rliable 1.2 resamples from numpy's global generator
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002  (rliable samples from the global generator)
    try:
        if vectorised:
            point, interval = {}, {}
            for name, scores in score_dict.items():
                point[name] = iqm_and_mean(scores)
                interval[name] = _percentile_interval(_resampled_iqm_and_mean(*_resamples([scores], reps)))
            poi, poi_ci = {}, {}
            for pair, (x, y) in pairs.items():
                poi[pair] = metrics.probability_of_improvement(x, y)
                poi_ci[pair] = _percentile_interval(_resampled_probability_of_improvement(*_resamples([x, y], reps)))
        else:
            point, interval = library.get_interval_estimates(score_dict, iqm_and_mean, reps=reps)
            poi, poi_ci = (
                library.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps) if pairs else ({}, {})
            )
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return point, interval, poi, poi_ci


def _resamples(samples: list[np.ndarray], reps: int) -> list[np.ndarray]:
    """
    The stratified bootstrap's resamples of each ``(n_runs, n_tasks)`` sample (one number of tasks), drawn from numpy's
    global generator in rliable's order (per resample, each sample's runs of every task in turn), each of shape
    ``(reps, n_runs, n_tasks)``.
    """
    runs, tasks = samples[0].shape[0], samples[0].shape[1]
    if all(sample.shape[0] == runs for sample in samples):
        # One call draws what rliable's call per resample and sample draws: numpy's legacy bounded integers take the
        # generator's words in turn, with nothing carried between calls
        drawn = np.random.choice(runs, (reps, len(samples) * runs, tasks), replace=True)  # noqa: NPY002
        # (reps, n_samples * n_runs, n_tasks) -> n_samples of (reps, n_runs, n_tasks): each resample's samples in turn
        indices = [drawn[:, index * runs : (index + 1) * runs] for index in range(len(samples))]
    else:
        draws: list[list[np.ndarray]] = [[] for _ in samples]
        for _ in range(reps):
            for sample, drawn_runs in zip(samples, draws, strict=True):
                drawn_runs.append(np.random.choice(sample.shape[0], sample.shape, replace=True))  # noqa: NPY002
        indices = [np.stack(drawn_runs) for drawn_runs in draws]
    # Run indices (reps, n_runs, n_tasks) with task indices (n_tasks,): each resample picks runs within each task
    return [sample[index, np.arange(tasks)] for sample, index in zip(samples, indices, strict=True)]


def _resampled_iqm_and_mean(resamples: np.ndarray) -> np.ndarray:
    """
    rliable's ``[IQM, mean]`` of each resample, shape ``(reps, 2)``: scipy's ``trim_mean`` (a partition, the middle
    half's mean) and the mean of the task means, in numpy's order of operations per resample, so the floats are equal.
    """
    reps, runs, tasks = resamples.shape
    flat = resamples.reshape(reps, runs * tasks)  # (reps, n_runs, n_tasks) -> (reps, n_runs * n_tasks), as ravel
    low = int(0.25 * flat.shape[1])
    high = flat.shape[1] - low
    iqm = np.mean(np.partition(flat, (low, high - 1), axis=1)[:, low:high], axis=1)
    mean = np.mean(np.mean(resamples, axis=1), axis=1)
    return np.stack([iqm, mean], axis=1)


def _resampled_probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """
    rliable's probability of improvement of each resample pair, shape ``(reps, 1)``: per task Mann-Whitney's U over the
    product of the runs, the count of pairs where ``x`` is above plus half the ties (an exact float, as scipy's rank sum
    is), averaged over tasks.
    """
    # Resamples in chunks of about 4M pairs of runs, so that the memory stays bounded for many runs and tasks
    chunk = max(1, 2**22 // (x.shape[1] * y.shape[1] * x.shape[2]))
    u_statistics = []
    for start in range(0, x.shape[0], chunk):
        # (chunk, n_x, 1, n_tasks) against (chunk, 1, n_y, n_tasks): every pair of runs per task
        above, below = x[start : start + chunk, :, None, :], y[start : start + chunk, None, :, :]
        u_statistics.append((above > below).sum(axis=(1, 2)) + 0.5 * (above == below).sum(axis=(1, 2)))
    per_task = np.concatenate(u_statistics) / (x.shape[1] * y.shape[1])
    return np.mean(per_task, axis=1)[:, None]


def _percentile_interval(results: np.ndarray, size: float = 0.95) -> np.ndarray:
    """arch's percentile interval (``conf_int``) of bootstrap estimates ``(reps, k)``: shape ``(2, k)``, rows low and high."""
    alpha = (1.0 - size) / 2
    # Each column's percentiles as arch computes them one column at a time (the same floats)
    return np.percentile(results, [100 * alpha, 100 * (1.0 - alpha)], axis=0)


def probability_triple(poi: dict[str, Any], poi_ci: dict[str, Any], pair: str) -> list[float]:
    """``[P, low, high]`` for one pair of rliable's probability-of-improvement estimates."""
    # rliable returns a scalar (or shape (1,)) estimate and a (2,) or (2, 1) interval
    low, high = np.asarray(poi_ci[pair]).reshape(-1)[:2]
    return [float(np.asarray(poi[pair]).reshape(-1)[0]), float(low), float(high)]


def holm(p_values: list[float]) -> list[float]:
    """
    Holm's step-down adjustment of a family of p-values (same order as given).

    :raises ValueError: a p-value is NaN or outside ``[0, 1]``
    """
    if not all(0.0 <= p <= 1.0 for p in p_values):
        raise ValueError(f"p_values must lie in [0, 1], got {p_values}")
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
    A run's score at a time: its last evaluation at or before ``at``.

    :param times: Time of each evaluation (ascending)
    :param scores: Score of each evaluation
    :param at: The time asked for
    :param before_first: The score before any evaluation (e.g. the untrained policy's)
    """
    index = int(np.searchsorted(times, at, side="right")) - 1
    return before_first if index < 0 else float(scores[index])


def score_at_time(times: np.ndarray, scores: np.ndarray, at: float, final_evaluations: int, before_first: float) -> float:
    """
    A run's score when it is stopped at ``at`` seconds: its final score if it has stopped by then, else :func:`score_at`.

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


def mann_whitney(arm: Sequence[float] | np.ndarray, base: Sequence[float] | np.ndarray) -> tuple[float, str]:
    """
    The two-sided Mann-Whitney U test of two samples (:doc:`/guide/compare`): ``"exact"`` without ties,
    ``"permutation"`` (or ``"permutation (monte carlo)"`` beyond :data:`PERMUTATIONS` splits) with ties, ``"undefined"``
    (p = 1) when a sample is empty or every value is the same.

    :param arm: One sample (a sequence or a 1-D array)
    :param base: The other sample
    :return: ``(p, method)``
    :raises ValueError: a sample is not 1-D or holds NaN (NaN has no rank)
    """
    from scipy.stats import mannwhitneyu, permutation_test, rankdata

    x, y = _sample(arm, "arm"), _sample(base, "base")
    pooled = np.concatenate([x, y])
    if len(x) < 1 or len(y) < 1 or len(np.unique(pooled)) < 2:
        return 1.0, "undefined"
    if len(np.unique(pooled)) == len(pooled):
        return float(mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue), "exact"
    ranks = rankdata(pooled)  # midranks: the same for every split of the pooled values
    if math.comb(len(pooled), len(x)) <= PERMUTATIONS or min(len(x), len(y)) < 2:
        # scipy's permutation_test refuses a sample of one value: every split is counted here
        return _all_splits_rank_sum_p(ranks, len(x)), "permutation"
    center = len(x) * (len(pooled) + 1) / 2

    def distance(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
        # The rank sum's distance from its mean under the null (two-sided)
        return np.abs(np.sum(a, axis=axis) - center)

    result = permutation_test(
        (ranks[: len(x)], ranks[len(x) :]), distance, permutation_type="independent", vectorized=True,
        n_resamples=PERMUTATIONS, batch=50_000, alternative="greater", random_state=np.random.default_rng(0),
    )  # fmt: skip
    return float(min(1.0, result.pvalue)), "permutation (monte carlo)"


def _sample(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """One sample of :func:`mann_whitney` as a 1-D float array, checked."""
    sample = np.asarray(values, dtype=float)
    if sample.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got shape {sample.shape}")
    if np.isnan(sample).any():
        raise ValueError(f"{name} holds NaN: {sample.tolist()}")
    return sample


def _all_splits_rank_sum_p(ranks: np.ndarray, size: int) -> float:
    """The share of all splits of ``ranks`` whose rank sum is at least as far from its mean as the first ``size``'s."""
    # Midranks are multiples of 1/2: doubled, every sum and comparison is exact in integers
    doubled = np.rint(2 * ranks).astype(np.int64)
    pooled = len(doubled)
    # The other sample's rank sum is as far from its mean as this one's: count the smaller side's subsets
    smaller = min(size, pooled - size)
    center = smaller * (pooled + 1)  # twice the smaller side's mean rank sum
    observed = abs(int(doubled[:size].sum()) - size * (pooled + 1))
    top = int(doubled.sum())
    # counts[j, s]: the subsets of j pooled values whose doubled rank sum is s, one value added at a time (numpy
    # buffers the overlapping operands, so each value joins a subset at most once)
    counts = np.zeros((smaller + 1, top + 1), dtype=np.int64)
    counts[0, 0] = 1
    for value in doubled:
        counts[1:, value:] += counts[:-1, : top + 1 - value]
    far = np.abs(np.arange(top + 1) - center) >= observed
    return int(counts[smaller, far].sum()) / math.comb(pooled, smaller)


def timestamp(text: str) -> float:
    """Seconds since the epoch of a UTC time as ``run.json`` writes it, with or without milliseconds."""
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
    Pairs of runs of the same env (and seed, with ``same_seed``) that trained side by side on one machine at one commit
    (overlapping by at least half of the shorter): the only pairs whose wall times may be compared.
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
