"""The fault tests' driver: a command run as a process while the test injects a fault (kills or restarts something)."""

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def run_with_fault(
    command: Sequence[str],
    fault: Callable[[], bool],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    wait: float = 300,
    timeout: float = 600,
) -> tuple[int, str]:
    """
    Run ``command`` and call ``fault()`` every 0.2 s while it runs, until ``fault`` says it struck (True) or ``wait``
    seconds pass; then let the process end, killing it after ``timeout`` seconds or if the test fails meanwhile.

    :param command: The process's command
    :param fault: Looks for its moment and strikes (kills a process, stops a server); True once it has
    :param cwd: The process's folder
    :param env: The process's environment
    :param wait: Seconds to wait for the fault's moment
    :param timeout: Seconds the process may take in all
    :return: The process's exit code and its output (stdout and stderr together)
    """
    options: dict[str, Any] = {"cwd": cwd, "env": env, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    process = subprocess.Popen(command, text=True, errors="replace", **options)
    try:
        deadline = time.monotonic() + wait
        while process.poll() is None and time.monotonic() < deadline and not fault():
            time.sleep(0.2)
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, output
