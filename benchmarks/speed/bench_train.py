"""
Speed of ``learn()`` and ``train()``: a RecurrentPPO setup with only the class name changed, in one process.

For each task (MLP: CartPoleNoVel-v1; image: CueRecallImage-v0, 64x64 with CnnLstmPolicy) and each setting
(LSTM 64 and 256, ``batch_size`` 128, RecurrentPPO's default, and 1024), three models get the same
arguments (RecurrentPPO's defaults otherwise: ``n_steps=128``, ``n_epochs=10``): sb3-contrib's
``RecurrentPPO``, ``ResetPPO`` with its defaults (``window_size="batch"``, full coverage, ``window_stride =
window_size``; results measured before the coverage study used windows of 16 inside the rollout, as their
``settings:`` line says) and ``ResetPPO`` with ``window_stride=1``. Each learns ``--learn-steps`` env steps from a
fresh model, ``--repeats`` times,
interleaved so that all see the same machine load; the figures are medians over the repeats:

- seconds of ``learn()`` (what a user waits for) and of one ``train()`` call, as the process's CPU time
  (one torch thread: on an idle machine this is the wall time; unlike wall time it does not grow when
  other processes share the cores; the wall times are in the JSON too);
- *updates per second*: trained slots per second of ``train()`` (transitions x epochs for RecurrentPPO,
  the expected window slots of an epoch x epochs for ResetPPO);
- share of the *roofline*: the same policy's fused LSTMs (actor and critic) and heads, forward and backward,
  plus the optimizer step, on ResetPPO's minibatch shapes, with no buffer, no loss and no resets (features
  extractor once per distinct step of a minibatch), timed over one epoch.

``--variants`` chooses the models (default: the three above); ``reset_gru`` is ``ResetPPO`` with the GRU policy
of the task (``MlpGruPolicy``, ``CnnGruPolicy``) and otherwise the same arguments: its roofline is the same
computation with the policy's GRUs. Each ResetPPO variant also reports the bytes of recurrent memory its buffer
stores per step (hidden and cell states of actor and critic for an LSTM, hidden states for a GRU).

With ``--memory``, the peak extra memory of one default ResetPPO ``train()`` per task (first setting) is
measured after all timings, relative to the rollout buffer's size and to one minibatch.

With ``--fresh-memory``, instead: the cost of fresh memory, i.e. seconds of one ResetPPO ``train()`` per task with
RecurrentPPO's defaults (``batch_size=128``) at each hidden size of ``--fresh-hidden`` (64 and 256) for the
defaults, ``memory_refresh=1`` (a refresh before each of epochs 2 to 10), ``burn_in=8`` and ``burn_in=16`` (one
model per setting collects a rollout, then ``train()`` is timed ``--repeats`` times: median of CPU time), with the
task's LSTM policy and (default, refresh, burn-in 8) with its GRU policy.

With ``--non-dividing``, instead: the cost per trained transition of one ``train()`` where the window does not divide
``n_steps`` (``--non-dividing-steps``, default 200, with ``batch_size=64`` and the default windows of 64: windows cut at
minibatch edges, one short minibatch per epoch) against a dividing rollout (``--dividing-steps``, default 256), for
ResetPPO and RecurrentPPO with the same arguments (LSTM 64), interleaved; also the real transitions of every
minibatch of one ResetPPO epoch (issue 42: all 64 but one).

Usage: python benchmarks/speed/bench_train.py [--tasks mlp image] [--repeats 3] [--variants recurrent_ppo reset reset_gru]
       [--fresh-memory | --non-dividing] [--json out.json]
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
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import obs_as_tensor

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.windows import effective_stride

TASKS: dict[str, dict[str, Any]] = {
    "mlp": dict(env_id="CartPoleNoVel-v1", policy="MlpLstmPolicy", env_kwargs={}, n_envs=8),
    "image": dict(env_id="CueRecallImage-v0", policy="CnnLstmPolicy", env_kwargs=dict(min_delay=4, max_delay=30), n_envs=4),
}
# ResetPPO's settings of each variant (the coverage study's arms: benchmarks/studies/coverage/PROTOCOL.md)
RESET_SETTINGS: dict[str, dict[str, Any]] = {
    "reset": {},
    # Every window every epoch, as the published first grid trained (windows of 16 inside the rollout: with the
    # default windows of min(batch_size, n_steps) a stride of 1 would mean that many times the work)
    "reset_stride1": {"window_stride": 1, "window_size": 16, "window_coverage": "inside"},
    "reset_gru": {},
    "reset_full16": {"window_coverage": "full", "window_size": 16},
    "reset_full64": {"window_coverage": "full", "window_size": 64},
    "reset_batch": {"window_coverage": "full", "window_size": "batch"},
    "reset_rollout": {"window_coverage": "full", "window_size": "rollout"},
}
VARIANTS = ("recurrent_ppo", *RESET_SETTINGS)
DEFAULT_VARIANTS = ("recurrent_ppo", "reset", "reset_stride1")
LABELS = {
    "recurrent_ppo": "RecurrentPPO",
    "reset": "ResetPPO",
    "reset_stride1": "stride 1",
    "reset_gru": "ResetPPO GRU",
    "reset_full16": "full, 16",
    "reset_full64": "full, 64",
    "reset_batch": "full, batch",
    "reset_rollout": "full, rollout",
}
# (lstm_hidden_size, batch_size): small and large LSTMs and minibatches
SETTINGS = ((64, 128), (64, 1024), (256, 128), (256, 1024))


class Printout:
    """
    What a speed benchmark prints, the exact command first (``python benchmarks/speed/<script> <argv>``), kept to be
    written as ``<out>.txt`` beside the results' ``<out>.json``.
    """

    def __init__(self, script: str, argv: list[str]) -> None:
        self.command = f"python benchmarks/speed/{script} {' '.join(argv)}".strip()
        self.lines: list[str] = []
        self.say(f"command: {self.command}")

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def write(self, out: str, payload: dict[str, Any]) -> None:
        """``<out>.json`` (the command, then ``payload``) and ``<out>.txt`` (every line said)."""
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".json").write_text(json.dumps({"command": self.command, **payload}, indent=2) + "\n")
        path.with_suffix(".txt").write_text("\n".join(self.lines) + "\n")


class Curve(BaseCallback):
    """
    The learning curve of a run (``bench_stride.py``, ``bench_consecutive.py``): at the end of every rollout, the env
    steps so far, the CPU seconds since the callback was made and the mean return of the last 100 training episodes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.points: list[tuple[int, float, float]] = []
        self.start = time.process_time()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.model.ep_info_buffer:
            mean_return = float(np.mean([info["r"] for info in self.model.ep_info_buffer]))
            self.points.append((self.model.num_timesteps, time.process_time() - self.start, mean_return))


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


