"""
The command line of a study's own runner (the attention studies'): each run of the study trained once through the RL
Zoo into ``<out>/<variant>/<env>/seed<k>/`` (:func:`sb3_reset_ppo.experiments.runner.run_one`: ``run.json`` with the
commit, ``failed.json`` on an error, nothing when cut short, so that the study resumes where it stopped; a cut run's
folder is removed as it ends, so that storing the study keeps none of its files), uncommitted
package changes refused, ``--minutes M`` to start only runs expected to finish in time (a run of a variant and task
never timed starts only without it), ``--forecast`` for the time left, ``--steps N --out DIR --allow-dirty`` for a
smoke test; the study's folder stored as its tables afterwards (``rundata.pack``).

A runner's ``main`` calls :func:`main` with its tasks, its variants (arms or settings, chosen with ``--arms`` or
``--settings``) and its run's ``spec``; :func:`main` parses the command line (:func:`add_arguments`,
:func:`check_arguments`) and trains the runs not stored yet (:func:`run`, with the kit's job dicts of :func:`jobs`:
``variant``, ``env``, ``seed``, ``run_dir`` and the run's ``spec``).
"""

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.kit import run_grid, rundata
from sb3_reset_ppo.experiments import executors, runner


def add_arguments(parser: argparse.ArgumentParser, out: Path, seeds: int) -> None:
    """
    The runner's common arguments.

    :param parser: The study's parser
    :param out: The study's folder (its tables beside it)
    :param seeds: The protocol's seeds per run (``--seeds``' default)
    """
    parser.add_argument("--seeds", type=int, default=seeds, help="seeds 0..N-1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=None, help="start only runs expected to finish in time")
    parser.add_argument("--retry-failed", action="store_true", help="train again the runs that failed with an error")
    parser.add_argument("--forecast", action="store_true", help="print how long the remaining runs take; run nothing")
    parser.add_argument("--out", type=Path, default=out, help="the study's folder (its tables beside it)")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (a smoke test; needs --out)")
    parser.add_argument("--allow-dirty", action="store_true", help="train with uncommitted package changes (a test)")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Path) -> None:
    """
    Refuse what the runner cannot do: no worker or seed, a smoke test into the study's folder, uncommitted package
    changes (every run records the commit it trained with).

    :param parser: The study's parser (its ``error`` exits)
    :param args: The parsed arguments
    :param out: The study's folder
    """
    if args.workers < 1 or args.seeds < 1:
        parser.error(f"--workers and --seeds must be at least 1, got {args.workers} and {args.seeds}")
    if args.steps is not None and (args.steps < 1 or args.out == out):
        parser.error(f"--steps must be positive and needs --out (the study's folder keeps its budgets), got {args.steps}")
    if runner.code_version()["dirty"] and not args.allow_dirty:
        parser.error("the package has uncommitted changes: commit them (every run records the commit) or --allow-dirty")


def jobs(
    spec: Callable[..., runner.RunSpec], tasks: list[str], variants: list[str], seeds: int, out: Path, steps: int | None
) -> list[dict[str, Any]]:
    """
    Every run of a study, seed by seed, task by task, the variants of a task and seed in a row (so that they train
    close in time, at about the same load), as the kit's job dicts with their ``spec``.

    :param spec: The study's run: ``spec(variant, task, seed, out, steps)``
    :param tasks: The tasks
    :param variants: The study's arms or settings
    :param seeds: Seeds 0..N-1
    :param out: The study's folder
    :param steps: Env steps instead of each task's budget (a smoke test), or None
    """
    return [
        {"variant": variant, "env": task, "seed": seed, "run_dir": spec(variant, task, seed, out).run_dir,
         "spec": spec(variant, task, seed, out, steps)}
        for seed in range(seeds)
        for task in tasks
        for variant in variants
    ]  # fmt: skip


