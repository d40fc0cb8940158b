"""
The durations the README and the guides state, measured: each documented command or snippet, run as it is written.

Every item runs as a fresh process in a scratch folder, as a user would run it from a clone: ``make demo``'s script,
the README's quick-start snippet, the masking guide's evaluation snippet, the RL Zoo guide's first ``train`` command
and the compare guide's first command, each read from its page at run time (so the measured code is the documented
code; the JSON keeps a hash of it, and ``benchmarks/tests/test_doc_durations.py`` asks for a new measurement when a page's code
changes). Each uses one torch thread, as written on its page (the snippets call ``torch.set_num_threads(1)``, the
entry points default to one thread).

The figure the docs state is the CPU seconds of the item's processes (``resource.getrusage`` of the children): for a
process with one thread, the time it takes on an idle core, and unlike wall time not stretched by other processes
on the machine. The compare command trains two runs at a time: its figure is its CPU seconds over the 2 cores of its
two workers (its time on 2 idle cores, if the runs keep both busy). The wall seconds and the 1-minute load average
before and after each item are recorded too. ``benchmarks/tests/test_doc_durations.py`` keeps every stated duration within
35% of the stored figure.

Writes ``<out>.json`` and ``<out>.txt`` (what it prints, the exact command first).

Usage: python benchmarks/speed/doc_durations.py [--items demo usage_snippet ...] [--out benchmarks/results/doc_durations]
"""

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def code_block(page: Path, heading: str, language: str, index: int = 0) -> str:
    """The ``index``-th ``language`` code block after the line ``heading`` of ``page``."""
    text = page.read_text()
    if f"\n{heading}\n" not in f"\n{text}":
        raise ValueError(f"no {heading!r} in {page}")
    section = f"\n{text}".split(f"\n{heading}\n", 1)[1]
    blocks = re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)
    return blocks[index]


def first_command(block: str) -> list[str]:
    """The first command line of a bash block, without its comment."""
    line = next(line for line in block.splitlines() if line.strip())
    return shlex.split(line, comments=True)


# What each item runs: a page's code (read at run time) and the cores its processes share (the stated figure is CPU
# seconds over them)
ITEMS: dict[str, dict[str, Any]] = {
    "demo": {"what": "make demo (python examples/demo.py)", "cores": 1},
    "usage_snippet": {"what": "README.md, ## Quick start: the Python snippet", "cores": 1},
    "masking_evaluation": {"what": "docs/guide/masking.md, ### Evaluating with memory: the Python snippet", "cores": 1},
    "zoo_train": {"what": "docs/guide/rl_zoo.md, # RL Zoo: the first command", "cores": 1},
    "compare_example": {"what": "docs/guide/compare.md, ## On one machine: the command (2 workers)", "cores": 2},
}


def item_command(name: str) -> tuple[list[str], str]:
    """The command that runs an item (``python`` as this interpreter) and the code it runs, for the hash."""
    python = sys.executable
    if name == "demo":
        code = (ROOT / "examples" / "demo.py").read_text()
        return [python, str(ROOT / "examples" / "demo.py")], code
    if name == "usage_snippet":
        code = code_block(ROOT / "README.md", "## Quick start", "python")
        return [python, "-c", code], code
    if name == "masking_evaluation":
        code = code_block(ROOT / "docs" / "guide" / "masking.md", "### Evaluating with memory", "python")
        return [python, "-c", code], code
    if name == "zoo_train":
        command = first_command(code_block(ROOT / "docs" / "guide" / "rl_zoo.md", "# RL Zoo", "bash"))
        assert command[0] == "python", command
        return [python, *command[1:]], shlex.join(command)
    if name == "compare_example":
        command = first_command(code_block(ROOT / "docs" / "guide" / "compare.md", "## On one machine", "bash"))
        assert command[0] == "python", command
        return [python, *command[1:], "--workers", "2"], shlex.join(command)
    raise ValueError(f"unknown item {name!r}")


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def measure(name: str, timeout: float) -> dict[str, Any]:
    """Run one item in a scratch folder: CPU seconds of its processes, wall seconds, the load before and after."""
    command, code = item_command(name)
    with tempfile.TemporaryDirectory(prefix="doc_durations-") as scratch:
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            command, cwd=scratch, capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, "SDL_VIDEODRIVER": "dummy", "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()[0]
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = ITEMS[name]["cores"]
    return {
        "item": name,
        "what": ITEMS[name]["what"],
        "cpu_seconds": cpu,
        "cores": cores,
        "seconds": cpu / cores,
        "wall_seconds": wall,
        "load_before": load_before,
        "load_after": load_after,
        "code_sha256": code_hash(code),
        "stdout_tail": done.stdout.strip().splitlines()[-5:],
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Measure the items; print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", nargs="+", default=list(ITEMS), choices=list(ITEMS))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds after which an item fails")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "doc_durations"),
                        help="writes OUT.json and OUT.txt (default: %(default)s)")  # fmt: skip
    arguments = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(arguments)
    command = "python benchmarks/speed/doc_durations.py " + " ".join(arguments)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"command: {command.strip()}")
    say(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()}")
    results = []
    for name in args.items:
        result = measure(name, args.timeout)
        results.append(result)
        say(
            f"{name}: {result['seconds']:.0f} s (CPU {result['cpu_seconds']:.1f} s over {result['cores']} core(s); wall "
            f"{result['wall_seconds']:.1f} s; load {result['load_before']:.2f} before, {result['load_after']:.2f} after): "
            f"{result['what']}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(out.with_suffix(".json").read_text())["results"] if out.with_suffix(".json").exists() else []
    # Items measured now replace their earlier figures; the others are kept
    merged = {r["item"]: r for r in stored} | {r["item"]: {**r, "command": command.strip()} for r in results}
    payload = {"command": command.strip(), "results": [merged[name] for name in ITEMS if name in merged]}
    out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    with out.with_suffix(".txt").open("a" if stored else "w") as text:
        text.write("\n".join(lines) + "\n\n")
    return results


if __name__ == "__main__":
    main()
