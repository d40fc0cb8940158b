"""
The RL Zoo rows study's report (``PROTOCOL.md``, Reported), from the runs stored so far.

Per env: a table in the style of the RL Zoo's ``benchmark.md`` (each arm's mean +- std over runs of the 50-episode
deterministic evaluation, the published ppo_lstm score, the runs, the runs that reach the published score, the
median ``learn()`` CPU and wall seconds), each run's score (mean +- std over its 50 episodes), the IQM of the run
scores with 95% stratified-bootstrap intervals, the probability of improvement P(ResetPPO > RecurrentPPO) with its
interval, a two-sided Mann-Whitney test Holm-adjusted over the envs, and the median of the per-seed ratios of
``learn()`` seconds. While a cell has fewer than the protocol's 10 seeds the page says the study is incomplete and
states no verdict (the numbers are shown). Where the runs trained on more than one machine, a sensitivity view gives
each machine's runs alone (descriptive: the protocol asked for one machine). The statistics are
``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/zoo_rows/zoo_rows_report.py [--runs FILE] [--out DIR] [--summaries DIR]
[--reps 2000] [--readme README.md] (writes the results page ``RESULTS.md`` into ``--out``, default this study's
folder, and ``zoo_rows_summary.json`` into ``--summaries``, default ``benchmarks/results/``; with ``--readme``, also
the README's row of this study, from the summary; ``python benchmarks/kit/studies.py report zoo_rows`` runs it and
leads the page)
"""

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.report import estimate_or, improvement_triple, iqm_triple, study_opening
from benchmarks.kit.study_report import ReportCommand
from benchmarks.studies.zoo_rows import zoo_rows_study as study
from sb3_reset_ppo.experiments import stats
from sb3_reset_ppo.experiments.runner import machine_name

HERE = Path(__file__).resolve().parent
SUMMARY = "zoo_rows_summary.json"
BASE, OTHER = study.ARMS  # reset_ppo, ppo_lstm: P(BASE > OTHER) and BASE / OTHER time ratios
NAMES = {"reset_ppo": "ResetPPO", "ppo_lstm": "RecurrentPPO"}
SEEDS = 10  # the protocol's seeds per arm and env
# The README's row of this study: the first cell starts with this, the link names the docs page
README_ROW = "| The RL Zoo's ppo_lstm rows"
README_LINK = "[RL Zoo rows](docs/studies/zoo_rows.md)"


def load(path: Path) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], list[dict[str, Any]]]:
    """
    The stored runs: ``{env: {arm: [record, ...]}}`` of the finished ones (by seed; the envs and arms in the
    protocol's order, those with a run only), and the failed ones.
    """
    records = study.read_records(path)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for env in study.PUBLISHED:
        for arm in study.ARMS:
            found = sorted((r for r in records if r["status"] == "ok" and (r["env"], r["algo"]) == (env, arm)), key=seed)
            if found:
                runs.setdefault(env, {})[arm] = found
    return runs, sorted((r for r in records if r["status"] != "ok"), key=lambda r: (r["env"], r["algo"], r["seed"]))


def seed(record: dict[str, Any]) -> int:
    """A record's seed."""
    return int(record["seed"])


def reaches(score: float, published: float) -> bool:
    """The protocol's rule: a run reaches the published score when its score, rounded to two decimals, is at least it."""
    return round(score, 2) >= published


def time_ratios(base: list[dict[str, Any]], other: list[dict[str, Any]], key: str) -> list[float]:
    """Per seed that both arms ran (at the same commit, on the same machine), ``base``'s ``key`` over ``other``'s."""
    other_of = {seed(r): r for r in other}
    return [
        r[key] / other_of[seed(r)][key]
        for r in base
        if seed(r) in other_of and (r["commit"], r["machine"]) == (other_of[seed(r)]["commit"], other_of[seed(r)]["machine"])
    ]


def median(values: list[float]) -> float | None:
    """The median (``None`` for no value)."""
    return float(np.median(values)) if values else None


