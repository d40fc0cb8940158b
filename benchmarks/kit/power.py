"""
Power calculation for the evidence protocol (benchmarks/studies/evidence/PROTOCOL.md): seeds per arm needed to detect the
differences seen in earlier runs.

For each env and pair of variants in the given results folders, the primary endpoint of every run (the mean
normalised-free evaluation return of the last ``--final-evaluations`` evaluations, as ``report.py`` computes
it) gives the observed difference of means, the pooled standard deviation, Cohen's d, the seeds per arm a
two-sided two-sample t-test at level 0.05 needs for 80% power against that d, and the smallest difference
(in units of the pooled standard deviation and in return) the given ``--seeds`` detect with 80% power.

Usage: python benchmarks/kit/power.py --grid benchmarks/results/grid --pairs reset:mask reset_importance:mask
       [--final-evaluations 2] [--seeds 10 20]
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks.kit import rundata  # benchmarks/kit/rundata.py
from sb3_reset_ppo.experiments import runner


def power(d: float, n: int, alpha: float = 0.05) -> float:
    """Power of a two-sided two-sample t-test with ``n`` runs per arm against a standardised difference ``d``."""
    df = 2 * n - 2
    critical = stats.t.ppf(1 - alpha / 2, df)
    noncentrality = abs(d) * math.sqrt(n / 2)
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality))


def seeds_for_power(d: float, target: float = 0.8, alpha: float = 0.05, most: int = 1000) -> int | None:
    """Smallest number of runs per arm reaching ``target`` power against ``d`` (``None``: more than ``most``)."""
    if d == 0:
        return None
    return next((n for n in range(2, most + 1) if power(d, n, alpha) >= target), None)


def detectable_effect(n: int, target: float = 0.8, alpha: float = 0.05) -> float:
    """Smallest standardised difference detected with ``target`` power by ``n`` runs per arm (bisection)."""
    low, high = 0.0, 20.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if power(middle, n, alpha) < target else (low, middle)
    return high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=Path, nargs="+", required=True, help="results folders")
    parser.add_argument("--pairs", nargs="+", required=True, help="A:B pairs of variants (difference A - B)")
    parser.add_argument("--final-evaluations", type=int, default=2, help="the endpoint: mean of the last K evaluations")
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 20], help="seeds per arm for the detectable effect")
    args = parser.parse_args()
    for grid in args.grid:
        rundata.ensure(grid)  # a stored study's folder, unpacked from its tables where needed
    runs = [run for grid in args.grid for run in runner.load_runs(grid, args.final_evaluations)]
    print("command: python " + " ".join(["benchmarks/kit/power.py", *sys.argv[1:]]))
    print()
    header = "| env | A - B | runs A, B | difference | pooled SD | Cohen's d | seeds per arm for 80% power |"
    header += "".join(f" detectable with {n} seeds (SD, return) |" for n in args.seeds)
    print(header)
    print("|" + "---|" * header.count(" |"))
    envs = sorted({run["env"] for run in runs})
    for pair in args.pairs:
        first, second = pair.split(":")
        for env in envs:
            a, b = (np.array([r["final"] for r in runs if r["env"] == env and r["variant"] == v]) for v in (first, second))
            if len(a) < 2 or len(b) < 2:
                continue
            pooled = math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))
            difference = float(a.mean() - b.mean())
            d = difference / pooled if pooled > 0 else 0.0
            needed = seeds_for_power(d)
            row = f"| {env} | {first} - {second} | {len(a)}, {len(b)} | {difference:+.3g} | {pooled:.3g} | {d:+.2f} "
            row += f"| {needed if needed is not None else '> 1000'} |"
            row += "".join(f" {effect:.2f}, {effect * pooled:.3g} |" for effect in map(detectable_effect, args.seeds))
            print(row)


if __name__ == "__main__":
    main()
