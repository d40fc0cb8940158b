"""
The RL Zoo's ppo_lstm benchmark rows: ResetPPO and RecurrentPPO with the zoo's hyperparameters, side by side
(``benchmarks/studies/zoo_rows/PROTOCOL.md``).

Each run trains through the zoo's own command line in a subprocess of its own, with ``learn()`` timed, then evaluates
the final model as the zoo's benchmark does (deterministic, 50 episodes, the saved VecNormalize statistics). Every run
appends one record to a gzipped-JSONL file (its training log inside); the runs already recorded there are skipped, so
the study is resumable, and a run cut short leaves nothing. A SIGINT or SIGTERM (``kill PID``, or Ctrl-C in its
terminal) starts no new run and lets the running ones finish and be recorded, then exits with status 130 (a
KeyboardInterrupt); a second one stops them at once, recording nothing of them.

Usage::

    python benchmarks/studies/zoo_rows/zoo_rows_study.py run [--workers 2] [--seeds 10] [--envs ...] [--stop-after M]
"""

import argparse
import fcntl
import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = ROOT / "benchmarks" / "results" / "zoo_rows" / "runs.jsonl.gz"
ARMS = ("reset_ppo", "ppo_lstm")
# Env id -> the score rl_zoo3 2.9.2's benchmark.md publishes for ppo_lstm (mean, std)
PUBLISHED = {
    "CartPoleNoVel-v1": (500.00, 0.00),
    "PendulumNoVel-v1": (-217.93, 140.09),
    "MountainCarContinuousNoVel-v0": (91.47, 1.78),
}
EVAL_EPISODES = 50
EVAL_SEED_OFFSET = 10_000
VERSIONS = ("sb3-reset-ppo", "stable-baselines3", "sb3-contrib", "rl-zoo3", "torch", "gymnasium", "numpy")


def conf_file(algo: str) -> Path:
    """The hyperparameter file an arm trains with: rl_zoo3's own for ppo_lstm, the package's for reset_ppo."""
    if algo == "ppo_lstm":
        import rl_zoo3

        return Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo_lstm.yml"
    from sb3_reset_ppo.zoo import DEFAULT_CONF_FILE

    return DEFAULT_CONF_FILE


def check_same_hyperparameters(envs: list[str]) -> None:
    """:raises ValueError: the package's entry for an env differs from the zoo's ppo_lstm entry."""
    zoo, package = (yaml.safe_load(conf_file(algo).read_text()) for algo in ("ppo_lstm", "reset_ppo"))
    for env in envs:
        if zoo.get(env) != package.get(env):
            raise ValueError(
                f"the package's hyperparameters for {env} differ from the zoo's: {package.get(env)} vs {zoo.get(env)}"
            )


