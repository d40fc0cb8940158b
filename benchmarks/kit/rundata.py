"""
The studies' stored runs as data: a few compressed tables instead of a folder tree of thousands of small files.

A study's run folder (``benchmarks/results/<name>/``, as the runners write it: ``run.json``, the zoo's
``evaluations.npz``, ``args.yml``, ``progress.csv.gz``, logs...) is stored as two gzipped JSON-lines tables, one row per
run (a folder holding ``run.json`` or ``failed.json``; any other file is a row of its own folder):

- ``benchmarks/results/<name>.runs.jsonl.gz``: ``{"dir": <the run's folder, relative>, "files": {<path>: <content>}}``
  with every file but the logs, parsed: a JSON file as its value and the style it was written in
  (``{"json": value, "style": i}``, so that it unpacks byte for byte), an ``.npz`` as its arrays
  (``[{key, dtype, shape, data}]``), a gzipped file as its text (``{"gz": text}``), any other text file (and a JSON file
  in no known style) as ``{"text": text}``;
- ``benchmarks/results/<name>.logs.jsonl.gz``: the same rows with the logs only (``*.log``, ``*log.txt.gz``), which
  no table reads but a person debugging a run does.

The code a run was made with is stored once: a run record's ``package_diff`` (the uncommitted package changes,
thousands of lines) is replaced by ``{"sha256": <its hash>}`` and the diff kept once in
``benchmarks/results/code_versions.jsonl.gz`` (``{"sha256", "package_diff"}`` rows).

The report generators read the folders: :func:`ensure` unpacks a study's tables into its folder (git-ignored) when
the folder is missing or older than the tables, so every command and page names the same paths as when the runs
were made. After training more runs, ``pack`` stores the folder again. Documents written by hand in a run folder
(``*.md``) stay files beside the tables.

Usage::

    python benchmarks/kit/rundata.py pack NAME...     # the folders benchmarks/results/NAME/ -> their tables
    python benchmarks/kit/rundata.py unpack NAME...   # the tables -> the folders (what ensure does)
    python benchmarks/kit/rundata.py check NAME...    # exit 1 unless the tables hold exactly the folders' contents
"""

import argparse
import base64
import fcntl
import gzip
import hashlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent.parent / "results"
CODE_VERSIONS = RESULTS / "code_versions.jsonl.gz"
# Written into an unpacked folder: the hash of the tables it was unpacked from
STAMP = ".unpacked"
# Locked while a process unpacks a folder (:func:`ensure`), so that a second one waits and then finds it unpacked
LOCK = ".unpacking"
# The files that mark a run's folder
RUN_MARKERS = ("run.json", "failed.json")
# JSON as the runners write it: (indent, separators, trailing newline); a stored cell names its style by its index (so
# a new style is appended), and a file no style reproduces is stored as its text
JSON_STYLES: tuple[tuple[int | None, tuple[str, str] | None, bool], ...] = (
    (2, None, False), (None, None, False), (2, None, True), (None, None, True), (1, None, False), (4, None, False),
    (1, None, True), (None, (",", ":"), False),
)  # fmt: skip


def runs_table(name: str, results: Path = RESULTS) -> Path:
    """The table of the study folder ``name``'s runs."""
    return results / f"{name}.runs.jsonl.gz"


def logs_table(name: str, results: Path = RESULTS) -> Path:
    """The table of the study folder ``name``'s logs."""
    return results / f"{name}.logs.jsonl.gz"


def packed_names(results: Path = RESULTS) -> list[str]:
    """The study folders stored as tables."""
    return sorted(path.name.removesuffix(".runs.jsonl.gz") for path in results.glob("*.runs.jsonl.gz"))


