"""
Report of the coverage study (``benchmarks/PROTOCOL_coverage.md``): the port case and the grid so far.

Port case (``benchmarks/results/coverage/port``, written by ``port_case.py``): per arm, the final and over-training
endpoints against RecurrentPPO (difference of means with a 95% bootstrap interval, Welch's p), ``learn()`` seconds
and their same-seed ratio to RecurrentPPO, the equal-wall-clock comparisons at each arm's and at RecurrentPPO's
finishing time, and two figures (normalised return against env steps and against ``learn()`` seconds).

Grid (``benchmarks/results/coverage`` with the reused ``ev_reset`` and ``ev_rppo`` runs of
``benchmarks/results/evidence``): the runs finished so far per arm and env, the reuse check of the re-trained timing
seeds, and the side-by-side timing pairs. The aggregates and the decision follow when the grid is complete.

Writes ``benchmarks/RESULTS_coverage.md``, ``benchmarks/results/coverage_summary.json`` and figures in
``benchmarks/figures_coverage/``.

Usage: python benchmarks/coverage_report.py [--reps 2000] [--out benchmarks]
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import port_case  # noqa: E402  (benchmarks/port_case.py)
import report  # noqa: E402  (benchmarks/report.py)
import run_grid  # noqa: E402  (benchmarks/run_grid.py)

PORT_ARMS = [arm for arm in port_case.ARMS if arm != "rppo"]
# The ResetPPO arms that may become the default (inside_rollout is descriptive only)
CANDIDATES = ["cv_inside16", "cv_full16", "cv_full64", "cv_batch", "cv_rollout"]
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


def score_at(times: np.ndarray, scores: np.ndarray, at: float, before_first: float = 0.0) -> float:
    """
    A run's score at a time: its last evaluation at or before ``at`` (``before_first`` before its first
    evaluation: the random policy's normalised score, 0).

    :param times: time of each evaluation (ascending)
    :param scores: score of each evaluation
    :param at: the time asked for
    :param before_first: the score before any evaluation
    """
    index = int(np.searchsorted(times, at, side="right")) - 1
    return before_first if index < 0 else float(scores[index])


def run_score_at(run: dict[str, Any], at: float) -> float:
    """
    A port-case run's normalised score at ``at`` seconds of its ``learn()``: its final score once it has finished
    (it has stopped), else its last evaluation by then (:func:`score_at`).
    """
    if at >= run["learn_seconds"]:
        return float(run["final"])
    return score_at(run["times"], run["scores"], at)


def difference(
    arm: Sequence[float], base: Sequence[float], reps: int, generator: np.random.Generator
) -> dict[str, float | None]:
    """Mean of ``arm`` minus mean of ``base`` with a 95% bootstrap interval (seeds resampled per arm) and Welch's p."""
    from scipy.stats import ttest_ind

    a, b = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    boot = [generator.choice(a, len(a)).mean() - generator.choice(b, len(b)).mean() for _ in range(reps)]
    low, high = np.percentile(boot, [2.5, 97.5])
    p = float(ttest_ind(a, b, equal_var=False).pvalue) if len(a) > 1 and len(b) > 1 else float("nan")
    return {
        "difference": float(a.mean() - b.mean()),
        "low": float(low),
        "high": float(high),
        "p": None if np.isnan(p) else p,
    }


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
            entry["final_vs_rppo"] = difference(entry["final"], [r["final"] for r in base], reps, generator)
            entry["over_training_vs_rppo"] = difference(
                entry["over_training"], [r["over_training"] for r in base], reps, generator
            )
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
    folder.mkdir(parents=True, exist_ok=True)
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
        figure.tight_layout()
        path = folder / name
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


def interval_text(row: dict[str, Any], scale: float = 1.0) -> str:
    return (
        f"{scale * row['difference']:+.3f} ({scale * row['low']:+.3f} to {scale * row['high']:+.3f}), "
        f"p {'undefined' if row['p'] is None else format(row['p'], '.3f')}, {verdict(row)}"
    )


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
        '"n.s.": not significant. Command: `python benchmarks/port_case.py --workers 2`.',
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
        "![port case per env step](figures_coverage/port_steps.png)",
        "![port case per learn() second](figures_coverage/port_seconds.png)",
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
    own = report.load_runs(coverage, FINAL_EVALUATIONS) if coverage.exists() else []
    timing = [r for r in own if r["variant"] in run_grid.COVERAGE_TIMING_ONLY]
    runs = [r for r in own if r["variant"] not in run_grid.COVERAGE_TIMING_ONLY]
    for run in list(runs):
        for arm in run_grid.COVERAGE_ARMS:
            if arm != run["variant"] and run_grid.coverage_alias(arm, run["env"]) == run["variant"]:
                runs.append({**run, "variant": arm, "shared_with": run["variant"]})
    if evidence.exists():
        for run in report.load_runs(evidence, FINAL_EVALUATIONS):
            if run["variant"] in REUSED and int(run["seed"]) < 10 and run["env"] in run_grid.EVIDENCE_ENVS:
                runs.append({**run, "variant": REUSED[run["variant"]], "reused_from": run["variant"]})
    return runs, timing


