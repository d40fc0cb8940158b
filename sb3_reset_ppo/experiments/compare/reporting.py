"""A comparison's report: the verdict in words, the figures, ``REPORT.md`` and ``summary.json``."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sb3_reset_ppo.experiments import runner, stats
from sb3_reset_ppo.experiments.compare.analysis import MIN_UPDATES, analyse, in_comparison, load
from sb3_reset_ppo.experiments.compare.settings import CompareSettings

FEW_SEEDS = 5
# The tests' level (after Holm's adjustment over the report's tests)
ALPHA = 0.05


def _triple(values: Sequence[float], digits: int = 1) -> str:
    return f"{values[0]:.{digits}f} ({values[1]:.{digits}f} to {values[2]:.{digits}f})"


def _probability_sentence(name: str, baseline: str, triple: Sequence[float], when: str, p_holm: float, tests: int) -> str:
    """A finding in words: better or worse only where the interval excludes 0.5 and ``p_holm`` is below :data:`ALPHA`."""
    verdict = stats.significance(triple[1], triple[2], 0.5) if p_holm < ALPHA else "not significant"
    test = f"Mann-Whitney p = {p_holm:.3f} (Holm-adjusted over the report's {tests} tests)"
    words = {"better": f"**{name} is better** than {baseline}", "worse": f"**{name} is worse** than {baseline}"}
    if triple[0] in (0.0, 1.0):
        # Every run of one arm above every run of the other: the interval is that one point and says nothing more
        side = "ahead of" if triple[0] == 1.0 else "behind"
        pairs = f"{name} was {side} {baseline} in every pair of runs (P({name} > {baseline}) = {triple[0]:.0f})"
        found = (
            f"{words[verdict]}: {pairs}" if verdict in words else f"{pairs}, but with so few runs that is **not significant**"
        )
        return f"{when}, {found}; {test}."
    found = words.get(verdict, f"{name} and {baseline} do not differ significantly (**not significant**)")
    return f"{when}, {found}: P({name} > {baseline}) = {_triple(triple, 2)}; {test}."


def _seconds_words(entry: dict[str, Any]) -> str:
    """An arm's median ``learn()`` seconds, and its evaluations' where they were timed."""
    if entry.get("evaluation_seconds") is None:
        return f"{entry['learn_seconds']:.1f} s (evaluations included: the runs' logs do not time them)"
    return f"{entry['learn_seconds']:.1f} s (evaluations apart: {entry['evaluation_seconds']:.1f} s)"


def _speed_sentence(name: str, baseline: str, arms: dict[str, Any], comparison: dict[str, Any]) -> str:
    """The time of ``learn()`` in words: the pairs' median ratio, or why the runs cannot say which arm is faster."""
    low, high = comparison["pair_ratios"]
    medians = f"median `learn()` {_seconds_words(arms[name])} against {_seconds_words(arms[baseline])}"
    pairs = f"{comparison['time_pairs']} pairs of runs that trained at the same time on one machine, {low:.2f} to {high:.2f}"
    updates = [arms[arm]["updates"] for arm in (name, baseline) if arms[arm].get("updates") is not None]
    if updates and min(updates) < MIN_UPDATES:
        return (
            f"Per second: **too short to judge speed**: a run made {min(updates)} update(s), fewer than {MIN_UPDATES}, "
            f"so start-up and evaluation weigh as much as training ({medians}; {pairs}); give more --timesteps."
        )
    if low < 1 < high:
        return (
            f"Per second: **not enough to judge speed**: the side-by-side pairs disagree on which is faster ({pairs}; "
            f"{medians}); give more --timesteps or seeds."
        )
    return (
        f"Per second: {name}'s `learn()` takes {comparison['time_ratio']:.2f} of {baseline}'s time, the median ratio of "
        f"{pairs} ({medians} over all runs)."
    )


# The verdict's findings per env step: (the comparison's key, when)
_PER_STEP = (("final", "Per env step, at the end of training"), ("auc", "Per env step, over training"))