def is_log(path: str) -> bool:
    """Whether a stored file is a log (kept in the logs table)."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith((".log", "log.txt.gz", "log.txt"))


def _json_text(value: Any, style: int) -> str:
    """``value`` as JSON written in the style ``JSON_STYLES[style]``."""
    indent, separators, newline = JSON_STYLES[style]
    return json.dumps(value, indent=indent, separators=separators) + ("\n" if newline else "")


def _json_style(raw: str, value: Any) -> int:
    """The style ``raw`` (the text of ``value``) is written in: its index in ``JSON_STYLES``, -1 for none."""
    return next((i for i in range(len(JSON_STYLES)) if _json_text(value, i) == raw), -1)


def encode(path: Path, diffs: dict[str, str]) -> dict[str, Any]:
    """
    A stored file as a table cell (see the module's docstring); a run record's ``package_diff`` goes to ``diffs``
    (hash -> diff).
    """
    data = path.read_bytes()
    if path.suffix == ".npz":
        with np.load(io.BytesIO(data)) as arrays:
            return {
                "npz": [
                    {"key": key, "dtype": str(array.dtype), "shape": list(array.shape), "data": array.ravel().tolist()}
                    for key, array in ((key, arrays[key]) for key in arrays.files)
                ]
            }
    if path.suffix == ".gz":
        return {"gz": gzip.decompress(data).decode()}
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {"bytes": base64.b64encode(data).decode()}
    if path.suffix == ".json":
        value = json.loads(text)
        style = _json_style(text, value)
        if style < 0:
            return {"text": text}
        if isinstance(value, dict) and isinstance(value.get("package_diff"), str):
            digest = hashlib.sha256(value["package_diff"].encode()).hexdigest()
            diffs[digest] = value["package_diff"]
            value = {**value, "package_diff": {"sha256": digest}}
        return {"json": value, "style": style}
    return {"text": text}


def decode(cell: dict[str, Any], diffs: dict[str, str]) -> bytes:
    """A table cell back as the file's bytes (a gzipped file recompressed; its contents are the stored ones)."""
    if "npz" in cell:
        # str -> Any, not -> ndarray: np.savez's stub types its keyword arrays and its allow_pickle flag alike
        arrays: dict[str, Any] = {
            array["key"]: np.asarray(array["data"], dtype=array["dtype"]).reshape(array["shape"]) for array in cell["npz"]
        }
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()
    if "gz" in cell:
        # Level 1: an archive's contents are stored, not its bytes, and level 9 took most of an unpack's CPU time
        return gzip.compress(cell["gz"].encode(), compresslevel=1, mtime=0)
    if "bytes" in cell:
        return base64.b64decode(cell["bytes"])
    if "json" in cell:
        value = cell["json"]
        if isinstance(value, dict) and isinstance(value.get("package_diff"), dict):
            value = {**value, "package_diff": diffs[value["package_diff"]["sha256"]]}
        return _json_text(value, cell["style"]).encode()
    return str(cell["text"]).encode()


# What a run folder holds that no table stores (git ignored it before the tables): the zoo's models, pickled
# statistics and Optuna reports, its monitors, and the trainer's plain log (its compressed copy, log.txt.gz, is kept)
NOT_STORED = ("*.zip", "*.pkl", "*.monitor.csv", "log.txt")


def _stored_files(folder: Path) -> list[Path]:
    """
    The files of a study folder that the tables hold: all but hand-written documents, the unpack stamp and lock and
    :data:`NOT_STORED`.
    """
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix != ".md"
        and p.name not in (STAMP, LOCK)
        and not any(p.match(pattern) for pattern in NOT_STORED)
    )


def _run_dir(path: Path, folder: Path) -> Path:
    """The run folder a file belongs to: its nearest folder with a run record, else its own folder."""
    for parent in path.parents:
        if parent == folder or not parent.is_relative_to(folder):
            break
        if any((parent / marker).exists() for marker in RUN_MARKERS):
            return parent
    return path.parent