def memory_bytes_per_step(buffer: Any) -> float:
    """Bytes of recurrent memory the buffer stores per step (all envs' steps): LSTM hidden and cell, GRU hidden."""
    arrays = [getattr(buffer, f"{name}_states_{side}") for name in ("hidden", "cell") for side in ("pi", "vf")]
    return sum(array.nbytes for array in arrays) / (buffer.buffer_size * buffer.n_envs)


def buffer_bytes(buffer: Any) -> int:
    """Size of the rollout buffer's stored arrays (dict observations: each key's)."""
    values = [v for value in vars(buffer).values() for v in (value.values() if isinstance(value, dict) else [value])]
    return sum(value.nbytes for value in values if isinstance(value, np.ndarray))


def make_model(variant: str, task: dict[str, Any], lstm: int, batch_size: int, args: argparse.Namespace) -> RecurrentPPO:
    """The same arguments for every variant: only the class (and the ResetPPO variant's own settings) differs."""
    env = make_vec_env(task["env_id"], n_envs=task["n_envs"], seed=args.seed, env_kwargs=task["env_kwargs"])
    kwargs: dict[str, Any] = dict(
        n_steps=args.n_steps, n_epochs=args.n_epochs, batch_size=batch_size, seed=args.seed,
        policy_kwargs=dict(lstm_hidden_size=lstm), device=args.device,
    )  # fmt: skip
    if variant == "recurrent_ppo":
        return RecurrentPPO(task["policy"], env, **kwargs)
    kwargs.update(RESET_SETTINGS[variant])
    policy = task["policy"].replace("Lstm", "Gru") if variant == "reset_gru" else task["policy"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # batch_size 1024 > one epoch of the image task's windows: said in the table
        return ResetPPO(policy, env, **kwargs)


class _TimedTrain:
    """Wraps a model's ``train`` to record the CPU and wall seconds of every call."""

    def __init__(self, model: RecurrentPPO) -> None:
        self.cpu: list[float] = []
        self.wall: list[float] = []
        self._train = model.train
        model.train = self  # type: ignore[method-assign]

    def __call__(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        self._train()
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)


def timed_learn(model: RecurrentPPO, steps: int, **learn_kwargs: Any) -> dict[str, Any]:
    """One ``learn()`` from a fresh model: CPU and wall seconds of it and the median of its ``train()`` calls'."""
    timer = _TimedTrain(model)
    cpu, wall = time.process_time(), time.perf_counter()
    model.learn(steps, **learn_kwargs)
    return {
        "learn_cpu": time.process_time() - cpu,
        "learn_wall": time.perf_counter() - wall,
        "train_cpu": statistics.median(timer.cpu),
        "train_wall": statistics.median(timer.wall),
    }


def slots_per_epoch(model: RecurrentPPO) -> float:
    """Trained slots (transitions) of one epoch; for ResetPPO the expected number over the random phases."""
    if not isinstance(model, ResetPPO):
        return float(model.n_envs * model.n_steps)
    buffer = model.rollout_buffer
    window = model.window_length
    if buffer.window_coverage == "full":
        # Every step in W / k windows of an epoch in expectation (clipped windows: their real slots only)
        return model.n_envs * model.n_steps * window / effective_stride(model.n_steps, window, buffer.window_stride, "full")
    n_starts = model.n_steps - window + 1
    return model.n_envs * n_starts / effective_stride(model.n_steps, window, buffer.window_stride, "inside") * window


def one_minibatch(model: ResetPPO) -> None:
    """Forward and backward of one minibatch, as train() does (the memory of one minibatch)."""
    samples = next(model.rollout_buffer.get(model.batch_size))
    model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None).loss.backward()


