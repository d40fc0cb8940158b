"""
Memory of a long ResetPPO run with images: CnnLstmPolicy on CueRecallImage-v0 (64x64).

Trains for ``--updates`` updates and prints the resident memory after update 30 and after the last one
(it must stay flat: no growth from stored states, logs or diagnostics), and the peak extra memory of one
``train()`` relative to the rollout buffer's size and to one minibatch.

With ``--attention``, instead: what attention memory stores and what one ``train()`` adds, at each
``memory_length`` K of ``--memory-lengths`` and rollout of N = ``--n-envs`` x ``--attention-steps`` steps
(``MlpTrXLPolicy`` on CartPoleNoVel-v1, ``trxl_dim`` ``--trxl-dim``, 2 layers, a critic transformer of its own,
``batch_size`` 128, one epoch; the LSTM of the same width beside it at each N): the bytes of the buffer's stored
block inputs (``E (K + T) L D`` floats, actor and critic), against the ``N K L D`` floats that a copy of the K
positions per step would take, the whole buffer, and the peak extra resident memory of one ``train()``.

Usage: python benchmarks/speed/bench_memory.py [--updates 300] [--n-envs 8] [--n-steps 128] [--json out.json]
       python benchmarks/speed/bench_memory.py --attention [--memory-lengths 16 64] [--attention-steps 128 512]
       [--out benchmarks/results/bench_memory_attention]
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
from sb3_reset_ppo.common.attention_buffers import AttentionWindowRolloutBuffer


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


def attention_memory(memory_length: int | None, n_steps: int, args: argparse.Namespace) -> dict[str, Any]:
    """
    One rollout and one ``train()`` of attention memory (``memory_length`` K) or, with ``None``, the LSTM of the
    same width: stored memory, the buffer and the peak extra memory of ``train()``.
    """
    env = make_vec_env("CartPoleNoVel-v1", n_envs=args.n_envs, seed=0)
    width, n_layers = args.trxl_dim, 2
    if memory_length is None:
        policy, policy_kwargs = "MlpLstmPolicy", dict(lstm_hidden_size=width)
    else:
        policy = "MlpTrXLPolicy"
        policy_kwargs = dict(trxl_dim=width, n_trxl_layers=n_layers, memory_length=memory_length)
    model = ResetPPO(policy, env, n_steps=n_steps, batch_size=128, n_epochs=1, policy_kwargs=policy_kwargs, seed=0)
    model.learn(n_steps * args.n_envs)
    buffer = model.rollout_buffer
    if memory_length is None:
        stored = sum(getattr(buffer, f"{n}_states_{side}").nbytes for n in ("hidden", "cell") for side in ("pi", "vf"))
        copies = None
    else:
        assert isinstance(buffer, AttentionWindowRolloutBuffer)
        stored = sum(array.nbytes for array in buffer.block_inputs.values())
        # K positions of (L, D) float32 per step, actor and critic: what a copy per step would store
        copies = len(buffer.block_inputs) * n_steps * args.n_envs * memory_length * n_layers * width * 4
    buffer._sampler = None
    with bench_train.PeakMemory() as train_peak:
        model.train()
    n = n_steps * args.n_envs
    return {
        "cell": "lstm" if memory_length is None else "trxl",
        "memory_length": memory_length,
        "n_steps": n_steps,
        "n_envs": args.n_envs,
        "steps": n,
        "stored_memory_bytes": stored,
        "stored_memory_bytes_per_step": stored / n,
        "k_copies_bytes": copies,
        "buffer_bytes": bench_train.buffer_bytes(buffer),
        "train_peak_extra_bytes": train_peak.extra,
    }


def bench_attention(args: argparse.Namespace) -> None:
    """Every K and N of ``--attention`` (and the LSTM at each N), then the table."""
    printout = bench_train.Printout("bench_memory.py", sys.argv[1:])
    say = printout.say
    say(f"settings: CartPoleNoVel-v1 n_envs={args.n_envs} trxl_dim={args.trxl_dim} n_trxl_layers=2 batch_size=128 "
        f"n_epochs=1 threads={args.threads} torch={th.__version__}")  # fmt: skip
    results = []
    for n_steps in args.attention_steps:
        for memory_length in [*args.memory_lengths, None]:
            result = attention_memory(memory_length, n_steps, args)
            results.append(result)
            say(json.dumps(result))
    say("")
    say(
        "| memory | K | N (steps) | stored memory MiB | bytes per step | K copies per step MiB | buffer MiB "
        "| train() peak extra MiB |"
    )
    say("|---|---|---|---|---|---|---|---|")
    mib = 2**20
    for r in results:
        copies = "-" if r["k_copies_bytes"] is None else f"{r['k_copies_bytes'] / mib:.2f}"
        say(
            f"| {r['cell']} | {r['memory_length'] or '-'} | {r['steps']} | {r['stored_memory_bytes'] / mib:.2f} "
            f"| {r['stored_memory_bytes_per_step']:.0f} | {copies} | {r['buffer_bytes'] / mib:.2f} "
            f"| {r['train_peak_extra_bytes'] / mib:.1f} |"
        )
    printout.write(args.out, {"settings": vars(args), "results": results})


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
    parser.add_argument("--attention", action="store_true", help="instead: attention memory's stored memory and peaks")
    parser.add_argument("--memory-lengths", nargs="+", type=int, default=[16, 64], help="--attention: K values")
    parser.add_argument("--attention-steps", nargs="+", type=int, default=[128, 512], help="--attention: n_steps values")
    parser.add_argument("--trxl-dim", type=int, default=64, help="--attention: trxl_dim (and the LSTM's hidden size)")
    parser.add_argument("--out", default="benchmarks/results/bench_memory_attention",
                        help="--attention: writes OUT.json and OUT.txt")  # fmt: skip
    args = parser.parse_args()
    th.set_num_threads(args.threads)
    bench_train._use_mmap_for_large_allocations()
    if args.attention:
        import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

        bench_attention(args)
        return
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