def _write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    # Through a sibling file renamed over the table: one interrupted (a second Ctrl-C while a stopped study is stored)
    # leaves the table as it was, never cut short. mtime=0: packing the same runs twice writes the same bytes; keys
    # keep the files' order
    scratch = path.with_name(path.name + ".tmp")
    try:
        with gzip.GzipFile(scratch, "wb", mtime=0) as out:
            for row in rows:
                out.write((json.dumps(row, separators=(",", ":")) + "\n").encode())
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a table (none when it does not exist)."""
    if not path.exists():
        return
    with gzip.open(path, "rt") as source:
        for line in source:
            yield json.loads(line)


def stored_paths(name: str, results: Path = RESULTS) -> list[str]:
    """The files the runs table of ``name`` holds (not the logs), relative to its folder, without decoding them."""
    return [str(Path(row["dir"]) / inside) for row in read_rows(runs_table(name, results)) for inside in row["files"]]


def read_code_versions(path: Path = CODE_VERSIONS) -> dict[str, str]:
    """The package diffs the runs were made with, by their sha256."""
    return {row["sha256"]: row["package_diff"] for row in read_rows(path)}


def pack(name: str, results: Path = RESULTS) -> tuple[int, int]:
    """
    Store the folder ``results/name/`` as its two tables (rewriting them) and its package diffs in the code versions'
    table (added to it).

    :return: the runs (rows) and the files stored
    :raises ValueError: ``name`` is not a folder of ``results``
    """
    folder = results / name
    if not folder.is_dir():
        raise ValueError(f"name must be a folder of {results}, got {name!r}")
    diffs = read_code_versions(results / CODE_VERSIONS.name)
    runs: dict[str, dict[str, Any]] = {}
    logs: dict[str, dict[str, Any]] = {}
    files = _stored_files(folder)
    for path in files:
        run = _run_dir(path, folder)
        key, inside = run.relative_to(folder).as_posix(), path.relative_to(run).as_posix()
        table = logs if is_log(inside) else runs
        table.setdefault(key, {})[inside] = encode(path, diffs)
    _write_rows([{"dir": key, "files": runs[key]} for key in sorted(runs)], runs_table(name, results))
    _write_rows([{"dir": key, "files": logs[key]} for key in sorted(logs)], logs_table(name, results))
    _write_rows([{"sha256": h, "package_diff": diffs[h]} for h in sorted(diffs)], results / CODE_VERSIONS.name)
    _stamp(name, results)
    return len(runs), len(files)


def _tables_hash(name: str, results: Path) -> str:
    digest = hashlib.sha256()
    for path in (runs_table(name, results), logs_table(name, results), results / CODE_VERSIONS.name):
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()


def _stamp(name: str, results: Path) -> None:
    (results / name / STAMP).write_text(_tables_hash(name, results) + "\n")


def unpacked(name: str, results: Path = RESULTS) -> dict[str, bytes]:
    """The files the tables of ``name`` hold: path relative to its folder -> bytes."""
    diffs = read_code_versions(results / CODE_VERSIONS.name)
    files: dict[str, bytes] = {}
    for table in (runs_table(name, results), logs_table(name, results)):
        for row in read_rows(table):
            for inside, cell in row["files"].items():
                files[str(Path(row["dir"]) / inside)] = decode(cell, diffs)
    return files


def _extends(path: Path, stored: bytes) -> bool:
    """Whether the file at ``path`` holds ``stored`` and more after it (an append-only file written to since)."""
    if not path.is_file() or path.stat().st_size <= len(stored):
        return False
    with open(path, "rb") as existing:
        return existing.read(len(stored)) == stored


def unpack(name: str, results: Path = RESULTS) -> int:
    """
    Write the tables of ``name`` into the folder ``results/name/``, over the files they hold (other files, such as
    runs trained since and not packed yet, stay; so does a file that begins with what the tables hold and goes on,
    such as a search's journal appended to since it was packed).

    :return: the files written
    :raises ValueError: ``name`` has no tables
    """
    if not runs_table(name, results).exists():
        raise ValueError(f"name must be one of {packed_names(results)}, got {name!r}")
    folder = results / name
    files = unpacked(name, results)
    made: set[Path] = set()
    for inside, data in files.items():
        path = folder / inside
        if _extends(path, data):
            continue
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(data)
    _stamp(name, results)
    return len(files)


def ensure(path: Path, results: Path = RESULTS) -> None:
    """
    Make sure the runs under ``path`` (a folder of ``results`` or one inside it) are on disk: unpack its study's
    tables when its folder was never unpacked or was unpacked from other tables. A path outside ``results``, or of
    a folder without tables, is left alone.
    """
    path = Path(path).resolve()
    if not path.is_relative_to(results.resolve()) or path == results.resolve():
        return
    name = path.relative_to(results.resolve()).parts[0]
    if not runs_table(name, results).exists():
        return
    stamp = results / name / STAMP
    (results / name).mkdir(exist_ok=True)
    # One process unpacks (the test workers regenerate several studies' pages at once); the others wait for it
    with open(results / name / LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text().strip() != _tables_hash(name, results):
            unpack(name, results)


def ensure_all(results: Path = RESULTS) -> None:
    """:func:`ensure` for every study folder stored as tables."""
    for name in packed_names(results):
        ensure(results / name, results)


def _same(stored: bytes, original: bytes, inside: str) -> bool:
    """Whether an unpacked file holds what the original held: its bytes, or an archive's contents."""
    if stored == original:
        return True
    if inside.endswith(".npz"):
        with np.load(io.BytesIO(stored)) as a, np.load(io.BytesIO(original)) as b:
            return a.files == b.files and all(
                a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True) for k in a.files
            )
    if inside.endswith(".gz"):
        return gzip.decompress(stored) == gzip.decompress(original)
    return False


def check(name: str, results: Path = RESULTS) -> list[str]:
    """The files of the folder ``results/name/`` that its tables do not hold as they are (empty when all are)."""
    folder = results / name
    stored = unpacked(name, results)
    on_disk = {path.relative_to(folder).as_posix(): path for path in _stored_files(folder)}
    problems = [f"{inside}: not in the tables" for inside in sorted(set(on_disk) - set(stored))]
    problems += [f"{inside}: in the tables only" for inside in sorted(set(stored) - set(on_disk))]
    problems += [
        f"{inside}: differs"
        for inside in sorted(set(stored) & set(on_disk))
        if not _same(stored[inside], on_disk[inside].read_bytes(), inside)
    ]
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", choices=["pack", "unpack", "check"])
    parser.add_argument("names", nargs="+", help="folders of benchmarks/results/")
    args = parser.parse_args(argv)
    failed = False
    for name in args.names:
        if args.verb == "pack":
            rows, files = pack(name)
            print(f"{name}: {files} files in {rows} rows -> {runs_table(name).name}, {logs_table(name).name}")
        elif args.verb == "unpack":
            print(f"{name}: {unpack(name)} files -> {RESULTS / name}")
        else:
            problems = check(name)
            failed |= bool(problems)
            print(f"{name}: " + ("the tables hold the folder" if not problems else "; ".join(problems[:10])))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