def verdict(summary: dict[str, Any], seeds: int, failed: dict[str, int] | None = None) -> list[str]:
    """
    The verdict in words, one line per finding.

    :param summary: :func:`~sb3_reset_ppo.experiments.compare.analysis.analyse`'s numbers
    :param seeds: The fewest finished runs of an arm (a warning below :data:`FEW_SEEDS`)
    :param failed: Runs per arm that failed with an error (left out of the numbers)
    """
    baseline, tests = summary["baseline"], summary["tests"]
    lines = []
    for name, comparison in summary["comparisons"].items():
        p_holm = comparison["p_holm"]
        for key, when in _PER_STEP:
            lines.append(_probability_sentence(name, baseline, comparison[key], when, p_holm[key], tests))
        if comparison["time_ratio"] is not None:
            lines.append(_speed_sentence(name, baseline, summary["arms"], comparison))
        else:
            lines.append(
                f"Per second: no {name} run trained at the same time as a {baseline} run on one machine, so no time ratio "
                "is given (machines and loads differ in speed)."
            )
        same_time = comparison["equal_time"]
        if same_time is None:
            lines.append("Equal wall-clock time: not measured (runs without a training log).")
        elif same_time["probability"] is None:
            lines.append(
                f"Equal wall-clock time: not measured (a run had no evaluation by {same_time['seconds']:.0f} s, the faster "
                "arm's median `learn()` time)."
            )
        else:
            when = f"Stopped at {same_time['seconds']:.0f} s of `learn()` (the faster arm's median time)"
            lines.append(_probability_sentence(name, baseline, same_time["probability"], when, p_holm["equal_time"], tests))
    hosts = sorted({host for entry in summary["arms"].values() for host in entry["hosts"]})
    if len(hosts) > 1:
        lines.append(
            f"The runs trained on {len(hosts)} machines: the equal wall-clock comparison mixes their speeds (the time "
            "ratio uses only pairs on one machine)."
        )
    for name, count in sorted((failed or {}).items()):
        lines.append(f"{count} run(s) of {name} failed with an error and are left out of these numbers (see Failed runs).")
    if seeds < FEW_SEEDS:
        lines.append(
            f"With {seeds} seed(s) per arm the intervals are wide and rest on few runs: use 10 or more seeds before deciding."
        )
    return lines


