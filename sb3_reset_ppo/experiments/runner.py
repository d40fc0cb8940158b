"""One training run through the RL Zoo (:class:`RunSpec`), trained and recorded by :func:`run_one`; see :func:`load_runs`."""

import datetime
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sb3_reset_ppo.common.utils import read_zoo_yaml
from sb3_reset_ppo.experiments import training_log

# Evaluations over a run's budget (the zoo's --eval-freq is the budget divided by this)
EVALUATIONS_PER_RUN = 20
FAILED_FILE = "failed.json"
RUN_FILE = "run.json"
# Written into a run's folder before anything else: only a folder holding it (or a record) is ever deleted
RUN_MARKER = ".sb3_reset_ppo_run"
# The repository (a checkout's root) whose commit a run records; absent when installed from a wheel
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunSpec:
    """One training run: what the zoo trains it with."""

    algo: str  #: the zoo's algorithm name (``reset_ppo``, ``ppo_lstm``, ``ppo``, ...)
    env: str  #: the env id
    seed: int  #: the training seed (the zoo's ``--seed``)
    run_dir: Path  #: the folder the run writes to (the zoo's log folder inside it)
    conf_file: Path  #: the zoo hyperparameter file (``--conf-file``); it must hold an entry for ``env``
    hyperparams: list[str] = field(default_factory=list)  #: settings on the zoo's command line (``--hyperparams``)
    eval_episodes: int = 20  #: episodes per evaluation (``--eval-episodes``)
    evaluations: int = EVALUATIONS_PER_RUN  #: evaluations over the budget (``--eval-freq`` is the budget over this)
    steps: int | None = None  #: the budget in env steps (``-n``); None: the file's ``n_timesteps``
    gym_packages: list[str] = field(default_factory=list)  #: modules that register the user's envs (``--gym-packages``)
    keep_log: bool = False  #: log every update; keep the log (``log.txt.gz``) and its curves (``progress.csv.gz``)
    label: str | None = None  #: the name recorded as the run's ``variant`` (default: ``algo``)
    extra: dict[str, Any] = field(default_factory=dict)  #: more fields for ``run.json``
    num_threads: int = 1  #: the trainer's torch threads (``--num-threads``; -1: torch's default; :doc:`/guide/install`)

    def __post_init__(self) -> None:
        check_num_threads(self.num_threads)
        for name in ("eval_episodes", "evaluations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps must be a positive int or None (the file's n_timesteps), got {self.steps!r}")
        self.run_dir, self.conf_file = Path(self.run_dir), Path(self.conf_file)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able values (paths as strings), e.g. to send it to another machine."""
        values = asdict(self)
        values["run_dir"], values["conf_file"] = str(self.run_dir), str(self.conf_file)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RunSpec":
        """The spec :meth:`to_dict` wrote."""
        return cls(**values)


def check_num_threads(num_threads: int, name: str = "num_threads") -> int:
    """
    :return: ``num_threads``, a positive int or -1 (torch's default) as the zoo's ``--num-threads`` takes it
    :raises ValueError: anything else, naming ``name``
    """
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or not (num_threads >= 1 or num_threads == -1):
        raise ValueError(f"{name} must be a positive int or -1 (torch's default: one thread per core), got {num_threads!r}")
    return num_threads


def budget(env_id: str, conf_file: Path) -> int:
    """
    The env steps a hyperparameter file gives an env (its ``n_timesteps``).

    :raises ValueError: the file is not a YAML mapping, or has no entry, or no ``n_timesteps``, for the env
    """
    try:
        entries = yaml.safe_load(Path(conf_file).read_text()) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"conf_file {conf_file} is not valid YAML: {error}") from error
    if not isinstance(entries, dict) or not isinstance(entries.get(env_id, {}), dict):
        raise ValueError(f"conf_file {conf_file} must map env ids to settings (the RL Zoo's YAML hyperparameter file)")
    if env_id not in entries:
        raise ValueError(f"conf_file {conf_file} has no entry for env {env_id!r}: add one, or give another file")
    if "n_timesteps" not in entries[env_id]:
        raise ValueError(f"conf_file {conf_file}'s entry for {env_id!r} has no n_timesteps: add it, or give steps")
    return int(float(entries[env_id]["n_timesteps"]))


def zoo_command(spec: RunSpec) -> list[str]:
    """The zoo command that trains ``spec``, evaluating on one separate env, with ``DummyVecEnv``."""
    steps = spec.steps or budget(spec.env, spec.conf_file)
    args = [
        sys.executable, "-m", "sb3_reset_ppo.zoo", "train",
        "--algo", spec.algo, "--env", spec.env, "--seed", str(spec.seed), "-f", str(spec.run_dir),
        "--conf-file", str(spec.conf_file), "--num-threads", str(spec.num_threads), "--vec-env", "dummy",
        "--eval-freq", str(max(steps // spec.evaluations, 1)),
        "--eval-episodes", str(spec.eval_episodes), "--n-eval-envs", "1",
        # Kept logs hold the train/ and rollout/ keys of every update
        "--log-interval", "1" if spec.keep_log else "-1",
    ]  # fmt: skip
    if spec.steps:
        args += ["-n", str(spec.steps)]
    if spec.gym_packages:
        args += ["--gym-packages", *spec.gym_packages]
    if spec.hyperparams:
        args += ["--hyperparams", *spec.hyperparams]
    return args


def code_version(root: Path = _PACKAGE_ROOT) -> dict[str, Any]:
    """
    The commit the run trained with and whether the package's code had uncommitted changes, read only where ``root``
    is the top level of this project's own git checkout (``setup.cfg`` names ``sb3-reset-ppo``).

    :param root: The folder holding the package folder ``sb3_reset_ppo`` (by default: the installed package's)
    :return: ``{"commit": <HEAD's hash or "">, "dirty": <uncommitted changes under sb3_reset_ppo/>}``
    """
    import configparser  # here, not at the top: only this function reads setup.cfg

    def git(*args: str) -> str:
        try:
            # In a session of its own: a Ctrl-C in the terminal, which the driver turns into "no new run", must not stop
            # git and leave a run that trains on recorded with no commit
            result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, start_new_session=True)
        except OSError:  # no git, or no folder root
            return ""
        if result.returncode < 0:
            raise RuntimeError(f"git {args[0]} was stopped by signal {-result.returncode}: the commit is not known")
        return result.stdout.strip() if result.returncode == 0 else ""

    def own_checkout() -> bool:
        toplevel = git("rev-parse", "--show-toplevel")
        if not toplevel or Path(toplevel).resolve() != Path(root).resolve():
            return False
        setup = configparser.ConfigParser(interpolation=None)
        try:
            setup.read(Path(toplevel) / "setup.cfg", encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            return False
        return setup.get("metadata", "name", fallback="") == "sb3-reset-ppo" and (Path(toplevel) / "sb3_reset_ppo").is_dir()

    if not own_checkout():
        return {"commit": "", "dirty": False}
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--", "sb3_reset_ppo"))}


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """
    The machine a run trains on: CPU model (from Linux's ``cpuinfo``, else "unknown CPU"), cores and the vector
    extensions that decide which kernels torch picks.
    """
    cpu, flags = "unknown CPU", set[str]()
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu == "unknown CPU":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    extensions = [flag for flag in ("avx2", "avx512f", "amx_tile") if flag in flags]
    return {"cpu": cpu, "cores": os.cpu_count(), "extensions": extensions}


def machine_name(spec: dict[str, Any]) -> str:
    """A machine as :func:`machine` describes it: ``CPU, N cores (extensions)``."""
    return f"{spec['cpu']}, {spec['cores']} cores" + (f" ({' '.join(spec['extensions'])})" if spec["extensions"] else "")


def evaluations_done(run_dir: Path) -> int:
    """How many evaluations the zoo stored in a run's ``<algo>/<env>_<k>/evaluations.npz`` (0 without exactly one)."""
    paths = sorted(Path(run_dir).glob("*/*/evaluations.npz"))
    if len(paths) != 1:
        return 0
    try:
        with np.load(paths[0]) as data:
            return len(data["timesteps"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # written in part (the trainer was cut while saving)
        return 0


def completed(result: dict[str, Any], evaluations: int = EVALUATIONS_PER_RUN) -> bool:
    """Whether a result of :func:`run_one` is a finished run: the trainer exited 0 and evaluated its whole budget."""
    # At least: the evaluation interval rounds down, and training ends at a rollout's end on or past the budget
    return bool(result["returncode"] == 0 and result.get("evaluations", evaluations) >= evaluations)


def recorded(run_dir: Path, retry_failed: bool = False) -> bool:
    """Whether a run needs no training now: it finished, or failed with an error (it would again) unless ``retry_failed``."""
    run_dir = Path(run_dir)
    return (run_dir / RUN_FILE).exists() or (not retry_failed and (run_dir / FAILED_FILE).exists())


def status(result: dict[str, Any], evaluations: int = EVALUATIONS_PER_RUN) -> str:
    """A result of :func:`run_one` in words: "ok", "FAILED (<code>)", "CUT (signal <n>)" or "TRUNCATED (<n> evaluations)"."""
    if result["returncode"] < 0:
        return f"CUT (signal {-result['returncode']})"
    if result["returncode"] != 0:
        return f"FAILED ({result['returncode']})"
    return "ok" if completed(result, evaluations) else f"TRUNCATED ({result['evaluations']} evaluations)"


def is_run_dir(folder: Path) -> bool:
    """Whether ``folder`` is a run's folder that :func:`run_one` made: it holds :data:`RUN_MARKER` or a record."""
    return any((Path(folder) / name).is_file() for name in (RUN_MARKER, RUN_FILE, FAILED_FILE))


def check_run_dir(run_dir: Path) -> None:
    """
    Check that a run may train into ``run_dir``, replacing it: it does not exist, or is an empty or a run's folder.

    :raises FileExistsError: ``run_dir`` exists and is not an empty folder or a run's folder (:func:`is_run_dir`)
    """
    run_dir = Path(run_dir)
    if not run_dir.exists() or is_run_dir(run_dir) or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return
    raise FileExistsError(
        f"run_dir {str(run_dir)!r} exists and is not a run's folder (no {RUN_MARKER}, {RUN_FILE} or {FAILED_FILE}): it "
        "is not deleted; remove it yourself or train into another folder"
    )


def parent_death_signal() -> Callable[[], None] | None:
    """On Linux, a ``preexec_fn`` that has the child killed when the thread that started it dies; None elsewhere."""
    if sys.platform != "linux":
        return None
    import ctypes
    import signal

    # Looked up here, in the parent: the child makes only these system calls between fork and exec
    prctl, request, kill = ctypes.CDLL(None, use_errno=True).prctl, 1, int(signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    parent = os.getpid()

    def set_signal() -> None:  # pragma: no cover  (runs in the child)
        prctl(request, kill)
        if os.getppid() != parent:  # the parent died before the signal was set: it will never come
            os._exit(1)

    return set_signal


def run_process_options() -> dict[str, Any]:
    """
    The ``subprocess`` options of a run's process. On Linux: a session of its own, so that a Ctrl-C in the terminal
    reaches only the driver, which lets the run finish or stops it (:func:`executors.run_workers`), and killed with the
    thread that started it (:func:`parent_death_signal`). Elsewhere none: without a parent-death signal a process in
    a session of its own would outlive its driver, so it stays in the driver's, where a Ctrl-C reaches it too.
    """
    set_signal = parent_death_signal()
    return {} if set_signal is None else {"start_new_session": True, "preexec_fn": set_signal}


def _compress(source: Path, target: Path) -> None:
    with open(source, "rb") as raw, gzip.open(target, "wb") as packed:
        shutil.copyfileobj(raw, packed)


def run_one(spec: RunSpec, command: list[str] | None = None) -> dict[str, Any]:
    """
    Train and evaluate one run into ``spec.run_dir``, replacing an earlier attempt's folder, and record it.

    :param command: The trainer's command (default :func:`zoo_command`)
    :raises FileExistsError: ``spec.run_dir`` exists and is not a run's folder (:func:`check_run_dir`)
    :return: The run's record (``variant``, ``env``, ``seed``, ``returncode``, ``seconds``, ``commit``, ``machine``, ...)
    """
    run_dir = spec.run_dir
    check_run_dir(run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / RUN_MARKER).write_text("a folder of sb3_reset_ppo.experiments.runner.run_one: replaced by its next attempt\n")
    args = command or zoo_command(spec)
    # The code and machine it trains with, read before it starts (a Ctrl-C after the run would also stop git)
    version, host = code_version(), machine()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    start = time.perf_counter()
    # OpenMP's threads (torch's and numpy's) as many as the trainer's torch threads; -1: the environment's own
    environment = {**os.environ, "OMP_NUM_THREADS": str(spec.num_threads)} if spec.num_threads > 0 else dict(os.environ)
    with open(run_dir / "log.txt", "w") as log:
        code = subprocess.call(args, stdout=log, stderr=subprocess.STDOUT, env=environment, **run_process_options())
    result = {
        "variant": spec.label or spec.algo, "env": spec.env, "seed": spec.seed, "returncode": code,
        "seconds": time.perf_counter() - start, "command": " ".join(args), **version, "started": started,
        "machine": host, "host": socket.gethostname(), "evaluations": evaluations_done(run_dir), **spec.extra,
    }  # fmt: skip
    # The zoo turns a KeyboardInterrupt into exit 0 and saves the truncated run: only a whole budget counts as done
    if completed(result, spec.evaluations):
        if spec.keep_log:
            # The training log, compressed (a plain log.txt is git-ignored), and its curves as CSV
            _compress(run_dir / "log.txt", run_dir / "log.txt.gz")
            rows = training_log.parse_tables((run_dir / "log.txt").read_text())
            training_log.write_csv(rows, run_dir / "progress.csv.gz")
        write_record(run_dir / RUN_FILE, result)
    elif code > 0:
        # An error (a negative code is a signal: cut, not failed, trained again), kept with its log and last lines
        _compress(run_dir / "log.txt", run_dir / "log.txt.gz")
        result["log_tail"] = log_tail(run_dir / "log.txt")
        write_record(run_dir / FAILED_FILE, result)
    return result


# The lines of a failed run's log that its record keeps (and the compare command prints)
LOG_TAIL_LINES = 15


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of a log (a trainer's traceback ends with its cause); [] without the file."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a run's record as JSON atomically (a temporary file renamed over it): never half written."""
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(record, indent=2))
    os.replace(scratch, path)


def run_budget(run_dir: Path) -> float | None:
    """The env steps a run was asked for: ``n_timesteps`` of its saved ``args.yml`` (``-n``), else ``config.yml``."""
    for name in ("args.yml", "config.yml"):
        saved = next(Path(run_dir).glob(f"*/*/*/{name}"), None)
        if saved is None:
            continue
        steps = read_zoo_yaml(saved).get("n_timesteps")
        if steps is not None and float(steps) > 0:
            return float(steps)
    return None


def load_runs(folder: Path, final_evaluations: int = 1) -> list[dict[str, Any]]:
    """
    The finished runs of a folder laid out as ``<name>/<env>/seed<k>/``: each ``run.json`` with ``timesteps``,
    ``eval_mean``, ``final`` (the mean of the last ``final_evaluations``), ``auc``, ``budget`` and ``dir``.
    """
    if isinstance(final_evaluations, bool) or not isinstance(final_evaluations, int) or final_evaluations < 1:
        raise ValueError(f"final_evaluations must be a positive int, got {final_evaluations!r}")
    runs = []
    for run_file in sorted(Path(folder).glob(f"*/*/seed*/{RUN_FILE}")):
        run = json.loads(run_file.read_text())
        evaluations = next(run_file.parent.glob("*/*/evaluations.npz"), None)
        if evaluations is None:
            continue
        with np.load(evaluations) as data:
            timesteps, results = data["timesteps"], data["results"]
        # The zoo finishes whole rollouts, so it can train, and evaluate, past the budget
        steps = run_budget(run_file.parent)
        within = np.ones(len(timesteps), dtype=bool) if steps is None else timesteps <= steps
        run["budget"] = steps
        run["timesteps"] = timesteps[within]
        # (n_evaluations, n_episodes) -> (n_evaluations,)
        run["eval_mean"] = results[within].mean(axis=1)
        run["final"] = float(run["eval_mean"][-final_evaluations:].mean())
        run["auc"] = float(run["eval_mean"].mean())
        run["dir"] = run_file.parent
        runs.append(run)
    return runs


def load_failed(folder: Path) -> list[dict[str, Any]]:
    """The runs of a folder that failed with an error (their ``failed.json``), with ``dir``."""
    failed = []
    for path in sorted(Path(folder).glob(f"*/*/seed*/{FAILED_FILE}")):
        run = json.loads(path.read_text())
        run["dir"] = path.parent
        failed.append(run)
    return failed


# The training log's key for the seconds the zoo's evaluations took so far (sb3_reset_ppo.zoo's timed evaluation)
EVALUATION_SECONDS = "time/evaluation_seconds"


def elapsed_seconds(run: dict[str, Any]) -> np.ndarray | None:
    """
    Seconds of ``learn()`` at each of a loaded run's evaluations, from its kept training log (:doc:`/guide/compare`);
    None without one.
    """
    steps, seconds = [0.0], [0.0]
    evaluating = 0.0  # cumulative: a row without it had no evaluation since the row before
    for row in training_log.training_rows(Path(run["dir"])):
        evaluating = row.get(EVALUATION_SECONDS, evaluating)
        if "time/total_timesteps" not in row:
            continue
        # Steps over fps is finer than time_elapsed, which SB3 logs in whole seconds
        if row.get("time/fps", 0.0) > 0:
            clock = row["time/total_timesteps"] / row["time/fps"]
        elif "time/time_elapsed" in row:
            clock = row["time/time_elapsed"]
        else:
            continue
        steps.append(row["time/total_timesteps"])
        # Both clocks round down (whole steps per second, whole seconds), so early in a short run they may fall below
        # the evaluations' seconds: learn() seconds never fall, and never below 0
        seconds.append(max(clock - evaluating, seconds[-1]))
    if len(steps) == 1:
        return None
    # Past the last row (the last update and evaluation): the run's own pace
    pace = seconds[-1] / steps[-1] if steps[-1] > 0 else 0.0
    timesteps = np.asarray(run["timesteps"], dtype=float)
    inside = np.interp(timesteps, steps, seconds)
    return np.where(timesteps > steps[-1], seconds[-1] + (timesteps - steps[-1]) * pace, inside)


def evaluation_seconds(run: dict[str, Any]) -> float | None:
    """The seconds a loaded run's evaluations took (:data:`EVALUATION_SECONDS`); None where its log lacks them."""
    values = [row[EVALUATION_SECONDS] for row in training_log.training_rows(Path(run["dir"])) if EVALUATION_SECONDS in row]
    return max(values) if values else None


def updates(run: dict[str, Any]) -> int | None:
    """The rollouts a loaded run trained on (its log's largest ``time/iterations``); None without a log that says."""
    values = [row["time/iterations"] for row in training_log.training_rows(Path(run["dir"])) if "time/iterations" in row]
    return int(max(values)) if values else None