def parameters_hash(model: Any) -> str:
    """sha256 of the policy's parameters and buffers, in ``state_dict`` order (names and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in model.policy.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def train_and_evaluate(
    algo: str, env: str, seed: int, folder: Path, timesteps: int | None = None, hyperparams: list[str] | None = None
) -> dict[str, Any]:
    """
    One run, in this process: train through the zoo's command line with ``learn()`` timed, then evaluate.

    :param hyperparams: Overrides of the entry, as the zoo's ``--hyperparams`` reads them (``"window_coverage:'inside'"``)
    """
    import torch as th
    from rl_zoo3 import exp_manager
    from stable_baselines3.common.evaluation import evaluate_policy

    from sb3_reset_ppo import zoo

    th.set_num_threads(1)
    timing: dict[str, float] = {}
    learn = exp_manager.ExperimentManager.learn

    def timed_learn(self: Any, model: Any) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        learn(self, model)
        timing.update(cpu_seconds=time.process_time() - cpu, wall_seconds=time.perf_counter() - wall)
        timing["timesteps"] = model.num_timesteps

    exp_manager.ExperimentManager.learn = timed_learn  # type: ignore[method-assign]
    arguments = ["train", "--algo", algo, "--env", env, "--seed", str(seed), "-f", str(folder)]
    arguments += ["--conf-file", str(conf_file(algo)), "--num-threads", "1", "--vec-env", "dummy", "--eval-freq", "-1"]
    if timesteps is not None:
        arguments += ["-n", str(timesteps)]
    if hyperparams:
        arguments += ["--hyperparams", *hyperparams]
    zoo.main(arguments)
    model, eval_env = trained_model(algo, env, seed, folder)
    episodes = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True, return_episode_rewards=True)
    returns, lengths = cast(tuple[list[float], list[int]], episodes)
    return {
        **timing,
        "episode_returns": [float(value) for value in returns],
        "episode_lengths": [int(value) for value in lengths],
        "score": float(np.mean(returns)),
        "parameters_sha256": parameters_hash(model),
    }


def trained_model(algo: str, env: str, seed: int, folder: Path) -> tuple[Any, Any]:
    """
    The final model of the run trained into ``folder`` and the test env the zoo's benchmark evaluates it on: one env,
    the saved VecNormalize statistics (not updated, rewards not normalised), seeded ``EVAL_SEED_OFFSET + seed``.
    """
    from rl_zoo3.utils import ALGOS, create_test_env, get_saved_hyperparams

    from sb3_reset_ppo import zoo

    zoo.register()  # reset_ppo in the zoo's ALGOS (training registers it too)
    (run_folder,) = (folder / algo).glob(f"{env}_*")
    hyperparams, stats_path = get_saved_hyperparams(str(run_folder / env), norm_reward=False, test_mode=True)
    eval_env = create_test_env(
        env,
        n_envs=1,
        stats_path=stats_path,
        seed=EVAL_SEED_OFFSET + seed,
        log_dir=None,
        should_render=False,
        hyperparams=hyperparams,
    )
    custom_objects = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    model = ALGOS[algo].load(run_folder / f"{env}.zip", custom_objects=custom_objects, device="cpu")
    return model, eval_env


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records stored so far (none when the file does not exist)."""
    if not path.exists():
        return []
    with gzip.open(path, "rt") as file:
        return [json.loads(line) for line in file if line.strip()]


def append_record(path: Path, record: dict[str, Any]) -> None:
    """
    Append one record as a gzip member of its own, under an exclusive lock (several workers append).

    The file with the new member is written beside the table and renamed over it: a store cut short (the session's
    end, a full disk, a second signal) leaves the table as it was, with every run recorded before, never a
    truncated member that would make the whole file unreadable.
    """
    (path.parent / ".work").mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".work" / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        member = gzip.compress((json.dumps(record, sort_keys=True) + "\n").encode())
        scratch = path.with_name(path.name + ".tmp")
        try:
            with open(scratch, "wb") as file:
                if path.exists():
                    file.write(path.read_bytes())
                file.write(member)
                file.flush()
                os.fsync(file.fileno())
            os.replace(scratch, path)
        finally:
            scratch.unlink(missing_ok=True)


def jobs(envs: list[str], seeds: int, done: set[tuple[str, str, int]]) -> Iterator[tuple[str, str, int]]:
    """The runs still to do, in the protocol's order: seed, env, arm."""
    for seed in range(seeds):
        for env in envs:
            for algo in ARMS:
                if (algo, env, seed) not in done:
                    yield algo, env, seed


def provenance() -> dict[str, Any]:
    """The commit, the machine and the versions a run trains with."""
    from sb3_reset_ppo.experiments import runner

    versions = {name: metadata.version(name) for name in VERSIONS}
    return {
        **runner.code_version(ROOT),
        "machine": runner.machine(),
        "python": platform.python_version(),
        "versions": versions,
    }


