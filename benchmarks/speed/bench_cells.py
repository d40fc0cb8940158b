"""
torch's CPU kernels of the two recurrent cells: ``nn.LSTM`` against ``nn.GRU``, forward and backward, one thread.

Each cell runs a sequence of ``--steps`` steps over ``--sequences`` sequences from given memory (the defaults, 17
steps of 8 sequences, the shape docs/studies/gru.md quotes), then backward through a sum of its outputs and its final
memory. For each input size (the MLP settings' 2 features of CartPoleNoVel-v1, the image settings' 512 of NatureCNN)
and hidden size (64, 256), the two cells are timed interleaved, as the CPU time of the process with one torch thread
(unlike wall time, not stretched by other processes), each repeat the mean over ``--calls`` calls after a warm-up; the
median of ``--repeats`` repeats is printed in milliseconds with the GRU / LSTM ratio, and the 1-minute load average
before and after. Prints the exact command first; ``--out`` writes the same lines to a file.

Usage: python benchmarks/speed/bench_cells.py [--repeats 5] [--calls 100] [--out benchmarks/results/bench_cells.txt]
"""

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch as th
from torch import nn

INPUT_SIZES = (2, 512)
HIDDEN_SIZES = (64, 256)


def make_cell(cell: str, input_size: int, hidden: int) -> nn.LSTM | nn.GRU:
    """One layer of ``cell`` (``"lstm"`` or ``"gru"``), its weights drawn from a fixed seed."""
    th.manual_seed(0)
    return (nn.LSTM if cell == "lstm" else nn.GRU)(input_size, hidden)


def step_function(rnn: nn.LSTM | nn.GRU, steps: int, sequences: int) -> Callable[[], None]:
    """One forward and backward of ``rnn`` over ``(steps, sequences, input_size)`` inputs from random memory."""
    inputs = th.randn(steps, sequences, rnn.input_size)
    h0 = th.randn(1, sequences, rnn.hidden_size)
    memory = (h0, th.randn(1, sequences, rnn.hidden_size)) if isinstance(rnn, nn.LSTM) else h0

    def call() -> None:
        rnn.zero_grad(set_to_none=True)
        output, final = rnn(inputs, memory)
        finals = final if isinstance(final, tuple) else (final,)
        (output.sum() + sum(state.sum() for state in finals)).backward()

    return call


def cpu_ms(call: Callable[[], None], calls: int) -> float:
    """Mean CPU milliseconds of ``call`` over ``calls`` calls."""
    start = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=17)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100, help="calls per repeat")
    parser.add_argument("--out", type=Path, help="also write the printed lines to this file")
    args = parser.parse_args()
    th.set_num_threads(1)
    load_before = os.getloadavg()[0]
    lines = [
        "command: python " + shlex.join(["benchmarks/speed/bench_cells.py", *sys.argv[1:]]),
        f"machine: {platform.machine()} python={platform.python_version()} torch={th.__version__} threads=1",
        f"forward and backward over {args.steps} steps of {args.sequences} sequences, CPU ms per call, "
        f"median of {args.repeats} repeats of {args.calls} calls",
        "| input | hidden | LSTM ms | GRU ms | GRU / LSTM |",
        "|---|---|---|---|---|",
    ]
    for input_size in INPUT_SIZES:
        for hidden in HIDDEN_SIZES:
            calls = {
                cell: step_function(make_cell(cell, input_size, hidden), args.steps, args.sequences)
                for cell in ("lstm", "gru")
            }
            times: dict[str, list[float]] = {cell: [] for cell in calls}
            for call in calls.values():
                cpu_ms(call, max(1, args.calls // 10))  # warm-up
            for _ in range(args.repeats):
                for cell, call in calls.items():
                    times[cell].append(cpu_ms(call, args.calls))
            lstm, gru = (statistics.median(times[cell]) for cell in ("lstm", "gru"))
            lines.append(f"| {input_size} | {hidden} | {lstm:.2f} | {gru:.2f} | {gru / lstm:.2f} |")
            print(lines[-1], flush=True)
    lines.append(f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
