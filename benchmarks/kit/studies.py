"""
The studies' front door: one command per study to rerun it, the lead of every results page, and the index of
``benchmarks/`` (``benchmarks/README.md``).

Every study is a folder ``benchmarks/studies/<name>/`` with its protocol, its notes, its results pages, its figures
and a ``study.yml`` that names its question, its verdict, its main page and figure, and the commands that train its
runs and write its pages (``{pages}`` and ``{summaries}`` in a command stand for the folders its pages and its
summaries go to: by default the study's folder and ``benchmarks/results/``).

The verdict is a sentence written by hand around numbers read from the study's summaries: ``{p:FILE:PATH}`` is a
probability with its 95% interval (``0.42 (0.34 to 0.49)``), ``{x:FILE:PATH}`` an estimate with its interval at three
significant decimals, ``{v:FILE:PATH}`` one number (two decimals; a count as it is) or a text the report wrote (such
as "pending" for an arm whose runs are not stored yet), where ``FILE`` is a summary in the summaries' folder and
``PATH`` the dotted keys to a ``[point, low, high]`` triple (or a number, or a text) in it. So the verdict a page leads
with is always the one its stored runs give.

Every main page opens, under its title, with the lead this module writes (question, verdict, main figure, the
commands to rerun it, links to the protocol and the notes); the chronicle the report generators write at the top
(commands, machines, dates) and the notes they include (deviations, amendments) move to the end of the page, under
``## How this page was made``.

Usage::

    python benchmarks/kit/studies.py run NAME        # train the study's missing runs (resumable), then its pages
    python benchmarks/kit/studies.py report NAME     # regenerate the study's pages from its stored runs
    python benchmarks/kit/studies.py index [--check] # write (or check) the leads and benchmarks/README.md

``run`` passes a SIGINT or SIGTERM it gets on to the study's command running (:func:`run_command`), which stops as it
does on its own (benchmarks/README.md); then it exits with an error, writing no pages.
"""

import argparse
import json
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.kit import rundata
from benchmarks.kit.scripts import run_script
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent

BENCHMARKS = HERE.parent
ROOT = BENCHMARKS.parent
STUDIES = BENCHMARKS / "studies"
SUMMARIES = BENCHMARKS / "results"
INDEX = BENCHMARKS / "README.md"
LEAD_START = "<!-- lead: written by benchmarks/kit/studies.py from study.yml -->"
LEAD_END = "<!-- lead end -->"
MADE = "## How this page was made"
# The speed benchmarks of the index: script -> its stored result (the latest run), under benchmarks/results/
SPEED_RESULTS = {
    "bench_train": "bench_train.txt",
    "bench_maskable": "bench_maskable.txt",
    "bench_memory": "bench_memory.txt",
    "bench_threads": "bench_threads.txt",
    "bench_export": "bench_export.txt",
    "bench_stride": "stride_summary.txt",
    "bench_envs": "bench_envs.txt",
    "bench_consecutive": "consecutive.jsonl",
    "bench_floor": "bench_floor.txt",
    "bench_sampler": "bench_sampler.txt",
    "doc_durations": "doc_durations.txt",
    "bench_cells": "bench_cells.txt",
    "venv_size": "venv_size.txt",
}


def _learn_ratios(results: Path) -> str:
    rows = json.loads((results / "bench_train.json").read_text())["results"]
    ratios = [row["reset"]["learn_ratio"] for row in rows]
    return f"ResetPPO's learn() takes {min(ratios):.2f} to {max(ratios):.2f} of RecurrentPPO's time ({len(rows)} settings)"


def _durations(results: Path) -> str:
    rows = json.loads((results / "doc_durations.json").read_text())["results"]
    return "; ".join(f"{row['item']} {row['seconds']:.0f} s" for row in rows)


def _last_line(path: Path) -> str:
    return [line for line in path.read_text().splitlines() if line.strip()][-1]


# What the index says of a speed benchmark's latest result (the others: a link to it)
HEADLINES = {
    "bench_train": _learn_ratios,
    "bench_maskable": lambda results: _last_line(results / "bench_maskable.txt"),
    "bench_memory": lambda results: _last_line(results / "bench_memory.txt"),
    "doc_durations": _durations,
}


