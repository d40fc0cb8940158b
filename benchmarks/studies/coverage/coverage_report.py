"""
Report of the coverage study (``benchmarks/studies/coverage/PROTOCOL.md``): the port case and the grid so far.

Port case (``benchmarks/results/coverage/port``, written by ``port_case.py``): per arm, the final and over-training
endpoints against RecurrentPPO (difference of means with a 95% bootstrap interval, Welch's p), ``learn()`` seconds
and their same-seed ratio to RecurrentPPO, the equal-wall-clock comparisons at each arm's and at RecurrentPPO's
finishing time, and two figures (normalised return against env steps and against ``learn()`` seconds).

Grid (``benchmarks/results/coverage`` with the reused ``ev_reset`` and ``ev_rppo`` runs of
``benchmarks/results/evidence``): the runs finished so far per arm and env, the reuse check of the re-trained timing
seeds, and the side-by-side timing pairs. The aggregates and the decision follow when the grid is complete.

Writes ``benchmarks/studies/coverage/RESULTS.md``, ``benchmarks/results/coverage_summary.json`` and figures in
``benchmarks/studies/coverage/figures/``.

Usage: python benchmarks/studies/coverage/coverage_report.py [--reps 2000] [--out benchmarks]
"""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from benchmarks.kit import report, run_grid, rundata
from benchmarks.studies.coverage import port_case
from sb3_reset_ppo.experiments import runner, stats

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]

PORT_ARMS = [arm for arm in port_case.ARMS if arm != "rppo"]
# The ResetPPO arms that may become the default (inside_rollout is descriptive only)
CANDIDATES = ["cv_inside16", "cv_full16", "cv_full64", "cv_batch", "cv_rollout"]
# The grid's arms: the candidates and RecurrentPPO with the same settings
ARMS = [*CANDIDATES, "cv_rppo"]
# Reused runs of the evidence study: its arm -> the coverage arm they are
REUSED = {"ev_reset": "cv_inside16", "ev_rppo": "cv_rppo"}
FINAL_EVALUATIONS = 2


def load_port(folder: Path) -> list[dict[str, Any]]:
    """The port case's runs: each record of ``port_case.py`` with ``timesteps`` and raw ``eval_mean`` arrays."""
    runs = []
    for path in sorted(folder.glob("*/seed*.json")):
        run = json.loads(path.read_text())
        run["timesteps"] = np.array([e["timesteps"] for e in run["evaluations"]], dtype=float)
        # (n_evaluations, n_episodes) -> (n_evaluations,)
        run["eval_mean"] = np.array([np.mean(e["returns"]) for e in run["evaluations"]])
        runs.append(run)
    return runs


def normalise(values: np.ndarray | float, random: float, reference: float) -> np.ndarray:
    """``(return - random) / (reference - random)``."""
    return (np.asarray(values, dtype=float) - random) / (reference - random)


def run_score_at(run: dict[str, Any], at: float) -> float:
    """
    A port-case run's normalised score at ``at`` seconds of its ``learn()``, by the equal-wall-clock rule of every
    report (:func:`sb3_reset_ppo.experiments.stats.score_at_time`): its final score (the mean of its last
    ``FINAL_EVALUATIONS``) once it has stopped, else its last evaluation by then, 0 before its first.
    """
    return stats.score_at_time(run["times"], run["scores"], at, FINAL_EVALUATIONS, before_first=0.0)


def difference(
    arm: Sequence[float], base: Sequence[float], reps: int, generator: np.random.Generator
) -> dict[str, float | None]:
    """:func:`report.difference` (mean of ``arm`` minus mean of ``base``, 95% bootstrap interval, Welch's p) by name."""
    diff, low, high, p = report.difference(arm, base, reps, generator)
    return {"difference": diff, "low": low, "high": high, "p": None if np.isnan(p) else p}


def verdict(row: dict[str, float | None]) -> str:
    """ "better" / "worse" where the interval excludes 0, else "n.s."."""
    low, high = row["low"], row["high"]
    assert low is not None and high is not None
    return "better" if low > 0 else "worse" if high < 0 else "n.s."


def port_analysis(runs: list[dict[str, Any]], random: float, reps: int) -> dict[str, Any]:
    """The port case's endpoints, ratios and equal-wall-clock comparisons, per arm against RecurrentPPO."""
    reference = report.REFERENCE_RETURN[port_case.ENV_ID]
    generator = np.random.default_rng(0)
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        scores = normalise(run["eval_mean"], random, reference)
        run["scores"] = scores
        run["final"] = float(scores[-FINAL_EVALUATIONS:].mean())
        run["over_training"] = float(scores.mean())
        # A snapshot's time: learn() seconds times its share of the env steps (PROTOCOL_coverage.md, amendment 1)
        run["times"] = run["learn_seconds"] * run["timesteps"] / run["total_steps"]
        by_arm.setdefault(run["arm"], {})[int(run["seed"])] = run
    rppo = by_arm.get("rppo", {})
    result: dict[str, Any] = {"random_return": random, "reference_return": reference, "arms": {}}
    for arm in ["rppo", *PORT_ARMS]:
        own = by_arm.get(arm, {})
        if not own:
            continue
        seeds = sorted(own)
        entry: dict[str, Any] = {
            "seeds": seeds,
            "final_return": [float(own[s]["eval_mean"][-FINAL_EVALUATIONS:].mean()) for s in seeds],
            "final": [own[s]["final"] for s in seeds],
            "over_training": [own[s]["over_training"] for s in seeds],
            "learn_seconds": [own[s]["learn_seconds"] for s in seeds],
        }
        paired = [s for s in seeds if s in rppo]
        if arm != "rppo" and len(paired) >= 2 and len(rppo) >= 2:
            base = [rppo[s] for s in sorted(rppo)]
            for key in ("final", "over_training"):
                entry[f"{key}_vs_rppo"] = difference(entry[key], [r[key] for r in base], reps, generator)
            entry["learn_ratio"] = float(np.median([own[s]["learn_seconds"] / rppo[s]["learn_seconds"] for s in paired]))
            # Equal wall-clock, seed by seed (each seed's runs trained side by side): at this arm's finishing time
            # RecurrentPPO's score then against this arm's final; at RecurrentPPO's finishing time the reverse
            at_arm = [run_score_at(rppo[s], own[s]["learn_seconds"]) for s in paired]  # RecurrentPPO at the arm's finish
            own_at_rppo = [run_score_at(own[s], rppo[s]["learn_seconds"]) for s in paired]
            entry["at_arm_finish"] = difference([own[s]["final"] for s in paired], at_arm, reps, generator)
            entry["at_arm_finish"]["rppo_score"] = float(np.mean(at_arm))
            entry["at_rppo_finish"] = difference(own_at_rppo, [rppo[s]["final"] for s in paired], reps, generator)
        result["arms"][arm] = entry
    return result


