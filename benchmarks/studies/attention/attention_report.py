"""
The attention study's report (``PROTOCOL.md``, Endpoints and Statistics), from the runs stored so far.

Per task and arm: the IQM with its 95% stratified-bootstrap interval of the final return (the mean of the last 3 of
20 evaluations), of the return per env step (the mean over all 20 evaluations: the area under the learning curve),
of ``learn()``'s wall seconds (less the evaluations') and of the return at equal ``learn()`` time (each run stopped
when the task's fastest arm's median run ends). The attention arm against each other arm: the probability of
improvement with its interval and a two-sided Mann-Whitney test, Holm-adjusted within each family (final return: 3
comparisons x the tasks; return at equal time: the same); a difference is stated only where the adjusted p is below
0.05 and the probability's interval excludes 1/2, else "not significant". While a task and arm has fewer than the
protocol's 10 seeds the page says the study is incomplete, and neither the summary's status nor any comparison
states a verdict. Each arm's parameter count per task is built from the hyperparameter files (``timing.py``). The statistics
are ``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/attention/attention_report.py [--runs DIR] [--out DIR] [--summaries DIR] [--reps 2000]
(writes the results page ``RESULTS.md`` and ``figures/learning_curves.png`` into ``--out``, default this study's
folder, and ``attention_summary.json`` into ``--summaries``, default ``benchmarks/results/``; ``python
benchmarks/kit/studies.py report attention`` runs it and leads the page)
"""

from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from benchmarks.kit import rundata
from benchmarks.kit.report import (
    NO_VERDICT,
    estimate_or,
    holm_verdict,
    improvement_triple,
    iqm_triple,
    machines,
    save_figure,
)
from benchmarks.kit.study_report import ReportCommand
from benchmarks.studies.attention import attention_study as study
from benchmarks.studies.attention import timing
from sb3_reset_ppo.experiments import runner, stats

HERE = Path(__file__).resolve().parent
SUMMARY = "attention_summary.json"
BASE = "trxl"
NAMES = {
    "trxl": "ResetPPO, attention", "lstm": "ResetPPO, LSTM", "gru": "ResetPPO, GRU", "rppo": "RecurrentPPO",
}  # fmt: skip
# The final return: the mean of the last evaluations
FINAL_EVALUATIONS = 3
# What a task's returns mean (PROTOCOL.md, Tasks)
REFERENCES = {
    "ProofOfMemory-v0": (
        "optimum 1.2 on average, without memory -0.4; CleanRL's ppo_trxl reports solving it in about 25,000 steps "
        "(its claim: not run here, PROTOCOL.md says why)"
    ),
    "CueRecallLong-v0": "optimum 1, without memory 0.25",
    "PopgymRepeatPreviousMedium-v0": "POPGym's score, -1 to 1",
    "PopgymAutoencodeEasy-v0": "POPGym's score, -1 to 1",
    "CartPoleNoVel-v1": "at most 500",
}
# The tested endpoints: summary key, name
ENDPOINTS = (("final", "final return"), ("at_equal_time", "return at equal learn() time"))


def load(out: Path) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], list[dict[str, Any]]]:
    """
    The finished runs, ``{task: {arm: [run, ...]}}`` (by seed; :func:`sb3_reset_ppo.experiments.runner.load_runs`, with
    ``learn_seconds`` at each evaluation where the training log times them), and the failed runs.
    """
    rundata.ensure(out)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in runner.load_runs(out, FINAL_EVALUATIONS):
        run["learn_seconds"] = runner.elapsed_seconds(run)
        runs.setdefault(run["env"], {}).setdefault(run["variant"], []).append(run)
    for by_arm in runs.values():
        for arm in by_arm:
            by_arm[arm].sort(key=lambda run: int(run["seed"]))
    return runs, runner.load_failed(out) if out.exists() else []


def equal_time(by_arm: dict[str, list[dict[str, Any]]]) -> float | None:
    """The ``learn()`` seconds at which a task's runs are compared: the smallest of the arms' median run times."""
    medians = [
        float(np.median([run["learn_seconds"][-1] for run in arm_runs]))
        for arm_runs in by_arm.values()
        if arm_runs and all(run["learn_seconds"] is not None for run in arm_runs)
    ]
    return min(medians) if medians else None


def endpoints(run: dict[str, Any], at: float | None) -> dict[str, float | None]:
    """One run's numbers: final return, return per env step, ``learn()`` seconds and the return at ``at`` seconds."""
    seconds = run["learn_seconds"]
    at_equal_time = None
    if seconds is not None and at is not None:
        at_equal_time = stats.score_at_time(seconds, run["eval_mean"], at, FINAL_EVALUATIONS, float(run["eval_mean"][0]))
    return {
        "final": float(run["final"]),
        "per_step": float(run["auc"]),
        "learn_seconds": None if seconds is None else float(seconds[-1]),
        "at_equal_time": at_equal_time,
    }


