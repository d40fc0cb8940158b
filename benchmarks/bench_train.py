"""
Speed and memory of ``train()``: ResetPPO against sb3-contrib's RecurrentPPO, side by side in one process.

For each task (MLP: CartPoleNoVel-v1; image: CueRecallImage-v0, 64x64 with CnnLstmPolicy) both models
collect one rollout with the same settings, then ``train()`` is timed several times on it (median after
a warm-up). Throughput is counted in *updates per second*: transitions x epochs for RecurrentPPO, window
slots x epochs for ResetPPO. The roofline is the same policy's fused LSTMs (actor and critic) and heads,
forward and backward, plus the optimizer step, on ResetPPO's minibatch shapes, with no buffer, no loss
and no resets (features extractor once per distinct step of a minibatch). Peak extra memory of
``train()`` is the peak resident memory during ``train()`` above the level before it, relative to the
rollout buffer's size. ``collect_rollouts`` is timed for both.

Usage: python benchmarks/bench_train.py [--tasks mlp image] [--repeats 5] [--threads 1] [--json out.json]
"""

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import obs_as_tensor

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from sb3_reset_ppo import ResetPPO

TASKS: dict[str, dict[str, Any]] = {
    "mlp": dict(env_id="CartPoleNoVel-v1", policy="MlpLstmPolicy", env_kwargs={}),
    "image": dict(
        env_id="CueRecallImage-v0",
        policy="CnnLstmPolicy",
        env_kwargs=dict(min_delay=4, max_delay=30),
    ),
}


def _use_mmap_for_large_allocations() -> None:
    """
    Make glibc serve allocations of 64 KiB and more with mmap and unmap them on free, so that resident
    memory tracks live tensors instead of the allocator's high-water mark (its default threshold adapts
    upward to 32 MiB, after which large freed tensors stay in the heap).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        m_mmap_threshold = -3
        ctypes.CDLL("libc.so.6").mallopt(m_mmap_threshold, 64 * 1024)


def _release_freed_memory() -> None:
    """Return memory that the allocator keeps after frees to the OS, so that peaks are measured from a true floor."""
    with contextlib.suppress(OSError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """Samples resident memory in a background thread; ``peak - start`` is the extra memory used."""

    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.start = self.peak = 0
        self._running = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        _release_freed_memory()
        self.start = self.peak = _rss_bytes()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *args: object) -> None:
        self._running = False
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def extra(self) -> int:
        return self.peak - self.start


def buffer_bytes(buffer: Any) -> int:
    """Size of the rollout buffer's stored arrays."""
    total = 0
    for value in vars(buffer).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, dict):
            total += sum(v.nbytes for v in value.values() if isinstance(v, np.ndarray))
    return total


def make_model(algo: str, task: dict[str, Any], args: argparse.Namespace) -> RecurrentPPO:
    env = make_vec_env(task["env_id"], n_envs=args.n_envs, seed=args.seed, env_kwargs=task["env_kwargs"])
    common = dict(
        n_steps=args.n_steps,
        n_epochs=args.n_epochs,
        seed=args.seed,
        policy_kwargs=dict(lstm_hidden_size=args.lstm_hidden_size),
    )
    if algo == "reset_ppo":
        extra: dict[str, Any] = {} if args.batch_size is None else {"batch_size": args.batch_size}
        if args.consecutive_windows is not None:
            extra["consecutive_windows"] = args.consecutive_windows
        return ResetPPO(task["policy"], env, window_size=args.window_size, **extra, **common)  # type: ignore[arg-type]
    return RecurrentPPO(task["policy"], env, batch_size=args.rppo_batch_size, **common)  # type: ignore[arg-type]


class _Continue(BaseCallback):
    def _on_step(self) -> bool:
        return True


def collect(model: RecurrentPPO) -> float:
    """Collect one rollout; return its duration."""
    if model._last_obs is None:
        model._setup_learn(model.n_steps * model.n_envs, callback=None)
    callback = _Continue()
    callback.init_callback(model)
    start = time.perf_counter()
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)  # type: ignore[arg-type]
    return time.perf_counter() - start


