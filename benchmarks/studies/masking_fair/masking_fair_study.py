"""
The fair masking study (``benchmarks/studies/masking_fair/PROTOCOL.md``): MaskableResetPPO against what users do
today (MaskablePPO with stacked frames; RecurrentPPO and ResetPPO with the mask in the observation) and the
memoryless floor (MaskablePPO), on MaskedCueRecallFair-v0 and LeducMatch-v0 (OpenSpiel's Leduc poker); and the
amendment's arm (``NOTES.md``, Amendments): MaskablePPO with a frame stack long enough for every delay of
MaskedCueRecallFair-v0, on that task only.

Each run trains its task's budget with one torch thread, copies the policy's parameters before ``learn()`` and
after every ``snapshot_every``-th update (inside ``learn()``, with the ``learn()`` CPU and wall seconds and the
training episodes so far),
and evaluates every copy after ``learn()`` returns (deterministic episodes on a fresh env seeded
``EVAL_SEED + seed``; masks for the masked arms), recording each episode's return, length and invalid actions, so
the recorded ``learn()`` seconds hold no evaluation. One JSON file per run,
``benchmarks/results/masking_fair/<task>/<arm>/seed_<k>.json``, with the run's SB3 training log beside it
(``seed_<k>.log.txt.gz``); a failed run leaves ``seed_<k>.failed.txt``. Finished and failed runs are skipped
(resumable); runs go seed by seed (every task and arm of a seed before the next seed).

Usage: python benchmarks/studies/masking_fair/masking_fair_study.py [--seeds 10] [--tasks ...] [--arms ...]
    [--workers 1] [--out DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from benchmarks.kit import snapshots
from benchmarks.kit.snapshots import COMMON, LSTM_KWARGS, MLP_KWARGS, N_STEPS

ROOT = Path(__file__).resolve().parents[3]

OUT = ROOT / "benchmarks" / "results" / "masking_fair"

N_ENVS = 8
ROLLOUT = N_ENVS * N_STEPS
# Frames stacked for the frame-stack arm: the cue of every short delay of MaskedCueRecallFair-v0 (at most 12 blank
# steps: 14 observations) and the last 4 or more hands of LeducMatch-v0 (at most 4 decisions of player 0 a hand),
# but none of its long delays (130 to 140 blank steps)
FRAME_STACK = 16
# arm -> (algorithm, policy, policy_kwargs, masks in learn() and in the evaluation, frames stacked (None: enough for
# every delay of the task, :func:`frames_for_every_delay`), mask appended)
ARMS: dict[str, tuple[str, str, dict[str, Any], bool, int | None, bool]] = {
    "maskable_reset_ppo": ("MaskableResetPPO", "MlpLstmPolicy", LSTM_KWARGS, True, 1, False),
    "maskable_ppo_stack": ("MaskablePPO", "MlpPolicy", MLP_KWARGS, True, FRAME_STACK, False),
    "recurrent_ppo_mask_obs": ("RecurrentPPO", "MlpLstmPolicy", LSTM_KWARGS, False, 1, True),
    "reset_ppo_mask_obs": ("ResetPPO", "MlpLstmPolicy", LSTM_KWARGS, False, 1, True),
    "maskable_ppo": ("MaskablePPO", "MlpPolicy", MLP_KWARGS, True, 1, False),
    "maskable_ppo_stack_full": ("MaskablePPO", "MlpPolicy", MLP_KWARGS, True, None, False),
}
# The arms that run on some tasks only (the others run on every task): the full stack where a longest delay exists
ARM_TASKS: dict[str, tuple[str, ...]] = {"maskable_ppo_stack_full": ("MaskedCueRecallFair-v0",)}
# task -> (env steps per run: 200 rollouts, updates between copies of the policy: 21 evaluations from step 0,
# evaluation episodes: 200 matches of LeducMatch-v0, whose returns vary more)
TASKS: dict[str, tuple[int, int, int]] = {
    "MaskedCueRecallFair-v0": (200 * ROLLOUT, 10, 100),
    "LeducMatch-v0": (200 * ROLLOUT, 10, 200),
}
# The endpoints' thresholds (PROTOCOL.md): half way from the memoryless optimum (1/2) to 1 on MaskedCueRecallFair-v0;
# the exact bound of a policy without memory of earlier hands (1.6 chips a hand, 8 hands) on LeducMatch-v0
THRESHOLDS: dict[str, float] = {"MaskedCueRecallFair-v0": 0.75, "LeducMatch-v0": 12.8}
# Evaluations kept for the final return (the last 3: the last 40,960 env steps)
FINAL_EVALUATIONS = 3
EVAL_SEED = 10_000


def runs_on(task: str, arm: str) -> bool:
    """Whether the study runs ``arm`` on ``task`` (:data:`ARM_TASKS`)."""
    return task in ARM_TASKS.get(arm, (task,))


def frames_for_every_delay(task: str) -> int:
    """
    The frames a stack needs to hold the cue at the query of every episode of ``task`` (a registered gym id whose
    env has ``delay_probabilities()``, as MaskedCueRecallFair-v0's): the query comes ``delay + 1`` steps after the
    cue, so the longest delay that can occur plus 2, the smallest ``k`` whose ``frame_stack_optimum(k)`` is 1.

    :param task: The gym id
    :return: The number of frames
    """
    import sb3_reset_ppo.envs  # noqa: F401  (registers the tasks)

    env = gym.make(task).unwrapped
    if not hasattr(env, "delay_probabilities"):
        raise ValueError(f"task must be an env with delay_probabilities() (a cue and a delay), got {task!r}")
    return max(delay for delay, p in env.delay_probabilities().items() if p > 0) + 2


def frames_stacked(task: str, arm: str) -> int:
    """The frames ``arm`` stacks on ``task`` (1: none)."""
    frames = ARMS[arm][4]
    return frames_for_every_delay(task) if frames is None else frames


class MaskInObservation(gym.ObservationWrapper[np.ndarray, np.int64, np.ndarray]):
    """
    Append the env's action mask (``env.unwrapped.action_masks()``, as 0/1 floats) to a ``Box`` observation: how
    RecurrentPPO and ResetPPO, which take no masks, are given them. Invalid actions are then handled as the task
    defines (both tasks: a penalty, the step taken again, the episode ended by the 10th).

    :param env: An env with a flat ``Box`` observation space, a ``Discrete`` action space and an ``action_masks()``
        method
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"env's observation space must be a flat Box, got {space}")
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f"env's action space must be Discrete, got {env.action_space}")
        size = int(env.action_space.n)
        low = np.concatenate([space.low, np.zeros(size, dtype=space.dtype)])
        high = np.concatenate([space.high, np.ones(size, dtype=space.dtype)])
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        mask = np.asarray(self.env.unwrapped.action_masks(), dtype=np.float32)  # type: ignore[attr-defined]
        return np.concatenate([np.asarray(observation, dtype=np.float32), mask])


