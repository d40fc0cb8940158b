"""
``benchmarks/tune.py optimize --storage postgresql+psycopg://...`` (docs/guide/tuning_cluster.md): two workers share
one study on a real PostgreSQL server that the test starts (tests/postgres_server.py), as workers on several
machines would. Skipped, saying why, only where the server's programs are not installed (``.ci/run`` installs
Debian's ``postgresql`` package where apt works).
"""

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import postgres_server
import pytest
from postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
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


def test_two_workers_share_one_study_in_postgresql(postgres: PostgresServer, tmp_path: Path) -> None:
    import optuna

    study = optuna.create_study(study_name=STUDY, storage=postgres.url, direction="maximize")
    for _ in range(TRIALS):
        study.enqueue_trial(CHEAP)
    tune = [
        sys.executable, str(ROOT / "benchmarks" / "tune.py"), "optimize", "--envs", ENV_ID, "--arms", ARM,
        "--trials", str(TRIALS), "--workers", "2", "--storage", postgres.url, "--seed-offset", str(SEED_OFFSET),
        "--n-timesteps", "512", "--n-evaluations", "1", "--eval-episodes", "2", "--out", str(tmp_path),
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(tune, cwd=ROOT, capture_output=True, text=True, timeout=600, env=environment)
    folder = tmp_path / ENV_ID / ARM
    logs = [path.read_text() if path.exists() else "" for path in (folder / "worker0.txt", folder / "worker1.txt")]
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n" + "\n".join(log[-3000:] for log in logs)
    assert result.returncode == 0, output

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

    # The session's record: the budget reached by two workers exiting cleanly, the password masked
    records = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines()]
    assert [(record["event"], record["trials"]) for record in records] == [("start", 0), ("end", TRIALS)]
    start, end = records
    assert (start["workers"], start["seed_base"], end["exit_codes"]) == (2, SEED_OFFSET, [0, 0])
    masked = postgres.url.replace(f":{postgres.password}@", ":***@")
    assert masked != postgres.url and f"--storage {masked} " in start["command"]
    # ...and in the command line tune.py prints
    assert f"--storage {masked} " in result.stdout and postgres.password not in result.stdout + result.stderr
    # No file tune.py leaves next to the study holds the password, but the zoo's pickled reports (the study object,
    # its storage URL with it), which .gitignore keeps out of the repository (the records and logs are committed)
    leaked = [path for path in tmp_path.rglob("*") if path.is_file() and postgres.password.encode() in path.read_bytes()]
    assert all(path.name.startswith("report_") and path.suffix == ".pkl" for path in leaked), leaked
    if leaked and (ROOT / ".git").exists():
        in_repository = [str(Path("benchmarks", "results", "tuning", path.relative_to(tmp_path))) for path in leaked]
        check = subprocess.run(["git", "check-ignore", "--no-index", *in_repository], cwd=ROOT, capture_output=True, text=True)
        assert set(check.stdout.split()) == set(in_repository), check

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