def _known(values: list[float | None]) -> list[float]:
    return [float(value) for value in values if value is not None]


def sizes() -> dict[str, dict[str, int]]:
    """The parameter count of each arm's policy on each task, ``{task: {arm: count}}`` (a cost endpoint of the protocol)."""
    return {task: {arm: timing.parameters(arm, task) for arm in study.ARMS} for task in study.TASKS}


def analyse(
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    reps: int = stats.REPS,
    parameters: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """
    Every number of the report: per task and arm, and the attention arm's comparisons with the other arms. The
    comparisons' verdicts are stated only once every run is stored (PROTOCOL.md, Decisions fixed now).

    :param parameters: Each arm's parameter count per task (:func:`sizes`), put into the summary
    """
    planned = len(study.TASKS) * len(study.ARMS) * study.SEEDS
    stored = sum(len(arm_runs) for by_arm in runs.values() for arm_runs in by_arm.values())
    summary: dict[str, Any] = {"planned": planned, "runs": stored, "reps": reps, "tasks": {}}
    summary["complete"] = stored == planned
    every = [run for by_arm in runs.values() for arm_runs in by_arm.values() for run in arm_runs]
    commits = Counter(str(run["commit"])[:8] if run.get("commit") else "not recorded" for run in every)
    summary["commits"] = dict(sorted(commits.items()))
    summary["dirty"] = sum(bool(run.get("dirty")) for run in every)
    summary["machines"] = machines(every)
    families: dict[str, list[tuple[str, str, float]]] = {key: [] for key, _ in ENDPOINTS}
    for task in study.TASKS:
        by_arm = runs.get(task, {})
        at = equal_time(by_arm)
        points = {arm: [endpoints(run, at) for run in by_arm[arm]] for arm in study.ARMS if by_arm.get(arm)}
        arms = {
            arm: {
                "runs": len(rows), "seeds": [int(run["seed"]) for run in by_arm[arm]],
                **{key: iqm_triple(_known([row[key] for row in rows]), reps) for key in rows[0]},
            }
            for arm, rows in points.items()
        }  # fmt: skip
        comparisons: dict[str, Any] = {}
        for arm in (a for a in points if a != BASE and BASE in points):
            entry: dict[str, Any] = {}
            for key, _ in ENDPOINTS:
                ours, theirs = (_known([row[key] for row in points[side]]) for side in (BASE, arm))
                if not ours or not theirs:
                    continue
                p, method = stats.mann_whitney(ours, theirs)
                entry[key] = {"probability": improvement_triple(ours, theirs, reps), "p": p, "method": method}
                families[key].append((task, arm, p))
            comparisons[arm] = entry
        summary["tasks"][task] = {
            "equal_time_seconds": at, "arms": arms, "comparisons": comparisons,
            "pending": [arm for arm in study.ARMS if len(by_arm.get(arm, [])) < study.SEEDS],
            "parameters": (parameters or {}).get(task, {}),
        }  # fmt: skip
    for key, family in families.items():
        for (task, arm, _), adjusted in zip(family, stats.holm([p for *_, p in family]) if family else [], strict=True):
            result = summary["tasks"][task]["comparisons"][arm][key]
            result["p_holm"] = adjusted
            result["verdict"] = verdict(result["probability"], adjusted) if summary["complete"] else NO_VERDICT
    summary["families"] = {key: len(family) for key, family in families.items()}
    summary["status"] = status(summary)
    return summary


def verdict(probability: list[float], p_holm: float) -> str:
    """``"higher"`` or ``"lower"`` (the attention arm's) where Holm's p < 0.05 and the interval excludes 1/2."""
    return {"better": "higher", "worse": "lower"}.get(holm_verdict(probability, p_holm), "not significant")


def status(summary: dict[str, Any]) -> str:
    """The study's state in one sentence: how many runs are stored, and whether a verdict may be stated."""
    if not summary["complete"]:
        return (
            f"Incomplete: {summary['runs']} of {summary['planned']} runs stored, so no verdict yet (one is stated "
            "when every arm has its 10 seeds on every task)"
        )
    return f"Complete: all {summary['planned']} runs stored; the verdicts per task are in the tables below"


def markdown(summary: dict[str, Any], failed: list[dict[str, Any]]) -> str:
    """The results page."""
    lines = [
        "# Attention memory against LSTM and GRU on the same windows",
        "",
        f"Written by `benchmarks/studies/attention/attention_report.py` from the runs of `attention_study.py`. "
        f"{summary['status']}.",
        "",
        f"Final return: the mean of the last {FINAL_EVALUATIONS} of 20 evaluations (20 deterministic episodes each). "
        "Per env step: the mean over all 20 evaluations. learn(): wall seconds less the evaluations', up to the last "
        "evaluation within the budget. At equal time: "
        "each run's return when the task's fastest arm's median run ends. IQM over runs with 95% stratified-bootstrap "
        f"intervals ({summary['reps']} resamples). Parameters: the policy's (actor and critic), as the hyperparameter "
        "files build it.",
        "",
        f"Runs: {summary['runs']}; commits: "
        + (", ".join(f"`{commit}` ({count})" for commit, count in summary["commits"].items()) or "none")
        + f"; {summary['dirty']} with uncommitted package changes. Machines: {summary['machines'] or 'none yet'}.",
    ]
    for task, entry in summary["tasks"].items():
        lines += ["", f"## {task}", "", f"Returns: {REFERENCES[task]}."]
        if entry["equal_time_seconds"] is not None:
            lines[-1] += f" Equal time: {entry['equal_time_seconds']:.0f} s of learn()."
        lines += [
            "",
            "| arm | runs | final return | return per env step | learn() s | return at equal time | parameters |",
            "|---|---|---|---|---|---|---|",
        ]
        for arm in study.ARMS:
            size = entry["parameters"].get(arm)
            size_cell = "-" if size is None else f"{size:,}"
            values = entry["arms"].get(arm)
            if values is None:
                lines.append(f"| {NAMES[arm]} | 0 | - | - | - | - | {size_cell} |")
                continue
            cells = [estimate_or(values[key]) for key in ("final", "per_step")]
            cells += [estimate_or(values["learn_seconds"], 0), estimate_or(values["at_equal_time"]), size_cell]
            lines.append(f"| {NAMES[arm]} | {values['runs']} | " + " | ".join(cells) + " |")
        if entry["comparisons"]:
            lines += [
                "",
                "| attention against | endpoint | P(attention > arm) | Mann-Whitney p | Holm p | verdict |",
                "|---|---|---|---|---|---|",
            ]
            for arm, results in entry["comparisons"].items():
                for key, name in ENDPOINTS:
                    if key in results:
                        r = results[key]
                        lines.append(
                            f"| {NAMES[arm]} | {name} | {estimate_or(r['probability'], 2)} | {r['p']:.3g} | "
                            f"{r['p_holm']:.3g} | {r['verdict']} |"
                        )
        if entry["pending"]:
            lines += ["", f"Fewer than {study.SEEDS} runs stored: {'; '.join(NAMES[arm] for arm in entry['pending'])}."]
    lines += ["", "## Failed runs", ""]
    lines += [f"- {run['variant']} {run['env']} seed {run['seed']}" for run in failed] or ["None."]
    return "\n".join(lines)


def figure(runs: dict[str, dict[str, list[dict[str, Any]]]], path: Path) -> None:
    """Per task, each arm's evaluation return (the mean over seeds) against env steps."""
    fig, axes = plt.subplots(1, len(study.TASKS), figsize=(4 * len(study.TASKS), 3.2), squeeze=False)
    for ax, task in zip(axes[0], study.TASKS, strict=True):
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("env steps")
        for arm in study.ARMS:
            arm_runs = runs.get(task, {}).get(arm, [])
            if not arm_runs:
                continue
            length = min(len(run["eval_mean"]) for run in arm_runs)
            # (runs, evaluations) -> (evaluations,)
            mean = np.mean([run["eval_mean"][:length] for run in arm_runs], axis=0)
            ax.plot(arm_runs[0]["timesteps"][:length], mean, label=NAMES[arm])
        if not runs.get(task):
            ax.text(0.5, 0.5, "no runs stored yet", ha="center", va="center", transform=ax.transAxes)
    axes[0][0].set_ylabel("evaluation return (mean over seeds)")
    # One legend, on the task with the most arms stored
    most = max(axes[0], key=lambda ax: len(ax.lines))
    if most.lines:
        most.legend(fontsize=7)
    save_figure(fig, path, dpi=80)


def main(argv: list[str] | None = None) -> None:
    command = ReportCommand(__doc__, HERE, study.OUT, "the study's folder", SUMMARY)
    args = command.parse(command.parser(), argv)
    runs, failed = load(args.runs)
    summary = analyse(runs, args.reps, sizes())
    command.write(args, markdown(summary, failed), summary, lambda path: figure(runs, path))
    print(summary["status"])


if __name__ == "__main__":
    main()
