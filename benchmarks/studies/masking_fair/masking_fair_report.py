"""
The fair masking study's report (``PROTOCOL.md``, Endpoints and Statistics), from the runs stored so far.

Per task: each arm's IQM (95% stratified-bootstrap interval) of the final return, of the env steps, ``learn()`` CPU
seconds and training episodes to the threshold (over the runs that reached it, with their count), of the invalid
actions per episode and of the ``learn()`` CPU seconds per 1,000 training episodes; the probability of improvement
of ``maskable_reset_ppo`` over each other arm with its interval, and two-sided Mann-Whitney tests, Holm-adjusted over
the protocol's families (final return: 4 comparisons x the tasks; steps and CPU seconds to the threshold: twice
that). The amendments (``NOTES.md``, Amendments): the success rate on MaskedCueRecallFair-v0 (a family of its own,
Holm over the 4 original arms); the full stack's comparisons (one test per endpoint, unadjusted), its line "pending"
while none of its runs is stored; each seed's ratio of the whole run's ``learn()`` CPU seconds between arms (median
over seeds with a percentile bootstrap interval, and the ratio of the sums); the frame stack's time to the
threshold and the tasks where no arm reaches the memoryless bound, stated as such. Works on partial runs (any
number of seeds per arm, at least one); the statistics are ``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/masking_fair/masking_fair_report.py [--runs DIR] [--out DIR] [--summaries DIR]
[--reps 2000] (prints every statement; writes the results page ``RESULTS.md`` and ``figures/learning_curves.png`` into
``--out``, default this study's folder, and ``masking_fair_summary.json`` into ``--summaries``, default
``benchmarks/results/``; ``python benchmarks/kit/studies.py report masking_fair`` runs it and leads the page)
"""

import functools
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.kit import rundata
from benchmarks.kit.report import estimate_or, improvement_triple, iqm_triple, save_figure, study_opening
from benchmarks.kit.study_report import ReportCommand
from sb3_reset_ppo.experiments import stats

HERE = Path(__file__).resolve().parent
# An estimate with its interval, "none" without one (the page states estimates in sentences)
_estimate = functools.partial(estimate_or, missing="none")

BASE = "maskable_reset_ppo"
# The arm whose cost is compared with the base's at the same number of training episodes (PROTOCOL.md, Endpoints)
LIKE_FOR_LIKE = "recurrent_ppo_mask_obs"
# The amendment's arms (NOTES.md, Amendments): compared with the base in a family of their own (one test per
# endpoint, unadjusted), so that the protocol's families stay as they were
AMENDED = ("maskable_ppo_stack_full",)
# Runs per arm and task (seeds 0 to 9)
SEEDS = 10
# The tasks' analytical returns (PROTOCOL.md, Tasks), stated beside the arms' final returns
ANALYTICAL = {
    "MaskedCueRecallFair-v0": "memoryless optimum 0.5, 16 stacked frames at best 0.875, perfect memory 1.0",
    "LeducMatch-v0": "without memory of earlier hands at most 12.8 chips a match, knowing the style at most 17.2",
}
# The best return of a policy without memory (of earlier hands, on LeducMatch-v0): a task on which no arm's final
# return gets above it does not show whether memory helps
MEMORYLESS = {"MaskedCueRecallFair-v0": 0.5, "LeducMatch-v0": 12.8}
# The cost ratios (NOTES.md, Amendments, 3): numerator arm -> denominator arms, each seed's whole-run learn() CPU s
COST_RATIOS = {
    "maskable_reset_ppo": ("recurrent_ppo_mask_obs", "reset_ppo_mask_obs"),
    "reset_ppo_mask_obs": ("recurrent_ppo_mask_obs",),
}
# How the page defines the success rate (NOTES.md, Amendments, 2)
SUCCESS_NOTE = "; success rate: the share of the final evaluations' episodes that name the cue (return > 0)."
# The frame stack whose time to the threshold is stated beside the base's (NOTES.md, Amendments, 4)
STACK = "maskable_ppo_stack"
# The tested endpoints: summary key, name (the success rate: MaskedCueRecallFair-v0's, NOTES.md, Amendments, 2)
ENDPOINTS = (
    ("final", "final return"),
    ("steps_to_threshold", "env steps to the threshold"),
    ("cpu_to_threshold", "learn() CPU s to the threshold"),
    ("success", "success rate"),
)
# A run that never reached the threshold: infinitely costly, as a finite number the rank statistics can order
NOT_REACHED = 1e18