def analyse(runs: dict[str, dict[str, list[dict[str, Any]]]], reps: int = stats.REPS) -> dict[str, Any]:
    """Every number of the report, per env and arm, and the comparison of ResetPPO with RecurrentPPO per env."""
    envs: dict[str, Any] = {}
    tested: list[tuple[str, float]] = []
    ratios: dict[str, list[float]] = {"cpu_seconds": [], "wall_seconds": []}
    for env, by_arm in runs.items():
        published = study.PUBLISHED[env]
        arms = {arm: arm_numbers(records, published[0], reps) for arm, records in by_arm.items()}
        entry: dict[str, Any] = {"published": list(published), "arms": arms}
        if BASE in by_arm and OTHER in by_arm:
            base, other = arms[BASE]["scores"], arms[OTHER]["scores"]
            p, method = stats.mann_whitney(base, other)
            for key in ratios:
                entry[key.replace("seconds", "ratios")] = time_ratios(by_arm[BASE], by_arm[OTHER], key)
                ratios[key] += entry[key.replace("seconds", "ratios")]
            entry["comparison"] = {
                "probability": improvement_triple(base, other, reps),
                "p": p,
                "method": method,
                "cpu_ratio": median(entry["cpu_ratios"]),
                "wall_ratio": median(entry["wall_ratios"]),
                "pairs": len(entry["cpu_ratios"]),
            }
            tested.append((env, p))
        envs[env] = entry
    for (env, _), adjusted in zip(tested, stats.holm([p for _, p in tested]) if tested else [], strict=True):
        envs[env]["comparison"]["p_holm"] = adjusted
    cells = {env: {arm: len(runs.get(env, {}).get(arm, [])) for arm in study.ARMS} for env in study.PUBLISHED}
    stored, planned = sum(sum(by_arm.values()) for by_arm in cells.values()), SEEDS * len(study.PUBLISHED) * len(study.ARMS)
    complete = min(n for by_arm in cells.values() for n in by_arm.values()) >= SEEDS
    summary = {
        "reps": reps,
        "runs": stored,
        "planned": planned,
        "complete": complete,
        # The study's state in words, for the verdict (study.yml)
        "state": (
            f"Complete: {stored} runs, the protocol's {SEEDS} seeds of each arm on every env"
            if complete
            else f"Incomplete: {stored} of {planned} runs stored, so no verdict yet (one is stated when every arm has "
            f"{SEEDS} seeds on every env)"
        ),
        "cells": cells,
        "envs": envs,
        "reached": {arm: sum(e["arms"][arm]["reached"] for e in envs.values() if arm in e["arms"]) for arm in study.ARMS},
        "arm_runs": {arm: sum(by_arm[arm] for by_arm in cells.values()) for arm in study.ARMS},
        # Over every env: the median of the per-seed ratios of the seeds both arms ran
        "cpu_ratio": median(ratios["cpu_seconds"]),
        "wall_ratio": median(ratios["wall_seconds"]),
        "pairs": len(ratios["cpu_seconds"]),
    }
    for entry in envs.values():
        if "comparison" in entry:
            entry["comparison"]["verdict"] = verdict(summary, entry["comparison"])
    summary["machines"] = by_machine(runs, reps)
    return summary


def by_machine(runs: dict[str, dict[str, list[dict[str, Any]]]], reps: int) -> dict[str, dict[str, Any]]:
    """
    The sensitivity view of a study whose runs trained on more than one machine (empty otherwise): per machine and env,
    each arm's runs there and, where both arms have some, P(ResetPPO > RecurrentPPO) with its interval and the
    Mann-Whitney p over those runs alone (descriptive, not Holm-adjusted).
    """
    names = sorted({machine_name(r["machine"]) for by_arm in runs.values() for records in by_arm.values() for r in records})
    if len(names) < 2:
        return {}
    view: dict[str, dict[str, Any]] = {}
    for name in names:
        for env, by_arm in runs.items():
            here = {arm: [r["score"] for r in by_arm.get(arm, []) if machine_name(r["machine"]) == name] for arm in study.ARMS}
            entry: dict[str, Any] = {"runs": {arm: len(scores) for arm, scores in here.items()}}
            if here[BASE] and here[OTHER]:
                entry["probability"] = improvement_triple(here[BASE], here[OTHER], reps)
                entry["p"] = stats.mann_whitney(here[BASE], here[OTHER])[0]
            view.setdefault(name, {})[env] = entry
    return view


