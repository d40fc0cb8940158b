"""
Report of the benchmark grid (``run_grid.py``): rliable aggregates, per-env tables, learning curves.

Reads every finished run's ``evaluations.npz`` (written by the RL Zoo), normalises each env's final
return to ``(score - random) / (reference - random)``, and writes ``benchmarks/studies/evidence/RESULTS.md`` with: IQM and
mean of the normalised final return with 95% stratified-bootstrap confidence intervals per variant,
the probability of improvement of each variant over the mask baseline, per-env tables (mean +- std,
timesteps, wall time), and PNGs of the learning curves and rliable's aggregate plots.

For another study in the same layout, name its variants and baseline, e.g. the fresh-memory study
(``benchmarks/studies/fresh_memory/PROTOCOL.md``; its primary endpoint is the mean of the last 2 of 20 evaluations):
``--grid benchmarks/results/fresh_memory --variants fm_off fm_refresh fm_burn8 fm_burn16 fm_refresh_burn8
--baseline fm_off --final-evaluations 2 --min-seeds 10 --out ... --figures ...``.

Usage: python benchmarks/kit/report.py [--grid benchmarks/results/grid] [--out benchmarks/studies/evidence/RESULTS.md]
"""

import argparse
import functools
import json
import os
import platform
import shlex
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from rliable import plot_utils

from benchmarks.kit import rundata
from sb3_reset_ppo.experiments import runner, training_log
from sb3_reset_ppo.experiments.runner import load_runs, machine_name
from sb3_reset_ppo.experiments.stats import aggregate, holm, interval_triple, probability_triple, significance

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
VARIANT_ORDER = ["reset", "reset_importance", "mask", "mask_kept", "ppo_lstm"]
BASELINE = "mask"
# Reference (best) returns used for normalisation; random returns are measured by the report itself