def timed(function: Callable[[], None], repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        function()
    durations = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        durations.append(time.perf_counter() - start)
    return durations


def one_minibatch(model: ResetPPO) -> None:
    """Forward and backward of one minibatch, as train() does (the memory of one minibatch)."""
    samples = next(model.rollout_buffer.get(model.batch_size))
    model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None).loss.backward()


def roofline(model: ResetPPO, repeats: int, warmup: int) -> list[float]:
    """
    The same policy's fused LSTMs (actor and critic) and heads, forward and backward, and the optimizer step
    (with SB3's gradient clipping), on ResetPPO's minibatch shapes, for one ``train()`` worth of minibatches;
    the features extractor runs once per distinct step of a minibatch. No buffer, no gather, no loss, no
    resets: the least work any implementation of the same update must do.
    """
    policy = model.policy
    n_windows, window_size = model.rollout_buffer.n_windows, model.window_size
    batch = n_windows if model.batch_size is None else min(model.batch_size, n_windows)
    n_minibatches = -(-n_windows // batch)
    # Distinct steps of a minibatch, on average over one epoch of ResetPPO's own minibatches
    n_steps = round(statistics.mean(int(s.slot_steps.unique().numel()) for s in model.rollout_buffer.get(batch)))
    observations = obs_as_tensor(
        np.stack([model.observation_space.sample() for _ in range(n_steps)]),
        model.device,  # type: ignore[arg-type]
    )
    # (W * B,) rows of the per-step features, as the slots of B windows
    rows = th.arange(window_size * batch, device=model.device) % n_steps
    assert policy.lstm_critic is not None

    def one_train() -> None:
        for _ in range(model.n_epochs * n_minibatches):
            features = policy.extract_features(observations)
            assert isinstance(features, th.Tensor)
            # (W * B, F) -> (W, B, F)
            sequence = features[rows].reshape(window_size, batch, -1)
            latent_pi, _ = policy.lstm_actor(sequence)
            latent_vf, _ = policy.lstm_critic(sequence)  # type: ignore[misc]
            # (W, B, H) -> (W * B, H)
            latent_pi = policy.mlp_extractor.forward_actor(latent_pi.reshape(window_size * batch, -1))
            latent_vf = policy.mlp_extractor.forward_critic(latent_vf.reshape(window_size * batch, -1))
            total = policy.action_net(latent_pi).sum() + policy.value_net(latent_vf).sum()
            policy.optimizer.zero_grad()
            total.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            policy.optimizer.step()

    return timed(one_train, repeats, warmup)


def measure_memory(result: dict[str, Any], model: ResetPPO) -> None:
    """
    Peak extra memory of one ResetPPO ``train()`` and of one minibatch. Run after every timing: large
    allocations are then mmapped (slower, but resident memory tracks live tensors).
    """
    _use_mmap_for_large_allocations()
    memory, minibatch = PeakMemory(), PeakMemory()

    def train() -> None:
        model.rollout_buffer._sampler = None
        model.train()

    train()  # warm-up under the new allocation policy
    with memory:
        train()
    with minibatch:
        one_minibatch(model)
    reset = result["reset_ppo"]
    reset["train_peak_extra_bytes"] = memory.extra
    reset["minibatch_peak_extra_bytes"] = minibatch.extra
    result["train_extra_memory_over_buffer"] = memory.extra / reset["buffer_bytes"]
    # train() may hold one copy of the rollout on the device plus a few minibatches
    result["train_extra_minus_buffer_in_minibatches"] = (memory.extra - reset["buffer_bytes"]) / max(minibatch.extra, 1)


def bench_task(name: str, args: argparse.Namespace) -> tuple[dict[str, Any], ResetPPO]:
    task = TASKS[name]
    result: dict[str, Any] = {
        "task": name,
        **{k: v for k, v in task.items() if k != "env_kwargs"},
        "env_kwargs": task["env_kwargs"],
    }
    models = {algo: make_model(algo, task, args) for algo in ("reset_ppo", "recurrent_ppo")}
    # Collection, interleaved so that both see the same machine load; the first round is a warm-up
    collect_times: dict[str, list[float]] = {algo: [] for algo in models}
    for round_ in range(args.collect_repeats + 1):
        for algo, model in models.items():
            duration = collect(model)
            if round_ > 0:
                collect_times[algo].append(duration)
    for algo, model in models.items():

        def train(model: RecurrentPPO = model) -> None:
            if isinstance(model, ResetPPO):
                model.rollout_buffer._sampler = None  # count the per-rollout setup (window view, weights) too
            model.train()

        durations = timed(train, args.repeats, warmup=1)
        if isinstance(model, ResetPPO):
            items = model.rollout_buffer.n_windows * model.window_size
        else:
            items = model.n_envs * model.n_steps
        updates = items * model.n_epochs
        result[algo] = {
            "train_seconds_median": statistics.median(durations),
            "train_seconds_all": durations,
            "updates_per_second": updates / statistics.median(durations),
            "items_per_epoch": items,
            "collect_seconds_median": statistics.median(collect_times[algo]),
            "buffer_bytes": buffer_bytes(model.rollout_buffer),
        }
    reset_model = models["reset_ppo"]
    assert isinstance(reset_model, ResetPPO)
    roof = roofline(reset_model, args.repeats, warmup=1)
    roof_updates = reset_model.rollout_buffer.n_windows * reset_model.window_size * reset_model.n_epochs
    result["roofline_updates_per_second"] = roof_updates / statistics.median(roof)
    reset, rppo = result["reset_ppo"], result["recurrent_ppo"]
    result["speedup_vs_recurrent_ppo"] = reset["updates_per_second"] / rppo["updates_per_second"]
    result["share_of_roofline"] = reset["updates_per_second"] / result["roofline_updates_per_second"]
    result["collect_time_ratio"] = reset["collect_seconds_median"] / rppo["collect_seconds_median"]
    return result, reset_model


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        "| task | RecurrentPPO updates/s | ResetPPO updates/s | ratio | roofline updates/s | share of roofline "
        "| train() peak extra / buffer | (extra - buffer) / one minibatch | collect time ResetPPO / RecurrentPPO |"
    )
    print(header)
    print("|" + "---|" * 9)
    for r in results:
        print(
            f"| {r['task']} ({r['env_id']}) | {r['recurrent_ppo']['updates_per_second']:,.0f} "
            f"| {r['reset_ppo']['updates_per_second']:,.0f} | {r['speedup_vs_recurrent_ppo']:.1f}x "
            f"| {r['roofline_updates_per_second']:,.0f} | {100 * r['share_of_roofline']:.0f}% "
            f"| {r['train_extra_memory_over_buffer']:.2f} | {r['train_extra_minus_buffer_in_minibatches']:.2f} "
            f"| {r['collect_time_ratio']:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["mlp", "image"], choices=sorted(TASKS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--collect-repeats", type=int, default=3)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--lstm-hidden-size", type=int, default=256)
    parser.add_argument("--window-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=None, help="ResetPPO windows per minibatch (default: ResetPPO's)")
    parser.add_argument("--consecutive-windows", type=int, default=None, help="ResetPPO's (default: its default)")
    parser.add_argument("--rppo-batch-size", type=int, default=128, help="RecurrentPPO minibatch (its default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    th.set_num_threads(args.threads)
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    print("command: python " + " ".join(sys.argv))
    print(
        f"settings: n_envs={args.n_envs} n_steps={args.n_steps} n_epochs={args.n_epochs} "
        f"lstm_hidden_size={args.lstm_hidden_size} window_size={args.window_size} "
        f"batch_size(ResetPPO)={args.batch_size or 'default'} batch_size(RecurrentPPO)={args.rppo_batch_size} "
        f"threads={args.threads} repeats={args.repeats} torch={th.__version__} machine={platform.machine()}"
    )
    timed_tasks = [bench_task(name, args) for name in args.tasks]
    # Memory after all timings (it changes the allocator's policy for the rest of the process)
    for result, model in timed_tasks:
        measure_memory(result, model)
    results = [result for result, _ in timed_tasks]
    print()
    print_table(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": sys.argv, "settings": vars(args), "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
