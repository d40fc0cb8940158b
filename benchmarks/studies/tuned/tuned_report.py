"""
The tuned study's report (``PROTOCOL.md``, Fresh seeds and endpoint), from the runs stored so far.

Per env, each arm's fresh-seed runs (its selected trial on seeds 300 to 309): the IQM of the final evaluation's mean
return with its 95% stratified-bootstrap interval, and the probability of improvement P(ResetPPO > RecurrentPPO)
with its interval and a two-sided Mann-Whitney test, Holm-adjusted over the envs (the study's only tests; an env
is tested, and its comparison given a verdict, only once both arms have all 10 fresh seeds, ``NOTES.md``).
Descriptive: the return over training per env step (the mean of the 20 evaluations, i.e. the area under the curve
over the budget, normalised), ``learn()`` seconds (from each run's training log) with the median over seeds of the
ratio ResetPPO / RecurrentPPO (over the seeds whose two runs trained at one commit on one machine: seconds on two
CPUs are not comparable; how many of those also trained side by side is stated), and each arm's return at the median
``learn()`` seconds of the faster arm's runs (a run not evaluated by then counts its first evaluation). The selection
(each top trial's search value and its selection runs' mean) is shown beside them. Works on partial runs; the
statistics are ``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/tuned/tuned_report.py [--runs DIR] [--out DIR] [--summaries DIR] [--reps 2000]
(prints every statement; writes ``RESULTS.md`` and ``figures/learning_curves.png`` into ``--out``, default this
study's folder, and ``tuned_summary.json`` into ``--summaries``, default ``benchmarks/results/``)
"""

import functools
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.kit import rundata
from benchmarks.kit.report import (
    NO_VERDICT,
    estimate_or,
    holm_verdict,
    improvement_triple,
    iqm_triple,
    learning_curves,
    machines,
)
from benchmarks.kit.study_report import ReportCommand
from benchmarks.studies.tuned import tuned_study as study
from sb3_reset_ppo.experiments import runner, stats

HERE = Path(__file__).resolve().parent
RUNS = rundata.RESULTS / "tuned"
# An estimate with its interval, "none" without one (the page states estimates in sentences)
_estimate = functools.partial(estimate_or, missing="none")
BASE, OTHER = "tuned_reset", study.OTHER_ARM
NAMES = {BASE: "ResetPPO", OTHER: "RecurrentPPO"}
ENV_ORDER = ["EarlyChoice-v0", "CartPoleNoVel-v1", "PendulumNoVel-v1"]


