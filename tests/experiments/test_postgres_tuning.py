"""
``benchmarks/kit/tune.py optimize --storage postgresql+psycopg://...`` (docs/guide/tuning_cluster.md): two workers share
one study on a real PostgreSQL server that the test starts (tests/experiments/postgres_server.py), as workers on several
machines would, the password in a libpq password file, never on a command line or in a file of the output.
Skipped, saying why, only where the server's programs are not installed (``.ci/run`` installs Debian's
``postgresql`` package where apt works).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import postgres_server
import pytest
from fault_helpers import run_with_fault
from postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
ENV_ID, ARM = "EarlyChoice-v0", "ev_reset"
STUDY = f"{ENV_ID}_{ARM}"  # tune.study_name
TRIALS = 3
SEED_OFFSET = 100000  # a second machine's offset (docs/guide/tuning_cluster.md)
# The sampled settings that decide a trial's cost, queued for every trial (Optuna's enqueue_trial, as tune.py
# queues a cut trial again): one minibatch of 32 steps x 8 envs per rollout, one epoch, the smallest network. The
# others (learning rate, discount, entropy bonus, ...) each zoo process's sampler draws, seeded by its worker.
CHEAP = {"n_steps_pow": 5, "batch_size_pow": 8, "n_epochs": 1, "net_arch": "tiny", "window_size": 8}


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, stopped and removed afterwards (skipped where none can start)."""
    with postgres_server.running_server(postgres_server.available_bindir()) as server:
        yield server


@pytest.fixture
def password_file(postgres: PostgresServer) -> Iterator[Path]:
    """A libpq password file for the server's role (mode 0600, outside the test's output), deleted afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="sb3-reset-ppo-pgpass-"))
    path = folder / "pgpass"
    path.touch(mode=0o600)
    path.write_text(f"127.0.0.1:{postgres.port}:*:*:{postgres.password}\n")
    yield path
    shutil.rmtree(folder)


def _command_lines() -> dict[int, bytes]:
    """Every process's command line that this user may read (``/proc/<pid>/cmdline``)."""
    lines = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            lines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:  # ended meanwhile, or not readable
            continue
    return lines


