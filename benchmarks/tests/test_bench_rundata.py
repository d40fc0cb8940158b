"""
The stored runs as tables (``benchmarks/kit/rundata.py``): a run folder packed and unpacked holds what it held, a
package diff is stored once however many records carry it, and the folders are unpacked only when their tables
changed.
"""

import fcntl
import gzip
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_helpers import _fake_run, _load

from sb3_reset_ppo.experiments import runner, training_log

rundata = _load("rundata")
studies = _load("studies")


def _study(results: Path) -> Path:
    folder = results / "s"
    _fake_run(folder, "reset", "CueRecall-v0", 0, [0.1, 0.5], budget=2000, started="2026-12-04T10:00:00Z")
    _fake_run(folder, "reset", "CueRecall-v0", 1, [0.2, 0.9], budget=2000)
    run_dir = folder / "reset" / "CueRecall-v0" / "seed0"
    training_log.write_csv([{"time/total_timesteps": 1000.0, "time/fps": 500.0}], run_dir / "progress.csv.gz")
    (run_dir / "log.txt.gz").write_bytes(gzip.compress(b"| time/fps | 500 |\n"))
    # The studies' own runners: records with the package diff, in a folder without run.json
    for seed in (0, 1):
        record = {"arm": "a", "seed": seed, "package_diff": "diff --git a/x b/x\n" * 50, "returns": [1.0, 0.5]}
        (folder / "own").mkdir(exist_ok=True)
        (folder / "own" / f"seed_{seed}.json").write_text(json.dumps(record, indent=2))
    (folder / "own" / "seed_0.log").write_text("trained\n")
    (folder / "NOTES.md").write_text("# kept as a file\n")
    return folder


def test_a_packed_folder_unpacks_to_what_it_held(tmp_path: Path) -> None:
    folder = _study(tmp_path)
    before = runner.load_runs(folder, 1)
    # What the zoo and the runner leave beside a run and no table stores: models, pickles, monitors, the plain log
    zoo_dir = folder / "reset" / "CueRecall-v0" / "seed1" / "reset_ppo" / "CueRecall-v0_1"
    for name in ("best_model.zip", "CueRecall-v0/vecnormalize.pkl", "0.monitor.csv", "../../log.txt"):
        (zoo_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (zoo_dir / name).write_bytes(b"not stored")
    assert rundata.pack("s", tmp_path) == (3, 11)  # two runs and the runner's folder; NOTES.md is not packed
    assert rundata.check("s", tmp_path) == []
    for name in ("best_model.zip", "CueRecall-v0/vecnormalize.pkl", "0.monitor.csv", "../../log.txt"):
        (zoo_dir / name).unlink()
    assert rundata.check("s", tmp_path) == []
    runs_text = gzip.decompress(rundata.runs_table("s", tmp_path).read_bytes()).decode()
    assert "diff --git" not in runs_text and "trained" not in runs_text  # the diff once elsewhere, the log apart
    assert len(list(rundata.read_rows(tmp_path / "code_versions.jsonl.gz"))) == 1
    assert "trained" in gzip.decompress(rundata.logs_table("s", tmp_path).read_bytes()).decode()
    originals = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".unpacked"}
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix != ".md":
            path.unlink()
    assert rundata.unpack("s", tmp_path) == 11
    for path, data in originals.items():
        assert rundata._same((folder / path).read_bytes(), data, str(path)), path
    assert (folder / "own" / "seed_1.json").read_bytes() == originals[Path("own/seed_1.json")]  # JSON as written
    after = runner.load_runs(folder, 1)
    assert [(r["seed"], r["final"], r["budget"], r["started" if r["seed"] == 0 else "seed"]) for r in after] == [
        (r["seed"], r["final"], r["budget"], r["started" if r["seed"] == 0 else "seed"]) for r in before
    ]
    assert np.array_equal(after[0]["eval_mean"], before[0]["eval_mean"])
    assert training_log.training_rows(folder / "reset" / "CueRecall-v0" / "seed0") == [
        {"time/total_timesteps": 1000.0, "time/fps": 500.0}
    ]
    # A file changed after packing is found by check
    (folder / "own" / "seed_1.json").write_text(json.dumps({"arm": "b"}))
    assert rundata.check("s", tmp_path) == ["own/seed_1.json: differs"]


