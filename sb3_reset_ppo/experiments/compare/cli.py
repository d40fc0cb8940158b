"""
``python -m sb3_reset_ppo.compare``: should I switch? ResetPPO against RecurrentPPO (or any zoo algorithms) on
*your* task, per env step and per second, with intervals.

Every (arm, seed) trains through the RL Zoo with the same hyperparameter file and settings, one torch thread each, on
local worker processes or, with ``--address``, as Ray tasks on a cluster. Runs are recorded as they finish: run the
command again and it trains only what is missing, then writes the report (``REPORT.md``, ``summary.json`` and figures
in ``--out``): the return against env steps and against seconds of ``learn()``, each arm's final return and return
over training with 95% bootstrap intervals, the probability that it beats the baseline (at the end, over training and
at equal wall-clock time) with a Holm-adjusted Mann-Whitney p-value, and a verdict in words.

Example::

    python -m sb3_reset_ppo.compare --env CueRecall-v0 --seeds 2 --timesteps 4000
    python -m sb3_reset_ppo.compare --env MyEnv-v0 --gym-packages my_package --conf-file my.yml --seeds 10
    python -m sb3_reset_ppo.compare --env MyEnv-v0 --gym-packages my_package --seeds 10 --address auto
"""

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sb3_reset_ppo.experiments import runner, stats
from sb3_reset_ppo.experiments.compare.analysis import NothingToCompare
from sb3_reset_ppo.experiments.compare.planning import prepare, start
from sb3_reset_ppo.experiments.compare.reporting import report
from sb3_reset_ppo.experiments.compare.settings import PROG, CompareSettings, check, env_folder, parse_variants
from sb3_reset_ppo.experiments.compare.training import train

# The arm the others are compared with when --baseline is not given and it is one of the arms
DEFAULT_BASELINE = "ppo_lstm"


def parser() -> argparse.ArgumentParser:
    """The command line (see the module's documentation)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", required=True, help="the env id (registered by --gym-packages for your own env)")
    p.add_argument("--gym-packages", nargs="+", default=[], help="modules to import first, e.g. the one registering --env")
    p.add_argument("--algos", nargs="+", default=["reset_ppo", DEFAULT_BASELINE],
                   help="zoo algorithms compared with their file's settings")  # fmt: skip
    p.add_argument("--variant", nargs="+", action="append", metavar="NAME ALGO [KEY:VALUE]",
                   help="one more arm: a name, a zoo algorithm and its own settings (repeatable)")  # fmt: skip
    p.add_argument("--baseline", default=None, help="the arm the others are compared with (default ppo_lstm, else the last)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 per arm (default 10)")
    p.add_argument("--timesteps", type=int, default=None, help="env steps per run (default: the file's n_timesteps)")
    p.add_argument("--conf-file", default=None, help="the zoo hyperparameter file every arm trains with")
    p.add_argument("--hyperparams", nargs="+", default=[], help="settings for every arm (the zoo's KEY:VALUE form)")
    p.add_argument("--policy", default="MlpLstmPolicy", help="policy of the file written for an env the package lacks")
    p.add_argument("--n-envs", type=int, default=8, help="n_envs of the file written for an env the package lacks")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--evaluations", type=int, default=runner.EVALUATIONS_PER_RUN, help="evaluations over each run")
    p.add_argument("--final-evaluations", type=int, default=2, help="the final return: mean of the last N evaluations")
    p.add_argument("--num-threads", type=int, default=1, help="torch threads per run (default 1: more stall beside the "
                   "other runs; -1: torch's default)")  # fmt: skip
    p.add_argument("--workers", type=int, default=None,
                   help="local runs at a time (default: the cores over --num-threads, so one core per thread)")  # fmt: skip
    p.add_argument("--address", default=None, help="a Ray cluster's address: runs train there as tasks of one CPU")
    p.add_argument("--out", type=Path, default=None, help="the comparison's folder (default compare/<env>)")
    p.add_argument("--reps", type=int, default=stats.REPS, help="bootstrap resamples")
    p.add_argument("--report-only", action="store_true", help="train nothing; report the runs finished so far")
    p.add_argument("--retry-failed", action="store_true", help="train again runs that failed with an error")
    return p


def settings_from_args(args: argparse.Namespace) -> CompareSettings:
    """
    The settings of :func:`parser`'s result, with the defaults that depend on other options (baseline, workers, folder).

    :raises ValueError: a ``--variant`` or the arms are not valid (:func:`parse_variants`)
    """
    arms = parse_variants(args.algos, args.variant)
    names = [arm.name for arm in arms]
    return CompareSettings(
        env=args.env, arms=tuple(arms), seeds=args.seeds, timesteps=args.timesteps, conf_file=args.conf_file,
        baseline=(DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[-1]) if args.baseline is None else args.baseline,
        hyperparams=tuple(args.hyperparams), gym_packages=tuple(args.gym_packages), policy=args.policy,
        n_envs=args.n_envs, eval_episodes=args.eval_episodes, evaluations=args.evaluations,
        final_evaluations=args.final_evaluations, num_threads=args.num_threads, address=args.address,
        workers=max((os.cpu_count() or 1) // max(args.num_threads, 1), 1) if args.workers is None else args.workers,
        out=(args.out or Path("compare") / env_folder(args.env)).resolve(), reps=args.reps,
        report_only=args.report_only, retry_failed=args.retry_failed,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> Path:
    """
    Run the comparison on ``argv`` (None: ``sys.argv[1:]``), resumable, and return its report's path; a refused command
    exits with status 2 naming the cause.
    """
    p = parser()
    args = p.parse_args(argv)
    try:
        settings = check(settings_from_args(args))
        prepared = prepare(settings)
        start(settings.out, prepared)
    except (ValueError, FileExistsError) as error:
        p.error(str(error))
    command = f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv)
    if not settings.report_only:
        try:
            train(prepared.runs, settings)
        except KeyboardInterrupt:
            p.exit(130, "interrupted: the finished runs are kept; run the same command again to resume\n")
        except FileExistsError as error:
            p.error(str(error))
    try:
        path = report(settings, {**prepared.record, "command": command})
    except NothingToCompare as error:
        p.exit(1, f"{p.prog}: no report: {error}\n")
    print(f"report: {path}")
    print("\n".join(json.loads((settings.out / "summary.json").read_text())["verdict"]))
    return path
