"""Where runs train: local worker threads (:func:`run_local`) or Ray tasks of one CPU on a cluster (:func:`run_ray`)."""

import contextlib
import io
import os
import re
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sb3_reset_ppo.common.settings import check_positive_int
from sb3_reset_ppo.experiments.runner import FAILED_FILE, RunSpec, budget, check_run_dir, run_one, write_record

Item = TypeVar("Item")
Result = dict[str, Any]


# The signals that stop :func:`run_workers`: the first one starts no new run, the second one ends the process
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_workers(work: Callable[[int, threading.Event], None], workers: int) -> None:
    """
    Run ``work(index, stop)`` on ``workers`` threads and wait for them; ``stop`` is set when a worker raises or at the
    first SIGINT or SIGTERM (:data:`STOP_SIGNALS`), which prints a line and waits for the running work. A second
    signal ends the process by that signal at once: the runs' processes die with it (:func:`~.runner.run_one`'s
    parent-death signal), nothing of theirs recorded, as after a kill. The handlers are installed only when called
    from the main thread, and the previous ones restored after.

    :raises BaseException: a worker's first error (after the others are done), else KeyboardInterrupt if stopped by a
        signal
    """
    check_positive_int("workers", workers)
    stop = threading.Event()
    errors: list[BaseException] = []
    done = [threading.Event() for _ in range(workers)]
    interrupted = threading.Event()

    def guarded(index: int) -> None:
        try:
            work(index, stop)
        except BaseException as error:  # re-raised in the calling thread once the other workers are done
            errors.append(error)
            stop.set()
        finally:
            done[index].set()

    def on_signal(signum: int, frame: object) -> None:
        if interrupted.is_set():
            # The second signal: ended by it with the default action, as a kill would (its children die with it)
            for number in STOP_SIGNALS:
                signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        interrupted.set()
        stop.set()
        running = sum(not flag.is_set() for flag in done)
        with contextlib.suppress(OSError):  # stdout gone (a closed pipe): the flags are what matters
            print(
                f"stopping ({signal.Signals(signum).name}): no new run starts; waiting for the running ones ({running}); "
                "send the signal again to stop them now",
                flush=True,
            )

    # A handler instead of KeyboardInterrupt, which could land in Thread.join (CPython 3.11 then marks a running one
    # stopped). SIGINT is handled even where a background job inherited it ignored (a script's `cmd &`): the first
    # signal only stops new runs, and `kill -INT` is how such a job is stopped.
    handle = threading.current_thread() is threading.main_thread()
    previous = {number: signal.signal(number, on_signal) for number in STOP_SIGNALS} if handle else {}
    try:
        threads = [threading.Thread(target=guarded, args=(index,)) for index in range(workers)]
        for thread in threads:
            thread.start()
        while not all(flag.is_set() for flag in done):
            time.sleep(0.2)
        for thread in threads:
            thread.join()
    finally:
        for number, handler in previous.items():
            # None: a handler not installed from Python; SIGINT's is then Python's own
            fallback = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, fallback if handler is None else handler)
    if errors:
        raise errors[0]
    if interrupted.is_set():
        raise KeyboardInterrupt


def _first(todo: list[Item], seconds_left: float | None) -> Item | None:
    return todo.pop(0) if todo else None


def run_local(
    todo: list[Item],
    train: Callable[[Item], Result],
    workers: int,
    minutes: float | None = None,
    pick: Callable[[list[Item], float | None], Item | None] = _first,
    on_result: Callable[[Item, Result], None] | None = None,
) -> list[Result]:
    """
    Train the runs of ``todo`` on ``workers`` threads, one trainer at a time each, in ``todo``'s order.

    :param todo: The runs (taken out of the list as they start)
    :param train: Trains one run and returns its record (:func:`sb3_reset_ppo.experiments.runner.run_one`'s)
    :param workers: Runs at a time
    :param minutes: A time limit, whose seconds left ``pick`` gets (None: no limit)
    :param pick: Takes the next run out of ``todo`` given the seconds left, or returns None to start no more
    :param on_result: Called with each run and its record as it finishes (e.g. to print progress)
    :return: The records of the runs trained, in the order they finished
    :raises KeyboardInterrupt: stopped by SIGINT or SIGTERM, once the running runs have finished (:func:`run_workers`)
    """
    if minutes is not None and not minutes > 0:
        raise ValueError(f"minutes must be positive or None, got {minutes!r}")
    deadline = None if minutes is None else time.monotonic() + 60 * minutes
    lock = threading.Lock()
    results: list[Result] = []

    def worker(index: int, stop: threading.Event) -> None:
        while True:
            with lock:
                left = None if deadline is None else deadline - time.monotonic()
                item = None if stop.is_set() else pick(todo, left)
            if item is None:
                return
            result = train(item)
            with lock:
                results.append(result)
                if on_result is not None:
                    on_result(item, result)

    run_workers(worker, workers)
    return results


