"""
The runner of the studies that evaluate copies of the policy taken while it trains (the masking studies, the coverage
study's port case): a run copies the policy before ``learn()``, after every ``every``-th update (with the ``learn()``
seconds and training episodes so far) and after the last, and evaluates the copies once ``learn()`` has returned, so
the ``learn()`` seconds hold no evaluation. SB3 is imported by the functions that train (the reports import cheaply).
"""

import copy
import gzip
import json
import multiprocessing
import os
import subprocess
import tempfile
import time
import traceback
from argparse import ArgumentParser, RawDescriptionHelpFormatter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
# The masking studies' settings: the package's CueRecall-v0 settings (sb3_reset_ppo/zoo/reset_ppo.yml) for every arm
# and task, and the networks of the memory and the memoryless arms
N_STEPS = 128
COMMON: dict[str, Any] = {
    "n_steps": N_STEPS, "batch_size": 128, "n_epochs": 10, "learning_rate": 2e-3, "gamma": 0.9, "gae_lambda": 0.95,
    "clip_range": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
}  # fmt: skip
LSTM_KWARGS: dict[str, Any] = {"lstm_hidden_size": 32, "net_arch": [32]}
MLP_KWARGS: dict[str, Any] = {"net_arch": [32]}


class Training(NamedTuple):
    """
    A run's training (:func:`train`): the copies of the policy (``timesteps``, ``training_episodes``,
    ``learn_cpu_seconds``, ``learn_wall_seconds`` so far, and the ``state``), when ``learn()`` started and ended
    (seconds since the epoch), its CPU and wall seconds, and the SB3 training log (empty when not kept).
    """

    snapshots: list[dict[str, Any]]
    started: float
    ended: float
    learn_cpu: float
    learn_wall: float
    log: str


def make_model(algorithm: str, policy: str, policy_kwargs: dict[str, Any], env: Any, seed: int) -> Any:
    """A masking study's model: ``algorithm`` with :data:`COMMON`, on the CPU, logging every update."""
    from sb3_contrib import MaskablePPO, RecurrentPPO

    from sb3_reset_ppo import MaskableResetPPO, ResetPPO

    classes: dict[str, Any] = {cls.__name__: cls for cls in (MaskableResetPPO, ResetPPO, MaskablePPO, RecurrentPPO)}
    return classes[algorithm](policy, env, policy_kwargs=dict(policy_kwargs), seed=seed, device="cpu", verbose=1, **COMMON)


def budget(job: dict[str, Any], total: int, every: int, episodes: int) -> tuple[int, int, int]:
    """A job's ``total_steps``, ``snapshot_every`` and ``eval_episodes`` (tests: fewer), else the protocol's."""
    return int(job.get("total_steps", total)), int(job.get("snapshot_every", every)), int(job.get("eval_episodes", episodes))


def evaluate(model: Any, env: Any, episodes: int, use_masking: bool, callback: Any = None) -> dict[str, list[Any]]:
    """
    The ``returns`` and ``lengths`` of deterministic episodes on ``env`` (then closed), keeping the recurrent state
    (:func:`sb3_reset_ppo.common.maskable_evaluation.evaluate_policy`, with masks if ``use_masking``).
    """
    from sb3_reset_ppo.common.maskable_evaluation import evaluate_policy

    returns, lengths = evaluate_policy(
        model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True, use_masking=use_masking,
        callback=callback,
    )  # fmt: skip
    env.close()
    assert isinstance(returns, list) and isinstance(lengths, list)  # return_episode_rewards=True: per episode
    return {"returns": [float(r) for r in returns], "lengths": [int(n) for n in lengths]}


def train(model: Any, total: int, every: int, use_masking: bool = False, keep_log: bool = True) -> Training:
    """
    Train ``model`` for ``total`` env steps (``learn()`` given ``use_masking=True`` if ``use_masking``), copying its
    policy; ``keep_log``: SB3's ``log`` output is kept (else the model logs as it is set to).
    """
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import configure

    def snapshot(steps: int, episodes: int, cpu: float, wall: float) -> dict[str, Any]:
        state = copy.deepcopy(model.policy.state_dict())
        return {
            "timesteps": int(steps), "training_episodes": episodes, "learn_cpu_seconds": cpu, "learn_wall_seconds": wall,
            "state": state,
        }  # fmt: skip

    class Snapshots(BaseCallback):
        """Copies the policy after every ``every``-th update, with the ``learn()`` seconds so far."""

        def __init__(self) -> None:
            super().__init__()
            self.rollouts = self.episodes = 0  # training episodes ended so far (in any of the envs)
            self.cpu0 = self.wall0 = 0.0
            self.snapshots = [snapshot(0, 0, 0.0, 0.0)]

        def _on_training_start(self) -> None:
            self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

        def take(self) -> None:
            cpu, wall = time.process_time() - self.cpu0, time.perf_counter() - self.wall0
            self.snapshots.append(snapshot(self.model.num_timesteps, self.episodes, cpu, wall))

        def _on_rollout_start(self) -> None:
            if self.rollouts > 0 and self.rollouts % every == 0:  # this rollout follows that many updates
                self.take()
            self.rollouts += 1

        def _on_step(self) -> bool:
            self.episodes += int(np.sum(self.locals["dones"]))
            return True

    callback = Snapshots()
    with tempfile.TemporaryDirectory() as folder:
        if keep_log:
            model.set_logger(configure(folder, ["log"]))
        started = time.time()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        model.learn(total, callback=callback, **({"use_masking": True} if use_masking else {}))
        learn_cpu, learn_wall = time.process_time() - cpu0, time.perf_counter() - wall0
        ended = time.time()
        if callback.snapshots[-1]["timesteps"] != model.num_timesteps:  # the last update's (no rollout starts after it)
            callback.take()
        model.logger.close()
        log = (Path(folder) / "log.txt").read_text() if keep_log else ""
    return Training(callback.snapshots, started, ended, learn_cpu, learn_wall, log)