def port_figures(runs: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Mean normalised return (with a band of one standard error) against env steps and against learn() seconds."""
    paths = []
    for axis, label, name in (("timesteps", "env steps", "port_steps.png"), ("times", "learn() seconds", "port_seconds.png")):
        figure, ax = plt.subplots(figsize=(6.5, 4))
        for arm in ["rppo", *PORT_ARMS]:
            own = [r for r in runs if r["arm"] == arm]
            if not own:
                continue
            x = np.mean([r[axis] for r in own], axis=0)
            y = np.array([r["scores"] for r in own])
            mean, error = y.mean(axis=0), y.std(axis=0, ddof=1) / np.sqrt(len(own)) if len(own) > 1 else 0 * y[0]
            ax.plot(x, mean, label=f"{'RecurrentPPO' if arm == 'rppo' else arm} ({len(own)} seeds)", marker=".")
            ax.fill_between(x, mean - error, mean + error, alpha=0.15)
        ax.set_xlabel(label + (" (mean over seeds of each snapshot's time)" if axis == "times" else ""))
        ax.set_ylabel("normalised return")
        ax.set_title(f"Port case: {port_case.ENV_ID}, RecurrentPPO's defaults")
        ax.legend(fontsize=7)
        report.save_figure(figure, folder / name, dpi=110)
        paths.append(folder / name)
    return paths


def interval_text(row: dict[str, Any]) -> str:
    p = "undefined" if row["p"] is None else format(row["p"], ".3f")
    return f"{row['difference']:+.3f} ({row['low']:+.3f} to {row['high']:+.3f}), p {p}, {verdict(row)}"


def port_markdown(analysis: dict[str, Any]) -> str:
    arms = analysis["arms"]
    lines = [
        "## Port case",
        "",
        f"sb3-contrib's documented use, {port_case.ENV_ID}, `MlpLstmPolicy`, {port_case.N_ENVS} envs, every argument at "
        f"its default (n_steps 128, batch_size 128, LSTM 256, 10 epochs), {port_case.TOTAL_STEPS:,} env steps, one "
        f"torch thread; 10 evaluations (every 2 rollouts) of {port_case.EVAL_EPISODES} deterministic episodes on a fresh "
        f"env. Normalised: random policy {analysis['random_return']:.1f}, optimum {analysis['reference_return']:.0f}. "
        "Differences are normalised scores against RecurrentPPO with a 95% bootstrap interval and Welch's p; "
        '"n.s.": not significant. Command: `python benchmarks/studies/coverage/port_case.py --workers 2`.',
        "",
        "| arm | seeds | final return (mean +- sd) | final - RecurrentPPO | over training - RecurrentPPO "
        "| `learn()` s (median) | ratio to RecurrentPPO |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, entry in arms.items():
        final = np.array(entry["final_return"])
        name = "RecurrentPPO" if arm == "rppo" else f"`{arm}`"
        spread = f"{final.mean():.0f} +- {final.std(ddof=1):.0f}" if len(final) > 1 else f"{final.mean():.0f}"
        seconds = f"{np.median(entry['learn_seconds']):.0f}"
        if arm == "rppo":
            lines.append(f"| {name} | {len(final)} | {spread} | | | {seconds} | 1 |")
            continue
        if "final_vs_rppo" not in entry:
            lines.append(f"| {name} | {len(final)} | {spread} | (too few seeds) | | {seconds} | |")
            continue
        lines.append(
            f"| {name} | {len(final)} | {spread} | {interval_text(entry['final_vs_rppo'])} "
            f"| {interval_text(entry['over_training_vs_rppo'])} | {seconds} | {entry['learn_ratio']:.2f} |"
        )
    lines += [
        "",
        "Equal wall-clock (seed by seed; a snapshot's time is the run's `learn()` seconds times its share of the env "
        "steps): at the arm's finishing time, its final score against RecurrentPPO's score then; at RecurrentPPO's "
        "finishing time, the arm's score then (its final: it has stopped) against RecurrentPPO's final.",
        "",
        "| arm | at the arm's finish: arm - RecurrentPPO | at RecurrentPPO's finish: arm - RecurrentPPO |",
        "|---|---|---|",
    ]
    for arm, entry in arms.items():
        if "at_arm_finish" in entry:
            lines.append(f"| `{arm}` | {interval_text(entry['at_arm_finish'])} | {interval_text(entry['at_rppo_finish'])} |")
    lines += [
        "",
        "![port case per env step](figures/port_steps.png)",
        "![port case per learn() second](figures/port_seconds.png)",
        "",
    ]
    return "\n".join(lines)


def grid_runs(coverage: Path, evidence: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    The grid's runs per arm: the coverage folder's (arms whose settings coincide on an env get the first arm's runs)
    and the reused evidence runs (``ev_reset`` as ``cv_inside16``, ``ev_rppo`` as ``cv_rppo``, seeds 0 to 9); and,
    separately, the coverage folder's re-trained timing runs of ``cv_inside16`` and ``cv_rppo``.

    :return: (runs for the endpoints, timing re-runs)
    """
    own = runner.load_runs(coverage, FINAL_EVALUATIONS) if coverage.exists() else []
    timing = [r for r in own if r["variant"] in run_grid.COVERAGE_TIMING_ONLY]
    runs = [r for r in own if r["variant"] not in run_grid.COVERAGE_TIMING_ONLY]
    for run in list(runs):
        for arm in run_grid.COVERAGE_ARMS:
            if arm != run["variant"] and run_grid.coverage_alias(arm, run["env"]) == run["variant"]:
                runs.append({**run, "variant": arm, "shared_with": run["variant"]})
    if evidence.exists():
        for run in runner.load_runs(evidence, FINAL_EVALUATIONS):
            if run["variant"] in REUSED and int(run["seed"]) < 10 and run["env"] in run_grid.EVIDENCE_ENVS:
                runs.append({**run, "variant": REUSED[run["variant"]], "reused_from": run["variant"]})
    return runs, timing


def load_pairs(folder: Path) -> list[dict[str, Any]]:
    """
    The finished runs of the timing pairs (``PROTOCOL_coverage.md``, amendment 4; ``timing_pairs.py``):
    ``<folder>/<arm>/<variant>/<env>/seed<k>/``, ``variant`` the arm or ``cv_rppo``.
    """
    if not folder.exists():
        return []
    return [
        run for arm in sorted(p for p in folder.iterdir() if p.is_dir()) for run in runner.load_runs(arm, FINAL_EVALUATIONS)
    ]


def reuse_check(runs: list[dict[str, Any]], timing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each re-trained timing run against the reused run of the same arm, env and seed: bitwise-equal evaluations?"""
    reused = {(r["variant"], r["env"], int(r["seed"])): r for r in runs if "reused_from" in r}
    rows = []
    for run in timing:
        other = reused.get((run["variant"], run["env"], int(run["seed"])))
        if other is not None:
            equal = all(np.array_equal(run[key], other[key]) for key in ("eval_mean", "timesteps"))
            rows.append(
                {
                    "variant": run["variant"], "env": run["env"], "seed": int(run["seed"]), "equal": bool(equal),
                    "final": [float(run["final"]), float(other["final"])], "auc": [float(run["auc"]), float(other["auc"])],
                }
            )  # fmt: skip
    return rows


def reuse_returns(reuse: list[dict[str, Any]], randoms: dict[str, float]) -> dict[str, dict[str, Any]]:
    """
    Whether the reused runs stand for this machine's: per arm and endpoint, the re-trained timing runs' normalised
    return minus the reused run's (same env and seed), over the pairs whose evaluations differ bitwise (a different
    floating-point path makes a run's learning take another course, so only the distribution can agree): the mean
    difference with a 95% bootstrap interval and the Wilcoxon signed-rank test's p.
    """
    from scipy.stats import wilcoxon

    generator = np.random.default_rng(0)
    result: dict[str, dict[str, Any]] = {}
    for arm in sorted({row["variant"] for row in reuse}):
        rows = [row for row in reuse if row["variant"] == arm and not row["equal"]]
        for key in ("final", "auc"):
            # Each row's [re-trained, reused] normalised returns
            normalised = [normalise(row[key], randoms[row["env"]], report.REFERENCE_RETURN[row["env"]]) for row in rows]
            differences = np.array([float(retrained - reused) for retrained, reused in normalised])
            if len(differences) < 2:
                continue
            boot = [generator.choice(differences, len(differences)).mean() for _ in range(2000)]
            low, high = np.percentile(boot, [2.5, 97.5])
            p = float(wilcoxon(differences).pvalue) if np.any(differences != 0) else 1.0
            result.setdefault(arm, {})[key] = {
                "pairs": len(differences), "difference": [float(differences.mean()), float(low), float(high)], "p": p,
            }  # fmt: skip
    return result


def load_disturbed(path: Path) -> list[tuple[float, float]]:
    """The periods when other work shared the machine with the grid (``PROTOCOL_coverage.md``, amendment 3)."""
    if not path.exists():
        return []
    return [(stats.timestamp(entry["from"]), stats.timestamp(entry["to"])) for entry in json.loads(path.read_text())]


def disturbed_run(run: dict[str, Any], periods: Sequence[tuple[float, float]]) -> bool:
    """Whether a run's interval overlaps one of ``periods``."""
    start, end = stats.run_interval(run)
    return any(start < to and frm < end for frm, to in periods)


def side_by_side_pairs(
    runs: list[dict[str, Any]], rppo_runs: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """
    (ResetPPO run, ``cv_rppo`` run) pairs of the same env and seed that trained on the same machine at the same commit
    with time intervals overlapping by at least half of the shorter (``PROTOCOL_coverage.md``, amendment 1;
    :func:`sb3_reset_ppo.experiments.stats.side_by_side`), reused runs and runs shared with another arm left out.
    """
    return stats.side_by_side([r for r in runs if "reused_from" not in r and "shared_with" not in r], rppo_runs)


def grid_markdown(
    runs: list[dict[str, Any]],
    timing: list[dict[str, Any]],
    reuse: list[dict[str, Any]],
    returns: dict[str, dict[str, Any]] | None = None,
    timings: tuple[int, list[tuple[str, str]]] | None = None,
) -> str:
    """
    The grid's progress: finished runs per arm and env, the timing re-runs, the reuse check, and ``timings`` =
    (the pairs counted for the timings: undisturbed and the timing pairs', the (arm, env) still without a timing).
    """
    envs, arms = run_grid.EVIDENCE_ENVS, ARMS
    done = complete(runs, arms, envs)
    later = "The aggregates, the equal-wall-clock comparison and the decision follow when the grid is complete. "
    lines = [
        "## Grid" if done else "## Grid (in progress)",
        "",
        "Finished runs per arm and env (seeds 0 to 9 each when complete; `cv_inside16` and `cv_rppo` are the evidence "
        f"study's `ev_reset` and `ev_rppo`, arms whose settings coincide on an env share runs). {'' if done else later}"
        "Command: `python benchmarks/kit/run_grid.py --study coverage --workers 2`.",
        "",
        "| env | " + " | ".join(f"`{arm}`" for arm in arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for env in envs:
        counts = [len({int(r["seed"]) for r in runs if r["env"] == env and r["variant"] == arm}) for arm in arms]
        lines.append(f"| {env} | " + " | ".join(str(c) for c in counts) + " |")
    lines += ["", f"Timing re-runs (`cv_inside16`, `cv_rppo`, seeds 0 and 1): {len(timing)} of 36 finished."]
    if reuse:
        equal = sum(row["equal"] for row in reuse)
        differ = [f"{r['variant']} {r['env']} seed {r['seed']}" for r in reuse if not r["equal"]]
        lines.append(
            f"Reuse check: {equal} of {len(reuse)} re-trained timing runs have evaluations bitwise equal to the reused run"
            + (f"; the other {len(differ)} differ: {', '.join(differ)}." if differ else ".")
        )
    for arm, endpoints in (returns or {}).items():
        parts = [
            f"{'final' if key == 'final' else 'over training'} {e['difference'][0]:+.3f} ({e['difference'][1]:+.3f} to "
            f"{e['difference'][2]:+.3f}, Wilcoxon p {e['p']:.2f})"
            for key, e in endpoints.items()
        ]
        pairs_count = next(iter(endpoints.values()))["pairs"]
        lines.append(
            f"Returns of the {pairs_count} `{arm}` re-runs that differ bitwise, minus the reused runs' (normalised, same "
            f"env and seed): " + "; ".join(parts) + "."
        )
    rppo = [t for t in timing if t["variant"] == "cv_rppo"]
    pairs = side_by_side_pairs([*runs, *[t for t in timing if t["variant"] != "cv_rppo"]], rppo)
    lines.append(f"Side-by-side pairs with `cv_rppo` in the grid so far: {len(pairs)}.")
    if timings is not None:
        counted, missing = timings
        without = ", ".join(f"`{arm}` {env}" for arm, env in missing) or "none"
        lines.append(
            f"Pairs counted for the timings (undisturbed grid pairs and the timing pairs of amendment 4, `python "
            f"benchmarks/studies/coverage/timing_pairs.py`): {counted}; (arm, env) still without one: {without}."
        )
    lines.append("")
    return "\n".join(lines)


# bench_train.py's variants of the candidates, and the port case's arm of each candidate
BENCH_VARIANTS = {
    "cv_inside16": "reset",
    "cv_full16": "reset_full16",
    "cv_full64": "reset_full64",
    "cv_batch": "reset_batch",
    "cv_rollout": "reset_rollout",
}
# With RecurrentPPO's defaults (n_steps = batch_size = 128) "rollout" is "batch": the port case runs it once
PORT_ARM_OF = {"cv_inside16": "cv_inside16", "cv_full16": "cv_full16", "cv_full64": "cv_full64", "cv_batch": "cv_batch",
               "cv_rollout": "cv_batch"}  # fmt: skip
SEEDS = range(10)


def complete(runs: list[dict[str, Any]], arms: Sequence[str], envs: Sequence[str]) -> bool:
    """Whether every (arm, env) has its seeds 0 to 9."""
    have = {(r["variant"], r["env"], int(r["seed"])) for r in runs}
    return all((arm, env, seed) in have for arm in arms for env in envs for seed in SEEDS)


def score_matrix(
    runs: list[dict[str, Any]], arm: str, envs: Sequence[str], value: Any, randoms: dict[str, float]
) -> np.ndarray:
    """Normalised ``value(run)`` of an arm, ``(seeds, envs)`` (seeds 0 to 9), as rliable takes it."""
    by_key = {(r["env"], int(r["seed"])): r for r in runs if r["variant"] == arm}
    return np.array(
        [
            [float(normalise(value(by_key[(env, seed)]), randoms[env], report.REFERENCE_RETURN[env])) for env in envs]
            for seed in SEEDS
        ]
    )


def seconds_per_step(
    runs: list[dict[str, Any]],
    timing: list[dict[str, Any]],
    disturbed: Sequence[tuple[float, float]] = (),
    pairs_runs: Sequence[dict[str, Any]] = (),
) -> tuple[dict[tuple[str, str], float], int]:
    """
    Seconds per env step of each (arm, env) from the side-by-side pairs (``PROTOCOL_coverage.md``, amendment 1): a
    ResetPPO arm's median over its paired runs, ``cv_rppo``'s over its runs with at least one pair. Pairs with a run
    in a ``disturbed`` period (amendment 3) are left out. ``pairs_runs``: the timing pairs' runs (amendment 4), paired
    by the same rule.

    :return: (arm, env) -> seconds per step, and the number of pairs
    """
    timed = [*timing, *pairs_runs]
    rppo = [t for t in timed if t["variant"] == "cv_rppo"]
    # (side_by_side_pairs leaves the reused runs and the runs shared with another arm out)
    others = [*runs, *[t for t in timed if t["variant"] != "cv_rppo"]]
    pairs = [
        (run, partner)
        for run, partner in side_by_side_pairs(others, rppo)
        if not (disturbed_run(run, disturbed) or disturbed_run(partner, disturbed))
    ]
    samples: dict[tuple[str, str], list[float]] = {}
    paired_rppo: dict[int, dict[str, Any]] = {}
    for run, partner in pairs:
        samples.setdefault((run["variant"], run["env"]), []).append(float(run["seconds"]) / float(run["timesteps"][-1]))
        paired_rppo[id(partner)] = partner
    for partner in paired_rppo.values():
        samples.setdefault(("cv_rppo", partner["env"]), []).append(float(partner["seconds"]) / float(partner["timesteps"][-1]))
    # Arms that share runs on an env share their timing
    for run in runs:
        if "shared_with" in run and (run["shared_with"], run["env"]) in samples:
            samples.setdefault((run["variant"], run["env"]), samples[(run["shared_with"], run["env"])])
    return {key: float(np.median(values)) for key, values in samples.items()}, len(pairs)


def trained_arms(env: str) -> list[str]:
    """The candidates that train their own runs on an env (arms with coinciding settings share the first's)."""
    return [arm for arm in CANDIDATES if run_grid.coverage_alias(arm, env) == arm]


def missing_timings(speed: dict[tuple[str, str], float]) -> list[tuple[str, str]]:
    """The (arm, env) of the candidates that train there and have no timing in ``speed`` (:func:`seconds_per_step`)."""
    return [(arm, env) for env in run_grid.EVIDENCE_ENVS for arm in trained_arms(env) if (arm, env) not in speed]


def probability_at_finish(
    runs: list[dict[str, Any]],
    arm: str,
    base: str,
    at: str,
    envs: Sequence[str],
    speed: dict[tuple[str, str], float],
    randoms: dict[str, float],
    reps: int,
) -> list[float] | None:
    """
    P(``arm`` > ``base``) with its 95% stratified-bootstrap interval, on the normalised scores of both at the time
    ``at`` finishes on each env (``"arm"``, ``"base"``, or per env the ``"faster"`` or the ``"slower"`` of the two),
    seed by seed, by the equal-wall-clock rule of every report (:func:`sb3_reset_ppo.experiments.stats.score_at_time`):
    a run that has stopped by then counts its final score (the mean of its last ``FINAL_EVALUATIONS``), one still
    training its last evaluation by then (0 before its first); None when an env lacks a timing.
    """
    if any((arm, env) not in speed or (base, env) not in speed for env in envs):
        return None
    scores = {arm: np.zeros((len(SEEDS), len(envs))), base: np.zeros((len(SEEDS), len(envs)))}
    for column, env in enumerate(envs):
        by_key = {(r["variant"], int(r["seed"])): r for r in runs if r["env"] == env and r["variant"] in (arm, base)}
        random, reference = randoms[env], report.REFERENCE_RETURN[env]
        faster = arm if speed[(arm, env)] <= speed[(base, env)] else base
        first = {"arm": arm, "base": base, "faster": faster, "slower": base if faster == arm else arm}[at]
        for row, seed in enumerate(SEEDS):
            finish = float(by_key[(first, seed)]["timesteps"][-1]) * speed[(first, env)]
            for name in (arm, base):
                run = by_key[(name, seed)]
                times = np.asarray(run["timesteps"], dtype=float) * speed[(name, env)]
                # Scored on the raw returns, then normalised (the random policy's return before the first evaluation)
                raw = stats.score_at_time(times, run["eval_mean"], finish, FINAL_EVALUATIONS, before_first=random)
                scores[name][row, column] = float(normalise(raw, random, reference))
    _, _, poi, poi_ci = stats.aggregate(scores, reps, baseline=base)
    return stats.probability_triple(poi, poi_ci, f"{arm},{base}")


def grid_analysis(
    runs: list[dict[str, Any]],
    timing: list[dict[str, Any]],
    randoms: dict[str, float],
    reps: int,
    disturbed: Sequence[tuple[float, float]] = (),
    pairs_runs: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """
    The protocol's grid statistics once the grid is complete: per endpoint (final, over training, equal wall-clock)
    the aggregate P(arm > cv_rppo) and P(arm > cv_inside16) with 95% stratified-bootstrap intervals and the IQMs;
    per-env differences against cv_rppo (Holm).
    """
    envs, arms = run_grid.EVIDENCE_ENVS, ARMS
    if not complete(runs, arms, envs):
        return {"complete": False}
    result: dict[str, Any] = {"complete": True, "endpoints": {}}
    for endpoint, value in (("final", lambda r: r["final"]), ("over_training", lambda r: r["auc"])):
        scores = {arm: score_matrix(runs, arm, envs, value, randoms) for arm in arms}
        entry: dict[str, Any] = {}
        for baseline in ("cv_rppo", "cv_inside16"):
            point, interval, poi, poi_ci = stats.aggregate(scores, reps, baseline=baseline)
            entry[f"vs_{baseline}"] = {
                arm: stats.probability_triple(poi, poi_ci, f"{arm},{baseline}") for arm in arms if arm != baseline
            }
            entry["iqm"] = {arm: stats.interval_triple(point[arm][0], *np.asarray(interval[arm])[:, 0]) for arm in arms}
        key = "final" if endpoint == "final" else "auc"
        # Arms that share another arm's runs on an env are left out there (their rows would repeat it in Holm's family)
        trained = [r for r in runs if "shared_with" not in r]
        entry["differences"] = report.difference_tests(trained, envs, CANDIDATES, "cv_rppo", key, reps)
        result["endpoints"][endpoint] = entry
    speed, n_pairs = seconds_per_step(runs, timing, disturbed, pairs_runs)
    result["pairs"] = n_pairs
    result["seconds_per_step"] = {f"{arm} {env}": value for (arm, env), value in speed.items()}

    def timed(base: str, at: str, arms: list[str]) -> dict[str, list[float]]:
        found = {arm: probability_at_finish(runs, arm, base, at, envs, speed, randoms, reps) for arm in arms}
        return {arm: triple for arm, triple in found.items() if triple is not None}

    # At the time the faster of the two finishes on each env
    result["equal_wall_clock_vs_cv_rppo"] = timed("cv_rppo", "faster", CANDIDATES)
    result["collapses"] = collapse_counts(runs, randoms)
    # The two moments: the ResetPPO arm's finishing time and RecurrentPPO's
    result["at_arm_finish_vs_cv_rppo"] = timed("cv_rppo", "arm", CANDIDATES)
    result["at_rppo_finish_vs_cv_rppo"] = timed("cv_rppo", "base", CANDIDATES)
    # Against the old defaults too: at the finishing time of the faster and of the slower of the two, per env
    inside = {at: timed("cv_inside16", at, CANDIDATES[1:]) for at in ("faster", "slower")}
    result["equal_wall_clock_vs_cv_inside16"] = {
        arm: {f"at_{at}_finish": inside[at][arm] for at in inside} for arm in inside["faster"]
    }
    return result


def bench_ratios(path: Path) -> dict[str, list[float]]:
    """Each candidate's learn() CPU-seconds ratio to RecurrentPPO in every setting of ``bench_train.py``'s JSON."""
    if not path.exists():
        return {}
    results = json.loads(path.read_text())["results"]
    return {
        arm: [float(r[variant]["learn_ratio"]) for r in results if variant in r and "learn_ratio" in r[variant]]
        for arm, variant in BENCH_VARIANTS.items()
    }


def decide(grid: dict[str, Any], port: dict[str, Any], ratios: dict[str, list[float]]) -> dict[str, Any]:
    """
    The protocol's decision rule, applied mechanically: which candidates qualify (conditions 1 to 3) and the new
    default; ``pending`` while the grid, the port case or the benchmark lacks data.
    """
    port_arms = port.get("arms", {})
    missing = [
        name
        for name, ok in (
            ("the grid", grid.get("complete", False)),
            ("the port case", all("final_vs_rppo" in port_arms.get(PORT_ARM_OF[a], {}) for a in CANDIDATES)),
            ("bench_train", all(ratios.get(a) for a in CANDIDATES)),
        )
        if not ok
    ]
    if missing:
        return {"pending": missing}
    rows = {}
    for arm in CANDIDATES:
        final = grid["endpoints"]["final"]["vs_cv_rppo"][arm]
        over = grid["endpoints"]["over_training"]["vs_cv_rppo"][arm]
        port_entry = port_arms[PORT_ARM_OF[arm]]
        conditions = {
            "1 per step (grid)": final[2] >= 0.5 and over[2] >= 0.5,
            "2 per step (port case)": port_entry["final_vs_rppo"]["high"] >= 0
            and port_entry["over_training_vs_rppo"]["high"] >= 0,
            "3 time": max(ratios[arm]) <= 0.5 and port_entry["learn_ratio"] <= 0.5,
        }
        rows[arm] = {"conditions": conditions, "qualifies": all(conditions.values()), "p_over_training": over[0]}
    qualifying = [arm for arm in CANDIDATES if rows[arm]["qualifies"]]
    chosen: str | None
    if qualifying:
        chosen, rule = max(qualifying, key=lambda arm: rows[arm]["p_over_training"]), "best over training among qualifying"
    else:
        at_time = grid.get("equal_wall_clock_vs_cv_rppo", {})
        chosen = max(at_time, key=lambda arm: at_time[arm][0]) if at_time else None
        rule = "none qualifies: best at the faster arm's finishing time"
    return {"candidates": rows, "default": chosen, "rule": rule}


def random_returns(envs: Sequence[str], cache: Path) -> dict[str, float]:
    """
    The random policy's mean return per env (``report.random_return``: 500 episodes, seed 0, deterministic), kept in
    ``cache`` (a JSON file) so that later reports do not measure it again.
    """
    known: dict[str, float] = json.loads(cache.read_text()) if cache.exists() else {}
    missing = [env for env in envs if env not in known]
    for env in missing:
        known[env] = float(report.random_return(env))
    if missing:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1, sort_keys=True))
    return {env: known[env] for env in envs}


def sharing_names(env: str) -> dict[str, list[str]]:
    """
    The arms (candidates and ``cv_rppo``) grouped by the runs they use on an env: each arm that trains its own runs
    there, with itself and the arms that share them (same resolved settings, :func:`run_grid.coverage_alias`).
    """
    names: dict[str, list[str]] = {}
    for arm in ARMS:
        names.setdefault(run_grid.coverage_alias(arm, env), []).append(arm)
    return names


def wall_clock_figure(
    runs: list[dict[str, Any]], speed: dict[tuple[str, str], float], randoms: dict[str, float], path: Path
) -> Path | None:
    """
    Mean normalised return against wall-clock seconds per env (each arm's evaluations at env steps times its
    seconds per step from the side-by-side pairs), for the (arm, env) pairs with a timing; None without any. Arms
    that share runs on an env (:func:`run_grid.coverage_alias`) are one curve labelled ``first = second``.
    """
    envs = [env for env in run_grid.EVIDENCE_ENVS if any((arm, env) in speed for arm in ARMS)]
    if not envs:
        return None
    columns = min(3, len(envs))
    rows = -(-len(envs) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.4 * rows), squeeze=False)
    for ax, env in zip(axes.flat, envs, strict=False):
        for arm, sharing in sharing_names(env).items():
            own = [r for r in runs if r["env"] == env and r["variant"] == arm]
            if (arm, env) not in speed or not own:
                continue
            length = min(len(r["eval_mean"]) for r in own)
            curve = np.mean(
                [normalise(r["eval_mean"][:length], randoms[env], report.REFERENCE_RETURN[env]) for r in own], axis=0
            )
            seconds = np.asarray(own[0]["timesteps"][:length], dtype=float) * speed[(arm, env)]
            label = " = ".join("RecurrentPPO" if name == "cv_rppo" else name for name in sharing)
            # One colour per arm on every panel (a shared curve takes its first arm's), RecurrentPPO black
            color = "black" if arm == "cv_rppo" else f"C{CANDIDATES.index(arm)}"
            ax.plot(seconds, curve, label=f"{label} ({len(own)})", marker=".", color=color)
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("wall-clock seconds (side-by-side timing)", fontsize=8)
        ax.set_ylabel("normalised return", fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    report.save_figure(figure, path, dpi=100)
    return path


def speed_table(seconds_per_step: dict[str, float]) -> list[str]:
    """
    Markdown lines: per env, each candidate's wall-clock seconds per env step over ``cv_rppo``'s (whole runs, with
    their evaluations; medians over side-by-side pairs, ``"<arm> <env>"`` keys as in the summary), "" without a
    timing.
    """
    if not seconds_per_step:
        return []
    lines = [
        "Wall-clock seconds per env step of whole runs (collection, training, evaluations) over `cv_rppo`'s, per env "
        "(medians over the side-by-side pairs):",
        "",
        "| env | " + " | ".join(f"`{arm}`" for arm in CANDIDATES) + " |",
        "|---|" + "---|" * len(CANDIDATES),
    ]
    for env in run_grid.EVIDENCE_ENVS:
        base = seconds_per_step.get(f"cv_rppo {env}")
        cells = [
            f"{seconds_per_step[f'{arm} {env}'] / base:.2f}" if base and f"{arm} {env}" in seconds_per_step else ""
            for arm in CANDIDATES
        ]
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def triple_text(triple: Sequence[float]) -> str:
    point, low, high = triple
    word = "better" if low > 0.5 else "worse" if high < 0.5 else "n.s."
    return f"{point:.2f} ({low:.2f} to {high:.2f}), {word}"


def aggregate_details(grid: dict[str, Any]) -> list[str]:
    """
    The complete grid's IQMs, P(arm > ``cv_inside16``) and per-env differences to ``cv_rppo`` (Holm over each
    table's rows) and collapses, as markdown lines.
    """
    final, over = grid["endpoints"]["final"], grid["endpoints"]["over_training"]
    lines = [
        "IQM of the normalised return over the 9 envs x 10 seeds (95% stratified-bootstrap interval), and "
        "P(arm > `cv_inside16`, the defaults before this study):",
        "",
        "| arm | IQM final | IQM over training | P(> `cv_inside16`) final | P(> `cv_inside16`) over training |",
        "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        versus = [triple_text(e["vs_cv_inside16"][arm]) if arm in e.get("vs_cv_inside16", {}) else "" for e in (final, over)]
        iqm = [f"{e['iqm'][arm][0]:.3f} ({e['iqm'][arm][1]:.3f} to {e['iqm'][arm][2]:.3f})" for e in (final, over)]
        lines.append(f"| `{arm}` | {iqm[0]} | {iqm[1]} | {versus[0]} | {versus[1]} |")
    for endpoint, entry in (("final", final), ("over training", over)):
        lines += [
            "",
            f"Per env, {endpoint}: arm minus `cv_rppo` (mean raw return, 95% bootstrap interval, Welch's p, Holm over "
            "the table's rows; an arm that shares another arm's runs on an env is that arm's row there)",
            "",
            "| env | arm | difference | p | p (Holm) |",
            "|---|---|---|---|---|",
        ]
        for row in entry["differences"]:
            diff, low, high = row["difference"]
            p = "undefined" if row["p"] is None else f"{row['p']:.3f}"
            lines.append(
                f"| {row['env']} | `{row['variant']}` | {diff:+.3f} ({low:+.3f} to {high:+.3f}) | {p} | {row['p_holm']:.3f} |"
            )
    versus_inside = grid.get("equal_wall_clock_vs_cv_inside16", {})
    if versus_inside:
        lines += [
            "",
            "At equal wall-clock time against `cv_inside16` (side-by-side timings): P(arm > `cv_inside16`) at the "
            "finishing time of the faster of the two (per env) and of the slower.",
            "",
            "| arm | at the faster one's finish | at the slower one's finish |",
            "|---|---|---|",
        ]
        for arm, moments in versus_inside.items():
            cells = [triple_text(moments[m]) if m in moments else "" for m in ("at_faster_finish", "at_slower_finish")]
            lines.append(f"| `{arm}` | {cells[0]} | {cells[1]} |")
    collapses = grid.get("collapses", {})
    if collapses:
        lines += [
            "",
            f"Collapses (as in the evidence study): runs that solved their env (an evaluation at or above "
            f"{report.SOLVED_AT} normalised) and, of their later evaluations, the share below {report.COLLAPSE_BELOW}.",
            "",
            "| arm | runs that solved | later evaluations below |",
            "|---|---|---|",
        ]
        for arm, (solved, runs, below, after) in collapses.items():
            share = f"{below} of {after} ({below / after:.0%})" if after else "-"
            lines.append(f"| `{arm}` | {solved} of {runs} | {share} |")
    lines.append("")
    return lines


def collapse_counts(runs: list[dict[str, Any]], randoms: dict[str, float]) -> dict[str, list[int]]:
    """Per arm (candidates and ``cv_rppo``): runs that solved, runs, later evaluations below the threshold, later ones."""
    result = {}
    for arm in ARMS:
        rows = [r for r in runs if r["variant"] == arm and r["env"] in randoms and int(r["seed"]) in SEEDS]
        stats_ = [report.collapse_stats(r["eval_mean"], randoms[r["env"]], report.REFERENCE_RETURN[r["env"]]) for r in rows]
        result[arm] = [sum(s[0] for s in stats_), len(rows), sum(s[1] for s in stats_), sum(s[2] for s in stats_)]
    return result


def analysis_markdown(grid: dict[str, Any], decision: dict[str, Any], ratios: dict[str, list[float]]) -> str:
    """The complete grid's aggregates and the decision (nothing while the grid is incomplete)."""
    lines = ["## Decision (the protocol's rule)", ""]
    if "pending" in decision:
        lines += [f"Pending: {', '.join(decision['pending'])} not complete yet.", ""]
    if grid.get("complete"):
        final, over = grid["endpoints"]["final"], grid["endpoints"]["over_training"]
        lines += [
            "## Grid aggregates (9 envs, seeds 0 to 9)",
            "",
            "Probability that the arm beats RecurrentPPO with the same settings (`cv_rppo`), 95% stratified-bootstrap "
            'interval; "better"/"worse" where the interval excludes 0.5.',
            "",
            "| arm | final | over training | at the faster arm's finishing time | at the arm's finishing time "
            "| at RecurrentPPO's finishing time |",
            "|---|---|---|---|---|---|",
        ]

        def timed(key: str, arm: str) -> str:
            values = grid.get(key, {})
            return triple_text(values[arm]) if arm in values else "(no timing)"

        for arm in CANDIDATES:
            lines.append(
                f"| `{arm}` | {triple_text(final['vs_cv_rppo'][arm])} | {triple_text(over['vs_cv_rppo'][arm])} "
                f"| {timed('equal_wall_clock_vs_cv_rppo', arm)} | {timed('at_arm_finish_vs_cv_rppo', arm)} "
                f"| {timed('at_rppo_finish_vs_cv_rppo', arm)} |"
            )
        lines += ["", f"Side-by-side pairs behind the timings: {grid.get('pairs', 0)}.", ""]
        lines += speed_table(grid.get("seconds_per_step", {}))
        lines += aggregate_details(grid)
    if ratios:
        lines += ["`learn()` CPU seconds over RecurrentPPO's (`bench_train.py`, every setting):", ""]
        lines += [f"- `{arm}`: {min(v):.2f} to {max(v):.2f}" for arm, v in ratios.items() if v]
        lines.append("")
    if "candidates" in decision:
        conditions = next(iter(decision["candidates"].values()))["conditions"]
        lines += ["| candidate | " + " | ".join(conditions) + " | qualifies |", "|---|" + "---|" * (len(conditions) + 1)]
        for arm, row in decision["candidates"].items():
            marks = " | ".join("yes" if ok else "no" for ok in row["conditions"].values())
            lines.append(f"| `{arm}` | {marks} | {'yes' if row['qualifies'] else 'no'} |")
        lines += ["", f"New default: `{decision['default']}` ({decision['rule']}).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the page and its figures/ (default: this study's)")
    parser.add_argument("--summaries", type=Path, default=BENCHMARKS / "results", help="folder of coverage_summary.json")
    parser.add_argument("--results", type=Path, default=BENCHMARKS / "results", help="folder of the runs")
    args = parser.parse_args(argv)
    rundata.ensure_all()  # the stored runs' folders, unpacked from their tables where needed
    random = report.random_return(port_case.ENV_ID)
    port_runs = load_port(args.results / "coverage" / "port")
    analysis = port_analysis(port_runs, random, args.reps)
    figures = port_figures(port_runs, args.out / "figures") if port_runs else []
    runs, timing = grid_runs(args.results / "coverage", args.results / "evidence")
    reuse = reuse_check(runs, timing)
    randoms = random_returns(run_grid.EVIDENCE_ENVS, args.results / "coverage" / "random_returns.json")
    disturbed = load_disturbed(args.results / "coverage" / "disturbed.json")
    pairs_runs = load_pairs(args.results / "coverage_pairs")
    # {"complete": False} while the grid is not
    grid = grid_analysis(runs, timing, randoms, args.reps, disturbed, pairs_runs)
    speed, n_pairs = seconds_per_step(runs, timing, disturbed, pairs_runs)
    wall_figure = wall_clock_figure(runs, speed, randoms, args.out / "figures" / "wall_clock.png")
    if wall_figure is not None:
        figures.append(wall_figure)
    ratios = bench_ratios(args.results / "coverage" / "bench" / "bench_train.json")
    decision = decide(grid, analysis, ratios)
    text = "\n".join(
        [
            "# Coverage study: full-coverage epochs and the window length (benchmarks/studies/coverage/PROTOCOL.md)",
            "",
            "Generated by `python benchmarks/studies/coverage/coverage_report.py`; the protocol fixed the question, arms, "
            "endpoints, statistics and decision rule before the runs.",
            "",
            port_markdown(analysis),
            grid_markdown(runs, timing, reuse, reuse_returns(reuse, randoms), (n_pairs, missing_timings(speed))),
            analysis_markdown(grid, decision, ratios),
            "![return against wall-clock seconds per env](figures/wall_clock.png)\n" if wall_figure else "",
        ]
    )
    (args.out / "RESULTS.md").write_text(text)
    summary = {
        "port": analysis, "grid": grid, "bench_ratios": ratios, "decision": decision, "reuse_check": reuse,
        "reuse_returns": reuse_returns(reuse, randoms),
        "figures": [str(p.relative_to(args.out)) for p in figures],
    }  # fmt: skip
    args.summaries.mkdir(parents=True, exist_ok=True)
    (args.summaries / "coverage_summary.json").write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    main()