def _pack(folder: Path) -> bytes:
    """A folder's files as a gzip-compressed tar archive (paths relative to the folder)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def _unpack(data: bytes, folder: Path) -> None:
    """
    Unpack :func:`_pack`'s archive into ``folder`` through a sibling folder (never half unpacked), refusing paths out.

    :raises FileExistsError: ``folder`` exists and is not a run's folder (:func:`~.runner.check_run_dir`)
    """
    check_run_dir(folder)
    scratch = folder.with_name(folder.name + ".unpacking")
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(scratch, filter="data")
    if folder.exists():
        shutil.rmtree(folder)
    scratch.rename(folder)


# A Ray task's temporary folder: the prefix, then the pid of the worker process that trains in it and its host
SCRATCH_PREFIX = "sb3_reset_ppo_run_"


def scratch_prefix(pid: int | None = None) -> str:
    """The start of :func:`train_packed`'s temporary folder names: the worker's ``pid`` (default: this process's) and host."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"
    return f"{SCRATCH_PREFIX}{os.getpid() if pid is None else pid}_{host}_"


def remove_stale_scratch(folder: Path | None = None) -> list[Path]:
    """
    Remove, and return, this machine's temporary folders of :func:`train_packed` in ``folder`` (default:
    :func:`tempfile.gettempdir`) whose worker process no longer runs.
    """
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        match = re.match(rf"{SCRATCH_PREFIX}(\d+)_", path.name)
        pid = None if match is None else int(match[1])
        if pid is None or pid == os.getpid() or not path.is_dir() or not path.name.startswith(scratch_prefix(pid)):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:  # no such process: the folder is stale
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except PermissionError:  # another user's process runs with that pid
            continue
    return removed


def train_packed(spec_values: dict[str, Any], conf_text: str | None = None) -> tuple[Result, bytes]:
    """
    A Ray task's body: train a run into a temporary folder of this machine and return its record and its files.

    :param spec_values: The run (:meth:`RunSpec.to_dict`); its ``run_dir`` is replaced by the temporary folder
    :param conf_text: The hyperparameter file's text, trained with from the temporary folder (None: ``conf_file``)
    """
    remove_stale_scratch()
    with tempfile.TemporaryDirectory(prefix=scratch_prefix()) as scratch:
        values = {**spec_values, "run_dir": str(Path(scratch) / "run")}
        if conf_text is not None:
            conf = Path(scratch) / Path(spec_values["conf_file"]).name
            conf.write_text(conf_text)
            values["conf_file"] = str(conf)
        spec = RunSpec.from_dict(values)
        result = run_one(spec)
        return result, _pack(spec.run_dir)


# Ray errors that lose a run with its machine or worker (trained again); any other error is the run's own (failed)
_LOST = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "TaskCancelledError", "RaySystemError", "OwnerDiedError")
# Times in all that run_ray sends a run lost with its machine or worker
LOST_ATTEMPTS = 3


def run_ray(
    specs: Sequence[RunSpec],
    address: str,
    on_result: Callable[[RunSpec, Result], None] | None = None,
    init: Callable[..., Any] | None = None,
    attempts: int = LOST_ATTEMPTS,
    on_lost: Callable[[RunSpec, Result, int], None] | None = None,
) -> list[Result]:
    """
    Train the runs as Ray tasks of one CPU each on the cluster at ``address``, each run's files unpacked into its
    ``run_dir`` here; a task lost with its machine is sent again. Results come back pickled: every machine of the
    cluster must be trusted (:doc:`/guide/compare`).

    :param address: The cluster's address, as ``ray.init(address=...)`` takes it
    :param on_result: Called once per run with its record (of the last attempt)
    :param init: Connects to the cluster (default ``ray.init``; the tests' seam)
    :param attempts: Times a run lost with its machine or worker is sent, in all (1: never again)
    :param on_lost: Called with a run, its lost attempt's record and the number of the attempt about to be sent
    :return: The records of the runs, one each, in the order they arrived
    :raises FileExistsError: a run's ``run_dir`` exists and is not a run's folder (checked before anything trains)
    """
    try:
        import ray
    except ImportError as error:  # the cluster extra
        raise ImportError('running on a Ray cluster needs Ray: in the clone, pip install -e ".[cluster]"') from error
    if not isinstance(address, str) or not address:
        raise ValueError(f"address must be a Ray cluster address such as 'auto' or 'host:6379', got {address!r}")
    check_positive_int("attempts", attempts)
    for spec in specs:  # before anything trains: a folder that is not a run's is never replaced
        check_run_dir(spec.run_dir)
    (init or ray.init)(address=address, log_to_driver=False, configure_logging=False)
    task = ray.remote(num_cpus=1, max_retries=0)(train_packed)
    # Each run carries its hyperparameter file's text and its budget, read here: workers need no file of this machine
    sent = [
        (RunSpec.from_dict({**spec.to_dict(), "steps": spec.steps or budget(spec.env, spec.conf_file)}).to_dict(),
         spec.conf_file.read_text())
        for spec in specs
    ]  # fmt: skip
    # Each task's run index and attempt number
    pending = {task.remote(*sent[index]): (index, 1) for index in range(len(specs))}
    results: list[Result] = []
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index, attempt = pending.pop(ref)
                spec = specs[index]
                try:
                    result, data = ray.get(ref)
                except ray.exceptions.RayError as error:
                    result = {
                        "variant": spec.label or spec.algo, "env": spec.env, "seed": spec.seed, "seconds": 0.0,
                        "evaluations": 0, "error": f"{type(error).__name__}: {error}",
                    }  # fmt: skip
                    if type(error).__name__ in _LOST:
                        result["returncode"] = -1  # lost with its machine or worker: not recorded, trained again
                        if attempt < attempts:
                            if on_lost is not None:
                                on_lost(spec, result, attempt + 1)
                            pending[task.remote(*sent[index])] = (index, attempt + 1)
                            continue
                    else:
                        # The task itself raised (in this package's code on the worker): recorded as failed
                        result["returncode"] = 1
                        spec.run_dir.mkdir(parents=True, exist_ok=True)
                        write_record(spec.run_dir / FAILED_FILE, result)
                else:
                    _unpack(data, spec.run_dir)
                results.append(result)
                if on_result is not None:
                    on_result(spec, result)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return results