def machine_lines(summary: dict[str, Any]) -> list[str]:
    """The sensitivity view per machine (none when every run trained on one machine)."""
    if not summary.get("machines"):
        return []
    out = [
        "## By machine (sensitivity)",
        "",
        "The runs trained on more than one machine, where the protocol asked for one: each machine's runs alone, with",
        "the probability that a ResetPPO run scores above a RecurrentPPO run of that machine and the Mann-Whitney p",
        "(descriptive, not Holm-adjusted; the verdicts above are over every run).",
        "",
        f"| machine | env | {NAMES[BASE]} runs | {NAMES[OTHER]} runs | P({NAMES[BASE]} > {NAMES[OTHER]}) | p |",
        "|---|---|---|---|---|---|",
    ]
    for name, envs in summary["machines"].items():
        for env, entry in envs.items():
            runs = entry["runs"]
            compared = f"{estimate_or(entry['probability'], 2)} | {entry['p']:.2g}" if "probability" in entry else "- | -"
            out.append(f"| {name} | {env} | {runs[BASE]} | {runs[OTHER]} | {compared} |")
    return [*out, ""]


def arm_numbers(records: list[dict[str, Any]], published: float, reps: int) -> dict[str, Any]:
    """One arm's runs on one env: their scores, mean +- std, the runs that reach ``published``, IQM, seconds."""
    scores = [float(r["score"]) for r in records]
    cpu, wall = ([float(r[key]) for r in records] for key in ("cpu_seconds", "wall_seconds"))
    return {
        "runs": len(records),
        "seeds": [seed(r) for r in records],
        "scores": scores,
        "episode_std": [float(np.std(r["episode_returns"])) for r in records],
        "mean": float(np.mean(scores)),
        "std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0,
        "reached": sum(reaches(score, published) for score in scores),
        "iqm": iqm_triple(scores, reps),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "median_cpu_seconds": median(cpu),
        "median_wall_seconds": median(wall),
        "timesteps": sorted({int(r["timesteps"]) for r in records}),
    }


def verdict(summary: dict[str, Any], comparison: dict[str, Any]) -> str:
    """
    ``"ResetPPO higher"``, ``"RecurrentPPO higher"`` or ``"not significant"`` (Holm p >= 0.05, or the probability's
    interval holds 0.5); ``"none while incomplete"`` before every cell has the protocol's seeds.
    """
    if not summary["complete"]:
        return "none while incomplete"
    side = stats.significance(comparison["probability"][1], comparison["probability"][2], 0.5)
    if side == "not significant" or comparison["p_holm"] >= 0.05:
        return "not significant"
    return f"{NAMES[BASE] if side == 'better' else NAMES[OTHER]} higher"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _triple(triple: list[float]) -> str:
    """A probability with its interval, as the studies' verdicts write it: ``0.42 (0.34 to 0.49)``."""
    point, low, high = triple
    return f"{point:.2f} ({low:.2f} to {high:.2f})"


