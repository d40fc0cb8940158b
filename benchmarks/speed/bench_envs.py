"""
Speed of the memory tasks: steps per second of one env (``gym.make(...).unwrapped``), median of repeats.

Usage: python benchmarks/speed/bench_envs.py [--steps 20000] [--repeats 3]
"""

import argparse
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

import sb3_reset_ppo.envs  # noqa: F401  (registers the memory tasks)

ENVS = ["CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "CueRecallImage-v0"]


def steps_per_second(env_id: str, steps: int) -> float:
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    actions = np.zeros(steps, dtype=np.int64)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    print("| env | steps/s (median) |\n|---|---|")
    for env_id in ENVS:
        rates = [steps_per_second(env_id, args.steps) for _ in range(args.repeats)]
        print(f"| {env_id} | {statistics.median(rates):,.0f} |")


if __name__ == "__main__":
    main()