def make_env(task: str, arm: str, n_envs: int, seed: int) -> Any:
    """
    The arm's vectorised env: ``make_vec_env`` (``DummyVecEnv``), the mask appended or frames stacked as the arm
    says.

    :param task: A task of :data:`TASKS`
    :param arm: An arm of :data:`ARMS`
    :param n_envs: Number of envs
    :param seed: Seed of the envs (``seed + index``)
    :return: The ``VecEnv``
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    import benchmarks.envs  # noqa: F401  (registers the tasks)

    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    if not runs_on(task, arm):
        raise ValueError(f"arm {arm!r} runs on {list(ARM_TASKS[arm])} only, got task {task!r}")
    frames, mask_obs = frames_stacked(task, arm), ARMS[arm][5]
    env = make_vec_env(task, n_envs=n_envs, seed=seed, wrapper_class=MaskInObservation if mask_obs else None)
    return VecFrameStack(env, frames) if frames > 1 else env


def result_path(out: Path, task: str, arm: str, seed: int) -> Path:
    """Where a run's record goes."""
    return out / task / arm / f"seed_{seed}.json"


def is_done(path: Path) -> bool:
    """Whether a run is recorded, finished (its JSON) or failed (its ``.failed.txt``)."""
    return path.exists() or path.with_name(path.stem + ".failed.txt").exists()


def jobs_to_do(out: Path, tasks: list[str], arms: list[str], seeds: list[int], **settings: Any) -> list[dict[str, Any]]:
    """
    The runs not recorded yet, seed by seed (each seed's tasks and arms together; an arm only on its tasks,
    :data:`ARM_TASKS`).

    :param out: The results folder
    :param tasks: Tasks to run
    :param arms: Arms to run
    :param seeds: Seeds to run
    :param settings: Overrides for tests (``total_steps``, ``snapshot_every``, ``eval_episodes``)
    :return: One job per run to do
    """
    snapshots.check_names("tasks", tasks, TASKS)
    snapshots.check_names("arms", arms, ARMS)
    return [
        {"task": task, "arm": arm, "seed": seed, "path": str(result_path(out, task, arm, seed)), **settings}
        for seed in seeds
        for task in tasks
        for arm in arms
        if runs_on(task, arm) and not is_done(result_path(out, task, arm, seed))
    ]


