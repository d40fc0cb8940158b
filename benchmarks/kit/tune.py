"""
Equal tuning budget (benchmarks/studies/evidence/PROTOCOL.md, Q4): the RL Zoo's Optuna search for several arms, the
same number of trials each, then the best trial of each arm re-run on fresh seeds.

``optimize``: for every (env, arm), ``--workers`` workers run the zoo's ``-optimize`` on one shared study (the
zoo's ``--storage`` with a journal file, ``benchmarks/results/tuning/<env>/<arm>/study.log``), one zoo process per
trial (``--n-trials 1``; the zoo's ``--max-total-trials`` would make each process run until the study is full), a
worker starting one only while the study has fewer than ``--trials`` trials finished or running, and, with
``--minutes M`` a worker starts a trial only if it is expected to finish within M minutes (the median duration of
the study's completed trials, before any the median of the arm's evidence runs on the env, times 1.25). The
arm's fixed settings are given with ``--hyperparams``, everything else is sampled (TPE sampler, median pruner,
``--n-evaluations`` evaluations per trial; both read the study's history from the storage, so a process per
trial samples and prunes as one process would). The same command with a database URL as ``--storage`` (e.g.
``postgresql+psycopg://user@host:5432/db``) lets workers on several machines share the study. The URL must not hold
the password (it would show in ``ps`` and in the zoo's pickled study, ``report_*.pkl``): libpq reads it from the
environment, ``PGPASSWORD``, or a password file (``~/.pgpass``, or the file ``PGPASSFILE`` names), which every zoo
process inherits (:func:`check_storage`). Resumable: a study already holding ``--trials`` finished or pruned trials
is skipped; with the local journal files, trials left running by stopped workers (e.g. with a session) are marked
failed first (running trials count against the budget) and queued again with their settings; with a database URL,
where other machines' workers may be running, they are left as they are (fail them by hand once no worker runs) and
the count of trials across machines is approximate (each machine sees the others' trials once they have started).
A trial whose zoo process is killed during a session is marked failed and queued again by its worker at once, on
either storage (each zoo process's trials record who started it: ``sb3_reset_ppo.zoo.owned_trials``). A SIGINT or
SIGTERM to tune.py (``kill PID``, or Ctrl-C in its terminal: on Linux the zoo processes are in sessions of their own)
starts no new trial and no other study: the running trials finish and are stored in the study as usual (the session
recorded as ``stopped``), then tune.py exits with status 130 (a KeyboardInterrupt). A second signal ends tune.py at
once, its zoo processes with it: their trials are left running, which a journal file's study marks failed and queues
again when it resumes, and a database's keeps as RUNNING (docs/guide/tuning_cluster.md). A database
that does not answer (a server restarting) is asked again for ``--reconnect-seconds`` (60), then tune.py stops with
an error naming it.
Each session's trials get sampler seeds no earlier session of the study used (1000 per recorded session plus
``--seed-offset``, which machines sharing a database study set 100000 apart; each trial its own seed). Every
invocation appends to ``sessions.jsonl`` next to the study what it ran with (commit, dirty flag, command, trials
before and after): the trials between two records ran at that commit.

``rerun``: the best trial of each study (the earliest completed trial with the best value: PROTOCOL.md,
amendment 9) trained again on ``--seeds`` fresh seeds (its settings written to ``best.yml`` next to the study,
with the trial and those tied with it in ``best.json``; every study summarised in ``SEARCH.md``, which the tuned
report shows), as runs of the grid layout
(``benchmarks/results/tuning/runs/tuned_<arm>/<env>/seed<k>/``) that ``report.py`` reads.

Usage: python benchmarks/kit/tune.py optimize [--envs EarlyChoice-v0 CartPoleNoVel-v1] [--arms ...] [--trials 30]
       python benchmarks/kit/tune.py rerun [--seeds 100 ... 109]
"""

import argparse
import functools
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from benchmarks.kit import run_grid, rundata
from sb3_reset_ppo.experiments import executors, runner

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent

OUT = BENCHMARKS / "results" / "tuning"
# A worker stops after this many failed trials in a row (a broken setting would otherwise fail until the deadline)
MAX_FAILURES = 3
# How long tune.py tries a study's database again, once a second, while it does not answer (a server restarting)
# before it stops with an error naming it (--reconnect-seconds)
RECONNECT_SECONDS = 60.0
ARMS = ["ev_reset", "ev_mask_kept", "ev_rppo"]
ENVS = ["EarlyChoice-v0", "CartPoleNoVel-v1"]


def study_path(out: Path, env_id: str, arm: str) -> Path:
    return out / env_id / arm / "study.log"


def study_name(env_id: str, arm: str) -> str:
    return f"{env_id}_{arm}"


def _backend(storage: str) -> Any:
    """Optuna storage: a journal file (``.log``, as the zoo opens it) or a database URL."""
    import optuna

    if storage.endswith(".log"):
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))  # type: ignore[attr-defined]
    return storage


Answer = TypeVar("Answer")


class DatabaseUnavailable(RuntimeError):
    """A study's database did not answer within the time allowed (:data:`RECONNECT_SECONDS`)."""


def _answered(storage: str, ask: Callable[[], Answer], seconds: float | None = None) -> Answer:
    """
    ``ask()``, which reads or writes a study in ``storage``, asked again once a second while a database does not
    answer (a server restarting: each ask opens a new connection), for up to ``seconds``.

    :param storage: A journal file (asked once) or a database URL
    :param ask: Reads or writes the study; asked again only whole, so it must be safe to repeat
    :param seconds: How long to keep asking (default :data:`RECONNECT_SECONDS`)
    :raises DatabaseUnavailable: The database did not answer in time; the message names it (without the password)
    """
    if storage.endswith(".log"):
        return ask()
    import optuna
    import sqlalchemy

    seconds = RECONNECT_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    while True:
        try:
            return ask()
        except (sqlalchemy.exc.OperationalError, optuna.exceptions.StorageInternalError) as error:
            if time.monotonic() >= deadline:
                raise DatabaseUnavailable(
                    f"the study's database {redact(storage)} did not answer for {seconds:.0f} s (is its server "
                    f"running and reachable?): {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                ) from error
            time.sleep(1.0)


def _trials(storage: str, name: str) -> list[Any]:
    """The study's trials, not copied (read them only); none if the study does not exist yet."""
    import optuna

    def ask() -> list[Any]:
        try:
            return optuna.load_study(study_name=name, storage=_backend(storage)).get_trials(deepcopy=False)
        except KeyError:
            return []

    return _answered(storage, ask)


def finished_trials(storage: str, name: str) -> int:
    """Trials of the study that completed or were pruned (0 if the study does not exist yet)."""
    return finished(state_counts(storage, name))


def failed_trials(storage: str, name: str) -> dict[int, dict[str, Any]]:
    """The study's FAILED trials, number -> settings (none without the study)."""
    return {trial.number: trial.params for trial in _trials(storage, name) if trial.state.name == "FAIL"}


def requeue(storage: str, name: str, settings: list[dict[str, Any]]) -> None:
    """Queue trials with these settings again (Optuna's ``enqueue_trial``: the next trials to start take them)."""
    import optuna

    def enqueue(params: dict[str, Any]) -> None:
        optuna.load_study(study_name=name, storage=_backend(storage)).enqueue_trial(params)

    for params in settings:  # one at a time: a database that stops answering between two never queues one twice
        _answered(storage, functools.partial(enqueue, params))


def _fail_and_requeue(storage: str, name: str, trials: list[Any]) -> list[Any]:
    """
    Mark these RUNNING trials FAILED and queue each again with its settings (:func:`requeue`).

    :return: The trials marked (not those that ended meanwhile)
    """
    import optuna

    def fail(trial_id: int) -> bool:
        """Whether the trial is failed now (it may have ended meanwhile, or an earlier ask whose answer was lost)."""
        study = optuna.load_study(study_name=name, storage=_backend(storage))
        try:
            study._storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            return bool(study._storage.get_trial(trial_id).state == optuna.trial.TrialState.FAIL)
        return True

    failed = [trial for trial in trials if _answered(storage, functools.partial(fail, trial._trial_id))]
    # Tried again with the same settings: otherwise the settings that take longest, the likeliest to be cut by a
    # session's end, would be tried less often than the sampler chose them. One that completed meanwhile is not.
    requeue(storage, name, [trial.params for trial in failed])
    return failed


def release_trials(storage: str, name: str, owner: str) -> list[int]:
    """
    Mark FAILED the study's RUNNING trials that the zoo process ``owner`` started (their user attribute
    :data:`sb3_reset_ppo.zoo.TRIAL_OWNER_ATTR`), once that process has ended, and queue each again with its
    settings: a process killed during a trial leaves it RUNNING, and running trials count against ``--trials``.
    Other processes' trials, on this machine or another one sharing a database, are left as they are.

    :param storage: The study's storage
    :param name: The study
    :param owner: The value the process's trials record (:data:`sb3_reset_ppo.zoo.TRIAL_OWNER_VARIABLE`)
    :return: The numbers of the trials marked
    """
    import optuna

    from sb3_reset_ppo.zoo import TRIAL_OWNER_ATTR

    left = [
        trial
        for trial in _trials(storage, name)
        if trial.state == optuna.trial.TrialState.RUNNING and trial.user_attrs.get(TRIAL_OWNER_ATTR) == owner
    ]
    return [trial.number for trial in _fail_and_requeue(storage, name, left)]


def fail_stale_trials(storage: str, name: str) -> int:
    """
    Mark the study's RUNNING trials FAILED: left by workers killed with a session (no worker runs when this is
    called). Running trials count against ``--trials``, so stale ones would shorten the search. Each is queued
    again with its settings (Optuna's ``enqueue_trial``: the next trial to start takes them).

    :return: How many trials were marked
    """
    import optuna

    stale = [trial for trial in _trials(storage, name) if trial.state == optuna.trial.TrialState.RUNNING]
    return len(_fail_and_requeue(storage, name, stale))


def best_trial(storage: str, name: str) -> tuple[int, float, dict[str, Any], list[int]]:
    """
    Number, value and raw parameters of the study's best completed trial, and the numbers of the other completed
    trials with the same value. A tie goes to the earliest trial, as Optuna's ``Study.best_trial`` and so the
    zoo's report decide it (``benchmarks/studies/evidence/PROTOCOL.md``, amendment 9), for every arm alike.
    """
    import optuna

    study = optuna.load_study(study_name=name, storage=_backend(storage))
    complete = [trial for trial in study.trials if trial.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise ValueError(f"study {name!r} in {storage} has no completed trial to re-run")
    value = max(float(trial.value) for trial in complete if trial.value is not None)
    tied = sorted(trial.number for trial in complete if trial.value is not None and float(trial.value) == value)
    best = next(trial for trial in complete if trial.number == tied[0])
    return best.number, value, dict(best.params), tied[1:]


def top_trials(storage: str, name: str, count: int) -> list[tuple[int, float, dict[str, Any]]]:
    """
    Number, value and raw parameters of the study's ``count`` best completed trials, best first; a tie goes to the
    earlier trial, as in :func:`best_trial` (pruned and failed trials never count).

    :raises ValueError: ``count`` is below 1, or the study has fewer completed trials
    """
    import optuna

    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    study = optuna.load_study(study_name=name, storage=_backend(storage))
    complete = [
        (trial.number, float(trial.value), dict(trial.params))
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if trial.value is not None
    ]
    if len(complete) < count:
        raise ValueError(f"study {name!r} in {storage} has {len(complete)} completed trials, fewer than {count}")
    return sorted(complete, key=lambda trial: (-trial[1], trial[0]))[:count]


def search_summary(out: Path, envs: list[str], arms: list[str], storage: str | None = None) -> str:
    """
    Markdown: per study its trials by state, their compute, the best trial, the trials tied with it and its
    settings (the tuned report's notes, ``SEARCH.md`` next to the studies).

    :param out: the studies' folder (``benchmarks/results/tuning``)
    :param envs: the searched envs
    :param arms: the searched arms
    :param storage: a database URL instead of the journal files
    :return: the section
    """
    lines = [
        "## The searches (Q4)",
        "",
        "Per study: its trials by state; trial-hours, the summed durations of its completed and pruned trials "
        "(failed trials are left out: a trial cut by a session's end ran again with its settings, and its "
        "recorded duration runs until it was marked failed); the best completed trial (its last evaluation's mean return, 10 "
        "episodes), the completed trials with the same value (a tie goes to the earliest: "
        "`benchmarks/studies/evidence/PROTOCOL.md`, amendment 9) and the values it sampled (the sampler's own "
        "parameters, e.g. `n_steps_pow` for `n_steps` = "
        "2 ** `n_steps_pow`; the converted settings it re-runs with are in `<env>/<arm>/best.yml`).",
        "",
        "| env | arm | completed | pruned | failed | trial-hours | best trial | value | tied with | settings |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env_id, arm in itertools.product(envs, arms):
        path = storage or str(study_path(out, env_id, arm))
        trials = _trials(path, study_name(env_id, arm))
        counts = Counter(trial.state.name for trial in trials)
        seconds = sum(
            trial.duration.total_seconds()
            for trial in trials
            if trial.duration is not None and trial.state.name in ("COMPLETE", "PRUNED")
        )
        number, value, params, tied = best_trial(path, study_name(env_id, arm))
        settings = ", ".join(
            f"{key}={params[key]:.3g}" if isinstance(params[key], float) else f"{key}={_literal(params[key])}"
            for key in sorted(params)
        )
        lines.append(
            f"| {env_id} | `{arm}` | {counts['COMPLETE']} | {counts['PRUNED']} | {counts['FAIL']} "
            f"| {seconds / 3600:.2f} | {number} | {value:.3f} | {', '.join(map(str, tied)) or '-'} | {settings} |"
        )
    return "\n".join(lines) + "\n"


def _literal(value: Any) -> str:
    """A converted hyperparameter as the zoo's config files write it (classes of ``torch.nn`` as ``nn.<Name>``)."""
    if isinstance(value, type):
        return f"nn.{value.__name__}"
    if isinstance(value, dict):
        return "dict(" + ", ".join(f"{key}={_literal(item)}" for key, item in value.items()) + ")"
    return repr(value)


def best_config(algo: str, env_id: str, conf: Path, params: dict[str, Any]) -> dict[str, Any]:
    """
    The env's entry of ``conf`` updated with a trial's converted parameters, as the zoo's ``-optimize`` trained it
    (the config's settings, then the sampled ones over them). Written as a config file for the reruns: the zoo's
    ``--trial-id`` cannot load trial 0 (rl_zoo3 2.9.2 tests ``if self.trial_id``).
    """
    import yaml
    from rl_zoo3 import hyperparams_opt

    import sb3_reset_ppo.zoo

    sb3_reset_ppo.zoo.register()
    entry = dict(yaml.safe_load(conf.read_text())[env_id])
    converted = hyperparams_opt.HYPERPARAMS_CONVERTER[algo](params)
    for key, value in converted.items():
        entry[key] = _literal(value) if key == "policy_kwargs" else value
    return entry


def check_storage(storage: str) -> str:
    """
    A ``--storage`` that keeps the database password out of every command line and file: a journal file, or a
    database URL without a password. With a password in the URL it would be visible in ``ps`` (tune.py's command
    line and every zoo process's) and stored in the zoo's pickled study (``report_*.pkl``). libpq takes the password
    from ``PGPASSWORD`` or a password file (``~/.pgpass``, or the file ``PGPASSFILE`` names, readable by its owner
    only) instead, and every zoo process inherits them.

    :param storage: The ``--storage`` value
    :return: ``storage``
    :raises ValueError: ``storage`` is a URL with a password (in its user part or as a ``password`` query parameter)
    """
    parts = urlsplit(storage)
    if parts.scheme and (parts.password or "password" in {key.lower() for key in parse_qs(parts.query)}):
        raise ValueError(
            f"--storage {redact(storage)!r} holds the database password, which would show in `ps` and in the zoo's "
            "pickled study (report_*.pkl): give the URL without it (postgresql+psycopg://USER@HOST:PORT/DB) and the "
            "password in the environment (PGPASSWORD) or a password file (~/.pgpass, or PGPASSFILE; mode 0600)"
        )
    return storage


def redact(storage: str) -> str:
    """
    A storage URL without its password (``postgresql://user:***@host/db``, a ``password`` query parameter as
    ``password=***``), e.g. for an error message or a record.
    """
    parts = urlsplit(storage)
    netloc, query = parts.netloc, parts.query
    if parts.password:
        netloc = f"{parts.username}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    values = parse_qs(parts.query, keep_blank_values=True)
    if any(key.lower() == "password" for key in values):
        query = "&".join(
            f"{key}={'***' if key.lower() == 'password' else value}" for key, items in values.items() for value in items
        )
    if (netloc, query) == (parts.netloc, parts.query):
        return storage
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def record_session(folder: Path, **fields: Any) -> None:
    """Append one JSON line to ``folder/sessions.jsonl``: the code version, the time and ``fields``."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **runner.code_version(), **fields}
    with open(folder / "sessions.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")


def worker_seed_base(folder: Path, offset: int = 0) -> int:
    """
    The seed of a session's first trial (see :func:`run_trials` for the others): ``offset`` plus 1000 per earlier
    session of the study recorded in ``folder/sessions.jsonl``. The zoo seeds its sampler with the worker's
    ``--seed`` (TPE's first ``--n-startup-trials`` trials are random draws of that generator), so a resumed study
    whose workers kept their seeds would repeat the earlier sessions' random trials.

    :param folder: the study's folder
    :param offset: added to every seed (distinct per machine when several share a study through a database)
    """
    path = folder / "sessions.jsonl"
    starts = sum(json.loads(line)["event"] == "start" for line in path.read_text().splitlines()) if path.exists() else 0
    return offset + 1000 * starts


def optimize_command(env_id: str, arm: str, storage: str, seed: int, log_dir: Path, args: argparse.Namespace) -> list[str]:
    """
    The zoo's ``-optimize`` command of one trial of the study, its sampler seeded with ``seed``. An arm that keeps
    today's window defaults (``today_defaults``) is searched in ppo_lstm's space (``benchmarks/kit/ppo_lstm_space.py``:
    its window settings are not sampled); every other ResetPPO arm with the package's sampler (``window_size`` too).
    """
    spec = run_grid.VARIANTS[arm]
    zoo = "benchmarks.kit.ppo_lstm_space" if spec.get("today_defaults", False) else "sb3_reset_ppo.zoo"
    command = [
        sys.executable, "-m", zoo, "train", "--algo", spec["algo"], "--env", env_id,
        "--conf-file", str(spec["conf"]), "-optimize", "--n-trials", "1",
        "--n-jobs", "1", "--storage", storage, "--study-name", study_name(env_id, arm),
        "--sampler", "tpe", "--pruner", "median", "--n-evaluations", str(args.n_evaluations),
        "--eval-episodes", str(args.eval_episodes), "--seed", str(seed), "--num-threads", "1", "--vec-env", "dummy",
        "--no-optim-plots", "-f", str(log_dir),
    ]  # fmt: skip
    if args.n_timesteps:
        command += ["-n", str(args.n_timesteps)]
    # The arm's fixed settings (run_grid.hyperparams: its study's window settings); sampled values override them
    fixed = run_grid.hyperparams(arm, env_id)
    if fixed:
        command += ["--hyperparams", *fixed]
    return command


def state_counts(storage: str, name: str) -> dict[str, int]:
    """How many of the study's trials are in each state, by name (``COMPLETE``, ``RUNNING``, ...; none: empty)."""
    return dict(Counter(trial.state.name for trial in _trials(storage, name)))


def finished(counts: dict[str, int]) -> int:
    """Trials that count toward ``--trials``: completed or pruned."""
    return counts.get("COMPLETE", 0) + counts.get("PRUNED", 0)


def ended(counts: dict[str, int]) -> int:
    """Trials that ended: completed, pruned or failed."""
    return sum(counts.get(state, 0) for state in ("COMPLETE", "PRUNED", "FAIL"))


def expected_trial_seconds(storage: str, env_id: str, arm: str, grid: Path) -> float | None:
    """
    How long a trial of the study is expected to take: the median duration of its completed trials (pruned ones
    stop early, so they are left out); before any, the median wall time of the arm's finished runs on the env in
    ``grid`` (a run at the env's budget with the arm's fixed settings); None if neither exists.
    """
    durations = [
        trial.duration.total_seconds()
        for trial in _trials(storage, study_name(env_id, arm))
        if trial.state.name == "COMPLETE" and trial.duration is not None
    ]
    if durations:
        return statistics.median(durations)
    runs = [json.loads(path.read_text()) for path in sorted((grid / arm / env_id).glob("seed*/run.json"))]
    seconds = [float(run["seconds"]) for run in runs if run.get("returncode") == 0]
    return statistics.median(seconds) if seconds else None


def fits(expected: float | None, deadline: float | None) -> bool:
    """Whether a trial expected to take ``expected`` seconds (times the grid's margin) ends before ``deadline``."""
    if deadline is None:
        return True
    return expected is not None and expected * run_grid.MARGIN <= deadline - time.monotonic()


def run_trials(env_id: str, arm: str, storage: str, base: int, args: argparse.Namespace, deadline: float | None) -> list[int]:
    """
    ``--workers`` threads, each starting one zoo process per trial (``--n-trials 1``) while the study has fewer
    than ``--trials`` trials finished or running, and, with a deadline, while a trial is expected to end
    before it (:func:`expected_trial_seconds`, a heuristic: a trial's settings are sampled inside the zoo
    process, so its cost is not known before it starts). Trial ``k`` of worker ``i`` seeds the zoo's sampler with
    ``base + k * workers + i``, a seed no other trial of the study used. A worker goes on after a process that
    exits with an error but ended a trial (the zoo exits 1 after a pruned or failed trial while no trial has
    completed), and stops after ``MAX_FAILURES`` failed trials in a row or a process that ended no trial (it
    could not start one: the setup is broken). A trial that its process left running (the process was killed) is
    marked failed and queued again with its settings (:func:`release_trials`), so that it trains again in this
    session. A database that stops answering is asked again for up to :data:`RECONNECT_SECONDS`.

    :return: Each worker's last exit code
    """
    from sb3_reset_ppo.zoo import TRIAL_OWNER_VARIABLE  # here: the zoo wrapper imports the RL Zoo

    name = study_name(env_id, arm)
    lock = threading.Lock()
    active = 0  # zoo processes running now, each of which runs at most one trial
    codes = [0] * args.workers
    (args.out / env_id / arm).mkdir(parents=True, exist_ok=True)
    known_failures = set(failed_trials(storage, name))  # failed before, or already queued again

    def work(index: int, stop: threading.Event) -> None:
        nonlocal active
        log_dir = args.out / env_id / arm / f"worker{index}"
        failures = 0
        for k in itertools.count():
            with lock:
                # Running trials: ours (some not in the storage yet) or, with a database, other machines'
                counts = state_counts(storage, name)
                if stop.is_set() or finished(counts) + max(active, counts.get("RUNNING", 0)) >= args.trials:
                    return
                if not fits(expected_trial_seconds(storage, env_id, arm, args.grid), deadline):
                    print(f"{env_id} {arm} worker {index}: no trial expected to finish in the time left", flush=True)
                    return
                active += 1
                before = counts
            command = optimize_command(env_id, arm, storage, base + k * args.workers + index, log_dir, args)
            if stop.is_set():  # a stop signal while this trial was being set up: no new trial starts
                with lock:
                    active -= 1
                return
            # The trials of this process record this value (sb3_reset_ppo.zoo.owned_trials), so that the one it
            # leaves running if it is killed can be told from other processes' running trials
            owner = f"{socket.gethostname()}-{uuid.uuid4().hex}"
            environment = {**os.environ, "OMP_NUM_THREADS": "1", TRIAL_OWNER_VARIABLE: owner}
            # On Linux in a session of its own (a Ctrl-C in the terminal reaches tune.py alone, which lets the trial
            # finish) and killed with tune.py (a second signal, or a kill): its trial, left running, is queued again
            with open(args.out / env_id / arm / f"worker{index}.txt", "a") as log:
                code = subprocess.call(
                    command, stdout=log, stderr=subprocess.STDOUT, env=environment, **runner.run_process_options()
                )
            with lock:
                active -= 1
                codes[index] = code
                left = release_trials(storage, name, owner)
                if left:
                    print(
                        f"{env_id} {arm} worker {index}: trial(s) {left} left running by its zoo process (exit code "
                        f"{code}) marked failed and queued again",
                        flush=True,
                    )
                    known_failures.update(left)  # queued again already
                after = state_counts(storage, name)
                new_failures = {n: p for n, p in failed_trials(storage, name).items() if n not in known_failures}
                known_failures.update(new_failures)
                if stop.is_set() and new_failures:
                    # The zoo process was signalled too (by its own pid: it runs in a session of its own), which
                    # fails its trial: queued again with its settings, as a trial cut by a session's end is (the
                    # slowest settings are the likeliest to be cut)
                    requeue(storage, name, list(new_failures.values()))
                    print(f"{env_id} {arm}: {len(new_failures)} trial(s) cut by the interrupt queued again", flush=True)
                    return
                if ended(after) <= ended(before):
                    print(f"{env_id} {arm} worker {index}: the zoo ended no trial (exit code {code}); stopped", flush=True)
                    return
                failed = code != 0 and after.get("FAIL", 0) > before.get("FAIL", 0)
                failures = failures + 1 if failed else 0
                if failures >= MAX_FAILURES:
                    print(f"{env_id} {arm} worker {index}: {failures} failed trials in a row; stopped", flush=True)
                    return

    executors.run_workers(work, args.workers)
    return codes


def optimize(args: argparse.Namespace) -> None:
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    for env_id, arm in itertools.product(args.envs, args.arms):
        path = study_path(args.out, env_id, arm)
        if not path.exists():  # a stored study's journal, unpacked from its tables (a live journal is never replaced)
            rundata.ensure(path.parent)
        storage = args.storage or str(path)
        done = finished_trials(storage, study_name(env_id, arm)) if (args.storage or path.exists()) else 0
        if done >= args.trials:
            print(f"{env_id} {arm}: {done} trials already, skipped", flush=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if args.storage is None and path.exists():
            stale = fail_stale_trials(storage, study_name(env_id, arm))
            if stale:
                print(f"{env_id} {arm}: {stale} trial(s) left running by a stopped worker marked failed", flush=True)
        if deadline is not None and not fits(expected_trial_seconds(storage, env_id, arm, args.grid), deadline):
            print(f"{env_id} {arm}: no trial expected to finish within the time left; left for later", flush=True)
            continue
        # Each session's trials get sampler seeds no earlier session of this study used (see run_trials)
        base = worker_seed_base(path.parent, args.seed_offset)
        command = " ".join(optimize_command(env_id, arm, redact(storage), base, path.parent / "worker0", args))
        record_session(path.parent, event="start", trials=done, workers=args.workers, seed_base=base, command=command)
        start = time.perf_counter()
        try:
            codes = run_trials(env_id, arm, storage, base, args, deadline)
        except KeyboardInterrupt:  # stopped by a signal once the running trials ended: no other study starts
            done = finished_trials(storage, study_name(env_id, arm))
            record_session(path.parent, event="stopped", trials=done, seconds=time.perf_counter() - start)
            print(f"{env_id} {arm}: stopped with {done} trials in {time.perf_counter() - start:.0f} s", flush=True)
            raise
        done = finished_trials(storage, study_name(env_id, arm))
        record_session(path.parent, event="end", trials=done, exit_codes=codes, seconds=time.perf_counter() - start)
        print(f"{env_id} {arm}: {done} trials in {time.perf_counter() - start:.0f} s, exit codes {codes}", flush=True)


def unfinished_studies(args: argparse.Namespace) -> list[str]:
    """
    The (env, arm) studies ``rerun`` cannot use: absent, or with fewer than ``--trials`` finished (completed or
    pruned) trials. The protocol re-runs the best of exactly that many trials, never of a partial search.
    """
    problems = []
    for env_id, arm in itertools.product(args.envs, args.arms):
        path = study_path(args.out, env_id, arm)
        if args.storage is None and not path.exists():
            problems.append(f"{env_id} {arm}: no study ({path})")
            continue
        done = finished_trials(args.storage or str(path), study_name(env_id, arm))
        if done < args.trials:
            problems.append(f"{env_id} {arm}: {done} of {args.trials} trials finished")
    return problems


def rerun(args: argparse.Namespace) -> None:
    import yaml

    jobs = []
    for env_id, arm in itertools.product(args.envs, args.arms):
        spec = run_grid.VARIANTS[arm]
        storage = args.storage or str(study_path(args.out, env_id, arm))
        number, value, params, tied = best_trial(storage, study_name(env_id, arm))
        folder = args.out / env_id / arm
        config = best_config(spec["algo"], env_id, spec["conf"], params)
        (folder / "best.yml").write_text(yaml.safe_dump({env_id: config}, sort_keys=True))
        best = {"trial": number, "value": value, "params": params, "tied_with": tied}
        (folder / "best.json").write_text(json.dumps(best, indent=2))
        ties = f", tied with trials {tied} (the earliest is re-run)" if tied else ""
        print(f"{env_id} {arm}: best trial {number} ({value:.3f}{ties}) {params}", flush=True)
        jobs += [
            {"variant": arm, "label": f"tuned_{arm}", "env": env_id, "seed": seed, "eval_episodes": 20,
             "conf": folder / "best.yml", "steps": args.n_timesteps, "extra": {"trial": number},
             "run_dir": args.out / "runs" / f"tuned_{arm}" / env_id / f"seed{seed}"}
            for seed in args.seeds
        ]  # fmt: skip

    summary = args.out / "SEARCH.md"
    summary.write_text(search_summary(args.out, args.envs, args.arms, args.storage))
    print(f"the searches: {summary}", flush=True)
    # In order, on --workers threads; Ctrl-C lets the running reruns end and starts no new one. A rerun that failed
    # with an error (failed.json) is not trained again (delete its folder to retry it)
    run_grid.run_until([job for job in jobs if not run_grid.recorded(job["run_dir"])], {}, args.workers, None)


def main() -> None:
    global RECONNECT_SECONDS  # every read and write of a study waits as long (_answered)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["optimize", "rerun"])
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=list(run_grid.VARIANTS))
    parser.add_argument("--trials", type=int, default=30, help="trials per (env, arm), all workers together")
    parser.add_argument("--workers", type=int, default=2, help="processes sharing a study (or running reruns)")
    parser.add_argument("--n-evaluations", type=int, default=5, help="evaluations per trial (for the pruner)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation of a trial")
    parser.add_argument("--storage", default=None,
                        help="a database URL without the password (PGPASSWORD, ~/.pgpass), not journals")  # fmt: skip
    parser.add_argument("--reconnect-seconds", type=float, default=RECONNECT_SECONDS,
                        help="how long to ask a database study again while it does not answer, then stop")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=None,
                        help="optimize: start only trials expected to finish within this many minutes")  # fmt: skip
    parser.add_argument("--grid", type=Path, default=BENCHMARKS / "results" / "evidence",
                        help="the evidence grid's runs: a study's first trials are expected to take as long")  # fmt: skip
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="added to the sampler seeds: 0, 100000, ... on machines sharing a database study")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)), help="rerun seeds")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--n-timesteps", type=int, default=None, help="env steps per trial and rerun (default: the env's)")
    args = parser.parse_args()
    for name in ("trials", "workers", "n_evaluations", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.trials * args.workers >= 1000:
        parser.error(f"--trials x --workers must be below 1000 (the seeds of a session), got {args.trials * args.workers}")
    if args.minutes is not None and args.minutes <= 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    if args.reconnect_seconds < 0:
        parser.error(f"--reconnect-seconds must be at least 0, got {args.reconnect_seconds}")
    if args.n_timesteps is not None and args.n_timesteps < 1:
        parser.error(f"--n-timesteps must be at least 1, got {args.n_timesteps}")
    if args.storage is not None:
        try:
            check_storage(args.storage)
        except ValueError as error:
            parser.error(str(error))
    if args.mode == "rerun":
        problems = unfinished_studies(args)
        if problems:
            parser.error(
                f"rerun needs {args.trials} finished trials in every study (run `python benchmarks/kit/tune.py optimize` "
                "with the same --envs, --arms, --trials and --out first): " + "; ".join(problems)
            )
    # The storage URL's password stays out of the logs
    print("command: python " + " ".join(["benchmarks/kit/tune.py", *map(redact, sys.argv[1:])]), flush=True)
    RECONNECT_SECONDS = args.reconnect_seconds
    try:
        optimize(args) if args.mode == "optimize" else rerun(args)
    except DatabaseUnavailable as error:
        parser.exit(1, f"error: {error}\n")


if __name__ == "__main__":
    main()