def code() -> dict[str, Any]:
    """
    The code a run trains with, read when it starts (other work may commit meanwhile): the package's ``version``, its
    ``commit`` and ``dirty`` (:func:`sb3_reset_ppo.experiments.runner.code_version`) and ``package_diff``, what dirty
    means: ``git status --porcelain`` (changed and untracked files) and ``git diff HEAD`` of ``sb3_reset_ppo``.
    """
    import sb3_reset_ppo
    from sb3_reset_ppo.experiments import runner

    texts: list[str] = []
    for args in (["status", "--porcelain", "--", "sb3_reset_ppo"], ["diff", "HEAD", "--", "sb3_reset_ppo"]):
        try:
            result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        except OSError:  # no git
            texts = []
            break
        texts.append(result.stdout if result.returncode == 0 else "")
    return {"version": sb3_reset_ppo.__version__, **runner.code_version(), "package_diff": "".join(texts)}


def record_run(
    job: dict[str, Any],
    head: dict[str, Any],
    model: Any,
    training: Training,
    evaluate: Callable[[], dict[str, Any]],
    code: dict[str, Any],
    episodes: bool = True,
    compact: bool = False,
) -> dict[str, Any]:
    """
    Evaluate every copy of the policy (loaded into ``model``; ``evaluate`` gives an evaluation's fields after the
    copy's, ``training_episodes`` only if ``episodes``), then write the run's record to ``job["path"]`` and return
    it: ``head`` (the run's settings), ``num_timesteps``, the ``learn()`` seconds, when it started and ended (now),
    the evaluations, the ``code`` (:func:`code`), the ``machine`` and the job's ``command``.
    """
    from sb3_reset_ppo.experiments import runner

    evaluations = []
    for snapshot in training.snapshots:
        model.policy.load_state_dict(snapshot["state"])
        kept = {key: value for key, value in snapshot.items() if key != "state" and (episodes or key != "training_episodes")}
        evaluations.append({**kept, **evaluate()})
    record = {
        **head, "num_timesteps": int(model.num_timesteps), "learn_cpu_seconds": training.learn_cpu,
        "learn_wall_seconds": training.learn_wall, "started": training.started, "ended": time.time(),
        "evaluations": evaluations, **code, "machine": runner.machine(), "command": job.get("command", ""),
    }  # fmt: skip
    write_record(Path(job["path"]), record, training.log, compact)
    return record


def write_record(path: Path, record: dict[str, Any], log: str | None = None, compact: bool = False) -> None:
    """Write a run's record (JSON, indented by 1 unless ``compact``) last, after its ``log`` (``<name>.log.txt.gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        with gzip.open(path.with_name(path.stem + ".log.txt.gz"), "wt") as file:
            file.write(log)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, separators=(",", ":")) if compact else json.dumps(record, indent=1))
    temporary.replace(path)  # the record last: a run counts as finished only once its log is there too


def safe_run(run: Callable[[dict[str, Any]], dict[str, Any]], job: dict[str, Any]) -> dict[str, Any]:
    """``run(job)``; a failure is written to ``<name>.failed.txt`` beside the job's record and returned, not raised."""
    try:
        return run(job)
    except Exception:
        path = Path(job["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        text = traceback.format_exc()
        path.with_name(path.stem + ".failed.txt").write_text(text)
        return {**{key: job[key] for key in ("task", "arm", "seed") if key in job}, "failed": text}


def check_names(kind: str, chosen: list[str], known: Iterable[str]) -> None:
    """Raise a ``ValueError`` naming the ``chosen`` names (of ``kind``, e.g. arms) that are not ``known``."""
    if unknown := sorted(set(chosen) - set(known)):
        raise ValueError(f"unknown {kind} {unknown}: choose from {list(known)}")


def parser(doc: str | None, arms: Iterable[str], out: Path, workers: int, workers_help: str | None = None) -> ArgumentParser:
    """A runner's command line: ``--seeds`` (0..N-1), ``--arms``, ``--workers`` and ``--out`` (``doc`` describes it)."""
    command = ArgumentParser(description=doc, formatter_class=RawDescriptionHelpFormatter)
    command.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    command.add_argument("--arms", nargs="+", default=list(arms), choices=list(arms))
    command.add_argument("--workers", type=int, default=workers, help=workers_help)
    command.add_argument("--out", type=Path, default=out)
    return command


def execute(
    jobs: list[dict[str, Any]], workers: int, work: Callable[..., dict[str, Any]], line: Callable[..., str], note: str = ""
) -> None:
    """
    ``work`` the jobs on ``workers`` processes (one run each, one OpenMP thread; here if ``workers`` is 1), printing
    their number (and ``note``), then ``line(record)`` as each finishes.
    """
    print(f"{len(jobs)} runs to do on {workers} workers{note}", flush=True)
    os.environ["OMP_NUM_THREADS"] = "1"
    if workers == 1:
        for job in jobs:
            print(line(work(job)), flush=True)
        return
    with multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
        for record in pool.imap_unordered(work, jobs):
            print(line(record), flush=True)
