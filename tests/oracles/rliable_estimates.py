"""
rliable's own interval estimates, as the reports computed them before ``stats.aggregate`` vectorised its bootstrap:
``library.get_interval_estimates`` (arch's bootstrap, one metric call per resample, scipy's ``trim_mean`` and
``mannwhitneyu``) from numpy's global generator seeded with 0. The reference ``aggregate`` is checked against, bitwise.
"""

from typing import Any

import numpy as np
from rliable import library, metrics


def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
    """rliable's ``[IQM, mean]`` of one ``(n_runs, n_tasks)`` array."""
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def rliable_aggregate(
    score_dict: dict[str, np.ndarray], reps: int, baseline: str | None = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """
    ``(point, interval, poi, poi_ci)`` as ``stats.aggregate`` returns them, from rliable alone; the global generator's
    state is restored after.
    """
    others = [] if baseline is None else [(v, baseline) for v in score_dict if v != baseline]
    pairs = {f"{v},{base}": (score_dict[v], score_dict[base]) for v, base in others}
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002
    try:
        point, interval = library.get_interval_estimates(score_dict, iqm_and_mean, reps=reps)
        poi, poi_ci = (
            library.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps) if pairs else ({}, {})
        )
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return point, interval, poi, poi_ci


def rliable_resamples(samples: list[np.ndarray], reps: int) -> list[np.ndarray]:
    """
    The resamples rliable's bootstrap hands its metric, from numpy's global generator seeded with 0 (restored after):
    of one sample (``StratifiedBootstrap``) or of a pair (``StratifiedIndependentBootstrap``), each stacked to
    ``(reps, n_runs, n_tasks)``.
    """
    bootstrap = (
        library.StratifiedBootstrap(*samples) if len(samples) == 1 else library.StratifiedIndependentBootstrap(*samples)
    )
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002
    try:
        drawn = [positional for positional, _ in bootstrap.bootstrap(reps)]
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return [np.stack([resample[index] for resample in drawn]) for index in range(len(samples))]
