"""
The masking study (``benchmarks/studies/masking/PROTOCOL.md``): MaskableResetPPO (memory and masks) against ResetPPO
without masks and sb3-contrib's MaskablePPO (masks, no memory) on MaskedCueRecall-v0.

Each run trains :data:`TOTAL_STEPS` env steps with one torch thread, copies the policy's parameters before
``learn()`` and after every :data:`SNAPSHOT_EVERY`-th update (inside ``learn()``, with the ``learn()`` CPU and wall
seconds so far), and evaluates every copy after ``learn()`` returns (:data:`EVAL_EPISODES` deterministic episodes,
the masked evaluation that keeps the recurrent state, on a fresh env seeded ``10_000 + seed``), so the recorded
``learn()`` seconds hold no evaluation. One JSON file per run, ``benchmarks/results/masking/<arm>/seed_<k>.json``,
with the run's SB3 training log beside it (``seed_<k>.log.txt.gz``); finished runs are skipped (resumable). Runs go
seed by seed, the three arms of a seed first, on ``--workers`` processes.

Usage: python benchmarks/studies/masking/masking_study.py [--seeds 10] [--arms ...] [--workers 2] [--out DIR]
"""

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]
OUT = BENCHMARKS / "results" / "masking"

ENV_ID = "MaskedCueRecall-v0"
N_ENVS = 8
N_STEPS = 128
# 30 rollouts of 8 x 128: CueRecall-v0's package budget (3e4) in whole rollouts
TOTAL_STEPS = 30 * N_STEPS * N_ENVS
SNAPSHOT_EVERY = 2  # updates between copies of the policy: 15 evaluations after training starts
EVAL_EPISODES = 100
EVAL_SEED_OFFSET = 10_000
# The package's CueRecall-v0 settings (sb3_reset_ppo/zoo/reset_ppo.yml), the same for every arm
COMMON: dict[str, Any] = {
    "n_steps": N_STEPS, "batch_size": 128, "n_epochs": 10, "learning_rate": 2e-3, "gamma": 0.9, "gae_lambda": 0.95,
    "clip_range": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
}  # fmt: skip
LSTM_KWARGS: dict[str, Any] = {"lstm_hidden_size": 32, "net_arch": [32]}
MLP_KWARGS: dict[str, Any] = {"net_arch": [32]}
# arm -> (algorithm, policy, policy_kwargs, masks in learn() and in the evaluation)
ARMS: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "maskable_reset_ppo": ("MaskableResetPPO", "MlpLstmPolicy", LSTM_KWARGS, True),
    "reset_ppo": ("ResetPPO", "MlpLstmPolicy", LSTM_KWARGS, False),
    "maskable_ppo": ("MaskablePPO", "MlpPolicy", MLP_KWARGS, True),
}


def result_path(out: Path, arm: str, seed: int) -> Path:
    """Where a run's record goes."""
    return out / arm / f"seed_{seed}.json"


def jobs_to_do(out: Path, arms: list[str], seeds: list[int], **settings: Any) -> list[dict[str, Any]]:
    """
    The runs without a record yet, seed by seed (each seed's arms together).

    :param out: The results folder
    :param arms: Arms to run
    :param seeds: Seeds to run
    :param settings: ``total_steps``, ``snapshot_every``, ``eval_episodes`` (default: the protocol's)
    :return: One job per run to do
    """
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise ValueError(f"unknown arms {unknown}: choose from {list(ARMS)}")
    return [
        {"arm": arm, "seed": seed, "path": result_path(out, arm, seed), **settings}
        for seed in seeds
        for arm in arms
        if not result_path(out, arm, seed).exists()
    ]


