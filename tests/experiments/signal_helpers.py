"""The stop tests' driver: a command started as a process of its own, signalled by its pid alone, as ``kill PID`` does."""

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def start(command: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """
    Start ``command`` with its output (stdout and stderr) written to ``log``, in a session of its own (a signal the
    test sends reaches it alone, never pytest's process group), with one OpenMP thread.
    """
    with open(log, "wb") as output:
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, cwd=cwd, env=environment, start_new_session=True
        )


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, seconds: float = 300) -> None:
    """
    Poll ``condition`` until it holds; kill the process and fail, with its output, if it exits first or time runs out.
    """
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"exit code {process.wait()} before the condition held:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)


def finish(process: subprocess.Popen[bytes], seconds: float = 300) -> int:
    """The process's exit code once it ends; killed (and the test failed) after ``seconds``."""
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def processes_naming(*texts: str) -> list[int]:
    """The pids of the processes whose command line holds every one of ``texts`` (a test's temporary folder: its own)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if all(text.encode() in cmdline.read_bytes() for text in texts):
                pids.append(int(cmdline.parent.name))
        except OSError:  # ended meanwhile
            continue
    return pids