def load(runs_dir: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The fresh-seed runs (``<runs>/fresh/<arm>/<env>/seed<k>/``) by env and arm, each with its ``learn()`` seconds."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in runner.load_runs(runs_dir / "fresh"):
        run["learn"] = runner.elapsed_seconds(run)
        found.setdefault(run["env"], {}).setdefault(run["variant"], []).append(run)
    order = [BASE, OTHER]
    return {
        env: {arm: found[env][arm] for arm in sorted(found[env], key=lambda a: (order + [a]).index(a))}
        for env in sorted(found, key=lambda e: (ENV_ORDER + [e]).index(e))
    }


def selections(runs_dir: Path, envs: list[str]) -> dict[str, dict[str, Any]]:
    """Each arm's stored selection (``selected.json``) per env, where there is one."""
    out: dict[str, dict[str, Any]] = {}
    for env in envs:
        for arm in (BASE, OTHER):
            path = runs_dir / "selection" / env / arm / "selected.json"
            if path.exists():
                out.setdefault(env, {})[arm] = json.loads(path.read_text())
    return out


def check_trials(runs: dict[str, dict[str, list[dict[str, Any]]]], selected: dict[str, dict[str, Any]]) -> None:
    """
    Refuse fresh-seed runs of another trial than their arm's selected one (a fresh run records its ``trial``).

    :raises ValueError: naming the run, its trial and the selected one
    """
    for env, by_arm in runs.items():
        for arm, records in by_arm.items():
            chosen = selected.get(env, {}).get(arm)
            for run in records:
                if chosen is not None and "trial" in run and int(run["trial"]) != int(chosen["trial"]):
                    raise ValueError(
                        f"fresh run {arm} {env} seed {run['seed']} trained trial {run['trial']}, but the selected trial "
                        f"is {chosen['trial']} (selection/{env}/{arm}/{study.SELECTED}): only the selected trial's runs "
                        "enter the report"
                    )


def learn_seconds(run: dict[str, Any]) -> float | None:
    """A run's ``learn()`` seconds at its final evaluation (None without a training log)."""
    return None if run["learn"] is None else float(run["learn"][-1])


def at_time(run: dict[str, Any], seconds: float) -> float:
    """A run's return when stopped at ``seconds`` of ``learn()`` (before its first evaluation: that evaluation's)."""
    return stats.score_at_time(run["learn"], run["eval_mean"], seconds, 1, float(run["eval_mean"][0]))


def time_comparison(by_arm: dict[str, list[dict[str, Any]]], reps: int) -> dict[str, Any] | None:
    """
    ``learn()`` seconds of both arms: the median ratio ResetPPO / RecurrentPPO over the seeds trained by both at one
    commit on one machine (``pairs`` of them), and each arm's return at the median seconds of the faster arm (None
    unless every run has its training log).
    """
    seconds: dict[str, dict[int, float]] = {arm: {} for arm in (BASE, OTHER)}
    where: dict[str, dict[int, tuple[Any, Any]]] = {arm: {} for arm in (BASE, OTHER)}
    for arm in (BASE, OTHER):
        for run in by_arm[arm]:
            value = learn_seconds(run)
            if value is None:
                return None
            seconds[arm][int(run["seed"])] = value
            where[arm][int(run["seed"])] = (run.get("commit"), run.get("machine"))
    # Only a seed whose two runs trained at one commit on one machine gives a ratio
    ratios = [
        value / seconds[OTHER][seed]
        for seed, value in seconds[BASE].items()
        if seed in seconds[OTHER] and where[BASE][seed] == where[OTHER][seed]
    ]
    # Of those, the seeds whose two runs also trained at one time (overlapping by at least half of the shorter)
    together = len(stats.side_by_side(by_arm[BASE], by_arm[OTHER]))
    medians = {arm: statistics.median(seconds[arm].values()) for arm in (BASE, OTHER)}
    faster = min(medians, key=lambda arm: medians[arm])
    scores = {arm: [at_time(r, medians[faster]) for r in by_arm[arm]] for arm in (BASE, OTHER)}
    return {
        "median_seconds": medians, "ratio": statistics.median(ratios) if ratios else None, "pairs": len(ratios),
        "side_by_side": together,
        "faster": faster, "at_seconds": medians[faster], "return_at": {arm: iqm_triple(v, reps) for arm, v in scores.items()},
        "probability_at": improvement_triple(scores[BASE], scores[OTHER], reps),
    }  # fmt: skip


def analyse(
    runs: dict[str, dict[str, list[dict[str, Any]]]], selected: dict[str, dict[str, Any]], reps: int = stats.REPS
) -> dict[str, Any]:
    """Every number of the report, per env: the arms' endpoints and the comparison of ResetPPO with RecurrentPPO."""
    summary: dict[str, Any] = {"envs": {}, "reps": reps, "runs": sum(len(r) for by in runs.values() for r in by.values())}
    tested: list[str] = []
    for env, by_arm in runs.items():
        arms: dict[str, Any] = {}
        for arm, records in by_arm.items():
            seconds = [s for s in (learn_seconds(r) for r in records) if s is not None]
            arms[arm] = {
                "runs": len(records), "seeds": sorted(int(r["seed"]) for r in records),
                "trials": sorted({int(r["trial"]) for r in records if "trial" in r}),
                "final": iqm_triple([r["final"] for r in records], reps), "auc": iqm_triple([r["auc"] for r in records], reps),
                "learn_seconds": iqm_triple(seconds, reps),
            }  # fmt: skip
        complete = all(set(study.FRESH_SEEDS) <= {int(r["seed"]) for r in by_arm.get(arm, [])} for arm in (BASE, OTHER))
        entry: dict[str, Any] = {"arms": arms, "selection": selected.get(env, {}), "complete": complete}
        if BASE in by_arm and OTHER in by_arm:
            final, other_final = ([r["final"] for r in by_arm[arm]] for arm in (BASE, OTHER))
            auc, other_auc = ([r["auc"] for r in by_arm[arm]] for arm in (BASE, OTHER))
            p, method = stats.mann_whitney(final, other_final)
            entry["comparison"] = {
                "final": {"probability": improvement_triple(final, other_final, reps), "p": p, "method": method},
                "auc": {"probability": improvement_triple(auc, other_auc, reps)},
                "time": time_comparison(by_arm, reps),
            }
            if complete:
                tested.append(env)
        summary["envs"][env] = entry
    adjusted = stats.holm([summary["envs"][env]["comparison"]["final"]["p"] for env in tested]) if tested else []
    for env, p_holm in zip(tested, adjusted, strict=True):
        summary["envs"][env]["comparison"]["final"]["p_holm"] = p_holm
    for entry in summary["envs"].values():
        if "comparison" in entry:
            final = entry["comparison"]["final"]
            final["verdict"] = verdict(final) if "p_holm" in final else NO_VERDICT
    summary["family"] = len(tested)
    return summary


def verdict(result: dict[str, Any]) -> str:
    """
    ``better`` / ``worse`` (ResetPPO against RecurrentPPO) where the interval excludes 0.5 and Holm's p < 0.05. Only an
    env whose arms both have every fresh seed is tested (:func:`analyse`); the others' comparisons have no verdict.
    """
    return holm_verdict(result["probability"], result["p_holm"])


def _holm(final: dict[str, Any], spec: str) -> str:
    """A comparison's Holm-adjusted p, or "-" where it is not tested yet."""
    return format(final["p_holm"], spec) if "p_holm" in final else "-"


def lines(summary: dict[str, Any]) -> list[str]:
    """The report's statements: every result with its interval, significant or not."""
    out = [
        f"Tests: {summary['family']} (final return, one per env, Holm); IQM over seeds, 95% stratified-bootstrap intervals."
    ]
    for env, entry in summary["envs"].items():
        out.append(f"## {env}")
        for arm, values in entry["arms"].items():
            out.append(
                f"- {NAMES.get(arm, arm)} ({arm}, trial {', '.join(map(str, values['trials']))}, {values['runs']} runs): "
                f"final return {_estimate(values['final'])}; mean over training {_estimate(values['auc'])}; learn() s "
                f"{_estimate(values['learn_seconds'], 1)}"
            )
        if "comparison" in entry:
            final, auc, time = (entry["comparison"][key] for key in ("final", "auc", "time"))
            out.append(
                f"- P(ResetPPO > RecurrentPPO), final return: {_estimate(final['probability'])}, Mann-Whitney p "
                f"{final['p']:.3g} ({final['method']}), Holm p {_holm(final, '.3g')}: {final['verdict']}"
            )
            out.append(f"- P(ResetPPO > RecurrentPPO), mean over training: {_estimate(auc['probability'])} (descriptive)")
            if time is not None:
                ratio = "none" if time["ratio"] is None else f"{time['ratio']:.2f}"
                out.append(
                    f"- learn() s: median ratio ResetPPO / RecurrentPPO {ratio} ({time['pairs']} seeds, both runs on one "
                    f"machine, {time['side_by_side']} of them side by side); at "
                    f"{time['at_seconds']:.0f} s (the median of {NAMES[time['faster']]}'s runs) ResetPPO "
                    f"{_estimate(time['return_at'][BASE])}, RecurrentPPO {_estimate(time['return_at'][OTHER])}, "
                    f"P(ResetPPO > RecurrentPPO) {_estimate(time['probability_at'])} (descriptive)"
                )
    return out


def selection_table(entry: dict[str, Any]) -> list[str]:
    """Each arm's selection on an env: the selection mean of each of its top trials, the selected one in bold."""
    out = []
    for arm, chosen in entry["selection"].items():
        searched = chosen.get("search_values", {})
        trials = ", ".join(
            f"{'**' if int(k) == chosen['trial'] else ''}{k}: {mean:.3f}{'**' if int(k) == chosen['trial'] else ''}"
            + (f" ({searched[k]:.3f})" if k in searched else "")
            for k, mean in chosen["means"].items()
        )
        out.append(f"| {NAMES.get(arm, arm)} | {chosen['trial']} | {trials} |")
    if not out:
        return []
    return [
        "Selection (seeds 200 to 202): the mean final return of each of the search's top 5 trials, the selected one in",
        "bold, and in brackets the trial's value in the search (its last evaluation, 10 episodes).",
        "",
        "| arm | selected trial | trial: selection mean (search value) |",
        "|---|---|---|",
        *out,
        "",
    ]


def markdown(summary: dict[str, Any], runs: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """The results page: how the runs were made, then per env the arms' endpoints, the test and the selection."""
    every = [record for by_arm in runs.values() for records in by_arm.values() for record in records]
    commits = sorted({record["commit"][:8] for record in every})
    out = [
        "# Tuned against tuned, with today's ResetPPO (benchmarks/studies/tuned/PROTOCOL.md)",
        "",
        "Measured by `benchmarks/studies/tuned/tuned_study.py` and summarised by `benchmarks/studies/tuned/tuned_report.py`",
        "(this file is its output). Each arm is its search's selected trial (ResetPPO: `tuned_reset`, searched with the",
        "window settings at their defaults; RecurrentPPO: `ev_rppo`, the evidence study's searches), on fresh seeds.",
        "",
        f"- Runs: {len(every)}; commits: "
        + ", ".join(f"`{c}` ({sum(r['commit'][:8] == c for r in every)})" for c in commits)
        + f"; {sum(bool(r.get('dirty')) for r in every)} with uncommitted package changes",
        f"- Machines: {machines(every)}; one torch thread a run, two runs at a time",
        f"- Bootstrap resamples: {summary['reps']}; tests: {summary['family']} on the final return (Holm over the envs)",
        "",
    ]
    for env, entry in summary["envs"].items():
        out += [
            f"## {env}",
            "",
            "IQM over seeds with 95% stratified-bootstrap intervals. Final return: the last evaluation's mean return; "
            "mean over training: the mean of the evaluations (the curve's area over the budget, normalised).",
            "",
            "| arm | trial | runs | final return | mean over training | learn() s |",
            "|---|---|---|---|---|---|",
        ]
        for arm, values in entry["arms"].items():
            out.append(
                f"| {NAMES.get(arm, arm)} | {', '.join(map(str, values['trials']))} | {values['runs']} "
                f"| {_estimate(values['final'])} | {_estimate(values['auc'])} | {_estimate(values['learn_seconds'], 1)} |"
            )
        out.append("")
        if "comparison" in entry:
            final, auc, time = (entry["comparison"][key] for key in ("final", "auc", "time"))
            out += [
                "| P(ResetPPO > RecurrentPPO) | value | p | p, Holm | verdict |",
                "|---|---|---|---|---|",
                f"| final return | {_estimate(final['probability'])} | {final['p']:.2g} ({final['method']}) "
                f"| {_holm(final, '.2g')} | {final['verdict']} |",
                f"| mean over training | {_estimate(auc['probability'])} | - | - | descriptive |",
            ]
            if time is not None:
                ratio = "none" if time["ratio"] is None else f"{time['ratio']:.2f}"
                out += [
                    f"| return at {time['at_seconds']:.0f} learn() s | {_estimate(time['probability_at'])} | - | - "
                    "| descriptive |",
                    "",
                    f"learn() seconds: median ratio ResetPPO / RecurrentPPO over {time['pairs']} seeds {ratio} (a seed's "
                    f"two runs on one machine; {time['side_by_side']} of the seeds' two runs also trained side by side, "
                    "overlapping by at least half of the shorter). At "
                    f"{time['at_seconds']:.0f} s, the median of {NAMES[time['faster']]}'s runs: ResetPPO "
                    f"{_estimate(time['return_at'][BASE])}, RecurrentPPO {_estimate(time['return_at'][OTHER])}.",
                ]
            out.append("")
        out += selection_table(entry)
    out += ["![learning curves](figures/learning_curves.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    command = ReportCommand(__doc__, HERE, RUNS, "the study's folder (fresh/ and selection/)", "tuned_summary.json")
    parser = command.parser()
    args = command.parse(parser, argv)
    runs_dir = args.runs.resolve()
    rundata.ensure(runs_dir, runs_dir.parent)  # the stored runs' folder, unpacked from its tables where needed
    runs = load(runs_dir)
    if not runs:
        parser.error(f"no finished fresh-seed run under {runs_dir / 'fresh'}")
    selected = selections(runs_dir, list(runs))
    check_trials(runs, selected)
    summary = analyse(runs, selected, args.reps)
    print("\n".join(lines(summary)))
    every = [record for by_arm in runs.values() for records in by_arm.values() for record in records]
    command.write(
        args, markdown(summary, runs), summary, lambda path: learning_curves(every, list(runs), path, [BASE, OTHER]), end=""
    )


if __name__ == "__main__":
    main()