REFERENCE_RETURN = {
    "CueRecall-v0": 1.0,
    "CueRecallLong-v0": 1.0,
    "EarlyChoice-v0": 3.25,
    "CartPoleNoVel-v1": 500.0,
    "PendulumNoVel-v1": -150.0,
    "MountainCarContinuousNoVel-v0": 93.0,
    "CueRecallImage-v0": 1.0,
    # POPGym's scores are in [-1, 1]
    "PopgymRepeatPreviousEasy-v0": 1.0,
    "PopgymRepeatFirstEasy-v0": 1.0,
    "PopgymCountRecallEasy-v0": 1.0,
    "PopgymPositionOnlyCartPoleEasy-v0": 1.0,
    "PopgymNoisyPositionOnlyCartPoleEasy-v0": 1.0,
    "PopgymAutoencodeEasy-v0": 1.0,
    # Success gives 1 - 0.9 * steps / max_steps: 1.0 bounds it
    "MiniGridMemoryS7Flat-v0": 1.0,
}
# Aggregates are also reported per group: the claim is about memory, so the groups may disagree
GROUPS = {
    "memory tasks": ["CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "CueRecallImage-v0"],
    "NoVel control": ["CartPoleNoVel-v1", "PendulumNoVel-v1", "MountainCarContinuousNoVel-v0"],
    "POPGym": [
        "PopgymRepeatPreviousEasy-v0",
        "PopgymRepeatFirstEasy-v0",
        "PopgymCountRecallEasy-v0",
        "PopgymPositionOnlyCartPoleEasy-v0",
        "PopgymNoisyPositionOnlyCartPoleEasy-v0",
        "PopgymAutoencodeEasy-v0",
    ],
    "MiniGrid": ["MiniGridMemoryS7Flat-v0"],
}
# Collapse: an evaluation below COLLAPSE_BELOW (normalised) after the run first reached SOLVED_AT
SOLVED_AT, COLLAPSE_BELOW = 0.9, 0.8
# Training diagnostics drawn per env with --diagnostics (train/ keys of the kept training logs)
DIAGNOSTICS = ["approx_kl", "clip_fraction", "explained_variance", "kept_slot_fraction", "episode_start_weight"]
# The packages the results depend on, whose versions the report states
PACKAGES = ["torch", "stable-baselines3", "sb3-contrib", "gymnasium", "rl_zoo3", "rliable", "numpy", "sb3-reset-ppo"]


# Seeded, so the same for every report: reports made in one process (a study's, the tests') roll it out once
@functools.cache
def random_return(env_id: str, episodes: int = 500, seed: int = 0) -> float:
    """The random policy's mean return on ``env_id`` over ``episodes`` episodes (seeded), for the normalisation."""
    import rl_zoo3.import_envs  # noqa: F401  (NoVel envs)

    from sb3_reset_ppo.envs import random_policy_return

    return random_policy_return(env_id, episodes, seed)


def failure(run: dict[str, Any], reason: str) -> dict[str, Any]:
    """A failed run as the report lists it: ``variant``, ``env``, ``seed`` and ``reason``."""
    return {"variant": run["variant"], "env": run["env"], "seed": int(run["seed"]), "reason": reason}


def load_failed(grid: Path) -> list[dict[str, Any]]:
    """
    The runs whose trainer exited with an error (``failed.json``, written by ``run_grid.py``; a later successful
    attempt, which writes ``run.json``, replaces them), as :func:`failure` records.
    """
    return [
        failure(run, f"exit code {run['returncode']}")
        for run in runner.load_failed(grid)
        if not (run["dir"] / "run.json").exists()
    ]


def check_evaluations(runs: list[dict[str, Any]], expected: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    Split ``runs`` into those with ``expected`` evaluations at or before their budget (all of them if None) and the
    others, which are reported as failed (their final score would not be the protocol's "last K of N").

    :return: (the runs kept, failure records as :func:`load_failed`'s)
    """
    if expected is None:
        return runs, []
    kept = [run for run in runs if len(run["eval_mean"]) == expected]
    wrong = [
        failure(run, f"{len(run['eval_mean'])} evaluations within its budget, not {expected}")
        for run in runs
        if len(run["eval_mean"]) != expected
    ]
    return kept, wrong


def failed_text(failed: list[dict[str, Any]]) -> str:
    """The report's list of failed runs: ``variant env seed k (reason)``, comma separated."""
    return ", ".join(f"{f['variant']} {f['env']} seed {f['seed']} ({f['reason']})" for f in failed)


def collapse_stats(eval_mean: np.ndarray, random: float, reference: float) -> tuple[bool, int, int]:
    """
    Whether a run solved its env (an evaluation at or above ``SOLVED_AT`` normalised), and of its evaluations after
    the first solved one, how many fell below ``COLLAPSE_BELOW`` normalised, out of how many.
    """
    normalised = (np.asarray(eval_mean) - random) / (reference - random)
    solved = np.flatnonzero(normalised >= SOLVED_AT)
    if len(solved) == 0:
        return False, 0, 0
    after = normalised[solved[0] + 1 :]
    return True, int((after < COLLAPSE_BELOW).sum()), len(after)


def diagnostics_figure(
    runs: list[dict[str, Any]], env_id: str, variants: list[str], path: Path, keys: list[str] = DIAGNOSTICS
) -> bool:
    """
    Per variant, the median over seeds of each ``train/`` diagnostic against the number of ``train()`` calls, from
    the runs' kept training logs. Returns False (and writes nothing) when no run has a log.
    """
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for run in runs:
        if run["env"] != env_id or run["variant"] not in variants:
            continue
        rows = [row for row in training_log.training_rows(run["dir"]) if "train/approx_kl" in row]
        if rows:
            per_key = curves.setdefault(run["variant"], {})
            for key in keys:
                per_key.setdefault(key, []).append([row.get(f"train/{key}", np.nan) for row in rows])
    if not curves:
        return False
    figure, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for variant in variants:
            series = curves.get(variant, {}).get(key)
            if not series:
                continue
            length = min(len(s) for s in series)
            values = np.array([s[:length] for s in series], dtype=float)
            if np.isnan(values).all():
                continue
            ax.plot(np.arange(1, length + 1), np.nanmedian(values, axis=0), label=f"{variant} ({len(series)})")
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("train() call")
    axes[0, 0].legend(fontsize=7)
    figure.suptitle(f"{env_id}: training diagnostics (median over seeds)", fontsize=10)
    save_figure(figure, path, dpi=90)
    return True


def save_figure(figure: Any, path: Path, dpi: int) -> None:
    """Lay ``figure`` out, write it to ``path`` (making its folder where missing) and close it."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def difference(
    arm: Sequence[float], base: Sequence[float], reps: int, generator: np.random.Generator
) -> tuple[float, float, float, float]:
    """
    Mean of ``arm`` minus mean of ``base``, its 95% bootstrap interval (seeds resampled within each) and Welch's
    t-test p-value (NaN with fewer than 2 values in either, or both constant and equal).
    """
    from scipy.stats import ttest_ind

    a, b = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    boot = [generator.choice(a, len(a)).mean() - generator.choice(b, len(b)).mean() for _ in range(reps)]
    low, high = np.percentile(boot, [2.5, 97.5])
    p = float(ttest_ind(a, b, equal_var=False).pvalue) if len(a) > 1 and len(b) > 1 else float("nan")
    return float(a.mean() - b.mean()), float(low), float(high), p


def difference_tests(
    runs: list[dict[str, Any]], envs: list[str], variants: list[str], baseline: str, key: str, reps: int
) -> list[dict[str, Any]]:
    """
    Per env, each variant's :func:`difference` from the baseline (raw returns) and its Welch p-value's Holm
    adjustment over the whole table.
    """
    generator = np.random.default_rng(0)
    rows = []
    for env in envs:
        base = [r[key] for r in runs if r["env"] == env and r["variant"] == baseline]
        for v in variants:
            other = [r[key] for r in runs if r["env"] == env and r["variant"] == v]
            if v != baseline and len(base) >= 2 and len(other) >= 2:
                rows.append((env, v, *difference(other, base, reps, generator)))
    # An undefined p (both arms constant and equal: no difference to test) stays in the family as 1.0, and is
    # stored as None ("undefined" in the table)
    adjusted = holm([1.0 if np.isnan(row[5]) else row[5] for row in rows])
    return [
        {"env": env, "variant": v, "difference": [diff, low, high], "p": None if np.isnan(p) else p, "p_holm": p_holm}
        for (env, v, diff, low, high, p), p_holm in zip(rows, adjusted, strict=True)
    ]


def probability_text(poi: dict[str, Any], poi_ci: dict[str, Any], pair: str) -> str:
    """``"P (low to high)"`` for one pair of rliable's probability-of-improvement estimates."""
    probability, low, high = probability_triple(poi, poi_ci, pair)
    return f"{probability:.3f} ({low:.3f} to {high:.3f})"


def estimate_text(triple: Sequence[float], digits: int = 3) -> str:
    """An estimate with its interval, ``[point, low, high]``, as ``point (low to high)``."""
    point, low, high = triple
    return f"{point:.{digits}f} ({low:.{digits}f} to {high:.{digits}f})"


def estimate_or(triple: Sequence[float] | None, digits: int = 3, missing: str = "-") -> str:
    """
    :func:`estimate_text`, or ``missing`` where there is no estimate.

    :param triple: ``[point, low, high]``, or None
    :param digits: Decimals of each number
    :param missing: The text without an estimate
    """
    return missing if triple is None else estimate_text(triple, digits)


# A comparison's verdict while a study's runs are not all stored (its protocol states none before)
NO_VERDICT = "none before all runs"


def holm_verdict(probability: Sequence[float], p_holm: float) -> str:
    """
    ``"better"`` / ``"worse"`` (the first arm's) where Holm's adjusted p < 0.05 and the probability of improvement's
    interval excludes 1/2 (above / below), else ``"not significant"``.

    :param probability: ``[point, low, high]`` of P(first arm > second arm)
    :param p_holm: The comparison's Holm-adjusted p-value
    """
    side = significance(probability[1], probability[2], 0.5)
    return side if side != "not significant" and p_holm < 0.05 else "not significant"


def difference_row(row: dict[str, Any], baseline: str) -> str:
    """One markdown row of :func:`difference_tests`' table."""
    diff, low, high = row["difference"]
    return (
        f"| {row['env']} | {row['variant']} - {baseline} | {diff:+.3f} ({low:+.3f} to {high:+.3f}) "
        f"| {'undefined (both constant)' if row['p'] is None else format(row['p'], '.3f')} | {row['p_holm']:.3f} |"
    )


def sample_std(values: np.ndarray) -> float:
    """The sample standard deviation (ddof 1, as Welch's test uses); 0 for a single value."""
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def iqm_triple(values: Sequence[float], reps: int) -> list[float] | None:
    """``[IQM, low, high]`` of one arm's values over its runs, with a 95% bootstrap interval (``None`` for none)."""
    if len(values) == 0:
        return None
    point, interval, _, _ = aggregate({"arm": np.asarray(values, dtype=float)[:, None]}, reps=reps)  # (runs, 1 task)
    return interval_triple(point["arm"][0], interval["arm"][0, 0], interval["arm"][1, 0])


def improvement_triple(arm: Sequence[float], other: Sequence[float], reps: int) -> list[float]:
    """``[P, low, high]``: the probability that a run of ``arm`` scores above a run of ``other`` (higher is better)."""
    scores = {"arm": np.asarray(arm, dtype=float)[:, None], "other": np.asarray(other, dtype=float)[:, None]}
    _, _, poi, poi_ci = aggregate(scores, reps=reps, baseline="other")  # scores: (runs, 1 task)
    return probability_triple(poi, poi_ci, "arm,other")


def paired_time_ratio(runs: list[dict[str, Any]], baseline_runs: list[dict[str, Any]]) -> tuple[float, int]:
    """
    The median over seeds of a run's wall time over the baseline's run of the same seed, counting only pairs that
    trained at the same commit, on the same machine where both record it, and are not reused: a study spans sessions
    on machines of different speeds, and each session's runs share its worktree's commit.

    :return: The median ratio (NaN without a pair) and the number of pairs
    """
    baseline_of = {r["seed"]: r for r in baseline_runs if "reused_from" not in r}
    ratios = [
        r["seconds"] / baseline_of[r["seed"]]["seconds"]
        for r in runs
        if "reused_from" not in r
        and r["seed"] in baseline_of
        and r.get("commit") == baseline_of[r["seed"]].get("commit")
        and (
            "machine" not in r or "machine" not in baseline_of[r["seed"]] or r["machine"] == baseline_of[r["seed"]]["machine"]
        )
    ]
    return (float(np.median(ratios)) if ratios else float("nan")), len(ratios)


def learning_curves(runs: list[dict[str, Any]], envs: list[str], path: Path, variant_order: list[str]) -> None:
    """Per env, each variant's evaluation return (mean +- std over seeds) against timesteps, saved to ``path``."""
    columns = min(3, len(envs))
    rows = -(-len(envs) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for ax, env_id in zip(axes.flat, envs, strict=False):
        for variant in variant_order:
            curves = [r for r in runs if r["env"] == env_id and r["variant"] == variant]
            if not curves:
                continue
            length = min(len(r["eval_mean"]) for r in curves)
            values = np.stack([r["eval_mean"][:length] for r in curves])
            steps = curves[0]["timesteps"][:length]
            mean, std = values.mean(axis=0), values.std(axis=0)
            ax.plot(steps, mean, label=f"{variant} ({len(curves)})")
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.set_title(env_id, fontsize=10)
        ax.set_xlabel("timesteps")
        ax.set_ylabel("evaluation return")
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    save_figure(figure, path, dpi=100)


def moved(name: str) -> str:
    """
    A file of ``benchmarks/`` as a run recorded it (``benchmarks/evidence.yml``), where it is now
    (``benchmarks/studies/evidence/evidence.yml``): the files were moved into the kit's and the studies' folders.
    """
    if (BENCHMARKS.parent / name).exists() or not name.startswith("benchmarks/"):
        return name
    # Each folder of benchmarks/ but the stored runs' (thousands of files, none of them moved there)
    folders = [folder for folder in BENCHMARKS.iterdir() if folder.is_dir() and folder.name != "results"]
    found = sorted(path for folder in folders for path in folder.glob(f"**/{Path(name).name}"))
    found = [path for path in found if "results" not in path.relative_to(BENCHMARKS).parts]
    return str(found[0].relative_to(BENCHMARKS.parent)) if len(found) == 1 else name


def conf_files(runs: list[dict[str, Any]]) -> str:
    """The hyperparameter files the runs used (from their commands), with the variants that used each."""
    used: dict[str, set[str]] = {}
    for run in runs:
        words = run.get("command", "").split()
        if "--conf-file" in words:
            path = Path(words[words.index("--conf-file") + 1])
            # Relative to the checkout the run trained in (runs may come from other worktrees of the repository)
            parts = path.parts
            name = str(Path(*parts[parts.index("benchmarks") :])) if "benchmarks" in parts else path.name
            used.setdefault(moved(name), set()).add(run["variant"])
    return ", ".join(f"`{name}` ({', '.join(sorted(variants))})" for name, variants in sorted(used.items())) or "unknown"


def study_opening(study: str, title: str, records: Sequence[dict[str, Any]]) -> tuple[list[str], str]:
    """
    The opening lines of a study's results page written by ``benchmarks/studies/<study>/<study>_report.py`` from the
    runs of ``<study>_study.py``, and the machines the ``records`` ran on (``cpu, N cores``; several joined by ``;``).
    """
    lines = [
        f"# {title} (benchmarks/studies/{study}/PROTOCOL.md)",
        "",
        f"Measured by `benchmarks/studies/{study}/{study}_study.py` and summarised by",
        f"`benchmarks/studies/{study}/{study}_report.py` (this file is its output).",
        "Every arm has the same settings; nothing is tuned per arm.",
        "",
    ]
    machines = sorted({f"{r['machine'].get('cpu')}, {r['machine'].get('cores')} cores" for r in records})
    return lines, "; ".join(machines)


def versions(names: Sequence[str] = PACKAGES) -> str:
    """The versions of the packages the results depend on (``names``), as the report states them."""
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def machines(runs: list[dict[str, Any]]) -> str:
    """The machines the runs trained on, as ``run_grid.py`` records them, with their number of runs."""
    unknown = "not recorded (runs made before run.json recorded the machine)"
    counts = Counter(machine_name(run["machine"]) if run.get("machine") else unknown for run in runs)
    # Most runs first (ties in the order of their first run)
    return "; ".join(f"{name}: {count} run{'s' if count != 1 else ''}" for name, count in counts.most_common())


def hardware() -> str:
    """The machine this report runs on."""
    system = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
    return f"{machine_name(runner.machine())}, {system}, no GPU"


def build_parser() -> argparse.ArgumentParser:
    """The report's command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=Path, nargs="+", default=[BENCHMARKS / "results" / "grid"],
                        help="results folders (several: the runs of all, e.g. two studies' arms)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the page to write (a study's RESULTS.md)")
    parser.add_argument("--figures", type=Path, default=None, help="the figures' folder (default: figures/ beside --out)")
    parser.add_argument(
        "--min-seeds", type=int, default=5, help="seeds every variant needs for an env to enter the aggregates"
    )
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the aggregates use seeds first_seed .. first_seed + min_seeds - 1 "
                        "(an env enters only with all of them)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    parser.add_argument("--evaluations", type=int, default=None,
                        help="evaluations every run must have within its budget; others are reported as failed")  # fmt: skip
    parser.add_argument("--variants", nargs="+", default=VARIANT_ORDER, help="variants to report, in this order")
    parser.add_argument("--baseline", default=BASELINE, help="the variant others are compared with")
    parser.add_argument("--final-evaluations", type=int, default=1, help="the final score: mean of the last K evaluations")
    parser.add_argument("--envs", nargs="+", default=None, help="envs to report (default: every env with runs)")
    parser.add_argument("--title", default="Benchmark results", help="the report's heading")
    parser.add_argument("--notes", type=Path, nargs="+", default=[],
                        help="markdown files put after the header, in this order (protocol, deviations, reading)")  # fmt: skip
    parser.add_argument("--grid-command", default=None, help="the command that ran the grid, as the report states it")
    parser.add_argument("--focus", default="reset", help="the variant whose shortfalls against the baseline are listed")
    parser.add_argument("--diagnostic-keys", nargs="+", default=DIAGNOSTICS,
                        help="the train/ keys --diagnostics draws")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the estimates (aggregates, groups, differences, wall times) as JSON")  # fmt: skip
    parser.add_argument("--diagnostics", action="store_true",
                        help="draw the training diagnostics per env from the runs' kept logs")  # fmt: skip
    return parser


@dataclass
class Selection:
    """
    The runs a report covers, and what the report derives from them before any table.

    :param runs: the finished runs of the requested variants and envs (exit code 0, the expected evaluations)
    :param failed: the failure records (as :func:`load_failed`'s), by variant, env and seed
    :param envs: the envs with runs, in ``REFERENCE_RETURN``'s order
    :param variants: the requested variants with runs, in the requested order
    :param aggregate_seeds: the seeds the aggregates use
    :param randoms: the random policy's return per env
    :param complete: the envs where every variant has every aggregate seed (the aggregates' envs)
    """

    runs: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    envs: list[str]
    variants: list[str]
    aggregate_seeds: list[int]
    randoms: dict[str, float]
    complete: list[str] = field(default_factory=list)

    def seeds(self, env: str, variant: str) -> list[dict[str, Any]]:
        """The runs of one variant on one env, by seed."""
        return sorted((r for r in self.runs if r["env"] == env and r["variant"] == variant), key=lambda r: r["seed"])

    def aggregate_runs(self, env: str, variant: str) -> list[dict[str, Any]]:
        """The runs of the aggregate seeds (a missing seed is not replaced by another)."""
        return [r for r in self.seeds(env, variant) if r["seed"] in self.aggregate_seeds]

    def normalised(self, key: str, envs: list[str]) -> dict[str, np.ndarray]:
        """
        Each variant's normalised scores ``key`` (``"final"`` or ``"auc"``) on the aggregate seeds of ``envs``, as
        rliable takes them: variant -> ``(n_seeds, n_envs)`` array of ``(score - random) / (reference - random)``.
        """
        randoms = self.randoms
        # (n_envs, n_seeds) -> (n_seeds, n_envs) normalised scores per variant
        return {
            v: np.array(
                [
                    [(r[key] - randoms[env]) / (REFERENCE_RETURN[env] - randoms[env]) for r in self.aggregate_runs(env, v)]
                    for env in envs
                ]
            ).T
            for v in self.variants
        }


def select_runs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Selection:
    """
    Load the runs of ``--grid``, keep those of ``--variants`` and ``--envs``, set the failed ones apart (an error
    exit, or another number of evaluations than ``--evaluations``), and derive the envs, variants, aggregate seeds
    and random returns of the report. A usage error (through ``parser``) when no run is left.

    :param args: the command line
    :param parser: the command line's parser (for the error)
    :return: the report's runs and what depends on them
    """

    def wanted(run: dict[str, Any]) -> bool:
        return run["variant"] in args.variants and (args.envs is None or run["env"] in args.envs)

    runs = [r for grid in args.grid for r in load_runs(grid, args.final_evaluations) if wanted(r)]
    failed = [f for grid in args.grid for f in load_failed(grid) if wanted(f)]
    failed += [failure(r, f"exit code {r['returncode']}") for r in runs if r["returncode"] != 0]
    runs, wrong = check_evaluations([r for r in runs if r["returncode"] == 0], args.evaluations)
    failed = sorted(failed + wrong, key=lambda f: (f["variant"], f["env"], f["seed"]))
    if not runs:
        parser.error(f"no finished run of --variants {' '.join(args.variants)} in --grid {' '.join(map(str, args.grid))}")
    envs = [env for env in REFERENCE_RETURN if any(r["env"] == env for r in runs)]
    selection = Selection(
        runs=runs,
        failed=failed,
        envs=envs,
        variants=[v for v in args.variants if any(r["variant"] == v for r in runs)],
        aggregate_seeds=list(range(args.first_seed, args.first_seed + args.min_seeds)),
        randoms={env: random_return(env) for env in envs},
    )
    selection.complete = [
        env for env in envs if all(len(selection.aggregate_runs(env, v)) == args.min_seeds for v in selection.variants)
    ]
    return selection


@dataclass
class Report:
    """
    The report's sections: each returns its markdown lines and fills its part of the JSON summary in.

    :param args: the command line
    :param selection: the report's runs
    :param summary: the JSON summary (``--json``): the report's settings and failed runs, and the sections that the
        tables fill in (estimates as ``[point, low, high]``, 95% intervals)
    """

    args: argparse.Namespace
    selection: Selection
    summary: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.summary = {
            "baseline": self.args.baseline,
            "variants": self.selection.variants,
            "final_evaluations": self.args.final_evaluations,
            "evaluations": self.args.evaluations,
            "reps": self.args.reps,
            "bootstrap_seed": 0,
            "failed": self.selection.failed,
            "aggregate": {},
            "groups": {},
            "differences": {},
            "wall_time": {},
        }

    def link(self, name: str) -> str:
        """A figure's path (``name``, in ``--figures``) as the report links it: relative to the report's folder."""
        return os.path.relpath(self.args.figures / name, self.args.out.parent)

    def header_lines(self, argv: list[str]) -> list[str]:
        """
        The report's title, how it was measured (commands, machines, packages, score), then the ``--notes`` files;
        ``argv``: the report's arguments, as the report states its command.
        """
        args, selection = self.args, self.selection
        grid_command = args.grid_command or (
            f"python benchmarks/kit/run_grid.py --envs {' '.join(selection.envs)} "
            f"--variants {' '.join(selection.variants)} --seeds {args.min_seeds}"
        )
        lines = [
            f"# {args.title}",
            "",
            "Measured by `benchmarks/kit/run_grid.py` (runs through the RL Zoo) and summarised by `benchmarks/kit/report.py`.",
            "Results are what was measured; nothing is tuned per variant beyond the hyperparameter files.",
            "",
            f"- Command (grid): `{grid_command}`",
            "- Command (report): `python " + shlex.join(["benchmarks/kit/report.py", *argv]) + "`",
            f"- Hardware (this report): {hardware()}",
            f"- Machines (the runs): {machines(selection.runs)}",
            f"- Packages: {versions()}",
            "- Hyperparameters: " + conf_files(selection.runs) + ".",
            "- Runs: two at a time on the 2 cores (one torch thread each); wall time includes the evaluations.",
            f"- Score: mean return of the last {args.final_evaluations} evaluation(s) at or before the run's budget (20 "
            "episodes each; deterministic policy, except on MiniGrid envs, which the RL Zoo evaluates with a stochastic "
            "one), normalised per env to",
            "  `(score - random) / (reference - random)` with the random policy's return measured here.",
            "",
        ]
        for notes in args.notes:
            lines += [notes.read_text().strip(), ""]
        return lines

    def aggregate_section(self, key: str, title: str, name: str) -> list[str]:
        """
        One aggregate of the score ``key`` (``"final"`` or ``"auc"``) over the complete envs: IQM and mean with their
        intervals, the probability of improvement over the baseline, and their figures (``<name>.png``,
        ``<name>_probability_of_improvement.png``) under the title "Aggregate: ``title``"; fills
        ``summary["aggregate"][key]``.
        """
        baseline, variants = self.args.baseline, self.selection.variants
        complete, aggregate_seeds = self.selection.complete, self.selection.aggregate_seeds
        point, interval, poi, poi_ci = aggregate(self.selection.normalised(key, complete), self.args.reps, baseline)
        entry: dict[str, Any] = {
            "envs": complete,
            "seeds": aggregate_seeds,
            "iqm": {v: interval_triple(point[v][0], *interval[v][:, 0]) for v in variants},
            "mean": {v: interval_triple(point[v][1], *interval[v][:, 1]) for v in variants},
            "probability_of_improvement": {pair.split(",")[0]: probability_triple(poi, poi_ci, pair) for pair in poi},
        }
        self.summary["aggregate"][key] = entry
        lines = [
            f"## Aggregate: {title}",
            "",
            f"Over {len(complete)} envs ({', '.join(complete)}), seeds {aggregate_seeds[0]} to {aggregate_seeds[-1]} of each.",
            "",
            "| variant | IQM (95% CI) | mean (95% CI) |",
            "|---|---|---|",
        ]
        for v in variants:
            lines.append(f"| {v} | {estimate_text(entry['iqm'][v])} | {estimate_text(entry['mean'][v])} |")
        lines += ["", f"Probability of improvement over `{baseline}` (95% CI):", "", "| pair | P(X > Y) |", "|---|---|"]
        for pair in poi:
            lines.append(f"| {pair.replace(',', ' vs ')} | {probability_text(poi, poi_ci, pair)} |")
        figure, _ = plot_utils.plot_interval_estimates(
            {v: point[v] for v in variants},
            {v: interval[v] for v in variants},
            metric_names=["IQM", "Mean"],
            algorithms=variants,
            xlabel=f"Normalised {'final return' if key == 'final' else 'return over training'}",
            xlabel_y_coordinate=-0.3,
        )
        figure.savefig(self.args.figures / f"{name}.png", dpi=100, bbox_inches="tight")
        # Closed once written: reports made in one process (benchmarks/kit/scripts.py) would otherwise keep them all
        plt.close(figure)
        lines += ["", f"![{name}]({self.link(name + '.png')})", ""]
        if poi:
            axes = plot_utils.plot_probability_of_improvement(poi, poi_ci)
            axes.figure.savefig(self.args.figures / f"{name}_probability_of_improvement.png", dpi=100, bbox_inches="tight")
            plt.close(axes.figure)
            lines += [f"![probability of improvement]({self.link(name + '_probability_of_improvement.png')})", ""]
        return lines

    def group_section(self) -> list[str]:
        """
        The aggregates within each of ``GROUPS`` (its complete envs): IQM and probability of improvement of the final
        return and of the return over training; fills ``summary["groups"]``.
        """
        baseline, variants = self.args.baseline, self.selection.variants
        lines = [
            "## Aggregate by group of envs",
            "",
            f"The same estimates within each group (IQM with 95% CI; P(> {baseline}) with 95% CI).",
            "",
            f"| group | variant | final IQM | final P(> {baseline}) | over training IQM | over training P(> {baseline}) |",
            "|---|---|---|---|---|---|",
        ]
        for group_name, group_envs in GROUPS.items():
            group = [env for env in self.selection.complete if env in group_envs]
            if not group:
                continue
            cells: dict[str, list[str]] = {v: [] for v in variants}
            for key in ("final", "auc"):
                point, interval, poi, poi_ci = aggregate(self.selection.normalised(key, group), self.args.reps, baseline)
                entry = self.summary["groups"].setdefault(group_name, {"envs": group})[key] = {
                    "iqm": {v: interval_triple(point[v][0], *interval[v][:, 0]) for v in variants},
                    "probability_of_improvement": {pair.split(",")[0]: probability_triple(poi, poi_ci, pair) for pair in poi},
                }
                for v in variants:
                    pair = f"{v},{baseline}"
                    cells[v] += [estimate_text(entry["iqm"][v]), probability_text(poi, poi_ci, pair) if pair in poi else "-"]
            for v in variants:
                lines.append(f"| {group_name} ({len(group)} envs) | {v} | " + " | ".join(cells[v]) + " |")
        lines.append("")
        return lines

    def aggregate_sections(self) -> list[str]:
        """
        The aggregates of the final return and of the return over training, then by group of envs; a line saying
        there is none when no env is complete or the baseline has no run.
        """
        args = self.args
        if not (self.selection.complete and args.baseline in self.selection.variants):
            return ["No env has every variant with enough seeds yet: no aggregate.", ""]
        last = "last evaluation" if args.final_evaluations == 1 else f"mean of the last {args.final_evaluations} evaluations"
        auc_title = "normalised return averaged over all evaluations of a run (area under the learning curve)"
        lines = self.aggregate_section("final", f"final normalised return ({last})", "aggregate")
        lines += self.aggregate_section("auc", auc_title, "aggregate_auc")
        return lines + self.group_section()

    def left_out_lines(self) -> list[str]:
        """The envs not in the aggregates and the failed runs, each a paragraph when there are any."""
        selection = self.selection
        first, last = selection.aggregate_seeds[0], selection.aggregate_seeds[-1]
        lines: list[str] = []
        missing = [env for env in (self.args.envs or REFERENCE_RETURN) if env not in selection.complete]
        if missing:
            lines += [
                f"Not in the aggregate (not run, or not every variant with seeds {first} to {last}): {', '.join(missing)}.",
                "",
            ]
        if selection.failed:
            lines += [
                f"Failed runs (left out everywhere; an env with a failed run among seeds {first} to "
                f"{last} leaves the aggregates): {failed_text(selection.failed)}.",
                "",
            ]
        return lines

    def difference_sections(self) -> list[str]:
        """
        Per env, each variant's difference from the baseline with its test (:func:`difference_tests`), of the final
        return and of the return over training (no section for a score without a row); fills
        ``summary["differences"]``.
        """
        baseline, selection = self.args.baseline, self.selection
        lines: list[str] = []
        for key, label in (("final", "final return"), ("auc", "return over training")):
            differences = difference_tests(selection.runs, selection.envs, selection.variants, baseline, key, self.args.reps)
            self.summary["differences"][key] = differences
            difference_rows = [difference_row(row, baseline) for row in differences]
            if difference_rows:
                lines += [
                    f"## Differences from `{baseline}` per env: {label}",
                    "",
                    "Mean over seeds minus the baseline's, in raw returns, with a 95% bootstrap interval; Welch's t-test "
                    "and its Holm adjustment over every row of this table.",
                    "",
                    "| env | comparison | difference (95% CI) | p | p (Holm) |",
                    "|---|---|---|---|---|",
                    *difference_rows,
                    "",
                ]
        return lines

    def per_env_sections(self) -> list[str]:
        """
        A table per env: each variant's seeds, final return and return over training (mean +- std), timesteps, wall
        time and its paired ratio to the baseline's; fills ``summary["wall_time"]``.
        """
        baseline, selection = self.args.baseline, self.selection
        lines = ["## Per env", ""]
        for env in selection.envs:
            lines += [
                f"### {env} (random {selection.randoms[env]:.2f}, reference {REFERENCE_RETURN[env]:g})",
                "",
                "| variant | seeds | final return (mean +- std) | return over training (mean +- std) | timesteps "
                f"| wall time per run (s) | wall time / {baseline}'s, side-by-side pairs: median ratio (pairs) |",
                "|---|---|---|---|---|---|---|",
            ]
            for v in selection.variants:
                rows = selection.seeds(env, v)
                if not rows:
                    continue
                finals = np.array([r["final"] for r in rows])
                aucs = np.array([r["auc"] for r in rows])
                seconds = np.mean([r["seconds"] for r in rows])
                reused = sum("reused_from" in r for r in rows)
                ratio, pairs = paired_time_ratio(rows, selection.seeds(env, baseline))
                # Only runs that trained side by side (one session, one machine) give a ratio: means over runs of
                # different sessions mix machines of different speeds (reused runs were timed by another study)
                self.summary["wall_time"].setdefault(env, {})[v] = {
                    "seconds": float(seconds),
                    "paired_median_ratio": ratio if pairs else None,
                    "pairs": pairs,
                }
                lines.append(
                    f"| {v} | {len(rows)}{f' ({reused} reused)' if reused else ''} "
                    f"| {finals.mean():.3f} +- {sample_std(finals):.3f} | {aucs.mean():.3f} +- {sample_std(aucs):.3f} "
                    f"| {int(rows[0]['timesteps'][-1])} | {seconds:.0f} "
                    f"| {f'{ratio:.2f} ({pairs})' if pairs else '-'} |"
                )
            lines += [
                "",
                "Wall time per run is descriptive only (a mean over sessions on machines of different speeds); the ratio "
                f"pairs each run with {baseline}'s run of the same seed trained at the same commit (one session, one "
                "machine), reused runs left out; '-': no such pair.",
                "",
            ]
            if any("reused_from" in r for r in selection.runs if r["env"] == env):
                lines += ["Reused runs keep the wall time of the study that ran them.", ""]
        return lines

    def collapse_section(self) -> list[str]:
        """
        Per env and variant, the runs that solved the env and how many of their later evaluations fell below the
        collapse threshold (:func:`collapse_stats`).
        """
        selection = self.selection
        lines = [
            "## Collapses",
            "",
            f"Runs that solved the env (an evaluation at or above {SOLVED_AT} normalised) and, of their evaluations after "
            f"the first solved one, the share below {COLLAPSE_BELOW} normalised (all seeds).",
            "",
            "| env | variant | runs that solved | later evaluations below threshold |",
            "|---|---|---|---|",
        ]
        for env in selection.envs:
            for v in selection.variants:
                rows = selection.seeds(env, v)
                if not rows:
                    continue
                stats = [collapse_stats(r["eval_mean"], selection.randoms[env], REFERENCE_RETURN[env]) for r in rows]
                solved = sum(s[0] for s in stats)
                below, after = sum(s[1] for s in stats), sum(s[2] for s in stats)
                share = f"{below} of {after} ({below / after:.0%})" if after else "-"
                lines.append(f"| {env} | {v} | {solved} of {len(rows)} | {share} |")
        lines.append("")
        return lines

    def diagnostics_section(self) -> list[str]:
        """
        With ``--diagnostics``, a figure of the training diagnostics per env that has kept logs
        (:func:`diagnostics_figure`); nothing without it.
        """
        args, selection = self.args, self.selection
        if not args.diagnostics:
            return []
        lines = ["## Training diagnostics", ""]
        for env in selection.envs:
            name = f"diagnostics_{env}.png"
            if diagnostics_figure(selection.runs, env, selection.variants, args.figures / name, args.diagnostic_keys):
                lines += [f"![{env} diagnostics]({self.link(name)})", ""]
        return lines

    def focus_section(self) -> list[str]:
        """
        The envs where ``--focus``'s mean over seeds is not above the baseline's, of the final return and of the
        return over training; nothing unless both variants have runs and differ.
        """
        focus, baseline, selection = self.args.focus, self.args.baseline, self.selection
        if not (focus in selection.variants and baseline in selection.variants and focus != baseline):
            return []
        lines = [
            f"## Where {focus} does not beat {baseline}",
            "",
            f"Envs where {focus}'s mean (over seeds) is not above {baseline}'s, in raw returns:",
            "",
        ]
        for key, label in (("final", "final return"), ("auc", "return over training")):
            behind = []
            for env in selection.envs:
                reset_rows, baseline_rows = selection.seeds(env, focus), selection.seeds(env, baseline)
                if reset_rows and baseline_rows:
                    reset_mean = np.mean([r[key] for r in reset_rows])
                    baseline_mean = np.mean([r[key] for r in baseline_rows])
                    if reset_mean <= baseline_mean:
                        behind.append(f"{env} ({reset_mean:.3f} vs {baseline_mean:.3f})")
            lines.append(f"- {label}: {', '.join(behind) if behind else 'none'}")
        lines.append("")
        return lines

    def learning_curves_section(self) -> list[str]:
        """Draw the learning curves (``learning_curves.png`` in ``--figures``) and link them."""
        selection, name = self.selection, "learning_curves.png"
        learning_curves(selection.runs, selection.envs, self.args.figures / name, selection.variants)
        return ["## Learning curves (mean +- std over seeds)", "", f"![learning curves]({self.link(name)})", ""]


def main(argv: list[str] | None = None) -> None:
    """
    Write the report of the runs the command line selects.

    :param argv: the arguments (default: the command line's)
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    for grid in args.grid:
        rundata.ensure(grid)  # a stored study's folder, unpacked from its tables where needed
    args.figures = args.figures or args.out.parent / "figures"
    args.figures.mkdir(parents=True, exist_ok=True)
    report = Report(args, select_runs(args, parser))
    lines = report.header_lines(argv)
    lines += report.aggregate_sections()
    lines += report.left_out_lines()
    lines += report.difference_sections()
    lines += report.per_env_sections()
    lines += report.collapse_section()
    lines += report.diagnostics_section()
    lines += report.focus_section()
    lines += report.learning_curves_section()
    args.out.write_text("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps(report.summary, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