def status_lines(summary: dict[str, Any]) -> list[str]:
    """The study's state: complete, or how many runs each cell holds (and no verdict)."""
    if summary["complete"]:
        return ["## Status", "", f"Complete: {summary['runs']} runs, the protocol's {SEEDS} seeds in every cell.", ""]
    out = [
        "## Status: incomplete",
        "",
        f"{summary['runs']} of the protocol's {summary['planned']} runs are stored ({SEEDS} seeds per arm and env); "
        "the runs stored per cell:",
        "",
        "| env | " + " | ".join(NAMES[arm] for arm in study.ARMS) + " |",
        "|---|" + "---|" * len(study.ARMS),
    ]
    for env, by_arm in summary["cells"].items():
        out.append(f"| {env} | " + " | ".join(f"{by_arm[arm]} of {SEEDS}" for arm in study.ARMS) + " |")
    out += [
        "",
        "The study is incomplete: no verdict is stated, and every number below will change as runs are added.",
        "",
    ]
    return out


def table_lines(summary: dict[str, Any]) -> list[str]:
    """The table in the style of the RL Zoo's ``benchmark.md``, one row per arm and env."""
    out = [
        "## The rows, in the style of the RL Zoo's benchmark.md",
        "",
        "Each run's score is the mean return of its final model over 50 deterministic episodes with the saved",
        "VecNormalize statistics (the zoo's benchmark evaluates its one run the same way, but over 150,000 steps: 300,",
        "750 and 1,340 episodes on these rows); mean +- std over the runs (sample std), beside the",
        "zoo's published ppo_lstm score (one run: mean +- std over its episodes). A run reaches the published score when",
        "its score, rounded to two decimals as published, is at least the published mean (PROTOCOL.md). `learn()`",
        "seconds: medians over the runs (CPU seconds of the training process, the cost endpoint; wall seconds on a",
        "shared machine, descriptive).",
        "",
        "| algo | env_id | mean_reward +- std (over runs) | published (ppo_lstm) | runs | reach the published score "
        "| n_timesteps | learn() CPU s | learn() wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for env, entry in summary["envs"].items():
        mean, std = entry["published"]
        for arm, values in entry["arms"].items():
            steps = ", ".join(str(n) for n in values["timesteps"])
            out.append(
                f"| {arm} | {env} | {values['mean']:.2f} +- {values['std']:.2f} | {mean:.2f} +- {std:.2f} "
                f"| {values['runs']} | {values['reached']} of {values['runs']} | {steps} "
                f"| {_number(values['median_cpu_seconds'], 0)} | {_number(values['median_wall_seconds'], 0)} |"
            )
    return out + [""]


def runs_lines(summary: dict[str, Any]) -> list[str]:
    """Per env, every run: its score (mean +- std over its 50 episodes) and its learn() CPU seconds, seed by seed."""
    out = [
        "## Every run",
        "",
        "Score: mean +- std over the run's 50 evaluation episodes; `learn()` CPU seconds.",
        "",
    ]
    for env, entry in summary["envs"].items():
        arms = list(entry["arms"])
        out += [
            f"### {env}",
            "",
            "| seed | " + " | ".join(f"{arm} score | {arm} CPU s" for arm in arms) + " |",
            "|---|" + "---|---|" * len(arms),
        ]
        cells: dict[int, dict[str, str]] = {}
        for arm, values in entry["arms"].items():
            for index, run_seed in enumerate(values["seeds"]):
                score, spread = values["scores"][index], values["episode_std"][index]
                cells.setdefault(run_seed, {})[arm] = f"{score:.2f} +- {spread:.2f} | {values['cpu_seconds'][index]:.0f}"
        for run_seed in sorted(cells):
            out.append(f"| {run_seed} | " + " | ".join(cells[run_seed].get(arm, "- | -") for arm in arms) + " |")
        out.append("")
    return out


def comparison_lines(summary: dict[str, Any]) -> list[str]:
    """Per env: both arms' IQM, P(ResetPPO > RecurrentPPO), the tests, the verdict and the time ratios."""
    out = [
        "## ResetPPO against RecurrentPPO",
        "",
        "IQM of the run scores with 95% stratified-bootstrap intervals; the probability that a ResetPPO run scores above",
        "a RecurrentPPO run, with its 95% bootstrap interval; a two-sided Mann-Whitney test per env, Holm-adjusted over",
        "the envs compared (a difference only where Holm p < 0.05 and the interval excludes 0.5); `learn()` seconds:",
        "the median over seeds of ResetPPO's run over RecurrentPPO's run of the same seed (both at one commit, on one",
        "machine; pairs).",
        "",
        f"| env | {NAMES[BASE]} IQM | {NAMES[OTHER]} IQM | P({NAMES[BASE]} > {NAMES[OTHER]}) | p | p, Holm | verdict "
        "| learn() CPU s ratio | learn() wall s ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for env, entry in summary["envs"].items():
        iqm = {arm: estimate_or(entry["arms"][arm]["iqm"], 2) if arm in entry["arms"] else "-" for arm in study.ARMS}
        if "comparison" not in entry:
            out.append(f"| {env} | {iqm[BASE]} | {iqm[OTHER]} | - | - | - | - | - | - |")
            continue
        result = entry["comparison"]
        out.append(
            f"| {env} | {iqm[BASE]} | {iqm[OTHER]} | {estimate_or(result['probability'], 2)} | {result['p']:.2g} "
            f"({result['method']}) | {result['p_holm']:.2g} | {verdict(summary, result)} "
            f"| {_number(result['cpu_ratio'], 2)} ({result['pairs']}) | {_number(result['wall_ratio'], 2)} |"
        )
    out += [
        "",
        f"Over every env: {NAMES[BASE]}'s `learn()` takes {_number(summary['cpu_ratio'], 2)} of {NAMES[OTHER]}'s CPU "
        f"seconds and {_number(summary['wall_ratio'], 2)} of its wall seconds (medians of {summary['pairs']} seed pairs); "
        f"runs that reach the published score: {reached_text(summary)}.",
        "",
    ]
    return out


def reached_text(summary: dict[str, Any]) -> str:
    """``ResetPPO a of n, RecurrentPPO b of m`` (the runs that reach the published score, over every env)."""
    return ", ".join(f"{NAMES[arm]} {summary['reached'][arm]} of {summary['arm_runs'][arm]}" for arm in study.ARMS)


def markdown(summary: dict[str, Any], runs: dict[str, dict[str, list[dict[str, Any]]]], failed: list[dict[str, Any]]) -> str:
    """The results page: the status, the table, the comparison, every run, then how it was made."""
    every = [r for by_arm in runs.values() for records in by_arm.values() for r in records]
    opening, machines = study_opening("zoo_rows", "The RL Zoo's ppo_lstm benchmark rows, side by side", every)
    commits = sorted({r["commit"][:8] for r in every})
    tests = sum("comparison" in entry for entry in summary["envs"].values())
    versions = sorted({", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items())) for r in every})
    out = [
        *opening,
        "- Command (runs): `python benchmarks/studies/zoo_rows/zoo_rows_study.py run --workers 2`",
        f"- Runs: {summary['runs']} of {summary['planned']}; commits: "
        + ", ".join(f"`{c}` ({sum(r['commit'][:8] == c for r in every)})" for c in commits)
        + f"; {sum(bool(r['dirty']) for r in every)} with uncommitted package changes",
        f"- Machine: {machines}; one torch thread a run, two runs at a time, the 2 cores shared with other work",
        f"- Versions: {'; '.join(versions)}",
        f"- Bootstrap resamples: {summary['reps']}; Mann-Whitney tests: {tests} (Holm over the envs)",
        "",
        *status_lines(summary),
        *table_lines(summary),
        *comparison_lines(summary),
        *machine_lines(summary),
        *runs_lines(summary),
    ]
    if failed:
        out += [
            "## Failed runs",
            "",
            "Recorded as failed (an error; not counted): "
            + ", ".join(f"{r['algo']} {r['env']} seed {r['seed']} (exit code {r['returncode']})" for r in failed)
            + ".",
            "",
        ]
    return "\n".join(out)


def readme_row(summary: dict[str, Any]) -> str:
    """The README's row of this study (its results table): the runs that reach the published scores, the time ratio."""
    state = (
        f"Incomplete ({summary['runs']} of {summary['planned']} runs stored), no verdict yet. "
        if not summary["complete"]
        else ""
    )
    reached = reached_text(summary).replace(NAMES[OTHER], f"`{NAMES[OTHER]}`")
    # The pooled median leans on the env with the most pairs: each env's own median beside it
    per_env = [f"{env} {_number(e['comparison']['cpu_ratio'], 2)}" for env, e in summary["envs"].items() if "comparison" in e]
    ratio = (
        f"ResetPPO's `learn()` takes {_number(summary['cpu_ratio'], 2)} of `RecurrentPPO`'s CPU seconds (median of "
        f"{summary['pairs']} seed pairs; per env {', '.join(per_env)})"
    )
    verdicts = [
        f"{env} {_triple(e['comparison']['probability'])}, {verdict(summary, e['comparison'])}"
        for env, e in summary["envs"].items()
        if "comparison" in e
    ]
    tested = (
        f"; P(ResetPPO's score > `RecurrentPPO`'s) per env, with the verdict of its Holm-adjusted test: {', '.join(verdicts)}"
        if summary["complete"]
        else ""
    )
    return (
        f"{README_ROW} (3 envs, the zoo's hyperparameters verbatim, {SEEDS} seeds each) | {state}Runs that reach the "
        f"zoo's published score: {reached}; {ratio}{tested} | {README_LINK} |"
    )


def write_readme(path: Path, row: str) -> None:
    """Replace the README's row of this study (the line that starts with :data:`README_ROW`) with ``row``."""
    lines = path.read_text().split("\n")
    found = [index for index, line in enumerate(lines) if line.startswith(README_ROW)]
    if len(found) != 1:
        raise ValueError(f"{path} must hold one line starting with {README_ROW!r}, found {len(found)}")
    lines[found[0]] = row
    path.write_text("\n".join(lines))


def figure(summary: dict[str, Any], path: Path) -> None:
    """Per env, every run's score by arm (one dot a run) beside the published score (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.kit.report import save_figure

    envs = list(summary["envs"])
    fig, axes = plt.subplots(1, len(envs), figsize=(3.6 * len(envs), 3.4), squeeze=False)
    for axis, env in zip(axes[0], envs, strict=True):
        entry = summary["envs"][env]
        for position, arm in enumerate(study.ARMS):
            if arm in entry["arms"]:
                scores = entry["arms"][arm]["scores"]
                spread = np.linspace(-0.12, 0.12, len(scores)) if len(scores) > 1 else np.zeros(1)
                axis.scatter(position + spread, scores, s=18, alpha=0.8)
        axis.axhline(entry["published"][0], color="gray", linestyle="--", linewidth=1)
        axis.set_xticks(range(len(study.ARMS)), [NAMES[arm] for arm in study.ARMS])
        axis.set_xlim(-0.5, len(study.ARMS) - 0.5)
        axis.set_title(f"{env}\npublished {entry['published'][0]:.2f} (dashed)", fontsize=9)
        axis.set_ylabel("score (mean of 50 episodes)")
    save_figure(fig, path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    command = ReportCommand(__doc__, HERE, study.OUT, "the runs' file", SUMMARY)
    parser = command.parser()
    parser.add_argument("--readme", type=Path, default=None, help="a README whose row of this study to rewrite")
    args = command.parse(parser, argv)
    runs, failed = load(args.runs)
    if not runs:
        parser.error(f"no finished run in {args.runs}")
    summary = analyse(runs, args.reps)
    summary["readme_row"] = readme_row(summary)
    command.write(args, markdown(summary, runs, failed), summary, lambda path: figure(summary, path), "scores.png")
    if args.readme is not None:
        write_readme(args.readme, summary["readme_row"])


if __name__ == "__main__":
    main()
