"""Training curves from a run's log: the tables SB3's logger prints, parsed and written as ``progress.csv.gz``."""

import contextlib
import csv
import gzip
import re
from pathlib import Path

# A table row: "|    approx_kl               | 0.00776  |" under a section header such as "| train/ |"
_ROW = re.compile(r"^\|\s+(\S+)\s+\|\s+(\S+)\s+\|$")
_SECTION = re.compile(r"^\|\s+(\w+/)\s+\|\s+\|$")
_BORDER = re.compile(r"^-{5,}$")


def parse_tables(text: str) -> list[dict[str, float]]:
    """The logger's tables in a run's stdout, one dict per table, ``"section/key": value`` (numbers only)."""
    rows: list[dict[str, float]] = []
    current: dict[str, float] | None = None
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if _BORDER.match(line):
            # A border opens or closes a table
            if current is None:
                current, section = {}, ""
            else:
                if current:
                    rows.append(current)
                current = None
            continue
        if current is None:
            continue
        header = _SECTION.match(line)
        if header:
            section = header.group(1)
            continue
        row = _ROW.match(line)
        if row:
            with contextlib.suppress(ValueError):  # numbers only
                current[section + row.group(1)] = float(row.group(2))
    return rows


def write_csv(rows: list[dict[str, float]], path: Path) -> None:
    """Write the rows as gzip-compressed CSV with the union of their keys as columns (empty where missing)."""
    columns = sorted({key for row in rows for key in row})
    with gzip.open(path, "wt", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, float]]:
    """Rows of a ``progress.csv.gz`` (missing values left out)."""
    with gzip.open(path, "rt", newline="") as source:
        return [{key: float(value) for key, value in row.items() if value != ""} for row in csv.DictReader(source)]


def training_rows(run_dir: Path) -> list[dict[str, float]]:
    """The run's training rows: its ``progress.csv.gz``, else parsed from its ``log.txt.gz`` (else none)."""
    if (run_dir / "progress.csv.gz").exists():
        return read_csv(run_dir / "progress.csv.gz")
    if (run_dir / "log.txt.gz").exists():
        with gzip.open(run_dir / "log.txt.gz", "rt") as log:
            return parse_tables(log.read())
    return []
