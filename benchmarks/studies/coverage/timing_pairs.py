"""
Timing pairs of the coverage study (``benchmarks/studies/coverage/PROTOCOL.md``, amendment 4): for every (arm, env) that
trains its own runs and has no undisturbed side-by-side pair with ``cv_rppo`` in the grid, the arm's run and a
``cv_rppo`` re-run of the same env and seed, started together on two workers with no other trainer on the machine
(checked before each pair). As in the grid, both cores stay busy: when one run of the pair ends first, its worker
trains *filler* copies of it (into a scratch folder, not recorded) until the other ends, so the longer run is timed
under the grid's load, not alone. The next pair starts when both have ended. Seeds 0 and 1.

Runs go to ``benchmarks/results/coverage_pairs/<arm>/<variant>/<env>/seed<k>/`` (``<variant>`` is the arm or
``cv_rppo``), trained as ``run_grid.py`` trains them (the same zoo command and records). A pair with both runs
finished and counted (side by side, outside the disturbed periods) is skipped; any other pair is trained again
whole (its runs must run together). They count
for the timings only: ``coverage_report.py`` adds them to the grid's pairs by the same side-by-side rule.

Usage: python benchmarks/studies/coverage/timing_pairs.py [--list] [--minutes M]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.kit import run_grid
from benchmarks.studies.coverage import coverage_report
from sb3_reset_ppo.experiments import executors, runner

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]

RESULTS = BENCHMARKS / "results"
PAIRS_FOLDER = RESULTS / "coverage_pairs"
SEEDS = range(2)
# Each run is expected to take its (arm, env)'s median grid time times this
MARGIN = 1.25


def pair_dirs(arm: str, env: str, seed: int, folder: Path = PAIRS_FOLDER) -> dict[str, Path]:
    """The run folders of one pair: the arm's and its ``cv_rppo`` partner's."""
    return {variant: folder / arm / variant / env / f"seed{seed}" for variant in ("cv_rppo", arm)}


def pair_done(dirs: dict[str, Path], disturbed: list[tuple[float, float]] | None = None) -> bool:
    """
    Whether both runs of a pair finished and count as a side-by-side pair outside the ``disturbed`` periods (a pair
    that does not is trained again).
    """
    if not all((d / "run.json").exists() for d in dirs.values()):
        return False
    rppo, arm = (json.loads((d / "run.json").read_text()) for d in dirs.values())
    if rppo.get("returncode") != 0 or arm.get("returncode") != 0:
        return False
    rppo["seconds"], arm["seconds"] = float(rppo["seconds"]), float(arm["seconds"])
    paired = bool(coverage_report.side_by_side_pairs([arm], [rppo]))
    return paired and not any(coverage_report.disturbed_run(r, disturbed or []) for r in (rppo, arm))


def other_trainers() -> list[str]:
    """Command lines of the zoo trainers running on this machine (``/proc``), other than this process's children."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):  # one folder per process, named by its id
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if "sb3_reset_ppo.zoo train" in command:
            found.append(command)
    return found


def run_pair(jobs: list[dict[str, Any]], scratch: Path) -> list[dict[str, Any]]:
    """
    Train the two jobs of a pair at the same time, one per thread; the one that ends first is followed on its thread
    by filler copies of itself (same command, into ``scratch``, not recorded) until the other ends, then the filler
    is stopped. Returns the two records (``run_grid.run_one``'s), in the jobs' order.
    """
    results: list[dict[str, Any] | None] = [None, None]
    finished = [threading.Event(), threading.Event()]

    def work(index: int, stop: threading.Event) -> None:
        results[index] = run_grid.run_one(jobs[index])
        finished[index].set()
        other = 1 - index
        copy = 0
        while not finished[other].is_set():
            filler_dir = scratch / f"filler{index}_{copy}"
            spec = run_grid.spec_of({**jobs[index], "run_dir": filler_dir})
            process = subprocess.Popen(
                runner.zoo_command(spec), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )  # fmt: skip
            while process.poll() is None and not finished[other].wait(1.0):
                pass
            if process.poll() is None:
                process.terminate()
                process.wait()
            shutil.rmtree(filler_dir, ignore_errors=True)
            copy += 1

    executors.run_workers(work, 2)
    return [r for r in results if r is not None]


