"""
The attention defaults study's report (``PROTOCOL.md``, Endpoints and Decision rule), from the runs stored so far.

Per task and setting: the IQM with its 95% stratified-bootstrap interval of the final return (the mean of the last 3
of 20 evaluations), of the return per env step (the mean over all 20 evaluations) and of ``learn()``'s wall seconds
(less the evaluations'). Per factor, each value against the base: the probability of improvement of the final return,
pooled over the tasks with the stratified bootstrap, the ratio of its median ``learn()`` seconds to the base's on each
task, and the protocol's judgement; then the factor's decision by the protocol's rule (:func:`decide`). While a setting
has fewer than the protocol's 5 seeds on a task the page states the numbers and no decision. The statistics are
``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/attention_defaults/attention_defaults_report.py [--runs DIR] [--out DIR]
[--summaries DIR] [--reps 2000] (writes the results page ``RESULTS.md`` into ``--out``, default this study's folder,
and ``attention_defaults_summary.json`` into ``--summaries``, default ``benchmarks/results/``; ``python
benchmarks/kit/studies.py report attention_defaults`` runs it and leads the page)
"""

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.report import estimate_or, iqm_triple
from benchmarks.kit.study_report import ReportCommand
from benchmarks.studies.attention.attention_report import endpoints, load
from benchmarks.studies.attention_defaults import attention_defaults_study as study
from sb3_reset_ppo.experiments import stats

HERE = Path(__file__).resolve().parent
SUMMARY = "attention_defaults_summary.json"
# The decision rule's cost margin (PROTOCOL.md, Decision rule): a value not worse than the base replaces it only where
# its median learn() seconds are at most this share of the base's on every task
CHEAPER = 0.80
# What a task's returns mean (PROTOCOL.md, Tasks)
REFERENCES = {
    "CueRecall-v0": "optimum 1, without memory 0.25",
    "PopgymRepeatFirstEasy-v0": "POPGym's score, -1 to 1; guessing about -0.5",
}
ENDPOINTS = (("final", "final return"), ("per_step", "return per env step"), ("learn_seconds", "learn() s"))


def judge(probability: list[float] | None, cost_ratios: list[float | None]) -> str:
    """
    A value against the base, by the protocol's rule: ``"better"`` (the pooled probability of improvement's interval
    lies above 1/2), ``"worse"`` (below 1/2), ``"not worse, cheaper"`` (the interval contains 1/2 and the value's
    median ``learn()`` seconds are at most :data:`CHEAPER` of the base's on every task) or ``"not worse"``;
    ``"pending"`` without a probability.

    :param probability: ``[P(value > base), low, high]``, pooled over the tasks
    :param cost_ratios: The value's median ``learn()`` seconds over the base's, per task (None: not timed)
    """
    if probability is None:
        return "pending"
    side = stats.significance(probability[1], probability[2], 0.5)
    if side != "not significant":
        return side
    cheaper = bool(cost_ratios) and all(ratio is not None and ratio <= CHEAPER for ratio in cost_ratios)
    return "not worse, cheaper" if cheaper else "not worse"


def decide(base: Any, judged: dict[Any, tuple[str, float]]) -> Any:
    """
    A factor's default by the protocol's rule: among its values judged ``"better"``, the one with the highest
    probability of improvement; else among those ``"not worse, cheaper"``, the one with the highest probability; else
    the base.

    :param base: The base value
    :param judged: Each other value's judgement (:func:`judge`) and its probability of improvement's point estimate
    :return: The value that becomes the default (the base when none qualifies)
    """
    for qualifying in ("better", "not worse, cheaper"):
        candidates = [(probability, value) for value, (judgement, probability) in judged.items() if judgement == qualifying]
        if candidates:
            return max(candidates, key=lambda candidate: candidate[0])[1]
    return base


def _common_seeds(runs: dict[str, dict[str, list[dict[str, Any]]]], setting: str) -> list[int]:
    """The seeds a setting has on every task (the stratified bootstrap needs as many runs on each task)."""
    seeds = [{int(run["seed"]) for run in runs.get(task, {}).get(setting, [])} for task in study.TASKS]
    return sorted(set.intersection(*seeds))


