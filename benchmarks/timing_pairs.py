"""
Timing pairs of the coverage study (``benchmarks/PROTOCOL_coverage.md``, amendment 4): for every (arm, env) that
trains its own runs and has no undisturbed side-by-side pair with ``cv_rppo`` in the grid, the arm's run and a
``cv_rppo`` re-run of the same env and seed, started together on two workers with nothing else on the machine; the
next pair starts when both have ended. Seeds 0 and 1.

Runs go to ``benchmarks/results/coverage_pairs/<arm>/<variant>/<env>/seed<k>/`` (``<variant>`` is the arm or
``cv_rppo``), trained as ``run_grid.py`` trains them (the same zoo command and records). A pair with both runs
finished is skipped; a pair with one run finished is trained again whole (its runs must run together). They count
for the timings only: ``coverage_report.py`` adds them to the grid's pairs by the same side-by-side rule.

Usage: python benchmarks/timing_pairs.py [--list] [--minutes M]
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from sb3_reset_ppo.experiments import executors

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import coverage_report  # noqa: E402  (benchmarks/coverage_report.py)
import run_grid  # noqa: E402  (benchmarks/run_grid.py)

RESULTS = HERE / "results"
PAIRS_FOLDER = RESULTS / "coverage_pairs"
SEEDS = range(2)
# Each run is expected to take its (arm, env)'s median grid time times this
MARGIN = 1.25


def pair_dirs(arm: str, env: str, seed: int, folder: Path = PAIRS_FOLDER) -> dict[str, Path]:
    """The run folders of one pair: the arm's and its ``cv_rppo`` partner's."""
    return {variant: folder / arm / variant / env / f"seed{seed}" for variant in ("cv_rppo", arm)}


def pair_done(dirs: dict[str, Path]) -> bool:
    """Whether both runs of a pair finished."""
    return all((d / "run.json").exists() for d in dirs.values())


def pair_jobs(arm: str, env: str, seed: int, eval_episodes: int, folder: Path = PAIRS_FOLDER) -> list[dict[str, Any]]:
    """The two grid jobs of a pair (``run_grid.run_one``'s), ``cv_rppo`` first."""
    return [
        {"variant": variant, "env": env, "seed": seed, "run_dir": run_dir, "eval_episodes": eval_episodes,
         "extra": {"timing_pair": arm}}
        for variant, run_dir in pair_dirs(arm, env, seed, folder).items()
    ]  # fmt: skip


def expected_seconds(arm: str, env: str, grid: list[dict[str, Any]], timing: list[dict[str, Any]]) -> float | None:
    """A pair's expected wall time: the longer of its two runs' median grid times (None if either was never timed)."""
    medians = []
    for variant in ("cv_rppo", arm):
        seconds = sorted(
            float(r["seconds"])
            for r in [*grid, *timing]
            if r["variant"] == variant and r["env"] == env and "reused_from" not in r and "shared_with" not in r
        )
        if not seconds:
            return None
        medians.append(seconds[len(seconds) // 2])
    return max(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the pairs to train and their expected time; run nothing")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start only pairs expected to finish within this many minutes (a session's end)")  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args()
    if args.minutes is not None and args.minutes <= 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    print("command: python " + " ".join(sys.argv), flush=True)
    coverage = RESULTS / "coverage"
    runs, timing = coverage_report.grid_runs(coverage, RESULTS / "evidence")
    disturbed = coverage_report.load_disturbed(coverage / "disturbed.json")
    speed, _ = coverage_report.seconds_per_step(runs, timing, disturbed)
    missing = coverage_report.missing_timings(speed)
    print(f"(arm, env) without an undisturbed side-by-side pair in the grid: {len(missing)}", flush=True)
    # Seed 0 of every (arm, env) first, so that a partial state times every one of them
    plan = [(arm, env, seed) for seed in SEEDS for arm, env in missing]
    todo = [(arm, env, seed) for arm, env, seed in plan if not pair_done(pair_dirs(arm, env, seed))]
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
    start = time.monotonic()
    for arm, env, seed in todo:
        expected = expected_seconds(arm, env, runs, timing)
        if deadline_left is not None:
            left = deadline_left - (time.monotonic() - start)
            if expected is None or expected * MARGIN > left:
                print(f"  {arm} {env} seed {seed}: not expected to finish in the time left; later", flush=True)
                continue
        dirs = pair_dirs(arm, env, seed)
        for run_dir in dirs.values():
            # A pair half done is trained again whole: its runs must run together
            if run_dir.exists():
                shutil.rmtree(run_dir)
        jobs = pair_jobs(arm, env, seed, args.eval_episodes)
        results = executors.run_local(jobs, run_grid.run_one, workers=2)
        line = ", ".join(f"{r['variant']} {run_grid.status(r)} in {r['seconds']:.0f} s" for r in results)
        print(f"  {arm} {env} seed {seed}: {line}", flush=True)
    summary = {"missing": [list(m) for m in missing], "pairs_done": sum(pair_done(pair_dirs(*p)) for p in plan)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
