"""
Report of the benchmark grid (``run_grid.py``): rliable aggregates, per-env tables, learning curves.

Reads every finished run's ``evaluations.npz`` (written by the RL Zoo), normalises each env's final
return to ``(score - random) / (reference - random)``, and writes ``benchmarks/RESULTS.md`` with: IQM and
mean of the normalised final return with 95% stratified-bootstrap confidence intervals per variant,
the probability of improvement of each variant over the mask baseline, per-env tables (mean +- std,
timesteps, wall time), and PNGs of the learning curves and rliable's aggregate plots.

For another study in the same layout, name its variants and baseline, e.g. the fresh-memory study
(``benchmarks/PROTOCOL_fresh_memory.md``; its primary endpoint is the mean of the last 2 of 20 evaluations):
``--grid benchmarks/results/fresh_memory --variants fm_off fm_refresh fm_burn8 fm_burn16 fm_refresh_burn8
--baseline fm_off --final-evaluations 2 --min-seeds 10 --out ... --figures ...``.

Usage: python benchmarks/report.py [--grid benchmarks/results/grid] [--out benchmarks/RESULTS.md]
"""

import argparse
import json
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import yaml
from rliable import library as rly
from rliable import metrics, plot_utils

HERE = Path(__file__).resolve().parent
VARIANT_ORDER = ["reset", "reset_importance", "mask", "mask_kept", "ppo_lstm"]
BASELINE = "mask"
# Reference (best) returns used for normalisation; random returns are measured by the report itself
sys.path.insert(0, str(HERE))
import run_grid  # noqa: E402  (benchmarks/run_grid.py)
import training_log  # noqa: E402  (benchmarks/training_log.py)

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


def random_return(env_id: str, episodes: int = 500, seed: int = 0) -> float:
    import rl_zoo3.import_envs  # noqa: F401  (NoVel envs)

    from sb3_reset_ppo.envs import random_policy_return

    return random_policy_return(env_id, episodes, seed)


class _ZooYamlLoader(yaml.SafeLoader):
    """A safe loader that reads the zoo's saved ``config.yml``/``args.yml`` (an ``OrderedDict`` tag) as a dict."""


_ZooYamlLoader.add_constructor(
    "tag:yaml.org,2002:python/object/apply:collections.OrderedDict",
    lambda loader, node: dict(loader.construct_sequence(node, deep=True)[0]),  # type: ignore[arg-type]
)


def run_budget(run_dir: Path) -> float | None:
    """
    The env steps a run was asked for: the zoo's ``-n`` (its saved ``args.yml``) if given, else ``n_timesteps`` of
    its saved ``config.yml``; None when neither is there.
    """
    for name in ("args.yml", "config.yml"):
        saved = next(run_dir.glob(f"*/*/*/{name}"), None)
        if saved is None:
            continue
        steps = yaml.load(saved.read_text(), Loader=_ZooYamlLoader).get("n_timesteps")
        if steps is not None and float(steps) > 0:
            return float(steps)
    return None


def load_runs(grid: Path, final_evaluations: int = 1) -> list[dict[str, Any]]:
    """
    Finished runs with their evaluations; ``final`` is the mean of the last ``final_evaluations`` evaluations.
    Only evaluations at or before the run's budget count: the zoo finishes whole rollouts, so a run whose
    ``n_steps * n_envs`` does not divide its budget (a tuned trial's settings) trains, and evaluates, past it.
    """
    runs = []
    for run_file in sorted(grid.glob("*/*/seed*/run.json")):
        run = json.loads(run_file.read_text())
        evaluations = next(run_file.parent.glob("*/*/evaluations.npz"), None)
        if evaluations is None:
            continue
        data = np.load(evaluations)
        budget = run_budget(run_file.parent)
        within = np.ones(len(data["timesteps"]), dtype=bool) if budget is None else data["timesteps"] <= budget
        run["budget"] = budget
        run["timesteps"] = data["timesteps"][within]
        # (n_evaluations, n_episodes) -> (n_evaluations,)
        run["eval_mean"] = data["results"][within].mean(axis=1)
        run["final"] = float(run["eval_mean"][-final_evaluations:].mean())
        run["auc"] = float(run["eval_mean"].mean())
        run["dir"] = run_file.parent
        runs.append(run)
    return runs