def _finals(runs: dict[str, dict[str, list[dict[str, Any]]]], setting: str, seeds: list[int]) -> np.ndarray:
    """The final returns of a setting's runs of ``seeds``, ``(n_seeds, n_tasks)``."""
    by_task = [{int(run["seed"]): float(run["final"]) for run in runs[task][setting]} for task in study.TASKS]
    return np.array([[finals[seed] for finals in by_task] for seed in seeds])


def _median_seconds(rows: list[dict[str, float | None]]) -> float | None:
    """The median ``learn()`` seconds of a setting's runs on a task; None where a run's log does not time them."""
    seconds = [row["learn_seconds"] for row in rows]
    known = [float(value) for value in seconds if value is not None]
    return float(np.median(known)) if known and len(known) == len(seconds) else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def analyse(runs: dict[str, dict[str, list[dict[str, Any]]]], reps: int = stats.REPS, failed: int = 0) -> dict[str, Any]:
    """
    Every number of the report: per task and setting, then per factor each value against the base and the decision.

    :param runs: The finished runs, ``{task: {setting: [run, ...]}}`` (:func:`load`)
    :param reps: Bootstrap resamples
    :param failed: The runs that failed with an error: the study is complete when every run is stored or failed, and a
        value without a run on every task is then judged ``"failed"`` (never chosen)
    """
    planned = len(study.TASKS) * len(study.SETTINGS) * study.SEEDS
    stored = sum(len(setting_runs) for by_setting in runs.values() for setting_runs in by_setting.values())
    summary: dict[str, Any] = {
        "planned": planned, "runs": stored, "failed": failed, "reps": reps, "cheaper": CHEAPER, "tasks": {},
    }  # fmt: skip
    medians: dict[str, dict[str, float | None]] = {}
    for task in study.TASKS:
        by_setting = runs.get(task, {})
        settings = {}
        for setting in study.SETTINGS:
            if not by_setting.get(setting):
                continue
            rows = [endpoints(run, None) for run in by_setting[setting]]
            medians.setdefault(setting, {})[task] = _median_seconds(rows)
            settings[setting] = {
                "runs": len(rows), "seeds": [int(run["seed"]) for run in by_setting[setting]],
                **{key: iqm_triple([float(v) for v in (row[key] for row in rows) if v is not None], reps)
                   for key, _ in ENDPOINTS},
                "learn_seconds_median": medians[setting][task],
            }  # fmt: skip
        pending = [s for s in study.SETTINGS if len(by_setting.get(s, [])) < study.SEEDS]
        summary["tasks"][task] = {"settings": settings, "pending": pending}
    summary["complete"] = stored + failed >= planned
    base_seeds = _common_seeds(runs, study.BASE)
    summary["factors"] = {}
    for factor, (base, values) in study.FACTORS.items():
        entries: dict[str, Any] = {}
        for value in values:
            setting = study.setting_name(factor, value)
            seeds = _common_seeds(runs, setting)
            probability = None
            if seeds and base_seeds:
                scores = {setting: _finals(runs, setting, seeds), study.BASE: _finals(runs, study.BASE, base_seeds)}
                _, _, poi, poi_ci = stats.aggregate(scores, reps=reps, baseline=study.BASE)
                probability = stats.probability_triple(poi, poi_ci, f"{setting},{study.BASE}")
            ratios = [
                _ratio(medians.get(setting, {}).get(task), medians.get(study.BASE, {}).get(task)) for task in study.TASKS
            ]
            entries[setting] = {
                "value": value, "seeds": len(seeds), "probability": probability, "cost_ratios": ratios,
                "judgement": "failed" if probability is None and summary["complete"] else judge(probability, ratios),
            }  # fmt: skip
        judged = {entry["value"]: (entry["judgement"], entry["probability"][0]) for entry in entries.values()
                  if entry["probability"] is not None}  # fmt: skip
        summary["factors"][factor] = {
            "base": base, "values": entries,
            "decision": decide(base, judged) if summary["complete"] else "pending",
        }  # fmt: skip
    summary["status"] = status(summary)
    return summary


