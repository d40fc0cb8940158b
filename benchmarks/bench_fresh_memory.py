"""
Cost of fresh memory: seconds of one ``train()`` with ``memory_refresh`` and ``burn_in`` against ResetPPO's defaults.

For each task of ``bench_train.py`` (MLP: CartPoleNoVel-v1, 8 envs; image: CueRecallImage-v0, 4 envs), with
RecurrentPPO's defaults (``n_steps=128``, ``n_epochs=10``, ``batch_size=128``, LSTM 256, ``window_size=16``),
one model per setting collects a rollout, then ``train()`` is timed ``--repeats`` times (process CPU time, one
torch thread; median). Settings: the default (no refresh, no burn-in), ``memory_refresh=1`` (a refresh before
each of epochs 2 to 10), and ``burn_in`` 8 and 16.

Usage: python benchmarks/bench_fresh_memory.py [--tasks mlp image] [--repeats 3] [--json out.json]
"""

import argparse
import json
import statistics
import sys
import time
import warnings
from typing import Any

import torch as th
from bench_train import TASKS
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from sb3_reset_ppo import ResetPPO

SETTINGS: dict[str, dict[str, int]] = {
    "default": {},
    "memory_refresh=1": {"memory_refresh": 1},
    "burn_in=8": {"burn_in": 8},
    "burn_in=16": {"burn_in": 16},
}


def train_seconds(task: dict[str, Any], settings: dict[str, int], repeats: int) -> float:
    env = make_vec_env(task["env_id"], n_envs=task["n_envs"], seed=0, env_kwargs=task["env_kwargs"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ResetPPO(task["policy"], env, seed=0, **settings)  # type: ignore[arg-type]
    model.learn(task["n_envs"] * model.n_steps)  # one rollout (and one train(), the warm-up)
    durations = []
    for _ in range(repeats):
        model.rollout_buffer.release()  # count the per-rollout setup too
        start = time.process_time()
        model.train()
        durations.append(time.process_time() - start)
    return statistics.median(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["mlp", "image"], choices=sorted(TASKS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    th.set_num_threads(1)
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    print("command: python " + " ".join(sys.argv), flush=True)
    results: list[dict[str, Any]] = []
    print("| task | setting | train() CPU s | relative to the default |\n|---|---|---|---|")
    for name in args.tasks:
        baseline = None
        for label, settings in SETTINGS.items():
            seconds = train_seconds(TASKS[name], settings, args.repeats)
            baseline = baseline or seconds
            results.append({"task": name, "setting": label, "train_cpu_seconds": seconds, "ratio": seconds / baseline})
            print(f"| {name} | {label} | {seconds:.2f} | {seconds / baseline:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": sys.argv, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