@dataclass
class Study:
    """A study's ``study.yml``."""

    name: str
    title: str
    question: str
    verdict: str
    page: str
    figure: str | None
    report: list[list[str]]
    run: list[list[str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    chronicle: list[str] = field(default_factory=list)
    docs: str | None = None
    # The study's other results pages, each led the same way: a mapping with page, title, question, verdict, figure
    more: list[dict[str, Any]] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return STUDIES / self.name

    def pages(self) -> list["Study"]:
        """The study, then one study-like entry per further results page (its own page, question, verdict, figure)."""
        return [self] + [Study(**{**self.__dict__, "more": [], "figure": None, **extra}) for extra in self.more]


def load(name: str) -> Study:
    """
    The study ``name``'s ``study.yml``.

    :raises ValueError: ``name`` is not a study (a folder of ``benchmarks/studies/`` with a ``study.yml``)
    """
    path = STUDIES / name / "study.yml"
    if not path.is_file():
        raise ValueError(f"study must be one of {names()}, got {name!r}")
    return Study(name=name, **yaml.safe_load(path.read_text()))


def names() -> list[str]:
    """The studies, in alphabetical order."""
    return sorted(path.parent.name for path in STUDIES.glob("*/study.yml"))


def _lookup(summaries: Path, file: str, keys: str) -> Any:
    value = json.loads((summaries / file).read_text())
    for key in keys.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def fill(template: str, summaries: Path = SUMMARIES) -> str:
    """
    ``template`` with every ``{p:FILE:PATH}``, ``{x:FILE:PATH}`` and ``{v:FILE:PATH}`` replaced by the number in the
    summary (see the module's docstring).

    :raises ValueError: a placeholder of another kind, or a triple that is not ``[point, low, high]``
    """

    def number(match: re.Match) -> str:
        kind, file, keys = match.group(1), match.group(2), match.group(3)
        value = _lookup(summaries, file, keys)
        if kind == "v":
            return str(value) if isinstance(value, int | str) else f"{float(value):.2f}"
        if not (isinstance(value, list) and len(value) == 3):
            raise ValueError(f"{{{kind}:{file}:{keys}}} must name a [point, low, high] triple, got {value!r}")
        digits = 2 if kind == "p" else 3
        point, low, high = (f"{float(v):.{digits}f}" for v in value)
        return f"{point} ({low} to {high})"

    filled = re.sub(r"\{([pxv]):([\w.-]+\.json):([\w.-]+)\}", number, template)
    leftover = re.search(r"\{\w:[^}]*\}", filled)
    if leftover:
        raise ValueError(f"unknown placeholder {leftover.group(0)!r} (allowed: p, x, v)")
    return filled


def lead(study: Study, summaries: Path = SUMMARIES) -> str:
    """The lead of the study's main page: question, verdict, main figure, how to rerun, where the details are."""
    lines = [
        LEAD_START,
        "",
        f"**Question.** {study.question.strip()}",
        "",
        f"**Verdict.** {fill(study.verdict, summaries).strip()}",
        "",
    ]
    if study.figure:
        lines += [f"![{study.title}]({study.figure})", ""]
    rerun = f"`python benchmarks/kit/studies.py report {study.name}` regenerates this page from the stored runs"
    if study.run:
        rerun = f"`python benchmarks/kit/studies.py run {study.name}` trains the missing runs (resumable), then " + rerun
    folder = f"benchmarks/studies/{study.name}"
    lines += [
        f"**Rerun.** {rerun}. The question, arms and statistics were fixed in advance in `{folder}/PROTOCOL.md`; how "
        f"the runs went (machines, dates, deviations) is in `{folder}/NOTES.md` and at the end of the results page.",
        "",
        LEAD_END,
    ]
    return "\n".join(lines)


def _sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``lines`` cut at their ``## `` headings: (heading, lines) pairs, the first with heading ``""``."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in lines:
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
        sections[-1][1].append(line)
    return sections


def arrange(text: str, study: Study, summaries: Path = SUMMARIES) -> str:
    """
    A page as its report generator wrote it (or as arranged before), led by the study's lead: the title, the lead,
    the findings, then ``## How this page was made`` with the generator's opening block and the chronicle sections.

    Arranging an arranged page changes only its lead (so it is idempotent while the summaries stay the same).
    """
    lines = text.rstrip("\n").split("\n")
    if not lines[0].startswith("# "):
        raise ValueError(f"{study.name}'s page must open with a '# ' title, got {lines[0]!r}")
    title, body = lines[0], lines[1:]
    if LEAD_START in body:  # arranged before: drop the old lead
        start, end = body.index(LEAD_START), body.index(LEAD_END)
        body = body[:start] + body[end + 1 :]
    sections = _sections(body)
    opening = list(sections[0][1])
    made: list[str] = []
    kept: list[str] = []
    for heading, section in sections[1:]:
        if heading == MADE[3:]:
            made = section[1:]
        elif heading in study.chronicle:
            made += ["", "#" + section[0], *section[1:]]
        else:
            kept += section
    if any(line.strip() for line in opening):
        made = [*opening, *made]
    made = _strip_blank(made)
    out = [title, "", lead(study, summaries), "", *_strip_blank(kept)]
    if made:
        out += ["", MADE, "", *made]
    return "\n".join(out) + "\n"


def _strip_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def commands(study: Study, kind: str, pages: Path, summaries: Path) -> list[list[str]]:
    """
    The study's ``run`` or ``report`` commands with ``{pages}`` and ``{summaries}`` filled in (relative to the
    repository's root where they lie in it, so that the commands the pages state work in any checkout).
    """
    pages, summaries = (path.resolve() for path in (pages, summaries))
    pages, summaries = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else path for path in (pages, summaries))
    return [
        [argument.replace("{pages}", str(pages)).replace("{summaries}", str(summaries)) for argument in command]
        for command in (study.run if kind == "run" else study.report)
    ]


def report(study: Study, pages: Path | None = None, summaries: Path = SUMMARIES) -> Path:
    """
    Regenerate the study's pages from its stored runs (its report commands, from the repository's root), then lead
    its main page with the verdict of the new summaries.

    :return: the main page
    """
    pages = pages or study.folder
    pages.mkdir(parents=True, exist_ok=True)
    summaries.mkdir(parents=True, exist_ok=True)
    # The report commands read run folders (their own study's and others'): unpacked from the tables where needed
    rundata.ensure_all()
    for command in commands(study, "report", pages, summaries):
        run_script(command)
    for entry in study.pages():
        page = pages / entry.page
        page.write_text(arrange(page.read_text(), entry, summaries))
    return pages / study.page


def count_runs(study: Study) -> int:
    """
    The study's stored runs, read from its tables: files ``run.json`` (the grid's), else ``seed*.json`` (the studies'
    own runners); a ``.jsonl.gz`` file of run records (a runner that appends one record a run): its finished runs.
    """
    total = 0
    for folder in study.runs:
        if folder.endswith(".jsonl.gz"):
            total += sum(row.get("status") == "ok" for row in rundata.read_rows(BENCHMARKS / folder))
            continue
        name, _, inside = Path(folder).relative_to("results").as_posix().partition("/")
        paths = [path for path in rundata.stored_paths(name) if not inside or path.startswith(inside + "/")]
        names = [path.rsplit("/", 1)[-1] for path in paths]
        found = names.count("run.json")
        total += found if found else sum(1 for n in names if n.startswith("seed") and n.endswith(".json"))
    return total


def _first_sentence(path: Path) -> str:
    """The first sentence of a script's docstring."""
    text = path.read_text()
    match = re.search(r'"""\s*(.*?)(?:\.\s|\n\n)', text, re.DOTALL)
    return " ".join(match.group(1).split()) + "." if match else ""


def index() -> str:
    """``benchmarks/README.md``: the studies (question, verdict, runs, command) and the speed benchmarks."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `python benchmarks/kit/studies.py index` (a test keeps it current): the studies first, each in its",
        "folder under `studies/` (protocol, config, notes, results pages, figures), then the speed benchmarks in",
        "`speed/`. The study kit is `kit/` (the runners `run_grid.py`, of runs the RL Zoo trains and evaluates, and",
        "`snapshots.py`, of runs that evaluate copies of the policy taken while training, the report generator `report.py`,",
        "the equal tuning budget `tune.py`, the power calculation `power.py` and this index, `studies.py`) with the",
        "package's `sb3_reset_ppo.experiments` (runs, statistics); every run is stored under `results/`. The studies'",
        "own tasks, registered under the ids their runs name by `import benchmarks.envs`, are in `envs/`.",
        "",
        "A study's runs are stored as two gzipped JSON-lines tables, `results/<name>.runs.jsonl.gz` (records, evaluations,",
        "configs, training curves: one row per run) and `results/<name>.logs.jsonl.gz` (the logs), with the package diffs",
        "they were made with stored once in `results/code_versions.jsonl.gz`; the reports unpack them into",
        "`results/<name>/` (git-ignored) and `python benchmarks/kit/rundata.py pack NAME` stores new runs",
        "(`kit/rundata.py`).",
        "",
        "The benchmarks are a project of their own (`pyproject.toml`: the package `benchmarks`, with the extras of",
        "sb3-reset-ppo the studies train with): in the clone, after the package, `pip install -e benchmarks` (`make install`",
        "installs both); then every command here runs from the repository's root as written.",
        "",
        "The study commands built on the kit's runners (`studies.py run`, `run_grid.py` without `--address`, `tune.py`,",
        "the attention, attention defaults, tuned and RL Zoo rows studies' runners) stop cleanly at SIGINT or SIGTERM",
        "(`kill PID`, or Ctrl-C in its terminal: on Linux the runs' processes are in sessions of their own, so it reaches",
        "the command alone). The first signal starts no new run (`tune.py optimize`: no new trial or study) and prints",
        "`stopping (SIGTERM): no new run starts; waiting for the running ones (N); send the signal again to stop them now`;",
        "the running runs finish and are stored as usual (a study that writes its tables at its end writes them then), and",
        "the command exits with status 130 (an uncaught KeyboardInterrupt; `studies.py run`: 1). A second signal ends it at",
        "once by that signal, its runs' processes with it: nothing of theirs is recorded, and the next start trains them",
        "again (`tune.py` with a journal file: a trial left running is queued again; with a database it stays RUNNING,",
        "docs/guide/tuning_cluster.md). Not so: the masking and coverage studies' snapshot and port-case runs (a",
        "`multiprocessing` pool), the fair masking study's and the coverage timing pairs' own processes (a Ctrl-C reaches",
        "them, and a second signal leaves them running), and `run_grid.py --address` (Ctrl-C cancels the Ray runs at once).",
        "",
        "## Studies",
        "",
        "| study | question | verdict | runs | rerun |",
        "|---|---|---|---|---|",
    ]
    for name in names():
        study = load(name)
        verdict = " ".join(fill(study.verdict).split())
        rerun = f"`python benchmarks/kit/studies.py {'run' if study.run else 'report'} {name}`"
        page = f"[{study.title}](studies/{name}/{study.page})"
        lines.append(f"| {page} | {' '.join(study.question.split())} | {verdict} | {count_runs(study)} | {rerun} |")
    lines += [
        "",
        "## Speed",
        "",
        "Each script runs ResetPPO and its peers side by side in one process and prints ratios (CPU time, one torch",
        "thread, medians of repeats); its latest stored result is under `results/`.",
        "",
        "| script | what it measures | latest result |",
        "|---|---|---|",
    ]
    for script in sorted((BENCHMARKS / "speed").glob("[!_]*.py")):  # the scripts, not the package's __init__
        result = SPEED_RESULTS.get(script.stem)
        stored = SUMMARIES / result if result else None
        if stored and stored.exists():
            headline = HEADLINES.get(script.stem)
            latest = f"[{result}](results/{result})" + (f": {headline(SUMMARIES)}" if headline else "")
        else:
            latest = "not stored yet"
        lines.append(f"| [`speed/{script.name}`](speed/{script.name}) | {_first_sentence(script)} | {latest} |")
    return "\n".join(lines) + "\n"


def run_command(command: list[str]) -> None:
    """
    Run a study's command (``python`` and ``command``) from the repository's root, passing on to it each SIGINT and
    SIGTERM this process gets. On Linux it runs in a session of its own, so that a Ctrl-C in the terminal reaches it
    once, through this process, and it dies with this process (a kill) (:func:`runner.run_process_options`).

    :raises subprocess.CalledProcessError: the command did not exit 0 (stopped by a signal, or an error)
    """
    process = subprocess.Popen([sys.executable, *command], cwd=ROOT, **runner.run_process_options())

    def forward(signum: int, frame: object) -> None:
        process.send_signal(signum)

    previous = {number: signal.signal(number, forward) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
    if code != 0:
        raise subprocess.CalledProcessError(code, [sys.executable, *command])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in ("run", "report"):
        sub = verbs.add_parser(verb)
        sub.add_argument("name", choices=names())
        sub.add_argument("--pages", type=Path, default=None, help="the pages' folder (default: the study's)")
        sub.add_argument("--summaries", type=Path, default=SUMMARIES, help="the summaries' folder")
    sub = verbs.add_parser("index")
    sub.add_argument("--check", action="store_true", help="exit 1 where a lead or the index is not current")
    args = parser.parse_args(argv)
    if args.verb in ("run", "report"):
        study = load(args.name)
        if args.verb == "run":
            for command in commands(study, "run", args.pages or study.folder, args.summaries):
                run_command(command)
        print(f"wrote {report(study, args.pages, args.summaries)}")
        return
    stale = []
    for name in names():
        for entry in load(name).pages():
            page = entry.folder / entry.page
            arranged = arrange(page.read_text(), entry)
            if arranged != page.read_text():
                stale.append(str(page.relative_to(ROOT)))
                if not args.check:
                    page.write_text(arranged)
    text = index()
    if text != (INDEX.read_text() if INDEX.exists() else ""):
        stale.append(str(INDEX.relative_to(ROOT)))
        if not args.check:
            INDEX.write_text(text)
    if args.check and stale:
        sys.exit(f"not current (run python benchmarks/kit/studies.py index): {', '.join(stale)}")
    print("current" if not stale else f"wrote {', '.join(stale)}")


if __name__ == "__main__":
    main()