def reuse_check(runs: list[dict[str, Any]], timing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each re-trained timing run against the reused run of the same arm, env and seed: bitwise-equal evaluations?"""
    reused = {(r["variant"], r["env"], int(r["seed"])): r for r in runs if "reused_from" in r}
    rows = []
    for run in timing:
        other = reused.get((run["variant"], run["env"], int(run["seed"])))
        if other is not None:
            equal = np.array_equal(run["eval_mean"], other["eval_mean"]) and np.array_equal(
                run["timesteps"], other["timesteps"]
            )
            rows.append({"variant": run["variant"], "env": run["env"], "seed": int(run["seed"]), "equal": bool(equal)})
    return rows


def overlap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Seconds two runs' time intervals overlap (``started`` and ``seconds`` of their ``run.json``)."""
    import datetime

    def interval(run: dict[str, Any]) -> tuple[float, float]:
        start = datetime.datetime.strptime(run["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
        return start, start + float(run["seconds"])

    (a0, a1), (b0, b1) = interval(a), interval(b)
    return max(0.0, min(a1, b1) - max(a0, b0))


def side_by_side_pairs(
    runs: list[dict[str, Any]], rppo_runs: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """
    (ResetPPO run, ``cv_rppo`` run) pairs of the same env and seed that trained on the same machine at the same commit
    with time intervals overlapping by at least half of the shorter (``PROTOCOL_coverage.md``, amendment 1).
    """
    pairs = []
    for run in runs:
        if "reused_from" in run or "shared_with" in run or "started" not in run:
            continue
        for other in rppo_runs:
            same = (
                other["env"] == run["env"]
                and int(other["seed"]) == int(run["seed"])
                and other.get("machine") == run.get("machine")
                and other.get("commit") == run.get("commit")
            )
            if same and overlap(run, other) >= 0.5 * min(float(run["seconds"]), float(other["seconds"])):
                pairs.append((run, other))
    return pairs


def grid_markdown(runs: list[dict[str, Any]], timing: list[dict[str, Any]], reuse: list[dict[str, Any]]) -> str:
    envs = run_grid.EVIDENCE_ENVS
    arms = [*CANDIDATES, "cv_rppo"]
    lines = [
        "## Grid (in progress)",
        "",
        "Finished runs per arm and env (seeds 0 to 9 each when complete; `cv_inside16` and `cv_rppo` are the evidence "
        "study's `ev_reset` and `ev_rppo`, arms whose settings coincide on an env share runs). The aggregates, the "
        "equal-wall-clock comparison and the decision follow when the grid is complete. Command: `python "
        "benchmarks/run_grid.py --study coverage --workers 2`.",
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
        lines.append(
            f"Reuse check: {equal} of {len(reuse)} re-trained timing runs have evaluations bitwise equal to the reused run"
            + ("." if equal == len(reuse) else ": " + ", ".join(
                f"{r['variant']} {r['env']} seed {r['seed']}" for r in reuse if not r["equal"]) + " differ.")
        )  # fmt: skip
    rppo = [t for t in timing if t["variant"] == "cv_rppo"]
    pairs = side_by_side_pairs([*runs, *[t for t in timing if t["variant"] != "cv_rppo"]], rppo)
    lines += [f"Side-by-side pairs with `cv_rppo` so far: {len(pairs)}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the report (results/ and figures below it)")
    parser.add_argument("--results", type=Path, default=HERE / "results", help="folder of the runs")
    args = parser.parse_args()
    random = report.random_return(port_case.ENV_ID)
    port_runs = load_port(args.results / "coverage" / "port")
    analysis = port_analysis(port_runs, random, args.reps)
    figures = port_figures(port_runs, args.out / "figures_coverage") if port_runs else []
    runs, timing = grid_runs(args.results / "coverage", args.results / "evidence")
    reuse = reuse_check(runs, timing)
    text = "\n".join(
        [
            "# Coverage study: full-coverage epochs and the window length (benchmarks/PROTOCOL_coverage.md)",
            "",
            "Generated by `python benchmarks/coverage_report.py`; the protocol fixed the question, arms, endpoints, "
            "statistics and decision rule before the runs.",
            "",
            port_markdown(analysis),
            grid_markdown(runs, timing, reuse),
        ]
    )
    (args.out / "RESULTS_coverage.md").write_text(text)
    summary = {"port": analysis, "reuse_check": reuse, "figures": [str(p.relative_to(args.out)) for p in figures]}
    (args.out / "results").mkdir(parents=True, exist_ok=True)
    (args.out / "results" / "coverage_summary.json").write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    main()
