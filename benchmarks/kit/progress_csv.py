"""
Write the training curves (``progress.csv.gz``) of stored runs from their kept logs (``log.txt.gz``), for runs made
before the runner wrote them.

Usage: python benchmarks/kit/progress_csv.py RUN_DIR...
"""

import gzip
import sys
from pathlib import Path

from sb3_reset_ppo.experiments.training_log import parse_tables, write_csv


def main(argv: list[str] | None = None) -> None:
    for run_dir in map(Path, sys.argv[1:] if argv is None else argv):
        with gzip.open(run_dir / "log.txt.gz", "rt") as log:
            rows = parse_tables(log.read())
        write_csv(rows, run_dir / "progress.csv.gz")
        print(f"{run_dir}: {len(rows)} rows")


if __name__ == "__main__":
    main()