def train(
    todo: list[dict[str, Any]], every: list[dict[str, Any]], workers: int, minutes: float | None, width: int = 5
) -> None:
    """
    Train the runs of ``todo`` on ``workers`` processes; with ``minutes``, start only runs expected to finish in time
    (their variant and task's median wall time so far, :func:`benchmarks.kit.run_grid.next_job`).

    :param width: Characters of the variant's column in the lines printed as runs finish
    """
    times = run_grid.median_times(every)

    def report(job: dict[str, Any], result: dict[str, Any]) -> None:
        run = f"{job['variant']:>{width}} {job['env']:<30} seed {job['seed']}"
        print(run_grid.finished_line(run, job, result), flush=True)

    executors.run_local(
        todo, lambda job: runner.run_one(job["spec"]), workers, minutes,
        pick=lambda jobs, left: run_grid.next_job(jobs, times, left), on_result=report,
    )  # fmt: skip
    if todo:
        print(run_grid.left_for_later(todo, times), flush=True)


def run(args: argparse.Namespace, script: str, jobs: Callable[[Path], list[dict[str, Any]]], width: int = 5) -> None:
    """
    Train the study's runs not stored yet (or print the forecast), then store its folder as its tables.

    :param args: The parsed arguments (:func:`add_arguments`'s, checked)
    :param script: The runner's path from the repository's root, for the command printed first
    :param jobs: Every run of the study, in the protocol's order, given the study's folder
    :param width: Characters of the variant's column in the lines printed as runs finish
    """
    print("command: python " + " ".join([script, *sys.argv[1:]]), flush=True)
    out = args.out.resolve()
    rundata.ensure(out, out.parent)  # the stored runs on disk, so that packing again keeps them
    every = jobs(out)
    todo = [job for job in every if not runner.recorded(job["run_dir"], args.retry_failed)]
    print(f"{len(every) - len(todo)} of {len(every)} runs already stored; {len(todo)} to run on {args.workers} workers")
    note = run_grid.machine_note(every)
    if note:
        print(note, flush=True)
    if args.forecast:
        print(run_grid.forecast(every, todo, args.workers))
        return
    try:
        train(todo, every, args.workers, args.minutes, width)
    finally:  # stopped by a signal too, once the running runs ended: the runs finished so far are stored
        if out.exists():
            rows, files = rundata.pack(out.name, out.parent)
            print(f"stored: {files} files in {rows} rows -> {rundata.runs_table(out.name, out.parent)}", flush=True)


def main(
    argv: list[str] | None,
    description: str | None,
    script: str,
    spec: Callable[..., runner.RunSpec],
    tasks: Sequence[str],
    option: str,
    variants: Sequence[str],
    out: Path,
    seeds: int,
    width: int = 5,
) -> None:
    """
    A study runner's command line: ``--tasks``, the variants' option, the common arguments (:func:`add_arguments`),
    checked (:func:`check_arguments`); then :func:`run` with every run of the chosen tasks and variants (:func:`jobs`).

    :param argv: The arguments (None: the command line's)
    :param description: The parser's description (the runner's docstring)
    :param script: The runner's path from the repository's root, for the command printed first
    :param spec: The study's run: ``spec(variant, task, seed, out, steps)``
    :param tasks: The study's tasks (``--tasks``' choices and default)
    :param option: The variants' option without its dashes (``arms`` or ``settings``)
    :param variants: The study's arms or settings (the option's choices and default)
    :param out: The study's folder (its tables beside it)
    :param seeds: The protocol's seeds per run (``--seeds``' default)
    :param width: Characters of the variant's column in the lines printed as runs finish
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(tasks), choices=list(tasks))
    parser.add_argument(f"--{option}", nargs="+", default=list(variants), choices=list(variants))
    add_arguments(parser, out, seeds)
    args = parser.parse_args(argv)
    check_arguments(parser, args, out)
    chosen = getattr(args, option)
    run(args, script, lambda folder: jobs(spec, args.tasks, chosen, args.seeds, folder, args.steps), width)