def test_two_workers_share_one_study_in_postgresql(postgres: PostgresServer, password_file: Path, tmp_path: Path) -> None:
    import optuna

    study = optuna.create_study(study_name=STUDY, storage=postgres.url, direction="maximize")
    for _ in range(TRIALS):
        study.enqueue_trial(CHEAP)
    # The URL without the password; libpq reads it from the password file that PGPASSFILE names (every zoo process
    # inherits the variable)
    url = postgres.url.replace(f":{postgres.password}@", "@")
    assert url != postgres.url and postgres.password not in url
    tune = [
        sys.executable, str(ROOT / "benchmarks" / "kit" / "tune.py"), "optimize", "--envs", ENV_ID, "--arms", ARM,
        "--trials", str(TRIALS), "--workers", "2", "--storage", url, "--seed-offset", str(SEED_OFFSET),
        "--n-timesteps", "512", "--n-evaluations", "1", "--eval-episodes", "2", "--out", str(tmp_path),
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PGPASSFILE": str(password_file)}
    environment.pop("PGPASSWORD", None)
    # A URL with the password is refused before anything runs (it would show in `ps` and in the zoo's pickled study)
    refused = subprocess.run(
        [*tune[:tune.index(url)], postgres.url, *tune[tune.index(url) + 1 :]], cwd=ROOT, capture_output=True, text=True,
        timeout=120, env=environment,
    )  # fmt: skip
    assert refused.returncode == 2 and "holds the database password" in refused.stderr, refused.stderr
    assert postgres.password not in refused.stdout + refused.stderr and list(tmp_path.iterdir()) == []
    # While it runs, no process's command line holds the password (tune.py's, its zoo processes')
    process = subprocess.Popen(tune, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    secret, zoo_processes, leaks = postgres.password.encode(), set(), []
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        for pid, line in _command_lines().items():
            if b"sb3_reset_ppo.zoo" in line and b"-optimize" in line:
                zoo_processes.add(pid)
            if secret in line:
                leaks.append(line.replace(b"\0", b" ").decode(errors="replace"))
        time.sleep(0.1)
    if process.poll() is None:
        process.kill()
    stdout, stderr = (stream.decode() for stream in process.communicate())
    result = subprocess.CompletedProcess(tune, process.returncode, stdout, stderr)
    folder = tmp_path / ENV_ID / ARM
    logs = [path.read_text() if path.exists() else "" for path in (folder / "worker0.txt", folder / "worker1.txt")]
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n" + "\n".join(log[-3000:] for log in logs)
    assert result.returncode == 0, output
    assert len(zoo_processes) >= 2 and not leaks, (zoo_processes, leaks)

    # Read back from the server: the study holds the budget's trials, all completed with the queued settings
    trials = optuna.load_study(study_name=STUDY, storage=postgres.url).trials
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE] * TRIALS, output
    assert all(trial.params[key] == value for trial in trials for key, value in CHEAP.items())
    # ...and the rest drawn by samplers seeded apart (one zoo process per trial, each its own seed)
    assert len({trial.params["learning_rate"] for trial in trials}) == TRIALS
    # Both workers wrote to it: each worker's zoo processes (their output in worker<i>.txt, with the seed they ran
    # with and Optuna's line for each trial they ended) ran some of the study's trials, numbered by the server
    ran = [{int(number) for number in re.findall(r"Trial (\d+) finished", log)} for log in logs]
    assert all(ran) and ran[0].isdisjoint(ran[1]) and ran[0] | ran[1] == {trial.number for trial in trials}, ran
    seeds = [{int(seed) for seed in re.findall(r"^Seed: (\d+)$", log, re.MULTILINE)} for log in logs]
    assert seeds[0] >= {SEED_OFFSET} and seeds[1] >= {SEED_OFFSET + 1}, seeds
    assert seeds[0] | seeds[1] <= set(range(SEED_OFFSET, SEED_OFFSET + TRIALS + 1)) and seeds[0].isdisjoint(seeds[1])

    # The session's record: the budget reached by two workers exiting cleanly, the URL as given (no password)
    records = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines()]
    assert [(record["event"], record["trials"]) for record in records] == [("start", 0), ("end", TRIALS)]
    start, end = records
    assert (start["workers"], start["seed_base"], end["exit_codes"]) == (2, SEED_OFFSET, [0, 0])
    assert f"--storage {url} " in start["command"] and f"--storage {url} " in result.stdout
    assert postgres.password not in result.stdout + result.stderr
    # No file under --out holds the password: records, logs, the zoo's folders and its pickled study (report_*.pkl)
    reports = list(tmp_path.rglob("report_*.pkl"))
    leaked = [path for path in tmp_path.rglob("*") if path.is_file() and secret in path.read_bytes()]
    assert reports and not leaked, (reports, leaked)

    # Resumed with the study full: skipped, nothing trained or recorded
    again = subprocess.run(tune, cwd=ROOT, capture_output=True, text=True, timeout=600, env=environment)
    assert again.returncode == 0 and f"{ENV_ID} {ARM}: {TRIALS} trials already, skipped" in again.stdout, again.stderr
    assert len(optuna.load_study(study_name=STUDY, storage=postgres.url).trials) == TRIALS
    assert len((folder / "sessions.jsonl").read_text().splitlines()) == 2


def _programs(folder: Path, names: tuple[str, ...] = postgres_server.PROGRAMS) -> Path:
    """A folder of stand-ins for the server's programs (executable files that do nothing)."""
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


def test_the_server_is_found_or_the_test_skipped_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nowhere to find it (no pg_config or initdb on PATH, no Debian server package): a skip naming what to install
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "path", ())))
    monkeypatch.setattr(postgres_server, "DEBIAN_BINDIRS", str(tmp_path / "lib" / "postgresql" / "*" / "bin"))
    assert postgres_server.candidate_bindirs() == [] and postgres_server.find_bindir() is None
    with pytest.raises(pytest.skip.Exception, match=r"server programs \(initdb, pg_ctl, postgres, psql\) not found"):
        postgres_server.available_bindir()
    assert "apt-get install postgresql" in str(postgres_server.unavailable_reason(None))
    # Debian's folders newest version first, then an initdb on PATH (links resolved); the first with every program
    _programs(tmp_path / "lib" / "postgresql" / "9.6" / "bin")
    _programs(tmp_path / "lib" / "postgresql" / "15" / "bin")
    _programs(tmp_path / "lib" / "postgresql" / "16" / "bin", ("initdb", "pg_ctl", "postgres"))  # no psql
    other = _programs(tmp_path / "opt" / "bin")
    (tmp_path / "path" / "initdb").symlink_to(other / "initdb")
    debian = [tmp_path / "lib" / "postgresql" / version / "bin" for version in ("16", "15", "9.6")]
    assert postgres_server.candidate_bindirs() == [*debian, other]
    assert postgres_server.find_bindir() == debian[1] and postgres_server.find_bindir([debian[0], other]) == other
    assert postgres_server.find_bindir([tmp_path / "missing"]) is None