def figures(by_arm: dict[str, list[dict[str, Any]]], folder: Path, env: str) -> list[Path]:
    """
    Plot into ``folder`` the return on ``env`` (mean and standard error over seeds) against env steps and seconds.

    :return: The figures' paths
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # the compare extra
        raise ImportError('the report\'s figures need matplotlib: in the clone, pip install -e ".[compare]"') from error
    folder.mkdir(parents=True, exist_ok=True)

    def save(fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
        ax.set(xlabel=xlabel, ylabel="evaluation return", title=title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, arm_runs in by_arm.items():
        if not arm_runs:
            continue
        length = min(len(run["eval_mean"]) for run in arm_runs)
        # (n_runs, n_evaluations): the evaluations all runs have
        curves = np.array([run["eval_mean"][:length] for run in arm_runs])
        steps = arm_runs[0]["timesteps"][:length]
        mean = curves.mean(axis=0)
        spread = curves.std(axis=0, ddof=1) / np.sqrt(len(curves)) if len(curves) > 1 else np.zeros_like(mean)
        ax.plot(steps, mean, label=f"{name} ({len(curves)} seeds)")
        ax.fill_between(steps, mean - spread, mean + spread, alpha=0.2)
    paths.append(save(fig, ax, "env steps", f"{env}: return per env step", folder / "return_vs_steps.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for index, (name, arm_runs) in enumerate(by_arm.items()):
        timed = [run for run in arm_runs if run["times"] is not None]
        for number, run in enumerate(timed):
            ax.plot(run["times"], run["eval_mean"], color=f"C{index}", alpha=0.6, label=name if number == 0 else None)
    paths.append(save(fig, ax, "seconds of learn()", f"{env}: return per second (each run)", folder / "return_vs_seconds.png"))
    return paths


# The methods of stats.mann_whitney, in words
_METHOD_WORDS = {
    "exact": "exact where the scores have no ties",
    "permutation": "an exact permutation test on midranks where they have ties",
    "permutation (monte carlo)": f"a permutation test on midranks from {stats.PERMUTATIONS:,} random splits where they "
    "have ties and more splits exist",
    "undefined": "1 where every score is the same",
}


def markdown(summary: dict[str, Any], recorded: dict[str, Any], lines: list[str], pictures: list[Path], out: Path) -> str:
    """
    ``REPORT.md``: the verdict first, then the table, the figures, the settings and what failed.

    :param summary: :func:`~sb3_reset_ppo.experiments.compare.analysis.analyse`'s numbers
    :param recorded: The recorded settings (``planning.record``) with the ``command`` and the ``failed`` runs
    :param out: The comparison's folder, which the links to the ``pictures`` (:func:`figures`) are relative to
    """
    baseline, threads = summary["baseline"], recorded.get("num_threads", 1)
    threads_words = "torch's default number of threads" if threads == -1 else f"{threads} torch thread{'s' * (threads > 1)}"
    used = {method for comparison in summary["comparisons"].values() for method in comparison.get("p_method", {}).values()}
    methods = "; ".join(words for method, words in _METHOD_WORDS.items() if method in used) or "none"
    text = [f"# {recorded['env']}: {' vs '.join(summary['arms'])}", "", "## Verdict", ""]
    text += [f"- {line}" for line in lines]
    text += [
        "", "## Numbers", "",
        "Interquartile mean over seeds with 95% stratified-bootstrap intervals (rliable, "
        f"{summary['reps']} resamples); P(arm > {baseline}): the probability of improvement with its interval, and p: "
        f"the two-sided Mann-Whitney test's p-value ({methods}), Holm-adjusted over the report's "
        f"{summary['tests']} tests. At equal wall-clock time a run that has stopped counts its final return, one still "
        "training its last evaluation by then.", "",
        f"| arm | runs | final return | return over training | median `learn()` s | median evaluation s | "
        f"P(> {baseline}) final | P(> {baseline}) over training | `learn()` s / {baseline}'s: median over the pairs "
        "of runs that trained side by side (their range) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, entry in summary["arms"].items():
        comparison = summary["comparisons"].get(name)
        if comparison is None:
            extra = "baseline | baseline | 1"
        else:
            ratio = "none"
            if comparison["time_ratio"] is not None:
                low, high = comparison["pair_ratios"]
                ratio = f"{comparison['time_ratio']:.2f} ({comparison['time_pairs']} pairs: {low:.2f} to {high:.2f})"
            p_holm = comparison["p_holm"]
            extra = " | ".join(f"{_triple(comparison[key], 2)}, p {p_holm[key]:.3f}" for key, _ in _PER_STEP)
            extra += f" | {ratio}"
        evaluating = "not timed" if entry.get("evaluation_seconds") is None else f"{entry['evaluation_seconds']:.1f}"
        text.append(
            f"| {name} | {entry['runs']} | {_triple(entry['final'])} | {_triple(entry['auc'])} | "
            f"{entry['learn_seconds']:.1f} | {evaluating} | {extra} |"
        )
    text += ["", "## Figures", ""]
    text += [f"![{picture.stem}]({picture.relative_to(out).as_posix()})" for picture in pictures]
    text += [
        "", "## Settings", "",
        f"- command: `{recorded['command']}`",
        f"- hyperparameter file (every arm): `{recorded['conf_file']}`; shared settings: {recorded['hyperparams'] or 'none'}",
        f"- seeds 0 to {recorded['seeds'] - 1}; budget: {recorded['timesteps'] or 'the file n_timesteps'} env steps; "
        f"{recorded['evaluations']} evaluations of {recorded['eval_episodes']} deterministic episodes on a separate env; "
        f"final return: the mean of the last {recorded['final_evaluations']}",
        "- `learn()` seconds: SB3's clock (env steps over `time/fps`) at each evaluation, the last update not counted, "
        "less the seconds the evaluations took (`time/evaluation_seconds`, where the run's log has it: the median "
        f"evaluation s column); runs trained with {threads_words} each",
    ]  # fmt: skip
    text += [f"- arm {arm['name']}: `{arm['algo']}` {' '.join(arm['hyperparams'])}".rstrip() for arm in recorded["arms"]]
    failed = recorded.get("failed") or []
    if failed:
        text += ["", "## Failed runs", ""]
        text += [f"- {run['variant']} seed {run['seed']}: exit {run['returncode']}, log `{run['log']}`" for run in failed]
    return "\n".join(text) + "\n"


def report(settings: CompareSettings, recorded: dict[str, Any]) -> Path:
    """
    Write ``REPORT.md``, ``summary.json`` and the figures into ``settings.out``.

    :param recorded: The comparison's recorded settings with the ``command`` that ran it
    :return: The report's path
    :raises NothingToCompare: the baseline or every other arm has no finished run
    """
    by_arm = load(settings)
    summary = analyse(by_arm, settings.baseline, settings.reps, settings.final_evaluations)
    pictures = figures(by_arm, settings.out / "figures", settings.env)
    failed = [
        {key: run[key] for key in ("variant", "seed", "returncode")} | {"log": str(run["dir"] / "log.txt.gz")}
        for run in runner.load_failed(settings.out / "runs")
        if in_comparison(run, settings) and not (run["dir"] / runner.RUN_FILE).exists()
    ]
    counts = {name: sum(run["variant"] == name for run in failed) for name in {run["variant"] for run in failed}}
    lines = verdict(summary, min(entry["runs"] for entry in summary["arms"].values()), counts)
    (settings.out / "summary.json").write_text(json.dumps({**summary, "failed": failed, "verdict": lines}, indent=2))
    path = settings.out / "REPORT.md"
    path.write_text(markdown(summary, {**recorded, "failed": failed}, lines, pictures, settings.out))
    return path
