"""
The kit's study runner (``benchmarks/kit/study_runner.py``) stopped by a signal: the running run finishes, no other
starts, and the study's folder is stored as its tables, as at its end. Its runs are fakes of two seconds (no training).
"""

import json
import signal
import sys
from pathlib import Path

import bench_helpers

from benchmarks.kit import rundata
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
