"""
The disk size of the ``.venv`` that ``make demo`` creates: a fresh clone of this repository's HEAD, ``make demo``'s
install step alone (a venv, the pinned CPU torch, ``pip install -e ".[plots]"``), then ``du`` of the ``.venv``.

The install is ``make demo``'s own Makefile target (its stamp file), so the measured environment is the one the README
describes; pip reads this machine's configuration (its find-links and cache), as ``make`` does. ``--also`` adds the
``du`` of other existing environments (for example a checkout's ``make install``, every extra) without installing
anything. Prints the exact command first; ``--out`` writes the same lines to a file.

Usage: python benchmarks/speed/venv_size.py [--also PATH ...] [--out benchmarks/results/venv_size.txt]
"""

import argparse
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def du_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (``du -s -B1``: blocks allocated, a hard link counted once)."""
    return int(subprocess.run(["du", "-s", "-B1", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


def demo_target(checkout: Path) -> str:
    """The Makefile's ``$(DEMO_STAMP)`` in ``checkout``: the target that ``make demo`` installs through."""
    checksum = subprocess.run(
        "cat setup.cfg | cksum | cut -d' ' -f1", shell=True, cwd=checkout, check=True, capture_output=True, text=True
    ).stdout.strip()
    return f".venv/.demo-installed-{checksum}"


def demo_install(clone: Path) -> float:
    """Run ``make demo``'s install target in ``clone``; return its wall seconds."""
    start = time.perf_counter()
    subprocess.run(["make", demo_target(clone)], cwd=clone, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--also", nargs="*", default=[], help="existing environments to measure too (no install)")
    parser.add_argument("--out", type=Path, help="also write the printed lines to this file")
    args = parser.parse_args()
    lines = [
        "command: python " + shlex.join(["benchmarks/speed/venv_size.py", *sys.argv[1:]]),
        f"machine: {platform.machine()} python={platform.python_version()}",
    ]
    commit = subprocess.run(["git", "log", "--oneline", "-1"], cwd=ROOT, check=True, capture_output=True, text=True)
    lines.append(f"commit: {commit.stdout.strip()}")
    with tempfile.TemporaryDirectory() as scratch:
        clone = Path(scratch) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        seconds = demo_install(clone)
        size = du_bytes(clone / ".venv")
        lines.append(f"make demo's .venv: {size:,} bytes = {size / 1e9:.2f} GB (du -s -B1; install {seconds:.0f} s wall)")
    for path in args.also:
        size = du_bytes(Path(path))
        lines.append(f"{path}: {size:,} bytes = {size / 1e9:.2f} GB (du -s -B1; existing, not installed here)")
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
