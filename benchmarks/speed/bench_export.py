"""
Per-step inference time of an exported policy (onnxruntime) against ``model.predict(..., deterministic=True)`` and
against the torch step alone.

The README's quick-start policy (``MlpLstmPolicy``, LSTM 256, ``net_arch`` 64-64) and its GRU twin on CueRecall-v0's
spaces, batches of 1 and 64 agents, one thread each (``torch.set_num_threads(1)``; onnxruntime's intra- and
inter-op threads 1). Each measurement is one step: the observation and the memory in, the action and the new
memory out (for ``predict`` that includes its numpy <-> torch conversions and checks, as a caller pays them; the
``torch`` row is the policy's own step, ``policy._predict`` on torch tensors under ``no_grad``, which ``predict``
calls: their difference is ``predict``'s Python overhead). The median
over ``--steps`` steps after ``--warmup`` steps, of wall time (``perf_counter``) and of this process's CPU time
(``process_time``); the machine's load average is recorded with them. The untrained weights time the same as
trained ones.

Usage: python benchmarks/speed/bench_export.py [--steps 2000] [--warmup 200] [--out benchmarks/results/bench_export]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch as th
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecall-v0)
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.export import export_onnx

BATCHES = (1, 64)
CELLS = ("Lstm", "Gru")


def time_steps(step: Callable[[int], None], steps: int, warmup: int) -> dict[str, float]:
    """Median wall and CPU time of ``step(index)`` in microseconds, after ``warmup`` calls."""
    for index in range(warmup):
        step(index)
    wall, cpu = [], []
    for index in range(steps):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        step(index)
        cpu.append(time.process_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
    return {
        "wall_median_us": 1e6 * statistics.median(wall),
        "cpu_median_us": 1e6 * statistics.median(cpu),
        "cpu_mean_us": 1e6 * statistics.fmean(cpu),
        "wall_p90_us": 1e6 * float(np.quantile(wall, 0.9)),
    }


def bench_cell(cell: str, steps: int, warmup: int, directory: Path) -> list[dict[str, Any]]:
    """ONNX, ``predict`` and torch-step rows for one cell at every batch size."""
    model = ResetPPO(f"Mlp{cell}Policy", make_vec_env("CueRecall-v0", n_envs=1), n_steps=64, batch_size=64, seed=0)
    path = export_onnx(model, directory / f"{cell}.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    policy = model.policy
    policy.set_training_mode(False)
    n_layers, hidden = policy.lstm_actor.num_layers, policy.lstm_actor.hidden_size
    names = ["h", "c"] if cell == "Lstm" else ["h"]
    rows = []
    rng = np.random.default_rng(0)
    for batch in BATCHES:
        # Observations of CueRecall's shape; an episode start every 5th step of each agent, staggered
        observations = rng.random((64, batch, 5)).astype(np.float32)
        starts = (np.arange(64)[:, None] + np.arange(batch)[None]) % 5 == 0
        memory = [np.zeros((n_layers, batch, hidden), np.float32) for _ in names]
        state: list[Any] = [tuple(np.zeros((n_layers, batch, hidden), np.float32) for _ in names)]
        # The torch step takes sb3-contrib's (hidden, cell) pair (a GRU policy reads the first)
        torch_state: list[Any] = [tuple(th.zeros((n_layers, batch, hidden)) for _ in range(2))]
        torch_obs, torch_starts = th.as_tensor(observations), th.as_tensor(starts, dtype=th.float32)

        def onnx_step(
            index: int, memory: list[np.ndarray] = memory, batch_obs: np.ndarray = observations, starts: np.ndarray = starts
        ) -> None:
            feed = {"obs": batch_obs[index % 64], "episode_start": starts[index % 64].astype(np.float32)}
            feed.update(zip(names, memory, strict=True))
            _, *memory[:] = session.run(None, feed)

        def predict_step(
            index: int, state: list[Any] = state, batch_obs: np.ndarray = observations, starts: np.ndarray = starts
        ) -> None:
            _, state[0] = model.predict(batch_obs[index % 64], state[0], starts[index % 64], deterministic=True)

        def torch_step(
            index: int, state: list[Any] = torch_state, batch_obs: th.Tensor = torch_obs, starts: th.Tensor = torch_starts
        ) -> None:
            with th.no_grad():
                _, state[0] = policy._predict(batch_obs[index % 64], state[0], starts[index % 64], deterministic=True)

        for runtime, step in (("onnxruntime", onnx_step), ("predict", predict_step), ("torch", torch_step)):
            load_before = os.getloadavg()[0]
            row = {"cell": cell.upper(), "batch": batch, "runtime": runtime, **time_steps(step, steps, warmup)}
            row["load_1min_before"], row["load_1min_after"] = load_before, os.getloadavg()[0]
            rows.append(row)
            print(
                f"{cell.upper():4} batch {batch:3} {runtime:12} wall {row['wall_median_us']:8.1f} us  "
                f"cpu {row['cpu_median_us']:8.1f} us  (load {load_before:.2f})",
                flush=True,
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """
    Markdown table: per cell and batch, the three runtimes' medians, the speed-up and ``predict``'s overhead (the
    share of its wall time outside the torch step).
    """
    lines = [
        "| cell | batch | predict wall (us) | torch step wall (us) | ONNX wall (us) | speed-up (wall) | predict overhead | "
        "predict CPU (us) | torch step CPU (us) | ONNX CPU (us) | speed-up (CPU) | ONNX per agent (us) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in CELLS:
        for batch in BATCHES:
            pair = {row["runtime"]: row for row in rows if row["cell"] == cell.upper() and row["batch"] == batch}
            predict, torch_row, onnx = pair["predict"], pair["torch"], pair["onnxruntime"]
            overhead = 1.0 - torch_row["wall_median_us"] / predict["wall_median_us"]
            lines.append(
                f"| {cell.upper()} | {batch} | {predict['wall_median_us']:.0f} | {torch_row['wall_median_us']:.0f} | "
                f"{onnx['wall_median_us']:.0f} | {predict['wall_median_us'] / onnx['wall_median_us']:.1f}x | "
                f"{overhead:.0%} | {predict['cpu_median_us']:.0f} | {torch_row['cpu_median_us']:.0f} | "
                f"{onnx['cpu_median_us']:.0f} | {predict['cpu_median_us'] / onnx['cpu_median_us']:.1f}x | "
                f"{onnx['wall_median_us'] / batch:.1f} |"
            )
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CELLS), figsize=(9, 3.5), sharey=True)
    width = 0.27
    for axis, cell in zip(axes, CELLS, strict=True):
        for offset, runtime in ((-width, "predict"), (0.0, "torch"), (width, "onnxruntime")):
            wall = {(r["cell"], r["batch"], r["runtime"]): r["wall_median_us"] for r in rows}
            values = [wall[(cell.upper(), b, runtime)] for b in BATCHES]
            bars = axis.bar(np.arange(len(BATCHES)) + offset, values, width, label=runtime)
            axis.bar_label(bars, fmt="%.0f", fontsize=8)
        axis.set_xticks(np.arange(len(BATCHES)), [f"batch {b}" for b in BATCHES])
        axis.set_title(f"{cell.upper()} 256, one step")
        axis.set_yscale("log")
    axes[0].set_ylabel("median wall time per step (us)")
    axes[0].legend()
    fig.suptitle("ONNX (onnxruntime) vs predict and its torch step, one thread", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--out", default="benchmarks/results/bench_export", help="results path without suffix")
    args = parser.parse_args()
    command = "python " + " ".join(sys.argv)
    print(f"command: {command}", flush=True)
    th.set_num_threads(1)
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as directory:
        rows = [row for cell in CELLS for row in bench_cell(cell, args.steps, args.warmup, Path(directory))]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    loads = [value for row in rows for value in (row["load_1min_before"], row["load_1min_after"])]
    machine = {
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "load_1min_min": min(loads), "load_1min_max": max(loads),
        "python": platform.python_version(), "torch": th.__version__, "onnxruntime": ort.__version__,
    }  # fmt: skip
    results = {
        "command": command, "steps": args.steps, "warmup": args.warmup, "threads": 1, "machine": machine,
        "wall_s": time.perf_counter() - wall_start, "cpu_s": time.process_time() - cpu_start, "rows": rows,
    }  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    text = (
        f"command: {command}\n"
        f"median per step over {args.steps} steps ({args.warmup} warm-up), one thread; machine: {machine['cores']} "
        f"cores, 1-minute load average {machine['load_1min_min']:.2f} to {machine['load_1min_max']:.2f}; torch "
        f"{machine['torch']}, onnxruntime {machine['onnxruntime']}; run: {results['wall_s']:.0f} s wall, "
        f"{results['cpu_s']:.0f} s CPU\n\n{table(rows)}\n"
    )
    out.with_suffix(".txt").write_text(text)
    figure(rows, out.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()
