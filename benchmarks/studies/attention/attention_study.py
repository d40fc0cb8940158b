"""
The attention study (``benchmarks/studies/attention/PROTOCOL.md``): ResetPPO with attention memory (Transformer-XL),
LSTM and GRU at the same window and budget, and RecurrentPPO as the peer, on five tasks, 10 seeds each.

Each run trains through the RL Zoo (:func:`sb3_reset_ppo.experiments.runner.run_one`: a subprocess, one torch thread,
20 evaluations of 20 deterministic episodes over the budget, their seconds logged so that ``learn()``'s seconds hold
none; the training log kept) into ``<out>/<arm>/<task>/seed<k>/``; a finished run writes ``run.json`` (with the
commit it trained with) and is skipped next time, a failed one ``failed.json``, a run cut short nothing (it trains
again). When the runs end, the study's folder is stored as its tables (``rundata.pack``), as the other studies'.

Usage: python benchmarks/studies/attention/attention_study.py [--tasks ...] [--arms ...] [--seeds 10] [--workers 2]
       [--minutes M] [--retry-failed] [--forecast] [--steps N --out DIR --allow-dirty]  (--steps: a smoke test)
"""

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.kit import run_grid, rundata
from sb3_reset_ppo.experiments import executors, runner

HERE = Path(__file__).resolve().parent
OUT = rundata.RESULTS / "attention"
# The hyperparameters: RecurrentPPO's and the LSTM and GRU arms' file, and the attention arm's (the same entries with
# the memory cell replaced)
CONF = HERE / "attention.yml"
TRXL_CONF = HERE / "attention_trxl.yml"
TASKS = (
    "ProofOfMemory-v0",
    "CueRecallLong-v0",
    "PopgymRepeatPreviousMedium-v0",
    "PopgymAutoencodeEasy-v0",
    "CartPoleNoVel-v1",
)
# ResetPPO's window, the same for its three arms (PROTOCOL.md, Arms), named so that a change of the package's defaults
# does not change the runs
WINDOW = ["window_size:16", "window_coverage:'full'"]
# arm -> the zoo's algorithm, its hyperparameter file, the settings it adds on the command line
ARMS: dict[str, tuple[str, Path, list[str]]] = {
    "trxl": ("reset_ppo", TRXL_CONF, WINDOW),
    "lstm": ("reset_ppo", CONF, WINDOW),
    "gru": ("reset_ppo", CONF, [*WINDOW, "policy:'MlpGruPolicy'"]),
    "rppo": ("ppo_lstm", CONF, []),
}
SEEDS = 10
EVAL_EPISODES = 20
# The module that registers the study's own tasks in the trainer's process
GYM_PACKAGES = ["benchmarks.envs"]


def spec(arm: str, task: str, seed: int, out: Path, steps: int | None = None) -> runner.RunSpec:
    """
    One run of the study.

    :param arm: An arm of :data:`ARMS`
    :param task: A task of :data:`TASKS`
    :param seed: The training seed
    :param out: The study's folder
    :param steps: Env steps instead of the task's budget (a smoke test)
    :return: The run, into ``out/<arm>/<task>/seed<seed>``
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    algo, conf, settings = ARMS[arm]
    return runner.RunSpec(
        algo=algo, env=task, seed=seed, run_dir=out / arm / task / f"seed{seed}", conf_file=conf,
        hyperparams=list(settings), eval_episodes=EVAL_EPISODES, steps=steps, gym_packages=GYM_PACKAGES, keep_log=True,
        label=arm, extra={"study": "attention", "arm": arm, "task": task},
    )  # fmt: skip


def jobs(tasks: list[str], arms: list[str], seeds: int, out: Path, steps: int | None = None) -> list[dict[str, Any]]:
    """
    Every run of the study, in the protocol's order (seed, task, arm: the arms of a task and seed train side by side),
    as the kit's job dicts (``variant`` is the arm) with their ``spec``.
    """
    return [
        {"variant": arm, "env": task, "seed": seed, "run_dir": spec(arm, task, seed, out).run_dir,
         "spec": spec(arm, task, seed, out, steps)}
        for seed in range(seeds)
        for task in tasks
        for arm in arms
    ]  # fmt: skip


def train(todo: list[dict[str, Any]], every: list[dict[str, Any]], workers: int, minutes: float | None) -> None:
    """
    Train the runs of ``todo`` on ``workers`` processes; with ``minutes``, start only runs expected to finish in time
    (their arm and task's median wall time so far, :func:`benchmarks.kit.run_grid.next_job`).
    """
    times = run_grid.median_times(every)

    def report(job: dict[str, Any], result: dict[str, Any]) -> None:
        print(f"{job['variant']:>5} {job['env']:<30} seed {job['seed']}: {runner.status(result)} in {result['seconds']:.0f} s")

    executors.run_local(
        todo, lambda job: runner.run_one(job["spec"]), workers, minutes,
        pick=lambda jobs, left: run_grid.next_job(jobs, times, left), on_result=report,
    )  # fmt: skip
    if todo:
        print(f"{len(todo)} runs left for later: not expected to finish in the time left, or never timed", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds 0..N-1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=None, help="start only runs expected to finish in time")
    parser.add_argument("--retry-failed", action="store_true", help="train again the runs that failed with an error")
    parser.add_argument("--forecast", action="store_true", help="print how long the remaining runs take; run nothing")
    parser.add_argument("--out", type=Path, default=OUT, help="the study's folder (its tables beside it)")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (a smoke test; needs --out)")
    parser.add_argument("--allow-dirty", action="store_true", help="train with uncommitted package changes (a test)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.seeds < 1:
        parser.error(f"--workers and --seeds must be at least 1, got {args.workers} and {args.seeds}")
    if args.steps is not None and (args.steps < 1 or args.out == OUT):
        parser.error(f"--steps must be positive and needs --out (the study's folder keeps its budgets), got {args.steps}")
    if runner.code_version()["dirty"] and not args.allow_dirty:
        parser.error("the package has uncommitted changes: commit them (every run records the commit) or --allow-dirty")
    print("command: python " + " ".join(["benchmarks/studies/attention/attention_study.py", *sys.argv[1:]]), flush=True)
    out = args.out.resolve()
    rundata.ensure(out, out.parent)  # the stored runs on disk, so that packing again keeps them
    every = jobs(args.tasks, args.arms, args.seeds, out, args.steps)
    todo = [job for job in every if not runner.recorded(job["run_dir"], args.retry_failed)]
    print(f"{len(every) - len(todo)} of {len(every)} runs already stored; {len(todo)} to run on {args.workers} workers")
    if args.forecast:
        print(run_grid.forecast(every, todo, args.workers))
        return
    train(todo, every, args.workers, args.minutes)
    if out.exists():
        rows, files = rundata.pack(out.name, out.parent)
        print(f"stored: {files} files in {rows} rows -> {rundata.runs_table(out.name, out.parent)}", flush=True)


if __name__ == "__main__":
    main()