def test_json_unpacks_as_it_was_written(tmp_path: Path) -> None:
    # The runners' styles (the masking_fair runner writes compact records, the coverage notes indent by one) and one
    # no style reproduces: each file unpacks byte for byte, a record's package diff still stored once
    folder = tmp_path / "s" / "own"
    folder.mkdir(parents=True)
    record = {"arm": "a", "package_diff": "diff --git a/x b/x\n" * 50, "returns": [1.0, 0.1 + 0.2, 1e-05], "e": "\u00e9"}
    written = {
        "compact.json": json.dumps(record, separators=(",", ":")),
        "indent1.json": json.dumps(record, indent=1) + "\n",
        "indent2.json": json.dumps(record, indent=2),
        "by_hand.json": '{ "arm" : "b",\n  "returns": [1.50, 2e0] }\n',
    }
    for name, text in written.items():
        (folder / name).write_text(text)
    rundata.pack("s", tmp_path)
    assert rundata.check("s", tmp_path) == []
    assert "diff --git" not in gzip.decompress(rundata.runs_table("s", tmp_path).read_bytes()).decode()
    for name in written:
        (folder / name).unlink()
    rundata.unpack("s", tmp_path)
    assert {name: (folder / name).read_text() for name in written} == written
    # check compares a JSON file's text, not only its value
    (folder / "compact.json").write_text(json.dumps(record))
    assert rundata.check("s", tmp_path) == ["own/compact.json: differs"]


def test_ensure_unpacks_only_when_the_tables_changed(tmp_path: Path) -> None:
    folder = _study(tmp_path)
    rundata.pack("s", tmp_path)
    record = folder / "reset" / "CueRecall-v0" / "seed1" / "run.json"
    record.unlink()
    rundata.ensure(folder / "reset", tmp_path)  # unpacked from these tables already: left alone
    assert not record.exists()
    (folder / ".unpacked").write_text("other tables\n")
    rundata.ensure(folder / "reset", tmp_path)
    assert record.exists()
    # A file appended to since the tables were written (a live search's journal) is kept; an edited one is not
    journal = folder / "search" / "study.log"
    journal.parent.mkdir()
    journal.write_text("trial 0\n")
    (folder / "search" / "notes.txt").write_text("stored\n")
    rundata.pack("s", tmp_path)
    journal.write_text("trial 0\ntrial 1\n")
    (folder / "search" / "notes.txt").write_text("stored and edited\n")
    (folder / ".unpacked").write_text("other tables\n")
    rundata.ensure(folder, tmp_path)
    assert journal.read_text() == "trial 0\ntrial 1\n"
    assert (folder / "search" / "notes.txt").read_text() == "stored\n"
    rundata.ensure(tmp_path / "elsewhere", tmp_path)  # a folder without tables: nothing to do
    with pytest.raises(ValueError, match="name must be one of"):
        rundata.unpack("elsewhere", tmp_path)


def test_ensure_waits_for_a_process_unpacking_the_folder_and_does_not_unpack_it_again(tmp_path: Path) -> None:
    folder = _study(tmp_path)
    rundata.pack("s", tmp_path)
    (folder / ".unpacked").write_text("other tables\n")
    record = folder / "reset" / "CueRecall-v0" / "seed1" / "run.json"
    record.unlink()
    with open(folder / rundata.LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process (a test worker) is unpacking
        waiter = threading.Thread(target=rundata.ensure, args=(folder, tmp_path))
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive() and not record.exists()
        rundata.unpack("s", tmp_path)  # what the other process does before it lets go
        record.unlink()  # so that an unpack by the waiter would show
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert not record.exists()
    rundata.pack("s", tmp_path)
    assert all(not path.endswith(rundata.LOCK) for path in rundata.stored_paths("s", tmp_path))


def test_the_index_counts_the_runs_in_the_tables() -> None:
    # The grid's runs (run.json) and the studies' own runners' (seed*.json), as when they were files
    counts = {name: studies.count_runs(studies.load(name)) for name in studies.names()}
    assert counts == {
        "attention": 147, "attention_defaults": 110, "coverage": 336, "evidence": 816, "fresh_memory": 600, "gru": 52,
        "masking": 30, "masking_fair": 110, "remainder": 60, "tuned": 100, "zoo_rows": 60,
    }  # fmt: skip


def test_a_table_interrupted_while_written_keeps_its_stored_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A study runner stores its folder after a stop signal, with the process's own handlers back: a second Ctrl-C then
    # lands inside pack. The tables it was rewriting (and the code versions every study shares) keep their rows
    _study(tmp_path)
    rundata.pack("s", tmp_path)
    tables = [rundata.runs_table("s", tmp_path), rundata.logs_table("s", tmp_path), tmp_path / "code_versions.jsonl.gz"]
    stored = {path: list(rundata.read_rows(path)) for path in tables}
    dumps = json.dumps

    def interrupted(value: object, **kwargs: Any) -> str:
        if isinstance(value, dict) and "dir" in value and "own" in str(value["dir"]):
            raise KeyboardInterrupt
        return dumps(value, **kwargs)

    monkeypatch.setattr(rundata.json, "dumps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rundata.pack("s", tmp_path)
    monkeypatch.setattr(rundata.json, "dumps", dumps)
    assert {path: list(rundata.read_rows(path)) for path in tables} == stored
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["s", *(path.name for path in tables)])
