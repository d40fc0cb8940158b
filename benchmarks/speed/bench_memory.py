"""
Memory of a long ResetPPO run with images: CnnLstmPolicy on CueRecallImage-v0 (64x64).

Trains for ``--updates`` updates and prints the resident memory after update 30 and after the last one
(it must stay flat: no growth from stored states, logs or diagnostics), and the peak extra memory of one
``train()`` relative to the rollout buffer's size and to one minibatch.

Usage: python benchmarks/speed/bench_memory.py [--updates 300] [--n-envs 8] [--n-steps 128] [--json out.json]
"""

import argparse
import json
import sys
import time
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from benchmarks.speed import bench_train
from sb3_reset_ppo import ResetPPO


class MemoryLog(BaseCallback):
    """Resident memory right after each train() (a rollout starts after the previous update)."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        self.iteration = 0
        self.rss: dict[int, int] = {}

    def _on_rollout_start(self) -> None:
        if self.iteration > 0 and (self.iteration % self.every == 0 or self.iteration == 30):
            bench_train._release_freed_memory()
            self.rss[self.iteration] = bench_train._rss_bytes()
        self.iteration += 1

    def _on_step(self) -> bool:
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=32)
    parser.add_argument("--n-epochs", type=int, default=1)
    parser.add_argument("--window-size", type=int, default=16)
    parser.add_argument("--lstm-hidden-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    th.set_num_threads(args.threads)
    bench_train._use_mmap_for_large_allocations()
    print("command: python " + " ".join(sys.argv))
    env = make_vec_env("CueRecallImage-v0", n_envs=args.n_envs, seed=0, env_kwargs=dict(min_delay=4, max_delay=30))
    model = ResetPPO(
        "CnnLstmPolicy", env, n_steps=args.n_steps, n_epochs=args.n_epochs, window_size=args.window_size,
        policy_kwargs=dict(lstm_hidden_size=args.lstm_hidden_size), seed=0,
    )  # fmt: skip
    log = MemoryLog(every=max(args.updates // 10, 1))
    start = time.perf_counter()
    model.learn(args.n_steps * args.n_envs * (args.updates + 1), callback=log)
    minutes = (time.perf_counter() - start) / 60

    # Peak extra memory of one more train() on the last rollout (still in the buffer), and of one minibatch
    model.rollout_buffer._sampler = None
    with bench_train.PeakMemory() as train_peak:
        model.train()
    model.rollout_buffer._sampler = None
    with bench_train.PeakMemory() as minibatch_peak:
        bench_train.one_minibatch(model)
    size = bench_train.buffer_bytes(model.rollout_buffer)
    result: dict[str, Any] = {
        "settings": vars(args),
        "minutes": minutes,
        "rss_by_update_mib": {k: v / 2**20 for k, v in log.rss.items()},
        "rss_growth_30_to_last": log.rss[max(log.rss)] / log.rss[30] - 1,
        "buffer_mib": size / 2**20,
        "train_peak_extra_mib": train_peak.extra / 2**20,
        "minibatch_peak_extra_mib": minibatch_peak.extra / 2**20,
    }
    print(json.dumps(result, indent=2))
    last = max(log.rss)
    print(
        f"\nresident memory after update 30: {log.rss[30] / 2**20:.1f} MiB, after update {last}: "
        f"{log.rss[last] / 2**20:.1f} MiB ({100 * result['rss_growth_30_to_last']:+.1f}%)"
    )
    print(
        f"train() peak extra: {result['train_peak_extra_mib']:.1f} MiB = "
        f"{train_peak.extra / size:.2f} x the rollout buffer ({result['buffer_mib']:.1f} MiB); "
        f"one minibatch alone: {result['minibatch_peak_extra_mib']:.1f} MiB"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
