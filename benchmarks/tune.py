"""
Equal tuning budget (benchmarks/PROTOCOL.md, Q4): the RL Zoo's Optuna search for several arms, the same number of
trials each, then the best trial of each arm re-run on fresh seeds.

``optimize``: for every (env, arm), ``--workers`` zoo processes run ``-optimize`` on one shared study (the zoo's
``--storage`` with a journal file, ``benchmarks/results/tuning/<env>/<arm>/study.log``; ``--max-total-trials``
caps the trials of all workers together), the arm's fixed settings given with ``--hyperparams`` and everything
else sampled (TPE sampler, median pruner, ``--n-evaluations`` evaluations per trial). The same command with a
database URL as ``--storage`` (e.g. ``postgresql://user:password@host/db``) lets workers on several machines
share the study. Resumable: a study already holding ``--trials`` finished or pruned trials is skipped; with the
local journal files, trials left running by stopped workers (e.g. with a session) are marked failed first (the
zoo counts running trials against the budget); with a database URL, where other machines' workers may be
running, they are left as they are. Each session's workers get sampler seeds no earlier session of the study
used (1000 per recorded session, plus ``--seed-offset``, which machines sharing a database study set apart).
Every invocation appends to ``sessions.jsonl`` next to the study what it
ran with (commit, dirty flag, command with a database password masked, trials before and after): the trials
between two records ran at that commit.

``rerun``: the best trial of each study trained again on ``--seeds`` fresh seeds (its settings written to
``best.yml`` next to the study, with the trial in ``best.json``), as runs of the grid layout
(``benchmarks/results/tuning/runs/tuned_<arm>/<env>/seed<k>/``) that ``report.py`` reads.

Usage: python benchmarks/tune.py optimize [--envs EarlyChoice-v0 CartPoleNoVel-v1] [--arms ...] [--trials 30]
       python benchmarks/tune.py rerun [--seeds 100 ... 109]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run_grid  # noqa: E402  (benchmarks/run_grid.py)

OUT = HERE / "results" / "tuning"
ARMS = ["ev_reset", "ev_mask_kept", "ev_rppo"]
ENVS = ["EarlyChoice-v0", "CartPoleNoVel-v1"]


def study_path(out: Path, env_id: str, arm: str) -> Path:
    return out / env_id / arm / "study.log"


def study_name(env_id: str, arm: str) -> str:
    return f"{env_id}_{arm}"


def _backend(storage: str) -> Any:
    """Optuna storage: a journal file (``.log``, as the zoo opens it) or a database URL."""
    import optuna

    if storage.endswith(".log"):
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))  # type: ignore[attr-defined]
    return storage


def finished_trials(storage: str, name: str) -> int:
    """Trials of the study that completed or were pruned (0 if the study does not exist yet)."""
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=_backend(storage))
    except KeyError:
        return 0
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return sum(trial.state in states for trial in study.trials)


def fail_stale_trials(storage: str, name: str) -> int:
    """
    Mark the study's RUNNING trials FAILED: left by workers killed with a session (no worker runs when this is
    called). The zoo counts RUNNING trials against ``--max-total-trials``, so stale ones would shorten the search.

    :return: How many trials were marked
    """
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=_backend(storage))
    except KeyError:
        return 0
    stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in stale:
        study._storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL)
    return len(stale)


def best_trial(storage: str, name: str) -> tuple[int, float, dict[str, Any]]:
    """Number, value and raw parameters of the study's best trial."""
    import optuna

    best = optuna.load_study(study_name=name, storage=_backend(storage)).best_trial
    return best.number, float(best.value if best.value is not None else float("nan")), dict(best.params)


def _literal(value: Any) -> str:
    """A converted hyperparameter as the zoo's config files write it (classes of ``torch.nn`` as ``nn.<Name>``)."""
    if isinstance(value, type):
        return f"nn.{value.__name__}"
    if isinstance(value, dict):
        return "dict(" + ", ".join(f"{key}={_literal(item)}" for key, item in value.items()) + ")"
    return repr(value)


