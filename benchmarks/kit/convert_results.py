"""
The one-off conversion of the studies' run folders (``benchmarks/results/<name>/``, thousands of tracked files) to
their tables (:mod:`rundata`): pack each folder, check that the tables hold every file as it is, then untrack the
folder's files (they stay on disk, git-ignored, as :func:`rundata.ensure` would unpack them). Hand-written documents
(``*.md``) stay tracked.

Usage (from the repository's root, in a checkout whose run folders are tracked)::

    python benchmarks/kit/convert_results.py            # convert every folder of FOLDERS
    python benchmarks/kit/convert_results.py --dry-run  # pack and check only
"""

import argparse
import subprocess
import sys

from benchmarks.kit import rundata

# The folders of benchmarks/results/ holding runs; bench_floor_paired (13 small files a test and a page read) stays
FOLDERS = (
    "coverage",
    "coverage_pairs",
    "coverage_pairs_logs",
    "evidence",
    "fresh_memory",
    "grid",
    "gru",
    "masking",
    "masking_fair",
    "remainder",
    "tuning",
)


def tracked(prefix: str) -> list[str]:
    """The files git tracks under ``prefix``."""
    out = subprocess.run(["git", "ls-files", "-z", prefix], check=True, capture_output=True, cwd=rundata.RESULTS)
    return [name for name in out.stdout.decode().split("\0") if name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="pack and check, untrack nothing")
    args = parser.parse_args(argv)
    for name in FOLDERS:
        before = tracked(name)
        rows, files = rundata.pack(name)
        problems = rundata.check(name)
        if problems:
            sys.exit(f"{name}: the tables do not hold the folder: {'; '.join(problems[:10])}")
        untracked = [path for path in before if not path.endswith(".md")]
        print(f"{name}: {len(before)} tracked files, {files} packed in {rows} rows; untracking {len(untracked)}")
        if not args.dry_run and untracked:
            subprocess.run(["git", "rm", "-q", "--cached", "--", *untracked], check=True, cwd=rundata.RESULTS)
            tables = [rundata.runs_table(name).name, rundata.logs_table(name).name]
            subprocess.run(["git", "add", "--", *tables], check=True, cwd=rundata.RESULTS)
    if not args.dry_run:
        subprocess.run(["git", "add", "--", rundata.CODE_VERSIONS.name], check=True, cwd=rundata.RESULTS)


if __name__ == "__main__":
    main()