def status(summary: dict[str, Any]) -> str:
    """The study's state in one sentence: how many runs are stored, and the decisions once all are."""
    if summary["runs"] == 0:
        return f"No runs yet: 0 of {summary['planned']} runs stored, so no decision (every default stays until they are)"
    if not summary["complete"]:
        return (
            f"Incomplete: {summary['runs']} of {summary['planned']} runs stored, so no decision yet (one is stated "
            f"when every setting has its {study.SEEDS} seeds on every task)"
        )
    changed = [f"{factor} {entry['base']!r} -> {entry['decision']!r}" for factor, entry in summary["factors"].items()
               if entry["decision"] != entry["base"]]  # fmt: skip
    decided = "; ".join(changed) if changed else "every default stays"
    runs = (
        f"all {summary['planned']} runs stored"
        if not summary["failed"]
        else (f"{summary['runs']} of {summary['planned']} runs stored, {summary['failed']} failed")
    )
    return f"Complete: {runs}; by the protocol's rule: {decided}"


def markdown(summary: dict[str, Any], failed: list[dict[str, Any]]) -> str:
    """The results page."""
    episodes = ", ".join(f"{count} deterministic episodes each on {task}" for task, count in study.EVAL_EPISODES.items())
    lines = [
        "# Attention defaults: one argument at a time",
        "",
        "Written by `benchmarks/studies/attention_defaults/attention_defaults_report.py` from the runs of "
        f"`attention_defaults_study.py`. {summary['status']}.",
        "",
        f"Final return: the mean of the last 3 of 20 evaluations ({episodes}). Per env step: the mean over all 20 "
        "evaluations. learn(): wall seconds less the evaluations'. IQM over runs with 95% stratified-bootstrap intervals "
        f"({summary['reps']} resamples).",
        "",
        "## Decisions",
        "",
        "Each value against the base (the package's defaults): P(value > base) of the final return, pooled over the "
        f"tasks; learn() s: the value's median over the base's, per task ({', '.join(study.TASKS)}). A value replaces "
        f"the base if it is better (interval above 0.5), or not worse (interval contains 0.5) and at most "
        f"{summary['cheaper']:.0%} of the base's learn() seconds on every task (PROTOCOL.md, Decision rule). The ten "
        "comparisons are not corrected for multiplicity: a pilot that leans towards keeping today's defaults. Factors "
        "are decided separately; their interactions are not measured.",
        "",
        "| factor | base | value | P(value > base) | learn() s / base's | judgement | decision |",
        "|---|---|---|---|---|---|---|",
    ]
    for factor, entry in summary["factors"].items():
        decision = entry["decision"] if entry["decision"] == "pending" else repr(entry["decision"])
        for value in entry["values"].values():
            ratios = " / ".join("-" if r is None else f"{r:.2f}" for r in value["cost_ratios"])
            lines.append(
                f"| `{factor}` | {entry['base']!r} | {value['value']!r} | {estimate_or(value['probability'], 2)} | {ratios} | "
                f"{value['judgement']} | {decision} |"
            )
    for task, entry in summary["tasks"].items():
        lines += [
            "",
            f"## {task}",
            "",
            f"Returns: {REFERENCES[task]}.",
            "",
            "| setting | runs | final return | return per env step | learn() s |",
            "|---|---|---|---|---|",
        ]
        for setting in study.SETTINGS:
            values = entry["settings"].get(setting)
            if values is None:
                lines.append(f"| {setting} | 0 | - | - | - |")
                continue
            cells = [estimate_or(values["final"]), estimate_or(values["per_step"]), estimate_or(values["learn_seconds"], 0)]
            lines.append(f"| {setting} | {values['runs']} | " + " | ".join(cells) + " |")
        if entry["pending"]:
            lines += ["", f"Fewer than {study.SEEDS} runs stored: {len(entry['pending'])} settings."]
    lines += ["", "## Failed runs", ""]
    lines += [f"- {run['variant']} {run['env']} seed {run['seed']}" for run in failed] or ["None."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    command = ReportCommand(
        __doc__, HERE, study.OUT, "the study's folder", SUMMARY, out_help="folder of RESULTS.md (default: this study's)"
    )
    args = command.parse(command.parser(), argv)
    runs, failed = load(args.runs)
    summary = analyse(runs, args.reps, len(failed))
    command.write(args, markdown(summary, failed), summary)
    print(summary["status"])


if __name__ == "__main__":
    main()