def run_in_subprocess(algo: str, env: str, seed: int, out: Path, timesteps: int | None = None) -> dict[str, Any]:
    """Train and evaluate one run in a subprocess; return its record (``status`` ok or failed, with its log)."""
    from sb3_reset_ppo.experiments import runner

    folder = out.parent / ".work" / f"{algo}_{env}_seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "log.txt"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    command = [sys.executable, str(Path(__file__).resolve()), "one", "--algo", algo, "--env", env, "--seed", str(seed)]
    command += ["--folder", str(folder)] + ([] if timesteps is None else ["--timesteps", str(timesteps)])
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(log, "w") as stream:
        # On Linux in a session of its own, so that a Ctrl-C in the terminal reaches this process alone (the zoo would
        # save a run cut by it as if done), and killed with it (a second signal, or a kill): never left training
        returncode = subprocess.run(
            command, stdout=stream, stderr=subprocess.STDOUT, env=environ, **runner.run_process_options()
        ).returncode
    if returncode < 0:  # killed by a signal (a session's end): nothing is recorded, the run is trained again
        raise RuntimeError(f"{algo} {env} seed {seed} was killed by signal {-returncode}")
    result_file = folder / "result.json"
    result = json.loads(result_file.read_text()) if returncode == 0 and result_file.exists() else {}
    record = {
        "algo": algo,
        "env": env,
        "seed": seed,
        "status": "ok" if result else "failed",
        "returncode": returncode,
        "started": started,
        "conf_file": conf_file(algo).name,
        **provenance(),
        **result,
        "log": log.read_text(errors="replace"),
    }
    shutil.rmtree(folder, ignore_errors=True)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train and evaluate the runs not yet recorded")
    run.add_argument("--envs", nargs="+", default=list(PUBLISHED), choices=list(PUBLISHED))
    run.add_argument("--seeds", type=int, default=10)
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--out", type=Path, default=OUT)
    run.add_argument("--stop-after", type=float, default=None, help="start no run after this many minutes")
    run.add_argument("--retry-failed", action="store_true")
    run.add_argument("--timesteps", type=int, default=None, help="a shorter budget than the protocol's (a test)")
    run.add_argument("--allow-dirty", action="store_true", help="train with uncommitted changes to the package (a test)")
    one = sub.add_parser("one", help="one run in this process (used by run)")
    one.add_argument("--algo", choices=ARMS, required=True)
    one.add_argument("--env", choices=list(PUBLISHED), required=True)
    one.add_argument("--seed", type=int, required=True)
    one.add_argument("--folder", type=Path, required=True)
    one.add_argument("--timesteps", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "one":
        result = train_and_evaluate(args.algo, args.env, args.seed, args.folder, args.timesteps)
        (args.folder / "result.json").write_text(json.dumps(result))
        return
    check_same_hyperparameters(args.envs)
    if provenance()["dirty"] and not args.allow_dirty:
        raise SystemExit("the package has uncommitted changes: commit them (runs record the commit) or pass --allow-dirty")
    done = {
        (record["algo"], record["env"], record["seed"])
        for record in read_records(args.out)
        if record["status"] == "ok" or not args.retry_failed
    }
    deadline = None if args.stop_after is None else time.monotonic() + 60 * args.stop_after

    def pick(todo: list[tuple[str, str, int]], seconds_left: float | None) -> tuple[str, str, int] | None:
        if not todo or (deadline is not None and time.monotonic() > deadline):
            return None
        return todo.pop(0)

    def train(job: tuple[str, str, int]) -> dict[str, Any]:
        record = run_in_subprocess(*job, out=args.out, timesteps=args.timesteps)
        append_record(args.out, record)
        return record

    def report(job: tuple[str, str, int], record: dict[str, Any]) -> None:
        score = record.get("score", float("nan"))
        seconds = record.get("cpu_seconds", 0)
        print(f"{time.strftime('%H:%M:%S')} {job}: {record['status']} score {score:.2f} learn {seconds:.0f} CPU s", flush=True)

    from sb3_reset_ppo.experiments import executors

    # The first SIGINT or SIGTERM starts no new run and lets the running ones finish and be recorded; a second one
    # stops them (executors.run_workers)
    executors.run_local(list(jobs(args.envs, args.seeds, done)), train, args.workers, pick=pick, on_result=report)


if __name__ == "__main__":
    main()