def _study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("masking_fair_study", HERE / "masking_fair_study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STUDY = _study()


def load(out: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The finished runs: ``{task: {arm: [record, ...]}}`` (by seed), with the failed runs' count under ``"failed"``."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for task in STUDY.TASKS:
        for arm in [arm for arm in STUDY.ARMS if STUDY.runs_on(task, arm)]:
            folder = out / task / arm
            records = [json.loads(path.read_text()) for path in sorted(folder.glob("seed_*.json"))] if folder.exists() else []
            if records:
                runs.setdefault(task, {})[arm] = sorted(records, key=lambda record: int(record["seed"]))
    return runs


def crossing(evaluations: list[dict[str, Any]], threshold: float) -> int | None:
    """
    The protocol's threshold crossing: the first evaluation whose mean return reaches ``threshold`` and so does the
    next one (the last evaluation alone if it is the first to reach it), or ``None``.
    """
    means = [float(np.mean(evaluation["returns"])) for evaluation in evaluations]
    for index, mean in enumerate(means):
        if mean >= threshold and (index + 1 == len(means) or means[index + 1] >= threshold):
            return index
    return None


def endpoints(record: dict[str, Any]) -> dict[str, Any]:
    """One run's endpoints (costs not reached: ``None``)."""
    task = record["task"]
    evaluations = record["evaluations"]
    final = evaluations[-STUDY.FINAL_EVALUATIONS :]
    returns = [r for evaluation in final for r in evaluation["returns"]]
    index = crossing(evaluations, STUDY.THRESHOLDS[task])
    reached = None if index is None else evaluations[index]
    last = evaluations[-1]
    result: dict[str, Any] = {
        "final": float(np.mean(returns)),
        "steps_to_threshold": None if reached is None else float(reached["timesteps"]),
        "cpu_to_threshold": None if reached is None else float(reached["learn_cpu_seconds"]),
        "episodes_to_threshold": None if reached is None else float(reached["training_episodes"]),
        "invalid": float(np.mean([n for evaluation in final for n in evaluation["invalid"]])),
        "cpu_per_1000_episodes": 1000 * float(last["learn_cpu_seconds"]) / max(1, int(last["training_episodes"])),
        "cpu_per_1000_steps": 1000 * float(last["learn_cpu_seconds"]) / max(1, int(last["timesteps"])),
    }
    if "delays" in final[0]:
        delays = np.array([d for evaluation in final for d in evaluation["delays"]], dtype=float)
        answered = np.array(returns) + 0.1 * np.array([n for evaluation in final for n in evaluation["invalid"]])
        long = delays > 128
        # A success returns at least 1 - 9 * 0.1 (the 10th invalid action ends the episode), a failure at most 0
        result["success"] = float(np.mean(np.array(returns) > 0))
        result["success_long"] = float(np.mean(answered[long] > 0.5)) if long.any() else None
        result["success_short"] = float(np.mean(answered[~long] > 0.5)) if (~long).any() else None
    else:
        styles = np.array([s for evaluation in final for s in evaluation["styles"]])
        result["by_style"] = {str(s): float(np.mean(np.array(returns)[styles == s])) for s in sorted(set(styles))}
    return result


def cpu_at_episodes(record: dict[str, Any], episodes: float) -> float | None:
    """
    A run's ``learn()`` CPU seconds when it had played ``episodes`` training episodes, interpolated between its
    evaluations (``None`` if it played fewer).
    """
    played = [float(evaluation["training_episodes"]) for evaluation in record["evaluations"]]
    cpu = [float(evaluation["learn_cpu_seconds"]) for evaluation in record["evaluations"]]
    return None if episodes > played[-1] else float(np.interp(episodes, played, cpu))


def like_for_like(base: list[dict[str, Any]], other: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    """
    ``learn()`` CPU seconds of the base arm's and the other arm's runs at the same number of training episodes: the
    smaller of the two arms' IQM final episode counts.
    """
    finals = [iqm_triple([float(r["evaluations"][-1]["training_episodes"]) for r in runs], reps) for runs in (base, other)]
    episodes = min(triple[0] for triple in finals if triple is not None)
    cpu = [[c for c in (cpu_at_episodes(r, episodes) for r in runs) if c is not None] for runs in (base, other)]
    iqms = [iqm_triple(values, reps) for values in cpu]
    ratio = None if iqms[0] is None or iqms[1] is None else iqms[0][0] / iqms[1][0]
    reached = [len(values) for values in cpu]
    return {"episodes": episodes, "final_episodes": finals, "cpu": iqms, "ratio": ratio, "reached": reached}


def cost_ratio(runs: list[dict[str, Any]], others: list[dict[str, Any]], reps: int) -> dict[str, Any] | None:
    """
    Each seed's whole-run ``learn()`` CPU seconds of one arm over the same seed's run of another: the median over the
    seeds both arms ran, with a 95% percentile bootstrap interval over those seeds (``reps`` resamples, fixed seed),
    and the ratio of the two arms' summed seconds over those seeds (``None`` without a common seed).
    """
    by_seed = {int(r["seed"]): float(r["learn_cpu_seconds"]) for r in others}
    pairs = [(float(r["learn_cpu_seconds"]), by_seed[int(r["seed"])]) for r in runs if int(r["seed"]) in by_seed]
    if not pairs:
        return None
    ratios = np.array([a / b for a, b in pairs])
    rng = np.random.default_rng(0)  # the same runs give the same interval
    medians = np.median(rng.choice(ratios, size=(reps, len(ratios))), axis=1)  # (reps,) medians of resampled seeds
    low, high = np.percentile(medians, [2.5, 97.5])
    of_sums = sum(a for a, _ in pairs) / sum(b for _, b in pairs)
    return {"seeds": len(pairs), "median": [float(np.median(ratios)), float(low), float(high)], "of_sums": of_sums}


def analyse(runs: dict[str, dict[str, list[dict[str, Any]]]], reps: int = stats.REPS) -> dict[str, Any]:
    """Every number of the report, per task and arm, and the comparisons of ``maskable_reset_ppo`` with the others."""
    summary: dict[str, Any] = {
        "tasks": {},
        "reps": reps,
        "runs": sum(len(r) for by_arm in runs.values() for r in by_arm.values()),
    }
    primary: list[tuple[str, str, float]] = []  # (task, arm, p) of the primary family
    secondary: list[tuple[str, str, str, float]] = []
    success: list[tuple[str, str, float]] = []  # the success rate's family (NOTES.md, Amendments, 2)
    for task, by_arm in runs.items():
        points = {arm: [endpoints(record) for record in records] for arm, records in by_arm.items()}
        arms: dict[str, Any] = {}
        for arm, rows in points.items():
            arms[arm] = {"runs": len(rows), "seeds": [int(r["seed"]) for r in by_arm[arm]]}
            for key in ("final", "invalid", "cpu_per_1000_episodes", "cpu_per_1000_steps"):
                arms[arm][key] = iqm_triple([row[key] for row in rows], reps)
            for key in ("steps_to_threshold", "cpu_to_threshold", "episodes_to_threshold"):
                reached = [row[key] for row in rows if row[key] is not None]
                arms[arm][key] = {"reached": len(reached), "iqm": iqm_triple(reached, reps)}
            for key in ("success", "success_long", "success_short"):
                values = [row[key] for row in rows if row.get(key) is not None]
                if values:
                    arms[arm][key] = iqm_triple(values, reps)
            if "by_style" in rows[0]:
                styles = sorted({s for row in rows for s in row["by_style"]})
                arms[arm]["by_style"] = {
                    s: iqm_triple([row["by_style"][s] for row in rows if s in row["by_style"]], reps) for s in styles
                }
        comparisons: dict[str, Any] = {}
        if BASE in points:
            base = points[BASE]
            for arm, rows in points.items():
                if arm == BASE:
                    continue
                entry: dict[str, Any] = {}
                # higher is better; for the costs the negated cost, a run that never reached it infinitely costly
                scores = {"final": ([r["final"] for r in base], [r["final"] for r in rows])}
                for key in ("steps_to_threshold", "cpu_to_threshold"):
                    ours, theirs = ([-(r[key] if r[key] is not None else NOT_REACHED) for r in side] for side in (base, rows))
                    scores[key] = (ours, theirs)
                if "success" in rows[0]:
                    scores["success"] = ([r["success"] for r in base], [r["success"] for r in rows])
                for key, (ours, theirs) in scores.items():
                    p, method = stats.mann_whitney(ours, theirs)
                    entry[key] = {"probability": improvement_triple(ours, theirs, reps), "p": p, "method": method}
                    if arm in AMENDED:  # a family of one test: Holm leaves its p as it is
                        entry[key].update(p_holm=p, family="amendment")
                    elif key == "final":
                        primary.append((task, arm, p))
                    elif key == "success":
                        success.append((task, arm, p))
                    else:
                        secondary.append((task, arm, key, p))
                comparisons[arm] = entry
        planned = [arm for arm in STUDY.ARMS if STUDY.runs_on(task, arm)]
        summary["tasks"][task] = {
            "threshold": STUDY.THRESHOLDS[task], "memoryless": MEMORYLESS[task], "arms": arms, "comparisons": comparisons,
            "pending": [arm for arm in planned if arm not in by_arm],
            "below_memoryless": all(values["final"][0] <= MEMORYLESS[task] for values in arms.values()),
        }  # fmt: skip
        if BASE in by_arm and LIKE_FOR_LIKE in by_arm:
            summary["tasks"][task]["like_for_like"] = like_for_like(by_arm[BASE], by_arm[LIKE_FOR_LIKE], reps)
        ratios: dict[str, Any] = {}
        for arm, others in COST_RATIOS.items():
            for other in others:
                ratio = cost_ratio(by_arm[arm], by_arm[other], reps) if arm in by_arm and other in by_arm else None
                if ratio is not None:
                    ratios.setdefault(arm, {})[other] = ratio
        summary["tasks"][task]["cost_ratios"] = ratios
        if any(arm in AMENDED for arm in planned):
            amended = [arm for arm in planned if arm in AMENDED]
            summary["tasks"][task]["amended"] = {arm: amended_text(arm, arms, comparisons) for arm in amended}
    for (task, arm, _), adjusted in zip(primary, stats.holm([p for *_, p in primary]) if primary else [], strict=True):
        summary["tasks"][task]["comparisons"][arm]["final"]["p_holm"] = adjusted
    for (task, arm, _), adjusted in zip(success, stats.holm([p for *_, p in success]) if success else [], strict=True):
        summary["tasks"][task]["comparisons"][arm]["success"]["p_holm"] = adjusted
    for (task, arm, key, _), adjusted in zip(
        secondary, stats.holm([p for *_, p in secondary]) if secondary else [], strict=True
    ):
        summary["tasks"][task]["comparisons"][arm][key]["p_holm"] = adjusted
    summary["families"] = {"primary": len(primary), "secondary": len(secondary), "success": len(success)}
    return summary


def amended_text(arm: str, arms: dict[str, Any], comparisons: dict[str, Any]) -> str:
    """
    What the page's verdict says of an amendment's arm: "pending" while none of its runs is stored, else its final
    return and the base's probability of improvement over it, with the runs stored so far when fewer than all.
    """
    if arm not in arms or arm not in comparisons:
        return f"pending ({arms.get(arm, {}).get('runs', 0)} of {SEEDS} runs stored)"
    final, result = arms[arm]["final"], comparisons[arm]["final"]
    runs = arms[arm]["runs"]
    partial = "" if runs >= SEEDS else f"; {runs} of {SEEDS} runs stored so far"
    verdict = _verdict(result["probability"], result["p_holm"])
    return (
        f"{_estimate(final)}, MaskableResetPPO's probability of improvement over it {_estimate(result['probability'], 2)} "
        f"(Mann-Whitney p {result['p']:.2g}, its own family: {verdict}{partial})"
    )


def _verdict(probability: list[float], p_holm: float) -> str:
    side = stats.significance(probability[1], probability[2], 0.5)
    return side if side != "not significant" and p_holm < 0.05 else "not significant"


def descriptive(entry: dict[str, Any]) -> list[str]:
    """A task's descriptive results: the cost like for like, success by delay (fair task), return by style (Leduc)."""
    out = []
    for arm, by_other in entry.get("cost_ratios", {}).items():
        for other, ratio in by_other.items():
            out.append(
                f"- learn() CPU s of the whole run (204,800 env steps), {arm} over {other} of the same seed: median "
                f"{_estimate(ratio['median'], 2)} over {ratio['seeds']} seeds; ratio of the summed seconds "
                f"{ratio['of_sums']:.2f}"
            )
    ratios = entry.get("cost_ratios", {})
    if LIKE_FOR_LIKE in ratios.get(BASE, {}) and LIKE_FOR_LIKE in ratios.get("reset_ppo_mask_obs", {}):
        masked, unmasked = ratios[BASE][LIKE_FOR_LIKE]["median"], ratios["reset_ppo_mask_obs"][LIKE_FOR_LIKE]["median"]
        alike = masked[1] <= unmasked[2] and unmasked[1] <= masked[2]  # the medians' intervals overlap
        out.append(
            f"- Against {LIKE_FOR_LIKE}, ResetPPO with masks costs {masked[0]:.2f} and with the mask in the observation "
            f"{unmasked[0]:.2f} (median ratios): "
            + (
                "alike, so the saving is ResetPPO's speed, not masking's"
                if alike
                else "their intervals do not overlap, so masking changes the cost too"
            )
            + f"; masking's own cost is {BASE} over reset_ppo_mask_obs"
        )
    if "like_for_like" in entry:
        same = entry["like_for_like"]
        ratio = "none" if same["ratio"] is None else f"{same['ratio']:.2f}"
        reached = same.get("reached", [None, None])
        runs = [entry["arms"][arm]["runs"] for arm in (BASE, LIKE_FOR_LIKE)]
        out.append(
            f"- learn() CPU s at {same['episodes']:.0f} training episodes (the protocol's like for like, read only where a "
            f"run played that many: {reached[0]} of {runs[0]} runs of {BASE}, {reached[1]} of {runs[1]} of "
            f"{LIKE_FOR_LIKE}): {BASE} {_estimate(same['cpu'][0], 1)}, {LIKE_FOR_LIKE} {_estimate(same['cpu'][1], 1)}; ratio "
            f"of the IQMs {ratio}"
        )
    if BASE in entry["arms"] and STACK in entry["comparisons"]:
        ours, theirs = entry["arms"][BASE]["cpu_to_threshold"], entry["arms"][STACK]["cpu_to_threshold"]
        result = entry["comparisons"][STACK]["cpu_to_threshold"]
        if ours["iqm"] is not None and theirs["iqm"] is not None:
            faster = "faster" if theirs["iqm"][0] < ours["iqm"][0] else "slower"
            out.append(
                f"- learn() CPU s to the threshold: {BASE} {ours['iqm'][0]:.1f} ({ours['reached']} runs reached it), "
                f"{STACK} {theirs['iqm'][0]:.1f} ({theirs['reached']} runs): the stack nominally {faster}; {BASE} "
                f"against it {_verdict(result['probability'], result['p_holm'])} (Holm p {result['p_holm']:.2g})"
            )
    for arm, values in entry["arms"].items():
        if "success_long" in values:
            out.append(
                f"- {arm}: success on long delays (beyond the window) {_estimate(values['success_long'])}, on short "
                f"delays {_estimate(values.get('success_short'))}"
            )
        if "by_style" in values:
            out.append(
                f"- {arm}: return per style " + ", ".join(f"{s} {_estimate(v, 2)}" for s, v in values["by_style"].items())
            )
    return out


def task_notes(task: str, entry: dict[str, Any]) -> list[str]:
    """A task's plain statements: no arm above the memoryless bound (the task uninformative), the arms pending."""
    out = []
    if entry.get("below_memoryless"):
        out.append(
            f"Uninformative at this budget: no arm's final return (IQM) gets above {entry['memoryless']}, the best "
            "return of a policy without memory, so this task does not show whether memory helps; its comparisons "
            "are stated for completeness."
        )
    for arm in entry.get("pending", []):
        out.append(f"{arm}: pending (0 of {SEEDS} runs stored); its rows appear when its runs are stored.")
    return out


def lines(summary: dict[str, Any]) -> list[str]:
    """The report's statements: every result with its interval, significant or not."""
    out = [
        f"Families: final return {summary['families']['primary']} tests, costs to the threshold "
        f"{summary['families']['secondary']} tests, success rate {summary['families']['success']} tests (Holm within "
        f"each; the amendment's arms {', '.join(AMENDED)}: one test per endpoint, unadjusted); IQM over seeds, 95% "
        "stratified-bootstrap intervals."
    ]
    for task, entry in summary["tasks"].items():
        out.append(f"## {task} (threshold {entry['threshold']}; {ANALYTICAL[task]})")
        out += task_notes(task, entry)
        for arm, values in entry["arms"].items():
            steps, cpu = values["steps_to_threshold"], values["cpu_to_threshold"]
            success = f"success rate {_estimate(values['success'])}; " if "success" in values else ""
            text = (
                f"- {arm} ({values['runs']} runs): final return {_estimate(values['final'])}; {success}reached the threshold "
                f"{steps['reached']} of {values['runs']}, env steps {_estimate(steps['iqm'], 0)}, learn() CPU s "
                f"{_estimate(cpu['iqm'], 1)}, training episodes {_estimate(values['episodes_to_threshold']['iqm'], 0)}; "
                f"invalid actions per episode {_estimate(values['invalid'], 2)}; learn() CPU s per 1,000 training "
                f"episodes {_estimate(values['cpu_per_1000_episodes'], 1)}"
            )
            out.append(text)
        out += descriptive(entry)
        for arm, comparison in entry["comparisons"].items():
            for key, name in ENDPOINTS:
                if key not in comparison:
                    continue
                result = comparison[key]
                out.append(
                    f"- {BASE} vs {arm}, {name}: P(improvement) {_estimate(result['probability'])}, Mann-Whitney "
                    f"p {result['p']:.3g} ({result['method']}), Holm p {result['p_holm']:.3g}: "
                    f"{_verdict(result['probability'], result['p_holm'])}"
                )
    return out


def figure(runs: dict[str, dict[str, list[dict[str, Any]]]], path: Path) -> None:
    """
    Per task, the mean evaluation return against env steps and against ``learn()`` CPU seconds: the IQM over seeds,
    shaded between the 25th and 75th percentile of the seeds (descriptive; the intervals are in the tables).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import trim_mean

    tasks = [task for task in STUDY.TASKS if task in runs]
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.8 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks, strict=True):
        for arm in [arm for arm in STUDY.ARMS if arm in runs[task]]:
            records = runs[task][arm]
            length = min(len(record["evaluations"]) for record in records)
            returns = np.array(
                [[np.mean(e["returns"]) for e in r["evaluations"][:length]] for r in records]
            )  # (seeds, evaluations)
            cpu = np.array(
                [[e["learn_cpu_seconds"] for e in r["evaluations"][:length]] for r in records]
            )  # (seeds, evaluations)
            steps = [e["timesteps"] for e in records[0]["evaluations"][:length]]
            middle = trim_mean(returns, 0.25, axis=0)
            low, high = np.percentile(returns, [25, 75], axis=0)
            for axis, x in ((row[0], steps), (row[1], trim_mean(cpu, 0.25, axis=0))):
                (line,) = axis.plot(x, middle, label=f"{arm}, {len(records)} seeds")
                axis.fill_between(x, low, high, alpha=0.15, color=line.get_color())
        for axis, label in ((row[0], "env steps"), (row[1], "learn() CPU seconds (IQM over seeds)")):
            axis.axhline(STUDY.THRESHOLDS[task], color="gray", linestyle=":", linewidth=1)
            axis.set_xlabel(label)
            axis.set_ylabel("mean evaluation return (IQM)")
            axis.set_title(f"{task}: threshold {STUDY.THRESHOLDS[task]} (dotted)", fontsize=9)
        row[1].set_xscale("symlog", linthresh=10)
        row[0].legend(loc="lower right", fontsize=7)
    save_figure(fig, path, dpi=110)


def markdown(summary: dict[str, Any], runs: dict[str, dict[str, list[dict[str, Any]]]], notes: str = "") -> str:
    """The results page: a chronicle block, then per task the arms' endpoints and the comparisons' table."""
    every = [record for by_arm in runs.values() for records in by_arm.values() for record in records]
    commits = sorted({record["commit"][:8] for record in every})
    opening, machines = study_opening("masking_fair", "Masking with memory against what users do today", every)
    out = [
        *opening,
        f"- Commands (runs): {'; '.join(f'`{c}`' for c in sorted({r['command'] for r in every}))}",
        f"- Runs: {len(every)} of {SEEDS * sum(STUDY.runs_on(t, a) for t in STUDY.TASKS for a in STUDY.ARMS)}; commits: "
        + ", ".join(f"`{c}` ({sum(r['commit'][:8] == c for r in every)})" for c in commits)
        + f"; {sum(bool(r['dirty']) for r in every)} with uncommitted package changes",
        f"- Machine: {machines}; one torch thread a run, the 2 cores shared with other work",
        f"- Bootstrap resamples: {summary['reps']}; tests: {summary['families']['primary']} on the final return, "
        f"{summary['families']['secondary']} on the costs to the threshold, {summary['families']['success']} on the "
        f"success rate (Holm within each family); the amendment's arms ({', '.join(AMENDED)}): one test per endpoint, "
        "unadjusted",
        "- Amendments after the 100 runs of the protocol, fixed before any run they add (`NOTES.md`, Amendments): the "
        f"arm {', '.join(AMENDED)} (a frame stack long enough for every delay), the success rate, the whole run's "
        "`learn()` CPU seconds of one arm over another's, the frame stack's time to the threshold and the tasks where no "
        "arm gets above the memoryless bound stated as such",
        "",
        *([notes.strip(), ""] if notes.strip() else []),
    ]
    for task, entry in summary["tasks"].items():
        with_success = any("success" in values for values in entry["arms"].values())
        amended = [arm for arm in AMENDED if STUDY.runs_on(task, arm)]
        out += [
            f"## {task}",
            "",
            f"Threshold {entry['threshold']}; {ANALYTICAL[task]}. IQM over seeds with 95% stratified-bootstrap "
            "intervals; the costs to the threshold over the runs that reached it" + (SUCCESS_NOTE if with_success else "."),
            "",
            *[line for note in task_notes(task, entry) for line in (note, "")],
            "| arm | runs | final return |" + (" success rate |" if with_success else "") + " reached the threshold "
            "| env steps to it | learn() CPU s to it | invalid actions per episode | learn() CPU s per 1,000 episodes |",
            "|---|---|---|" + ("---|" if with_success else "") + "---|---|---|---|---|",
        ]
        for arm, values in entry["arms"].items():
            steps, cpu = values["steps_to_threshold"], values["cpu_to_threshold"]
            stored = f"{values['runs']}" + (f" of {SEEDS}" if values["runs"] < SEEDS else "")
            out.append(
                f"| {arm} | {stored} | {_estimate(values['final'])} |"
                + (f" {_estimate(values.get('success'))} |" if with_success else "")
                + f" {steps['reached']} of {values['runs']} | {_estimate(steps['iqm'], 0)} | {_estimate(cpu['iqm'], 1)} "
                f"| {_estimate(values['invalid'], 2)} | {_estimate(values['cpu_per_1000_episodes'], 1)} |"
            )
        for arm in entry.get("pending", []):
            out.append(f"| {arm} | 0 of {SEEDS} | pending |" + (" pending |" if with_success else "") + " | | | | |")
        out += [
            "",
            f"{BASE} against each arm: probability of improvement (higher return or success rate, or lower cost with a",
            "run that never reached the threshold infinitely costly) with its 95% interval, two-sided Mann-Whitney p and",
            "Holm's p within its family; better or worse only where the interval excludes 0.5 and that p < 0.05."
            + (
                f" The amendment's arms ({', '.join(amended)}) are a family of their own, one test per endpoint: their p"
                " unadjusted."
                if amended
                else ""
            ),
            "",
            "| against | endpoint | P(improvement) | p | p, Holm | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for arm, comparison in entry["comparisons"].items():
            for key, name in ENDPOINTS:
                if key not in comparison:
                    continue
                result = comparison[key]
                out.append(
                    f"| {arm} | {name} | {_estimate(result['probability'])} | {result['p']:.2g} ({result['method']}) "
                    f"| {result['p_holm']:.2g} | {_verdict(result['probability'], result['p_holm'])} |"
                )
        out += ["", "Descriptive (not tested):", "", *descriptive(entry), ""]
    out += ["![learning curves](figures/learning_curves.png)", ""]
    return "\n".join(out)


def deviations(notes: str) -> str:
    """The ``## Deviations from the protocol`` section of the study's notes (the rest is how to run it), or ``""``."""
    heading = "## Deviations from the protocol"
    if heading not in notes:
        return ""
    section = notes[notes.index(heading) :]
    rest = section.find("\n## ", len(heading))
    return section if rest < 0 else section[:rest]


def main(argv: list[str] | None = None) -> None:
    command = ReportCommand(__doc__, HERE, STUDY.OUT, "the runs' folder", "masking_fair_summary.json")
    parser = command.parser()
    parser.add_argument("--notes", type=Path, default=HERE / "NOTES.md", help="the notes whose deviations the page states")
    args = command.parse(parser, argv)
    rundata.ensure_all()  # the stored runs' folders, unpacked from their tables where needed
    runs = load(args.runs)
    if not runs:
        parser.error(f"no finished run under {args.runs}")
    summary = analyse(runs, args.reps)
    print("\n".join(lines(summary)))
    notes = deviations(args.notes.read_text()) if args.notes.is_file() else ""
    command.write(args, markdown(summary, runs, notes), summary, lambda path: figure(runs, path), end="")


if __name__ == "__main__":
    main()