def load_failed(grid: Path) -> list[dict[str, Any]]:
    """
    The runs whose trainer exited with an error (``failed.json``, written by ``run_grid.py``; a later successful
    attempt, which writes ``run.json``, replaces them), as ``variant``, ``env``, ``seed`` and ``reason``.
    """
    failed = []
    for failed_file in sorted(grid.glob("*/*/seed*/failed.json")):
        if (failed_file.parent / "run.json").exists():
            continue
        run = json.loads(failed_file.read_text())
        failed.append(
            {
                "variant": run["variant"], "env": run["env"], "seed": int(run["seed"]),
                "reason": f"exit code {run['returncode']}",
            }
        )  # fmt: skip
    return failed


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
        {
            "variant": run["variant"], "env": run["env"], "seed": int(run["seed"]),
            "reason": f"{len(run['eval_mean'])} evaluations within its budget, not {expected}",
        }
        for run in runs
        if len(run["eval_mean"]) != expected
    ]  # fmt: skip
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
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def aggregate(score_dict: dict[str, np.ndarray], reps: int, baseline: str = BASELINE) -> tuple[dict, dict, dict, dict]:
    def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])

    # A fixed bootstrap seed, so the same runs give the same RESULTS.md. rliable 1.2's StratifiedBootstrap
    # draws from numpy's global generator (its random_state argument is not used for the resampling).
    np.random.seed(0)  # noqa: NPY002  (rliable samples from the global generator)
    point, interval = rly.get_interval_estimates(score_dict, iqm_and_mean, reps=reps)
    # rliable's plot expects "x,y" keys
    pairs = {f"{v},{baseline}": (score_dict[v], score_dict[baseline]) for v in score_dict if v != baseline}
    poi, poi_ci = rly.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps) if pairs else ({}, {})
    return point, interval, poi, poi_ci


def probability_triple(poi: dict, poi_ci: dict, pair: str) -> list[float]:
    """``[P, low, high]`` for one pair of rliable's probability-of-improvement estimates."""
    # rliable returns a scalar (or shape (1,)) estimate and a (2,) or (2, 1) interval
    low, high = np.asarray(poi_ci[pair]).reshape(-1)[:2]
    return [float(np.asarray(poi[pair]).reshape(-1)[0]), float(low), float(high)]


def probability_text(poi: dict, poi_ci: dict, pair: str) -> str:
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


def difference_tests(
    runs: list[dict[str, Any]], envs: list[str], variants: list[str], baseline: str, key: str, reps: int
) -> list[dict[str, Any]]:
    """
    Per env, each variant's mean minus the baseline's (raw returns), a 95% bootstrap interval (resampling seeds
    within each arm), Welch's t-test p-value and its Holm adjustment over the whole table.
    """
    from scipy.stats import ttest_ind

    generator = np.random.default_rng(0)
    rows = []
    for env in envs:
        base = np.array([r[key] for r in runs if r["env"] == env and r["variant"] == baseline])
        for v in variants:
            other = np.array([r[key] for r in runs if r["env"] == env and r["variant"] == v])
            if v == baseline or len(base) < 2 or len(other) < 2:
                continue
            boot = [generator.choice(other, len(other)).mean() - generator.choice(base, len(base)).mean() for _ in range(reps)]
            low, high = np.percentile(boot, [2.5, 97.5])
            p = float(ttest_ind(other, base, equal_var=False).pvalue)
            rows.append((env, v, other.mean() - base.mean(), low, high, p))
    # An undefined p (both arms constant and equal: no difference to test) stays in the family as 1.0, and is
    # stored as None ("undefined" in the table)
    adjusted = holm([1.0 if np.isnan(row[5]) else row[5] for row in rows])
    return [
        {
            "env": env, "variant": v, "difference": [float(diff), float(low), float(high)],
            "p": None if np.isnan(p) else p, "p_holm": p_holm,
        }
        for (env, v, diff, low, high, p), p_holm in zip(rows, adjusted, strict=True)
    ]  # fmt: skip


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


def interval_triple(point: float, low: float, high: float) -> list[float]:
    """``[point, low, high]`` as plain floats (the JSON summary's form of an estimate with its interval)."""
    return [float(point), float(low), float(high)]


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
    figure.tight_layout()
    figure.savefig(path, dpi=100)


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
            used.setdefault(name, set()).add(run["variant"])
    return ", ".join(f"`{name}` ({', '.join(sorted(variants))})" for name, variants in sorted(used.items())) or "unknown"


