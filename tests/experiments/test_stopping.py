"""
A signal to the compare command (``kill PID``, or a Ctrl-C in its terminal): the first one starts no new run and lets
the running one finish and be recorded, the second one stops it at once. Real processes, trained through the RL Zoo.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from signal_helpers import finish, processes_naming, start, wait_until

from sb3_reset_ppo.experiments import runner

# One seed of each arm, one worker: the two runs train one after the other, each for a few seconds
COMPARE = ["--env", "CueRecall-v0", "--seeds", "1", "--timesteps", "1024", "--evaluations", "2", "--eval-episodes", "1"]


def _compare(tmp_path: Path) -> tuple[list[str], Path]:
    out = tmp_path / "compare"
    return [sys.executable, "-m", "sb3_reset_ppo.compare", *COMPARE, "--workers", "1", "--out", str(out)], out


def _run_dirs(out: Path) -> list[Path]:
    return sorted(path for path in out.glob("runs/*/*/seed*") if path.is_dir())


def _stopped_once(tmp_path: Path, signum: signal.Signals, group: bool) -> None:
    """Send ``signum`` to compare's process (or its process group) while its first run trains, and check the result."""
    command, out = _compare(tmp_path)
    log = tmp_path / "log.txt"
    process = start(command, log, tmp_path)
    wait_until(lambda: bool(processes_naming("sb3_reset_ppo.zoo", str(out))), process, log)  # a run's trainer runs
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    code = finish(process)
    text = log.read_text()
    assert code == 130, text[-4000:]
    assert text.count(f"stopping ({signum.name}): no new run starts; waiting for the running ones (1); send the "
                      "signal again to stop them now") == 1  # fmt: skip
    assert "interrupted: the finished runs are kept; run the same command again to resume" in text
    # The run that was training finished and is recorded, once; the other arm's run never started
    (run_dir,) = _run_dirs(out)
    record = json.loads((run_dir / runner.RUN_FILE).read_text())
    assert record["returncode"] == 0 and record["evaluations"] >= 2
    assert len(list(out.glob(f"runs/*/*/seed*/{runner.RUN_FILE}"))) == 1 and not (out / "REPORT.md").exists()


def test_sigterm_lets_the_running_run_finish_and_starts_no_other(tmp_path: Path) -> None:
    _stopped_once(tmp_path, signal.SIGTERM, group=False)  # `kill PID`


def test_ctrl_c_lets_the_running_run_finish_and_starts_no_other(tmp_path: Path) -> None:
    # SIGINT to the whole process group, as a Ctrl-C in the terminal sends it: the run's trainer, in a session of its
    # own, does not get it (the zoo would cut its run short) and finishes
    _stopped_once(tmp_path, signal.SIGINT, group=True)


def test_a_second_signal_stops_the_running_run(tmp_path: Path) -> None:
    command, out = _compare(tmp_path)
    log = tmp_path / "log.txt"
    process = start(command, log, tmp_path)
    wait_until(lambda: bool(processes_naming("sb3_reset_ppo.zoo", str(out))), process, log)  # a run's trainer runs
    process.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping (SIGTERM)" in log.read_text(), process, log)
    process.send_signal(signal.SIGTERM)
    # Ended by the signal, at once, and its run's zoo process with it (the parent-death signal)
    assert finish(process, 60) == -signal.SIGTERM, log.read_text()[-4000:]
    deadline = time.monotonic() + 10
    while processes_naming(str(out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(str(out)) == []
    # Nothing of the cut run is recorded: the next start trains it again
    (run_dir,) = _run_dirs(out)
    assert not (run_dir / runner.RUN_FILE).exists() and not (run_dir / runner.FAILED_FILE).exists()
    assert not runner.recorded(run_dir)


def test_a_run_gets_a_session_of_its_own_only_where_it_dies_with_its_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without a parent-death signal (not Linux) a process in a session of its own would outlive its driver
    options = runner.run_process_options()
    if sys.platform == "linux":
        assert options["start_new_session"] is True and callable(options["preexec_fn"])
    monkeypatch.setattr(runner.sys, "platform", "darwin")
    assert runner.parent_death_signal() is None and runner.run_process_options() == {}


def test_a_run_whose_driver_died_before_its_signal_was_set_exits() -> None:
    if sys.platform != "linux":
        pytest.skip("the parent-death signal is Linux's")
    # The child's preexec_fn compares its parent with the driver that made it: another parent (here the test's own
    # pid stands in for a driver already gone) means the signal would never come, so the child exits at once
    set_signal = runner.parent_death_signal()
    assert set_signal is not None
    code = subprocess.call([sys.executable, "-c", "import time; time.sleep(30)"], preexec_fn=_from_another_driver(set_signal))
    assert code == 1


def _from_another_driver(set_signal: Callable[[], None]) -> Callable[[], None]:
    def preexec() -> None:  # pragma: no cover  (runs in the child)
        # The fork's copy of os only
        os.getppid = lambda: -1
        set_signal()

    return preexec