def pair_jobs(arm: str, env: str, seed: int, eval_episodes: int, folder: Path = PAIRS_FOLDER) -> list[dict[str, Any]]:
    """The two grid jobs of a pair (``run_grid.run_one``'s), ``cv_rppo`` first."""
    return [
        {"variant": variant, "env": env, "seed": seed, "run_dir": run_dir, "eval_episodes": eval_episodes,
         "extra": {"timing_pair": arm}}
        for variant, run_dir in pair_dirs(arm, env, seed, folder).items()
    ]  # fmt: skip


def expected_seconds(arm: str, env: str, grid: list[dict[str, Any]], timing: list[dict[str, Any]]) -> float | None:
    """A pair's expected wall time: the longer of its two runs' median grid times (None if either was never timed)."""
    own = [r for r in [*grid, *timing] if r["env"] == env and "reused_from" not in r and "shared_with" not in r]
    seconds = [[float(r["seconds"]) for r in own if r["variant"] == variant] for variant in ("cv_rppo", arm)]
    return max(statistics.median(times) for times in seconds) if all(seconds) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the pairs to train and their expected time; run nothing")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start only pairs expected to finish within this many minutes (a session's end)")  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args()
    if args.minutes is not None and args.minutes <= 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    start = time.monotonic()
    print("command: python " + " ".join(sys.argv), flush=True)
    coverage = RESULTS / "coverage"
    runs, timing = coverage_report.grid_runs(coverage, RESULTS / "evidence")
    disturbed = coverage_report.load_disturbed(coverage / "disturbed.json")
    speed, _ = coverage_report.seconds_per_step(runs, timing, disturbed)
    missing = coverage_report.missing_timings(speed)
    print(f"(arm, env) without an undisturbed side-by-side pair in the grid: {len(missing)}", flush=True)
    # Seed 0 of every (arm, env) first, so that a partial state times every one of them
    plan = [(arm, env, seed) for seed in SEEDS for arm, env in missing]
    todo = [(arm, env, seed) for arm, env, seed in plan if not pair_done(pair_dirs(arm, env, seed), disturbed)]
    total = 0.0
    for arm, env, seed in plan:
        seconds = expected_seconds(arm, env, runs, timing)
        total += 0.0 if (arm, env, seed) not in todo or seconds is None else seconds
        state = "done" if (arm, env, seed) not in todo else f"about {seconds or float('nan'):.0f} s"
        print(f"  {arm:>12} {env:<40} seed {seed}: {state}", flush=True)
    print(f"{len(plan) - len(todo)} of {len(plan)} pairs done; about {total / 60:.0f} wall-minutes to go", flush=True)
    if args.list:
        return
    deadline_left = None if args.minutes is None else 60 * args.minutes
    for arm, env, seed in todo:
        # Nothing else trains while a pair does (amendment 4): wait for other trainers to end
        if others := other_trainers():
            print(f"  waiting: {len(others)} other trainer(s) running, e.g. {others[0][:160]}", flush=True)
        while others:
            time.sleep(30)
            others = other_trainers()
        expected = expected_seconds(arm, env, runs, timing)
        if deadline_left is not None:
            left = deadline_left - (time.monotonic() - start)
            if expected is None or expected * MARGIN > left:
                print(f"  {arm} {env} seed {seed}: not expected to finish in the time left; later", flush=True)
                continue
        dirs = pair_dirs(arm, env, seed)
        # A pair not counted is trained again whole: its runs must run together
        for run_dir in filter(Path.exists, dirs.values()):
            shutil.rmtree(run_dir)
        jobs = pair_jobs(arm, env, seed, args.eval_episodes)
        for job in jobs:
            job["extra"]["load_average_before"] = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="timing_pair_filler_") as scratch:
            results = run_pair(jobs, Path(scratch))
        line = ", ".join(f"{r['variant']} {run_grid.status(r)} in {r['seconds']:.0f} s" for r in results)
        counted = "counted" if pair_done(dirs, disturbed) else "NOT counted (not side by side, disturbed or failed)"
        print(f"  {arm} {env} seed {seed}: {line}; {counted}", flush=True)
    done = sum(pair_done(pair_dirs(*p), disturbed) for p in plan)
    print(json.dumps({"missing": [list(m) for m in missing], "pairs_done": done}), flush=True)


if __name__ == "__main__":
    main()
