"""
The kit's study runner (``benchmarks/kit/study_runner.py``) stopped by a signal: the running run finishes, no other
starts, and the study's folder is stored as its tables, as at its end; a run cut short leaves no files to store. Its
runs are fakes (no training).
"""

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

import bench_helpers
import pytest

from benchmarks.kit import run_grid, rundata, study_runner
from sb3_reset_ppo.experiments import runner

# A study of 6 runs on one worker; each "run" writes run_one's marker, sleeps 2 s, then records itself
STOPPED_STUDY = """
import argparse, sys, time, types
from pathlib import Path
from benchmarks.kit import study_runner
from sb3_reset_ppo.experiments import runner

def run_one(spec):
    spec.run_dir.mkdir(parents=True)
    (spec.run_dir / runner.RUN_MARKER).write_text("")
    time.sleep(2)
    record = {"variant": "a", "env": "T", "seed": 0, "returncode": 0, "seconds": 2.0, "evaluations": 20}
    runner.write_record(spec.run_dir / runner.RUN_FILE, record)
    return record

runner.run_one = run_one
out = Path(sys.argv[1])
parser = argparse.ArgumentParser()
study_runner.add_arguments(parser, out, seeds=3)
args = parser.parse_args(["--workers", "1"])
spec = lambda variant, task, seed, folder, steps=None: types.SimpleNamespace(run_dir=folder / variant / task / f"seed{seed}")
study_runner.run(args, "study.py", lambda folder: study_runner.jobs(spec, ["T"], ["a", "b"], 3, folder, None))
"""


def test_a_signal_stops_the_runner_after_its_running_run_and_stores_the_study(tmp_path: Path) -> None:
    out = tmp_path / "study"
    command = [sys.executable, "-c", STOPPED_STUDY, str(out)]
    first = out / "a" / "T" / "seed0"
    code, text = bench_helpers.stopped_by(signal.SIGINT, command, (first / runner.RUN_MARKER).exists, tmp_path / "log.txt")
    # Python's exit for an uncaught KeyboardInterrupt: ended by SIGINT (130 in a shell)
    assert code == -signal.SIGINT, text[-4000:]
    line = "stopping (SIGINT): no new run starts; waiting for the running ones (1); send the signal again to stop them now"
    assert text.count(line) == 1 and text.count(": ok in ") == 1, text
    # The running run finished and is recorded; no other started; the study is stored as its tables
    assert json.loads((first / runner.RUN_FILE).read_text())["returncode"] == 0
    assert [path.relative_to(out).as_posix() for path in out.glob("*/*/seed*")] == ["a/T/seed0"]
    assert f"stored: 2 files in 1 rows -> {rundata.runs_table('study', tmp_path)}" in text


def test_a_run_cut_short_leaves_no_folder_and_the_stored_study_none_of_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A process group killed from outside (`kill -- -PGID`): each trainer dies of the signal, run_one returns its
    # negative code without a record, and the runner stores the study on its way out. Seed 0 finishes; seed 1 is cut
    # after writing some of the zoo's files; seed 2 fails with an error (its folder and record are kept)
    def run_one(spec: runner.RunSpec) -> dict[str, Any]:
        seed = int(spec.run_dir.name.removeprefix("seed"))
        spec.run_dir.mkdir(parents=True)
        (spec.run_dir / runner.RUN_MARKER).write_text("")
        (spec.run_dir / "args.yml").write_text("partial: true\n")
        code = {0: 0, 1: -signal.SIGTERM, 2: 1}[seed]
        record = {"variant": "a", "env": "T", "seed": seed, "returncode": code, "seconds": 2.0, "evaluations": 20}
        if code >= 0:
            runner.write_record(spec.run_dir / (runner.RUN_FILE if code == 0 else runner.FAILED_FILE), record)
        return record

    monkeypatch.setattr(runner, "run_one", run_one)
    out = tmp_path / "study"
    parser = argparse.ArgumentParser()
    study_runner.add_arguments(parser, out, seeds=3)
    args = parser.parse_args(["--workers", "1"])

    def spec(variant: str, task: str, seed: int, folder: Path, steps: int | None = None) -> runner.RunSpec:
        return runner.RunSpec("reset_ppo", task, seed, folder / variant / task / f"seed{seed}", tmp_path / "unused.yml")

    study_runner.run(args, "study.py", lambda folder: study_runner.jobs(spec, ["T"], ["a"], 3, folder, None))
    text = capsys.readouterr().out
    cut = f"    a {'T':<30} seed 1: CUT (signal 15) in 2 s; its folder removed (trained again at the next start)"
    assert cut in text.splitlines(), text
    assert text.count("its folder removed") == 1
    assert sorted(path.name for path in (out / "a" / "T").iterdir()) == ["seed0", "seed2"]
    stored = rundata.stored_paths("study", tmp_path)
    assert not any("seed1" in path for path in stored) and any(path.startswith("a/T/seed2/") for path in stored)
    # The run's own folder only: a folder run_one did not make, or a recorded run's, is never removed
    foreign = {"variant": "a", "env": "T", "seed": 3, "run_dir": tmp_path / "mine"}
    (tmp_path / "mine").mkdir()
    assert not run_grid.discard_cut_short(foreign) and (tmp_path / "mine").is_dir()
    assert not run_grid.discard_cut_short({**foreign, "run_dir": out / "a" / "T" / "seed0"})
    assert not run_grid.discard_cut_short({**foreign, "run_dir": None})