def evaluate(model: Any, task: str, arm: str, seed: int, episodes: int) -> dict[str, list[Any]]:
    """
    Deterministic episodes of the model on a fresh env seeded ``EVAL_SEED + seed``, with masks for the masked arms,
    keeping the recurrent state (:func:`sb3_reset_ppo.common.maskable_evaluation.evaluate_policy`).

    :return: Per episode: ``returns``, ``lengths``, ``invalid`` (invalid actions), ``delays`` (MaskedCueRecallFair-v0's
        delay) or ``styles`` (LeducMatch-v0's opponent)
    """
    masking = ARMS[arm][3]
    env = make_env(task, arm, 1, EVAL_SEED + seed)
    counts = {"invalid": 0}
    invalid: list[int] = []
    kinds: list[Any] = []

    def count(local: dict[str, Any], _: dict[str, Any]) -> None:
        info = local["info"]
        counts["invalid"] += int(info.get("invalid_action", False))
        if local["done"]:
            invalid.append(counts["invalid"])
            counts["invalid"] = 0
            kinds.append(info.get("delay", info.get("style")))

    evaluated = snapshots.evaluate(model, env, episodes, masking, callback=count)
    return {**evaluated, "invalid": invalid, "delays" if task == "MaskedCueRecallFair-v0" else "styles": kinds}


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one run (:mod:`snapshots`); write and return its record (and its training log)."""
    import torch as th

    th.set_num_threads(1)
    task, arm, seed = job["task"], job["arm"], int(job["seed"])
    total, every, episodes = snapshots.budget(job, *TASKS[task])
    algorithm, policy, policy_kwargs, masking, _, mask_obs = ARMS[arm]
    frames = frames_stacked(task, arm)
    code = snapshots.code()
    env = make_env(task, arm, N_ENVS, seed)
    model = snapshots.make_model(algorithm, policy, policy_kwargs, env, seed)
    training = snapshots.train(model, total, every, use_masking=masking)
    env.close()
    head = {
        "task": task, "arm": arm, "seed": seed, "algorithm": algorithm, "policy": policy, "policy_kwargs": policy_kwargs,
        "masking": masking, "frame_stack": frames, "mask_in_observation": mask_obs, "settings": COMMON,
        "n_envs": N_ENVS, "total_steps": total, "snapshot_every": every, "eval_episodes": episodes,
        "eval_seed": EVAL_SEED + seed,
    }  # fmt: skip
    # compact: 100 runs of 21 evaluations
    return snapshots.record_run(
        job, head, model, training, lambda: evaluate(model, task, arm, seed, episodes), code, compact=True
    )


def safe_run(job: dict[str, Any]) -> dict[str, Any]:
    """:func:`run`, with a failure written to ``seed_<k>.failed.txt`` and returned instead of raised."""
    return snapshots.safe_run(run, job)


def summary(record: dict[str, Any]) -> str:
    """One line on a finished run."""
    head = f"{record['task']:>22} {record['arm']:>22} seed {record['seed']}"
    if "failed" in record:
        return f"{head}: FAILED\n{record['failed']}"
    finals = [float(np.mean(e["returns"])) for e in record["evaluations"][-3:]]
    invalid = float(np.mean(record["evaluations"][-1]["invalid"]))
    return (
        f"{head}: learn() {record['learn_cpu_seconds']:.0f} CPU s ({record['learn_wall_seconds']:.0f} wall s), "
        f"last three mean returns {' '.join(f'{f:.3f}' for f in finals)}, invalid actions per episode {invalid:.2f}"
    )


def execute(jobs: list[dict[str, Any]], workers: int) -> None:
    """
    Run the jobs, each in a fresh Python process (``--one``; one torch thread), ``workers`` at a time
    (:func:`sb3_reset_ppo.experiments.executors.run_workers`), printing a line as each finishes.
    """
    from sb3_reset_ppo.experiments.executors import run_workers

    todo = list(jobs)
    lock = threading.Lock()
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def work(index: int, stop: threading.Event) -> None:
        while not stop.is_set():
            with lock:
                if not todo:
                    return
                job = todo.pop(0)
            command = [sys.executable, __file__, "--one", json.dumps(job)]
            result = subprocess.run(command, env=environment, capture_output=True, text=True)
            line = result.stdout.strip().splitlines()[-1:] or [f"no output; stderr: {result.stderr[-2000:]}"]
            print(line[0], flush=True)

    run_workers(work, workers)


def main(argv: list[str] | None = None) -> None:
    parser = snapshots.parser(__doc__, ARMS, OUT, workers=1, workers_help="runs at a time (the protocol: 1 or 2)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one job (JSON), in this process
    args = parser.parse_args(argv)
    if args.one is not None:
        print(summary(safe_run(json.loads(args.one))), flush=True)
        return
    if args.workers < 1 or args.seeds < 1:
        parser.error(f"--workers and --seeds must be at least 1, got {args.workers} and {args.seeds}")
    command = "python benchmarks/studies/masking_fair/masking_fair_study.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    jobs = jobs_to_do(args.out, args.tasks, args.arms, list(range(args.seeds)), command=command.strip())
    print(f"{len(jobs)} runs to do on {args.workers} workers; reproduce with: {command.strip()}", flush=True)
    execute(jobs, args.workers)


if __name__ == "__main__":
    main()