def make_model(arm: str, env: Any, seed: int) -> Any:
    """The arm's model with the protocol's settings."""
    from sb3_contrib import MaskablePPO

    from sb3_reset_ppo import MaskableResetPPO, ResetPPO

    algorithm, policy, policy_kwargs, _ = ARMS[arm]
    classes: dict[str, Any] = {"MaskableResetPPO": MaskableResetPPO, "ResetPPO": ResetPPO, "MaskablePPO": MaskablePPO}
    return classes[algorithm](policy, env, policy_kwargs=dict(policy_kwargs), seed=seed, device="cpu", verbose=1, **COMMON)


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one run; write and return its record (and its training log)."""
    import copy

    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    import sb3_reset_ppo
    import sb3_reset_ppo.envs  # registers MaskedCueRecall-v0
    from sb3_reset_ppo.common.maskable_evaluation import evaluate_policy
    from sb3_reset_ppo.experiments import runner

    th.set_num_threads(1)
    arm, seed, path = job["arm"], int(job["seed"]), Path(job["path"])
    total = int(job.get("total_steps", TOTAL_STEPS))
    every = int(job.get("snapshot_every", SNAPSHOT_EVERY))
    episodes = int(job.get("eval_episodes", EVAL_EPISODES))
    algorithm, policy, policy_kwargs, masking = ARMS[arm]

    class Snapshots(BaseCallback):
        """Copies the policy after every ``every``-th update, with the ``learn()`` seconds so far."""

        def __init__(self) -> None:
            super().__init__()
            self.rollouts = 0
            self.cpu0 = self.wall0 = 0.0
            self.snapshots: list[tuple[int, float, float, dict[str, Any]]] = []

        def _on_training_start(self) -> None:
            self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

        def take(self) -> None:
            cpu, wall = time.process_time() - self.cpu0, time.perf_counter() - self.wall0
            self.snapshots.append((self.model.num_timesteps, cpu, wall, copy.deepcopy(self.model.policy.state_dict())))

        def _on_rollout_start(self) -> None:
            updates = self.rollouts  # this rollout follows that many updates
            self.rollouts += 1
            if updates > 0 and updates % every == 0:
                self.take()

        def _on_step(self) -> bool:
            return True

    # The code the run trains with, read when it starts (other work may commit while it trains)
    version, diff = runner.code_version(), package_diff()
    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed)
    model = make_model(arm, env, seed)
    with tempfile.TemporaryDirectory() as folder:
        model.set_logger(configure(folder, ["log"]))
        callback = Snapshots()
        callback.snapshots.append((0, 0.0, 0.0, copy.deepcopy(model.policy.state_dict())))
        started = time.time()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if algorithm == "ResetPPO":
            model.learn(total, callback=callback)
        else:
            model.learn(total, callback=callback, use_masking=True)
        learn_cpu, learn_wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if callback.snapshots[-1][0] != model.num_timesteps:  # the last update's copy (no rollout starts after it)
            callback.take()
        model.logger.close()
        log_text = (Path(folder) / "log.txt").read_text()
    evaluations = []
    for steps, cpu, wall, state in callback.snapshots:
        model.policy.load_state_dict(state)
        eval_env = make_vec_env(ENV_ID, n_envs=1, seed=EVAL_SEED_OFFSET + seed)
        returns, lengths = evaluate_policy(
            model, eval_env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True,
            use_masking=masking,
        )  # fmt: skip
        eval_env.close()
        assert isinstance(returns, list) and isinstance(lengths, list)  # return_episode_rewards=True: per episode
        evaluations.append({
            "timesteps": int(steps), "learn_cpu_seconds": cpu, "learn_wall_seconds": wall,
            "returns": [float(r) for r in returns], "lengths": [int(n) for n in lengths],
        })  # fmt: skip
    record = {
        "arm": arm, "seed": seed, "algorithm": algorithm, "policy": policy, "policy_kwargs": policy_kwargs,
        "masking": masking, "settings": COMMON, "env": ENV_ID, "n_envs": N_ENVS, "total_steps": total,
        "snapshot_every": every, "eval_episodes": episodes, "eval_seed": EVAL_SEED_OFFSET + seed,
        "num_timesteps": int(model.num_timesteps), "learn_cpu_seconds": learn_cpu, "learn_wall_seconds": learn_wall,
        "started": started, "ended": time.time(), "evaluations": evaluations, "version": sb3_reset_ppo.__version__,
        **version, "package_diff": diff, "machine": runner.machine(),
        "command": job.get("command", ""),
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path.with_name(path.stem + ".log.txt.gz"), "wt") as log:
        log.write(log_text)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=1))
    temporary.replace(path)  # the record last: a run counts as finished only once its log is there too
    return record


def package_diff() -> str:
    """
    What ``dirty`` means when a run starts: ``git status --porcelain -- sb3_reset_ppo`` (changed and untracked files
    under the package) followed by ``git diff HEAD -- sb3_reset_ppo``.
    """
    import subprocess

    texts = []
    for args in (["status", "--porcelain", "--", "sb3_reset_ppo"], ["diff", "HEAD", "--", "sb3_reset_ppo"]):
        try:
            result = subprocess.run(["git", *args], cwd=BENCHMARKS.parent, capture_output=True, text=True)
        except OSError:  # no git
            return ""
        texts.append(result.stdout if result.returncode == 0 else "")
    return "".join(texts)


def safe_run(job: dict[str, Any]) -> dict[str, Any]:
    """:func:`run`, with a failure written to ``<arm>/seed_<k>.failed.txt`` and returned instead of raised."""
    try:
        return run(job)
    except Exception:
        failed = Path(job["path"]).with_suffix(".failed.txt")
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(traceback.format_exc())
        return {"arm": job["arm"], "seed": job["seed"], "failed": failed.read_text()}


def summary(record: dict[str, Any]) -> str:
    """One line on a finished run."""
    if "failed" in record:
        return f"{record['arm']:>18} seed {record['seed']}: FAILED\n{record['failed']}"
    from sb3_reset_ppo.envs.masked_cue_recall import normalised_score

    finals = [normalised_score(sum(e["returns"]) / len(e["returns"])) for e in record["evaluations"][-3:]]
    return (
        f"{record['arm']:>18} seed {record['seed']}: learn() {record['learn_cpu_seconds']:.0f} CPU s "
        f"({record['learn_wall_seconds']:.0f} wall s), last three evaluations {' '.join(f'{f:.3f}' for f in finals)}"
    )


def execute(jobs: list[dict[str, Any]], workers: int, work: Callable[[dict[str, Any]], dict[str, Any]] = safe_run) -> None:
    """Run the jobs on ``workers`` processes (one run per process), printing a line as each finishes."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if workers == 1:
        for job in jobs:
            print(summary(work(job)), flush=True)
        return
    with multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
        for record in pool.imap_unordered(work, jobs):
            print(summary(record), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--total-steps", type=int, default=TOTAL_STEPS, help="protocol: the default (tests: fewer)")
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES, help="protocol: the default")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.seeds < 1 or args.total_steps < 1 or args.eval_episodes < 1:
        parser.error("--workers, --seeds, --total-steps and --eval-episodes must be at least 1")
    command = "python benchmarks/studies/masking/masking_study.py " + " ".join(sys.argv[1:] if argv is None else argv)
    jobs = jobs_to_do(
        args.out, args.arms, list(range(args.seeds)), total_steps=args.total_steps, eval_episodes=args.eval_episodes,
        command=command.strip(),
    )  # fmt: skip
    print(f"{len(jobs)} runs to do on {args.workers} workers; reproduce with: {command.strip()}", flush=True)
    execute(jobs, args.workers)


if __name__ == "__main__":
    main()