def roofline(model: ResetPPO, repeats: int) -> float:
    """
    CPU seconds of one ``train()`` worth of the least work any implementation of the same update must do: the
    same policy's fused LSTMs (actor and critic) and heads, forward and backward, and the optimizer step (with
    SB3's gradient clipping), on ResetPPO's minibatch shapes; the features extractor runs once per distinct step
    of a minibatch. No buffer, no gather, no loss, no resets. Timed over one epoch, times ``n_epochs``.
    """
    policy = model.policy
    window_size = model.window_length
    minibatches = list(model.rollout_buffer.get(model.batch_size))
    assert policy.lstm_critic is not None
    shapes = [(int(s.slot_steps.shape[0]), int(s.slot_steps.unique().numel())) for s in minibatches]
    inputs = []
    for batch, n_steps in shapes:
        observations = obs_as_tensor(np.stack([model.observation_space.sample() for _ in range(n_steps)]), model.device)
        # (W * B,) rows of the per-step features, as the slots of B windows
        inputs.append((observations, th.arange(window_size * batch, device=model.device) % n_steps, batch))

    def one_epoch() -> None:
        for observations, rows, batch in inputs:
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

    one_epoch()  # warm-up
    durations = []
    for _ in range(repeats):
        cpu = time.process_time()
        one_epoch()
        durations.append(time.process_time() - cpu)
    return statistics.median(durations) * model.n_epochs


def measure_memory(result: dict[str, Any], model: ResetPPO) -> None:
    """
    Peak extra memory of one ResetPPO ``train()`` and of one minibatch. Run after every timing: large
    allocations are then mmapped (slower, but resident memory tracks live tensors).
    """
    _use_mmap_for_large_allocations()

    def train() -> None:
        model.rollout_buffer._sampler = None
        model.train()

    train()  # warm-up under the new allocation policy
    with PeakMemory() as memory:
        train()
    with PeakMemory() as minibatch:
        one_minibatch(model)
    reset = result["reset"]
    reset["train_peak_extra_bytes"] = memory.extra
    reset["minibatch_peak_extra_bytes"] = minibatch.extra
    result["train_extra_memory_over_buffer"] = memory.extra / reset["buffer_bytes"]
    # train() may hold one copy of the rollout on the device plus a few minibatches
    result["train_extra_minus_buffer_in_minibatches"] = (memory.extra - reset["buffer_bytes"]) / max(minibatch.extra, 1)