def test_the_server_runs_as_the_postgres_user_under_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bindir = _programs(tmp_path / "bin")
    monkeypatch.setattr(postgres_server.os, "geteuid", lambda: 0)
    command = ["initdb", "-D", "a b"]
    monkeypatch.setattr(postgres_server.shutil, "which", lambda name: f"/usr/sbin/{name}")
    assert postgres_server.as_server_user(command) == ["runuser", "-u", "postgres", "--", *command]
    monkeypatch.setattr(postgres_server.shutil, "which", lambda name: "/bin/su" if name == "su" else None)
    assert postgres_server.as_server_user(command) == ["su", "postgres", "-s", "/bin/sh", "-c", "initdb -D 'a b'"]
    # As root without the postgres user, or without psycopg: skipped, saying why
    monkeypatch.setattr(postgres_server, "SERVER_USER", "no-such-user-here")
    assert "no 'no-such-user-here' user" in str(postgres_server.unavailable_reason(bindir))
    monkeypatch.setattr(postgres_server.os, "geteuid", lambda: 12345)
    assert postgres_server.as_server_user(["initdb"]) == ["initdb"]  # anyone else runs it as themselves
    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert "psycopg" in str(postgres_server.unavailable_reason(bindir))


@pytest.mark.slow
def test_tuning_survives_a_database_restart_and_counts_no_trial_twice(
    postgres: PostgresServer, password_file: Path, tmp_path: Path
) -> None:
    # Slow (about four minutes on 2 busy cores): zoo processes each import the RL Zoo and torch, and the server stays
    # down for 20 s, so that the trials and tune.py's own reads meet it down
    import optuna

    bindir = postgres_server.available_bindir()
    study = optuna.create_study(study_name=STUDY, storage=postgres.url, direction="maximize")
    for _ in range(TRIALS):
        study.enqueue_trial(CHEAP)
    url = postgres.url.replace(f":{postgres.password}@", "@")
    tune = [
        sys.executable, str(ROOT / "benchmarks" / "kit" / "tune.py"), "optimize", "--envs", ENV_ID, "--arms", ARM,
        "--trials", str(TRIALS), "--workers", "2", "--storage", url, "--n-timesteps", "4096", "--n-evaluations", "4",
        "--eval-episodes", "2", "--out", str(tmp_path), "--reconnect-seconds", "120",
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PGPASSFILE": str(password_file)}
    environment.pop("PGPASSWORD", None)
    restarted: list[float] = []

    def restart() -> bool:
        # Once a trial trains (it has sampled its settings), the server stops, cutting every connection, and
        # starts again on its port after a while: the trial's next report, and tune.py's reads, meet it down
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if not any(len(trial.params) > len(CHEAP) for trial in running):
            return False
        postgres_server.stop_server(bindir, postgres)
        time.sleep(20)
        postgres_server.start_server(bindir, postgres)
        restarted.append(time.monotonic())
        return True

    code, text = run_with_fault(tune, restart, cwd=ROOT, env=environment)
    folder = tmp_path / ENV_ID / ARM
    logs = [path.read_text() if path.exists() else "" for path in (folder / "worker0.txt", folder / "worker1.txt")]
    shown = f"{text[-3000:]}\n" + "\n".join(log[-3000:] for log in logs)
    assert restarted, shown
    # The workers reconnected and the study completed in the same session
    assert code == 0, shown
    trials = optuna.load_study(study_name=STUDY, storage=postgres.url).trials
    states = Counter(trial.state.name for trial in trials)
    # The trials the restart cut failed, none is left running, and the budget's trials completed: none counted twice
    assert states["COMPLETE"] == TRIALS and states["FAIL"] >= 1 and set(states) <= {"COMPLETE", "FAIL", "WAITING"}, states
    finished = [int(number) for log in logs for number in re.findall(r"Trial (\d+) finished", log)]
    assert sorted(finished) == sorted(trial.number for trial in trials if trial.state.name == "COMPLETE"), finished
    records = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines()]
    assert [(record["event"], record["trials"]) for record in records] == [("start", 0), ("end", TRIALS)]

    # A server that stays down: tune.py asks again for --reconnect-seconds, then stops with an error naming the
    # database (its URL without the password)
    postgres_server.stop_server(bindir, postgres)
    more = [*tune[: tune.index("--trials") + 1], str(TRIALS + 1), *tune[tune.index("--trials") + 2 : -1], "3"]
    down = subprocess.run(more, cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert down.returncode == 1, down.stdout[-3000:] + down.stderr[-3000:]
    assert f"error: the study's database {url} did not answer for 3 s" in down.stderr, down.stderr[-3000:]
    assert postgres.password not in down.stdout + down.stderr
    postgres_server.start_server(bindir, postgres)  # for the fixture's teardown, which stops it