def best_config(algo: str, env_id: str, conf: Path, params: dict[str, Any]) -> dict[str, Any]:
    """
    The env's entry of ``conf`` updated with a trial's converted parameters, as the zoo's ``-optimize`` trained it
    (the config's settings, then the sampled ones over them). Written as a config file for the reruns: the zoo's
    ``--trial-id`` cannot load trial 0 (rl_zoo3 2.9.2 tests ``if self.trial_id``).
    """
    import yaml
    from rl_zoo3 import hyperparams_opt

    import sb3_reset_ppo.zoo

    sb3_reset_ppo.zoo.register()
    entry = dict(yaml.safe_load(conf.read_text())[env_id])
    converted = hyperparams_opt.HYPERPARAMS_CONVERTER[algo](params)
    for key, value in converted.items():
        entry[key] = _literal(value) if key == "policy_kwargs" else value
    return entry


def redact(storage: str) -> str:
    """A storage URL without its password (``postgresql://user:***@host/db``), e.g. for a committed record."""
    parts = urlsplit(storage)
    if not parts.password:
        return storage
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def record_session(folder: Path, **fields: Any) -> None:
    """Append one JSON line to ``folder/sessions.jsonl``: the code version, the time and ``fields``."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **run_grid.code_version(), **fields}
    with open(folder / "sessions.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")


def worker_seed_base(folder: Path, offset: int = 0) -> int:
    """
    The seed of a session's first worker (worker ``k`` gets this plus ``k``): ``offset`` plus 1000 per earlier
    session of the study recorded in ``folder/sessions.jsonl``. The zoo seeds its sampler with the worker's
    ``--seed`` (TPE's first ``--n-startup-trials`` trials are random draws of that generator), so a resumed study
    whose workers kept their seeds would repeat the earlier sessions' random trials.

    :param folder: the study's folder
    :param offset: added to every seed (distinct per machine when several share a study through a database)
    """
    path = folder / "sessions.jsonl"
    starts = sum(json.loads(line)["event"] == "start" for line in path.read_text().splitlines()) if path.exists() else 0
    return offset + 1000 * starts


def optimize_command(
    env_id: str, arm: str, storage: str, trials: int, worker: int, log_dir: Path, args: argparse.Namespace
) -> list[str]:
    spec = run_grid.VARIANTS[arm]
    command = [
        sys.executable, "-m", "sb3_reset_ppo.zoo", "train", "--algo", spec["algo"], "--env", env_id,
        "--conf-file", str(spec["conf"]), "-optimize", "--max-total-trials", str(trials), "--n-trials", str(trials),
        "--n-jobs", "1", "--storage", storage, "--study-name", study_name(env_id, arm),
        "--sampler", "tpe", "--pruner", "median", "--n-evaluations", str(args.n_evaluations),
        "--eval-episodes", str(args.eval_episodes), "--seed", str(worker), "--num-threads", "1", "--vec-env", "dummy",
        "-f", str(log_dir),
    ]  # fmt: skip
    if args.n_timesteps:
        command += ["-n", str(args.n_timesteps)]
    if spec["hyperparams"]:
        command += ["--hyperparams", *spec["hyperparams"]]
    return command


def optimize(args: argparse.Namespace) -> None:
    for env_id in args.envs:
        for arm in args.arms:
            path = study_path(args.out, env_id, arm)
            storage = args.storage or str(path)
            done = finished_trials(storage, study_name(env_id, arm)) if (args.storage or path.exists()) else 0
            if done >= args.trials:
                print(f"{env_id} {arm}: {done} trials already, skipped", flush=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if args.storage is None and path.exists():
                stale = fail_stale_trials(storage, study_name(env_id, arm))
                if stale:
                    print(f"{env_id} {arm}: {stale} trial(s) left running by a stopped worker marked failed", flush=True)
            # Each session's workers get seeds no earlier session of this study used (below)
            base = worker_seed_base(path.parent, args.seed_offset)
            record_session(
                path.parent,
                event="start",
                trials=done,
                workers=args.workers,
                seeds=[base + index for index in range(args.workers)],
                command=" ".join(
                    optimize_command(env_id, arm, redact(storage), args.trials, base, path.parent / "worker0", args)
                ),
            )
            start = time.perf_counter()

            def worker(index: int, env_id: str = env_id, arm: str = arm, storage: str = storage, base: int = base) -> int:
                log_dir = args.out / env_id / arm / f"worker{index}"
                with open(args.out / env_id / arm / f"worker{index}.txt", "a") as log:
                    command = optimize_command(env_id, arm, storage, args.trials, base + index, log_dir, args)
                    return subprocess.call(
                        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
                    )

            with ThreadPoolExecutor(max_workers=args.workers) as pool:
                codes = list(pool.map(worker, range(args.workers)))
            done = finished_trials(storage, study_name(env_id, arm))
            record_session(path.parent, event="end", trials=done, exit_codes=codes, seconds=time.perf_counter() - start)
            print(f"{env_id} {arm}: {done} trials in {time.perf_counter() - start:.0f} s, exit codes {codes}", flush=True)


def unfinished_studies(args: argparse.Namespace) -> list[str]:
    """
    The (env, arm) studies ``rerun`` cannot use: absent, or with fewer than ``--trials`` finished (completed or
    pruned) trials. The protocol re-runs the best of exactly that many trials, never of a partial search.
    """
    problems = []
    for env_id in args.envs:
        for arm in args.arms:
            path = study_path(args.out, env_id, arm)
            if args.storage is None and not path.exists():
                problems.append(f"{env_id} {arm}: no study ({path})")
                continue
            done = finished_trials(args.storage or str(path), study_name(env_id, arm))
            if done < args.trials:
                problems.append(f"{env_id} {arm}: {done} of {args.trials} trials finished")
    return problems


def rerun(args: argparse.Namespace) -> None:
    import yaml

    jobs = []
    for env_id in args.envs:
        for arm in args.arms:
            spec = run_grid.VARIANTS[arm]
            storage = args.storage or str(study_path(args.out, env_id, arm))
            number, value, params = best_trial(storage, study_name(env_id, arm))
            folder = args.out / env_id / arm
            config = best_config(spec["algo"], env_id, spec["conf"], params)
            (folder / "best.yml").write_text(yaml.safe_dump({env_id: config}, sort_keys=True))
            (folder / "best.json").write_text(json.dumps({"trial": number, "value": value, "params": params}, indent=2))
            print(f"{env_id} {arm}: best trial {number} ({value:.3f}) {params}", flush=True)
            jobs += [
                {
                    "variant": arm,
                    "label": f"tuned_{arm}",
                    "env": env_id,
                    "seed": seed,
                    "eval_episodes": 20,
                    "conf": folder / "best.yml",
                    "steps": args.n_timesteps,
                    "extra": {"trial": number},
                    "run_dir": args.out / "runs" / f"tuned_{arm}" / env_id / f"seed{seed}",
                }
                for seed in args.seeds
            ]

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        for result in pool.map(run_grid.run_one, [job for job in jobs if not (job["run_dir"] / "run.json").exists()]):
            status = "ok" if result["returncode"] == 0 else f"FAILED ({result['returncode']})"
            print(f"{result['variant']} {result['env']} seed {result['seed']}: {status}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["optimize", "rerun"])
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=list(run_grid.VARIANTS))
    parser.add_argument("--trials", type=int, default=30, help="trials per (env, arm), all workers together")
    parser.add_argument("--workers", type=int, default=2, help="processes sharing a study (or running reruns)")
    parser.add_argument("--n-evaluations", type=int, default=5, help="evaluations per trial (for the pruner)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation of a trial")
    parser.add_argument("--storage", default=None, help="a database URL instead of the journal files")
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="added to the workers' sampler seeds: distinct per machine sharing a database study")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)), help="rerun seeds")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--n-timesteps", type=int, default=None, help="env steps per trial and rerun (default: the env's)")
    args = parser.parse_args()
    for name in ("trials", "workers", "n_evaluations", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.n_timesteps is not None and args.n_timesteps < 1:
        parser.error(f"--n-timesteps must be at least 1, got {args.n_timesteps}")
    if args.mode == "rerun":
        problems = unfinished_studies(args)
        if problems:
            parser.error(
                f"rerun needs {args.trials} finished trials in every study (run `python benchmarks/tune.py optimize` "
                "with the same --envs, --arms, --trials and --out first): " + "; ".join(problems)
            )
    print("command: python " + " ".join(["benchmarks/tune.py", *sys.argv[1:]]), flush=True)
    optimize(args) if args.mode == "optimize" else rerun(args)


if __name__ == "__main__":
    main()