def bench_setting(
    name: str, lstm: int, batch_size: int, learn_steps: int, args: argparse.Namespace
) -> tuple[dict[str, Any], ResetPPO | None]:
    task = TASKS[name]
    result: dict[str, Any] = {
        "task": name, "env_id": task["env_id"], "policy": task["policy"], "n_envs": task["n_envs"], "lstm_hidden_size": lstm,
        "batch_size": batch_size, "learn_steps": learn_steps,
    }  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in args.variants}
    models: dict[str, RecurrentPPO] = {}
    for _ in range(args.repeats):
        for variant in args.variants:
            models[variant] = make_model(variant, task, lstm, batch_size, args)
            runs[variant].append(timed_learn(models[variant], learn_steps))
    for variant, model in models.items():
        medians = {key: statistics.median(run[key] for run in runs[variant]) for key in runs[variant][0]}
        slots = slots_per_epoch(model)
        result[variant] = {
            **medians,
            "runs": runs[variant],
            "slots_per_epoch": slots,
            "updates_per_second": slots * model.n_epochs / medians["train_cpu"],
        }
        if isinstance(model, ResetPPO):
            # Whole windows in a minibatch of batch_size transitions, at least one (None: all windows of an epoch)
            windows = None if model.batch_size is None else max(1, int(model.batch_size) // model.window_length)
            result[variant]["windows_per_minibatch"] = windows
            result[variant]["window_stride"] = model.rollout_buffer.window_stride
            result[variant]["roofline_train_cpu"] = roofline(model, repeats=args.repeats)
            result[variant]["share_of_roofline"] = result[variant]["roofline_train_cpu"] / medians["train_cpu"]
            result[variant]["memory_bytes_per_step"] = memory_bytes_per_step(model.rollout_buffer)
    rppo = result.get("recurrent_ppo")
    for variant in args.variants:
        if variant != "recurrent_ppo" and rppo is not None:
            result[variant]["learn_ratio"] = result[variant]["learn_cpu"] / rppo["learn_cpu"]
            result[variant]["train_ratio"] = result[variant]["train_cpu"] / rppo["train_cpu"]
    reset_model = models.get("reset")
    assert reset_model is None or isinstance(reset_model, ResetPPO)
    return result, reset_model


FRESH_MEMORY: dict[str, dict[str, int]] = {
    "default": {},
    "memory_refresh=1": {"memory_refresh": 1},
    "burn_in=8": {"burn_in": 8},
    "burn_in=16": {"burn_in": 16},
}
# The same settings with the task's GRU policy (relative to the GRU default)
FRESH_MEMORY_GRU = ("default", "memory_refresh=1", "burn_in=8")


def fresh_memory_train_seconds(
    task: dict[str, Any], settings: dict[str, int], args: argparse.Namespace, policy: str | None = None, lstm: int = 256
) -> float:
    """Median CPU seconds of one ResetPPO ``train()`` (per-rollout setup included) with fresh-memory settings."""
    env = make_vec_env(task["env_id"], n_envs=task["n_envs"], seed=args.seed, env_kwargs=task["env_kwargs"])
    policy = policy or task["policy"]
    model = ResetPPO(
        policy, env, n_steps=args.n_steps, n_epochs=args.n_epochs, seed=args.seed, policy_kwargs=dict(lstm_hidden_size=lstm),
        **settings,  # type: ignore[arg-type]
    )  # fmt: skip
    model.learn(task["n_envs"] * args.n_steps)  # one rollout, and one train() as the warm-up
    durations = []
    for _ in range(args.repeats):
        model.rollout_buffer.release()
        start = time.process_time()
        model.train()
        durations.append(time.process_time() - start)
    return statistics.median(durations)


def bench_fresh_memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    print("| task | cell | hidden | setting | train() CPU s | relative to the default |", flush=True)
    print("|---|---|---|---|---|---|", flush=True)
    for name in args.tasks:
        gru = TASKS[name]["policy"].replace("Lstm", "Gru")
        for lstm in args.fresh_hidden:
            for cell, labels, policy in (("LSTM", list(FRESH_MEMORY), None), ("GRU", list(FRESH_MEMORY_GRU), gru)):
                baseline = None
                for label in labels:
                    seconds = fresh_memory_train_seconds(TASKS[name], FRESH_MEMORY[label], args, policy, lstm)
                    baseline = baseline or seconds
                    results.append({
                        "task": name, "cell": cell, "hidden": lstm, "setting": label, "train_cpu_seconds": seconds,
                        "ratio": seconds / baseline,
                    })  # fmt: skip
                    print(f"| {name} | {cell} | {lstm} | {label} | {seconds:.2f} | {seconds / baseline:.2f} |", flush=True)
    return results


def bench_non_dividing(args: argparse.Namespace) -> list[dict[str, Any]]:
    """
    Median CPU seconds of ``train()`` per trained transition (``n_envs * n_steps * n_epochs``: every step once per
    epoch for both classes with ResetPPO's defaults) with a non-dividing and a dividing ``n_steps``, side by side.
    """
    batch_size, lstm = 64, 64
    rollouts = {"dividing": args.dividing_steps, "non-dividing": args.non_dividing_steps}
    results: list[dict[str, Any]] = []
    print("| task | class | n_steps | train() CPU s | us per transition | non-dividing / dividing |")
    print("|---|---|---|---|---|---|")
    for name in args.tasks:
        task = TASKS[name]
        runs: dict[tuple[str, str], list[float]] = {}
        sizes: list[int] = []
        for _ in range(args.repeats):
            for label, n_steps in rollouts.items():
                for variant in ("recurrent_ppo", "reset"):
                    settings = argparse.Namespace(**{**vars(args), "n_steps": n_steps})
                    model = make_model(variant, task, lstm, batch_size, settings)
                    timed = timed_learn(model, 2 * n_steps * task["n_envs"])
                    transitions = task["n_envs"] * n_steps * args.n_epochs
                    runs.setdefault((label, variant), []).append(timed["train_cpu"] / transitions)
                    if isinstance(model, ResetPPO) and label == "non-dividing" and not sizes:
                        model.rollout_buffer.release()
                        sizes = [
                            int(s.kept.numel() if s.n_real_slots is None else s.n_real_slots)
                            for s in model.rollout_buffer.get(batch_size)
                        ]
        for variant in ("recurrent_ppo", "reset"):
            per = {label: statistics.median(runs[(label, variant)]) for label in rollouts}
            row = {
                "task": name, "variant": variant, "lstm_hidden_size": lstm, "batch_size": batch_size,
                "seconds_per_transition": per, "runs": {label: runs[(label, variant)] for label in rollouts},
                "non_dividing_over_dividing": per["non-dividing"] / per["dividing"],
            }  # fmt: skip
            if variant == "reset":
                row["non_dividing_minibatch_transitions"] = sizes
            results.append(row)
            for label, n_steps in rollouts.items():
                seconds = per[label] * task["n_envs"] * n_steps * args.n_epochs
                ratio = f"{row['non_dividing_over_dividing']:.3f}" if label == "non-dividing" else ""
                print(f"| {name} | {LABELS[variant]} | {n_steps} | {seconds:.2f} | {1e6 * per[label]:.1f} | {ratio} |")
        print(f"{name}: ResetPPO minibatch transitions of one non-dividing epoch: {sizes}", flush=True)
    return results


def print_tables(results: list[dict[str, Any]], variants: list[str]) -> None:
    resets = [variant for variant in variants if variant != "recurrent_ppo"]
    header = "| task | LSTM | batch_size |"
    for variant in variants:
        header += f" {LABELS[variant]} learn() s |" + (" ratio |" if variant != "recurrent_ppo" else "")
    header += "".join(f" {LABELS[variant]} train() s |" for variant in variants)
    print(header)
    print("|" + "---|" * header.count(" |"))
    for r in results:
        row = f"| {r['task']} | {r['lstm_hidden_size']} | {r['batch_size']} |"
        for variant in variants:
            row += f" {r[variant]['learn_cpu']:.1f} |"
            if "learn_ratio" in r[variant]:
                row += f" {r[variant]['learn_ratio']:.2f} |"
            elif variant != "recurrent_ppo":
                row += " - |"
        row += "".join(f" {r[variant]['train_cpu']:.2f} |" for variant in variants)
        print(row)
    print()
    header = "| task | LSTM | batch_size | windows per minibatch |"
    for variant in variants:
        header += f" {LABELS[variant]} updates/s |"
        if variant != "recurrent_ppo":
            header += " share of roofline | memory bytes per step |"
    print(header)
    print("|" + "---|" * header.count(" |"))
    for r in results:
        row = f"| {r['task']} | {r['lstm_hidden_size']} | {r['batch_size']} | {r[resets[0]]['windows_per_minibatch']} |"
        for variant in variants:
            row += f" {r[variant]['updates_per_second']:,.0f} |"
            if variant != "recurrent_ppo":
                row += f" {100 * r[variant]['share_of_roofline']:.0f}% | {r[variant]['memory_bytes_per_step']:,.0f} |"
        print(row)
    memory = [r for r in results if "train_extra_memory_over_buffer" in r]
    if memory:
        print()
        print("| task | train() peak extra / buffer | (extra - buffer) / one minibatch |")
        print("|---|---|---|")
        for r in memory:
            print(
                f"| {r['task']} | {r['train_extra_memory_over_buffer']:.2f} "
                f"| {r['train_extra_minus_buffer_in_minibatches']:.2f} |"
            )


def default_windows() -> str:
    """ResetPPO's default window settings, as the ``reset`` variant trains with them (they changed with the coverage study)."""
    import inspect

    parameters = inspect.signature(ResetPPO.__init__).parameters
    return " ".join(f"{name}={parameters[name].default!r}" for name in ("window_size", "window_coverage", "window_stride"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["mlp", "image"], choices=sorted(TASKS))
    parser.add_argument("--settings", nargs="+", default=[f"{lstm}:{batch}" for lstm, batch in SETTINGS],
                        help="LSTM:BATCH pairs (default: %(default)s)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--learn-steps", type=int, default=None, help="env steps per learn() (default: 2 rollouts)")
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=10)
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS,
                        help="models to compare (default: %(default)s; at least one ResetPPO variant)")  # fmt: skip
    parser.add_argument("--memory", action="store_true", help="also measure the peak memory of train() (needs reset)")
    parser.add_argument("--fresh-memory", action="store_true", help="instead: the cost of memory_refresh and burn_in")
    parser.add_argument("--fresh-hidden", nargs="+", type=int, default=[64, 256],
                        help="--fresh-memory: hidden sizes of the recurrent layers (default: %(default)s)")  # fmt: skip
    parser.add_argument("--non-dividing", action="store_true",
                        help="instead: train() cost per transition, non-dividing against dividing n_steps")  # fmt: skip
    parser.add_argument("--non-dividing-steps", type=int, default=200)
    parser.add_argument("--dividing-steps", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    if args.variants == ["recurrent_ppo"]:
        parser.error("--variants needs at least one ResetPPO variant")
    if args.memory and "reset" not in args.variants:
        parser.error("--memory measures the 'reset' variant: add it to --variants")
    th.set_num_threads(args.threads)
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    print("command: python " + " ".join(sys.argv), flush=True)
    print(
        f"settings: n_steps={args.n_steps} n_epochs={args.n_epochs} ResetPPO defaults: {default_windows()} "
        f"threads={args.threads} repeats={args.repeats} torch={th.__version__} machine={platform.machine()}",
        flush=True,
    )
    if args.non_dividing or args.fresh_memory:
        results = bench_non_dividing(args) if args.non_dividing else bench_fresh_memory(args)
    else:
        results = bench_timings(args)
        print()
        print_tables(results, args.variants)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": sys.argv, "settings": vars(args), "results": results}, indent=2))


def bench_timings(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every task and setting (:func:`bench_setting`), then with ``--memory`` the peak memory of ``train()``."""
    results, memory_models = [], []
    for name in args.tasks:
        for index, setting in enumerate(args.settings):
            lstm, batch_size = (int(part) for part in setting.split(":"))
            learn_steps = args.learn_steps or 2 * args.n_steps * TASKS[name]["n_envs"]
            result, model = bench_setting(name, lstm, batch_size, learn_steps, args)
            results.append(result)
            if index == 0 and model is not None:
                memory_models.append((result, model))
            print(json.dumps({k: v for k, v in result.items() if k not in VARIANTS}), flush=True)
    if args.memory:
        # After all timings (it changes the allocator's policy for the rest of the process)
        for result, model in memory_models:
            result["reset"]["buffer_bytes"] = buffer_bytes(model.rollout_buffer)
            measure_memory(result, model)
    return results


if __name__ == "__main__":
    main()