def versions() -> str:
    names = ["torch", "stable-baselines3", "sb3-contrib", "gymnasium", "rl_zoo3", "rliable", "numpy", "sb3-reset-ppo"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def machine_name(spec: dict[str, Any]) -> str:
    """A machine as ``run_grid.machine`` describes it: ``CPU, N cores (extensions)``."""
    return f"{spec['cpu']}, {spec['cores']} cores" + (f" ({' '.join(spec['extensions'])})" if spec["extensions"] else "")


def machines(runs: list[dict[str, Any]]) -> str:
    """The machines the runs trained on, as ``run_grid.py`` records them, with their number of runs."""
    counts: dict[str, int] = {}
    for run in runs:
        spec = run.get("machine")
        name = machine_name(spec) if spec else "not recorded (runs made before run.json recorded the machine)"
        counts[name] = counts.get(name, 0) + 1
    return "; ".join(
        f"{name}: {count} run{'s' if count != 1 else ''}" for name, count in sorted(counts.items(), key=lambda item: -item[1])
    )


def hardware() -> str:
    """The machine this report runs on."""
    system = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
    return f"{machine_name(run_grid.machine())}, {system}, no GPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=Path, nargs="+", default=[HERE / "results" / "grid"],
                        help="results folders (several: the runs of all, e.g. two studies' arms)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--figures", type=Path, default=HERE / "figures")
    parser.add_argument(
        "--min-seeds", type=int, default=5, help="seeds every variant needs for an env to enter the aggregates"
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the aggregates use seeds first_seed .. first_seed + min_seeds - 1 (an env enters only with all of them)",
    )
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
    args = parser.parse_args()
    args.figures.mkdir(parents=True, exist_ok=True)
    baseline = args.baseline

    def link(name: str) -> str:
        """A figure's path as the report links it: relative to the report's folder."""
        return os.path.relpath(args.figures / name, args.out.parent)

    def wanted(run: dict[str, Any]) -> bool:
        return run["variant"] in args.variants and (args.envs is None or run["env"] in args.envs)

    runs = [r for grid in args.grid for r in load_runs(grid, args.final_evaluations) if wanted(r)]
    failed = [f for grid in args.grid for f in load_failed(grid) if wanted(f)]
    failed += [
        {"variant": r["variant"], "env": r["env"], "seed": int(r["seed"]), "reason": f"exit code {r['returncode']}"}
        for r in runs
        if r["returncode"] != 0
    ]
    runs, wrong = check_evaluations([r for r in runs if r["returncode"] == 0], args.evaluations)
    failed = sorted(failed + wrong, key=lambda f: (f["variant"], f["env"], f["seed"]))
    if not runs:
        parser.error(f"no finished run of --variants {' '.join(args.variants)} in --grid {' '.join(map(str, args.grid))}")
    aggregate_seeds = list(range(args.first_seed, args.first_seed + args.min_seeds))
    envs = [env for env in REFERENCE_RETURN if any(r["env"] == env for r in runs)]
    variants = [v for v in args.variants if any(r["variant"] == v for r in runs)]
    randoms = {env: random_return(env) for env in envs}

    def seeds(env: str, variant: str) -> list[dict[str, Any]]:
        return sorted((r for r in runs if r["env"] == env and r["variant"] == variant), key=lambda r: r["seed"])

    def aggregate_runs(env: str, variant: str) -> list[dict[str, Any]]:
        """The runs of the aggregate seeds (a missing seed is not replaced by another)."""
        return [r for r in seeds(env, variant) if r["seed"] in aggregate_seeds]

    complete = [env for env in envs if all(len(aggregate_runs(env, v)) == args.min_seeds for v in variants)]
    lines = [
        f"# {args.title}",
        "",
        "Measured by `benchmarks/run_grid.py` (runs through the RL Zoo) and summarised by `benchmarks/report.py`.",
        "Results are what was measured; nothing is tuned per variant beyond the hyperparameter files.",
        "",
        "- Command (grid): `"
        + (
            args.grid_command
            or f"python benchmarks/run_grid.py --envs {' '.join(envs)} --variants {' '.join(variants)} "
            f"--seeds {args.min_seeds}"
        )
        + "`",
        "- Command (report): `python " + shlex.join(["benchmarks/report.py", *sys.argv[1:]]) + "`",
        f"- Hardware (this report): {hardware()}",
        f"- Machines (the runs): {machines(runs)}",
        f"- Packages: {versions()}",
        "- Hyperparameters: " + conf_files(runs) + ".",
        "- Runs: two at a time on the 2 cores (one torch thread each); wall time includes the evaluations.",
        f"- Score: mean return of the last {args.final_evaluations} evaluation(s) at or before the run's budget (20 "
        "episodes each; deterministic policy, except on MiniGrid envs, which the RL Zoo evaluates with a stochastic "
        "one), normalised per env to",
        "  `(score - random) / (reference - random)` with the random policy's return measured here.",
        "",
    ]
    for notes in args.notes:
        lines += [notes.read_text().strip(), ""]
    # Estimates as [point, low, high] (95% intervals), for --json
    summary: dict[str, Any] = {
        "baseline": baseline,
        "variants": variants,
        "final_evaluations": args.final_evaluations,
        "evaluations": args.evaluations,
        "reps": args.reps,
        "bootstrap_seed": 0,
        "failed": failed,
        "aggregate": {},
        "groups": {},
        "differences": {},
        "wall_time": {},
    }
    if complete and baseline in variants:

        def normalised(key: str, group: list[str] = complete) -> dict[str, np.ndarray]:
            # (n_envs, n_seeds) -> (n_seeds, n_envs) normalised scores per variant
            return {
                v: np.array(
                    [
                        [(r[key] - randoms[env]) / (REFERENCE_RETURN[env] - randoms[env]) for r in aggregate_runs(env, v)]
                        for env in group
                    ]
                ).T
                for v in variants
            }

        for key, title, name in (
            (
                "final",
                "final normalised return ("
                + (
                    "last evaluation"
                    if args.final_evaluations == 1
                    else f"mean of the last {args.final_evaluations} evaluations"
                )
                + ")",
                "aggregate",
            ),
            (
                "auc",
                "normalised return averaged over all evaluations of a run (area under the learning curve)",
                "aggregate_auc",
            ),
        ):
            point, interval, poi, poi_ci = aggregate(normalised(key), args.reps, baseline)
            summary["aggregate"][key] = {
                "envs": complete,
                "seeds": aggregate_seeds,
                "iqm": {v: interval_triple(point[v][0], *interval[v][:, 0]) for v in variants},
                "mean": {v: interval_triple(point[v][1], *interval[v][:, 1]) for v in variants},
                "probability_of_improvement": {pair.split(",")[0]: probability_triple(poi, poi_ci, pair) for pair in poi},
            }
            lines += [
                f"## Aggregate: {title}",
                "",
                f"Over {len(complete)} envs ({', '.join(complete)}), seeds {aggregate_seeds[0]} to {aggregate_seeds[-1]} "
                "of each.",
                "",
                "| variant | IQM (95% CI) | mean (95% CI) |",
                "|---|---|---|",
            ]
            for v in variants:
                iqm, mean = point[v]
                lines.append(
                    f"| {v} | {iqm:.3f} ({interval[v][0, 0]:.3f} to {interval[v][1, 0]:.3f}) "
                    f"| {mean:.3f} ({interval[v][0, 1]:.3f} to {interval[v][1, 1]:.3f}) |"
                )
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
            figure.savefig(args.figures / f"{name}.png", dpi=100, bbox_inches="tight")
            lines += ["", f"![{name}]({link(name + '.png')})", ""]
            if poi:
                axes = plot_utils.plot_probability_of_improvement(poi, poi_ci)
                axes.figure.savefig(args.figures / f"{name}_probability_of_improvement.png", dpi=100, bbox_inches="tight")
                lines += [f"![probability of improvement]({link(name + '_probability_of_improvement.png')})", ""]
        lines += [
            "## Aggregate by group of envs",
            "",
            f"The same estimates within each group (IQM with 95% CI; P(> {baseline}) with 95% CI).",
            "",
            f"| group | variant | final IQM | final P(> {baseline}) | over training IQM | over training P(> {baseline}) |",
            "|---|---|---|---|---|---|",
        ]
        for group_name, group_envs in GROUPS.items():
            group = [env for env in complete if env in group_envs]
            if not group:
                continue
            cells: dict[str, list[str]] = {v: [] for v in variants}
            for key in ("final", "auc"):
                point, interval, poi, poi_ci = aggregate(normalised(key, group), args.reps, baseline)
                summary["groups"].setdefault(group_name, {"envs": group})[key] = {
                    "iqm": {v: interval_triple(point[v][0], *interval[v][:, 0]) for v in variants},
                    "probability_of_improvement": {pair.split(",")[0]: probability_triple(poi, poi_ci, pair) for pair in poi},
                }
                for v in variants:
                    cells[v].append(f"{point[v][0]:.3f} ({interval[v][0, 0]:.3f} to {interval[v][1, 0]:.3f})")
                    pair = f"{v},{baseline}"
                    cells[v].append(probability_text(poi, poi_ci, pair) if pair in poi else "-")
            for v in variants:
                lines.append(f"| {group_name} ({len(group)} envs) | {v} | " + " | ".join(cells[v]) + " |")
        lines.append("")
    else:
        lines += ["No env has every variant with enough seeds yet: no aggregate.", ""]
    missing = [env for env in (args.envs or REFERENCE_RETURN) if env not in complete]
    if missing:
        lines += [
            f"Not in the aggregate (not run, or not every variant with seeds {aggregate_seeds[0]} to "
            f"{aggregate_seeds[-1]}): {', '.join(missing)}.",
            "",
        ]
    if failed:
        lines += [
            f"Failed runs (left out everywhere; an env with a failed run among seeds {aggregate_seeds[0]} to "
            f"{aggregate_seeds[-1]} leaves the aggregates): {failed_text(failed)}.",
            "",
        ]

    for key, label in (("final", "final return"), ("auc", "return over training")):
        differences = difference_tests(runs, envs, variants, baseline, key, args.reps)
        summary["differences"][key] = differences
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
    lines += ["## Per env", ""]
    for env in envs:
        lines += [
            f"### {env} (random {randoms[env]:.2f}, reference {REFERENCE_RETURN[env]:g})",
            "",
            "| variant | seeds | final return (mean +- std) | return over training (mean +- std) | timesteps "
            f"| wall time per run (s) | wall time / {baseline}'s, side-by-side pairs: median ratio (pairs) |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in variants:
            rows = seeds(env, v)
            if not rows:
                continue
            finals = np.array([r["final"] for r in rows])
            aucs = np.array([r["auc"] for r in rows])
            seconds = np.mean([r["seconds"] for r in rows])
            reused = sum("reused_from" in r for r in rows)
            ratio, pairs = paired_time_ratio(rows, seeds(env, baseline))
            # Only runs that trained side by side (one session, one machine) give a ratio: means over runs of
            # different sessions mix machines of different speeds (reused runs were timed by another study)
            summary["wall_time"].setdefault(env, {})[v] = {
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
        if any("reused_from" in r for r in runs if r["env"] == env):
            lines += ["Reused runs keep the wall time of the study that ran them.", ""]
    lines += [
        "## Collapses",
        "",
        f"Runs that solved the env (an evaluation at or above {SOLVED_AT} normalised) and, of their evaluations after "
        f"the first solved one, the share below {COLLAPSE_BELOW} normalised (all seeds).",
        "",
        "| env | variant | runs that solved | later evaluations below threshold |",
        "|---|---|---|---|",
    ]
    for env in envs:
        for v in variants:
            rows = seeds(env, v)
            if not rows:
                continue
            stats = [collapse_stats(r["eval_mean"], randoms[env], REFERENCE_RETURN[env]) for r in rows]
            solved = sum(s[0] for s in stats)
            below, after = sum(s[1] for s in stats), sum(s[2] for s in stats)
            share = f"{below} of {after} ({below / after:.0%})" if after else "-"
            lines.append(f"| {env} | {v} | {solved} of {len(rows)} | {share} |")
    lines.append("")
    if args.diagnostics:
        lines += ["## Training diagnostics", ""]
        for env in envs:
            name = f"diagnostics_{env}.png"
            if diagnostics_figure(runs, env, variants, args.figures / name, args.diagnostic_keys):
                lines += [f"![{env} diagnostics]({link(name)})", ""]
    focus = args.focus
    if focus in variants and baseline in variants and focus != baseline:
        lines += [
            f"## Where {focus} does not beat {baseline}",
            "",
            f"Envs where {focus}'s mean (over seeds) is not above {baseline}'s, in raw returns:",
            "",
        ]
        for key, label in (("final", "final return"), ("auc", "return over training")):
            behind = []
            for env in envs:
                reset_rows, baseline_rows = seeds(env, focus), seeds(env, baseline)
                if reset_rows and baseline_rows:
                    reset_mean = np.mean([r[key] for r in reset_rows])
                    baseline_mean = np.mean([r[key] for r in baseline_rows])
                    if reset_mean <= baseline_mean:
                        behind.append(f"{env} ({reset_mean:.3f} vs {baseline_mean:.3f})")
            lines.append(f"- {label}: {', '.join(behind) if behind else 'none'}")
        lines.append("")
    learning_curves(runs, envs, args.figures / "learning_curves.png", variants)
    lines += ["## Learning curves (mean +- std over seeds)", "", f"![learning curves]({link('learning_curves.png')})", ""]
    args.out.write_text("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
