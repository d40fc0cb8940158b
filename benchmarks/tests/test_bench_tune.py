"""
The equal tuning budget (``benchmarks/kit/tune.py``): trial settings, the search's bookkeeping, sessions, time limits
and interrupts, on fake zoo workers (no training).
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_helpers
import pytest
from bench_helpers import ROOT, _fake_run, _interrupted, _load


def test_tuning_rerun_config_is_the_trials_settings(tmp_path: Path) -> None:
    tune = _load("tune")
    raw = {
        "window_size": 8, "batch_size_pow": 6, "n_steps_pow": 8, "one_minus_gamma": 0.01, "one_minus_gae_lambda": 0.05,
        "learning_rate": 1e-3, "ent_coef": 0.01, "clip_range": 0.2, "n_epochs": 5, "max_grad_norm": 0.5,
        "net_arch": "tiny", "activation_fn": "relu",
    }  # fmt: skip
    config = tune.best_config(
        "reset_ppo", "CartPoleNoVel-v1", ROOT / "benchmarks" / "studies" / "evidence" / "evidence.yml", raw
    )
    # The sampled settings over the config's (as -optimize trained the trial), the rest of the entry kept
    assert (config["batch_size"], config["n_steps"], config["window_size"], config["n_epochs"]) == (64, 256, 8, 5)
    assert config["gamma"] == pytest.approx(0.99) and config["normalize"] is True
    assert config["policy_kwargs"] == "dict(net_arch=dict(pi=[64], vf=[64]), activation_fn=nn.ReLU)"
    raw.pop("window_size")
    assert "window_size" not in tune.best_config(
        "ppo_lstm", "CartPoleNoVel-v1", ROOT / "benchmarks" / "studies" / "evidence" / "evidence.yml", raw
    )
    assert tune.finished_trials(str(tmp_path / "none.log"), "missing") == 0
    command = tune.optimize_command(
        "EarlyChoice-v0",
        "ev_mask_kept",
        "s.log",
        7,
        tmp_path,
        tune.argparse.Namespace(n_evaluations=5, eval_episodes=10, n_timesteps=None),
    )
    # One trial per process (tune.py counts the study's trials; the zoo's --max-total-trials would run until full)
    assert command[command.index("--n-trials") + 1] == "1" and "--max-total-trials" not in command
    assert command[command.index("--storage") + 1] == "s.log" and command[command.index("--seed") + 1] == "7"
    # The arm's fixed settings, with its study's window settings (sampled values override them in the zoo)
    assert command[command.index("--hyperparams") + 1 :] == [
        "boundary:'mask'",
        "weighting:'kept_mean'",
        "window_coverage:'inside'",
        "window_size:16",
    ]


def test_tuning_marks_trials_of_stopped_workers_failed(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="s", storage=tune._backend(storage))
    study.tell(study.ask(), 1.0)
    cut = study.ask()  # a worker stopped while this trial ran
    cut.suggest_int("n_steps_pow", 3, 12)
    assert tune.fail_stale_trials(storage, "s") == 1
    loaded = optuna.load_study(study_name="s", storage=tune._backend(storage))
    states = [trial.state for trial in loaded.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]
    assert tune.finished_trials(storage, "s") == 1 and tune.fail_stale_trials(storage, "s") == 0
    # The cut trial's settings are tried again by the next trial to start
    again = loaded.ask()
    assert again.suggest_int("n_steps_pow", 3, 12) == cut.params["n_steps_pow"]
    assert tune.state_counts(storage, "s") == {"COMPLETE": 1, "FAIL": 1, "RUNNING": 1}
    assert tune.ended({"COMPLETE": 1, "FAIL": 2, "RUNNING": 5, "PRUNED": 1}) == 4


def test_tuning_best_trial_breaks_ties_by_the_earliest_trial(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="s", storage=tune._backend(storage), direction="maximize")
    with pytest.raises(ValueError, match="no completed trial"):
        tune.best_trial(storage, "s")
    values = [400.0, 500.0, None, 500.0, 499.9, 500.0]  # trial 2 pruned at a higher value
    for value in values:
        trial = study.ask()
        trial.suggest_int("n_steps_pow", 3, 12)
        if value is None:
            trial.report(600.0, step=1)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, value)
    number, value, params, tied = tune.best_trial(storage, "s")
    # Pruned trials never win; among equal values the earliest, as Optuna's best_trial (what the zoo reports)
    assert (number, value, tied) == (1, 500.0, [3, 5]) and number == study.best_trial.number
    assert params == study.trials[1].params
    # The tuned report's summary of the search: states, trial-hours, best trial and its ties
    folder = tmp_path / "EarlyChoice-v0" / "ev_reset"
    folder.mkdir(parents=True)
    journal = tune._backend(str(tune.study_path(tmp_path, "EarlyChoice-v0", "ev_reset")))
    copy = optuna.create_study(study_name=tune.study_name("EarlyChoice-v0", "ev_reset"), storage=journal, direction="maximize")
    for frozen in study.trials:
        copy.add_trial(frozen)
    copy.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={}, distributions={}))
    row = tune.search_summary(tmp_path, ["EarlyChoice-v0"], ["ev_reset"]).splitlines()[-1]
    assert row.startswith("| EarlyChoice-v0 | `ev_reset` | 5 | 1 | 1 | ")
    assert row.endswith(f"| 1 | 500.000 | 3, 5 | n_steps_pow={study.trials[1].params['n_steps_pow']} |")


def test_tuning_rerun_refuses_a_partial_or_missing_search(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    path = tune.study_path(tmp_path, "EarlyChoice-v0", "ev_reset")
    path.parent.mkdir(parents=True)
    study = optuna.create_study(study_name=tune.study_name("EarlyChoice-v0", "ev_reset"), storage=tune._backend(str(path)))
    study.tell(study.ask(), 1.0)
    study.ask()  # running (or left by a stopped worker): not finished
    args = tune.argparse.Namespace(envs=["EarlyChoice-v0"], arms=["ev_reset", "ev_rppo"], trials=2, storage=None, out=tmp_path)
    problems = tune.unfinished_studies(args)
    missing = tune.study_path(tmp_path, "EarlyChoice-v0", "ev_rppo")
    assert problems == ["EarlyChoice-v0 ev_reset: 1 of 2 trials finished", f"EarlyChoice-v0 ev_rppo: no study ({missing})"]
    assert tune.unfinished_studies(tune.argparse.Namespace(**{**vars(args), "arms": ["ev_reset"], "trials": 1})) == []
    # From the command line: a usage error naming the studies, before anything is trained or written
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "kit" / "tune.py"),
            "rerun",
            "--envs",
            "EarlyChoice-v0",
            "--arms",
            "ev_reset",
        ]
        + ["--trials", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "EarlyChoice-v0 ev_reset: 1 of 2 trials finished" in result.stderr
    assert not (path.parent / "best.yml").exists()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kit" / "tune.py"), "optimize", "--trials", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "--trials must be at least 1, got 0" in result.stderr


def test_tuning_records_each_session_with_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    tune = _load("tune")
    calls: list[list[str]] = []

    def worker(command: list[str], **kwargs: Any) -> int:
        """A zoo worker that finishes one trial of the shared study."""
        calls.append(command)
        storage, name = command[command.index("--storage") + 1], command[command.index("--study-name") + 1]
        study = optuna.create_study(study_name=name, storage=tune._backend(storage), load_if_exists=True)
        study.tell(study.ask(), 1.0)
        return 0

    monkeypatch.setattr(tune.subprocess, "call", worker)
    args = tune.argparse.Namespace(
        envs=["EarlyChoice-v0"], arms=["ev_reset"], trials=3, workers=2, storage=None, out=tmp_path,
        n_evaluations=5, eval_episodes=10, n_timesteps=None, seed_offset=0, minutes=None, grid=tmp_path / "grid",
    )  # fmt: skip
    tune.optimize(args)  # two workers, a zoo process per trial: exactly 3 trials
    assert len(calls) == 3 and all(command[command.index("--n-trials") + 1] == "1" for command in calls)
    tune.optimize(tune.argparse.Namespace(**{**vars(args), "trials": 4}))  # resumed with a larger budget: one more
    tune.optimize(tune.argparse.Namespace(**{**vars(args), "trials": 4}))  # 4 >= 4 trials: skipped, nothing recorded
    assert len(calls) == 4
    lines = (tmp_path / "EarlyChoice-v0" / "ev_reset" / "sessions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["event"], r["trials"]) for r in records] == [("start", 0), ("end", 3), ("start", 3), ("end", 4)]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert all(r["commit"] == head and isinstance(r["dirty"], bool) for r in records)
    # The command of the session's first trial (seed 0) as it ran
    (first,) = [command for command in calls[:3] if command[command.index("--seed") + 1] == "0"]
    assert records[0]["command"] == " ".join(first)
    assert records[1]["exit_codes"] == [0, 0]
    # Every trial seeds the zoo's sampler afresh, a resumed study's too: repeated seeds repeat random startup trials
    seeds = [int(command[command.index("--seed") + 1]) for command in calls]
    assert len(set(seeds)) == 4 and all(seed < 1000 for seed in seeds[:3]) and 1000 <= seeds[3] < 2000
    assert [r["seed_base"] for r in records if r["event"] == "start"] == [0, 1000]
    assert tune.worker_seed_base(tmp_path / "EarlyChoice-v0" / "ev_reset", offset=100000) == 102000
    assert tune.worker_seed_base(tmp_path / "nowhere") == 0
    # A database password never reaches the record
    assert tune.redact("postgresql://user:secret@db.example:5432/optuna") == "postgresql://user:***@db.example:5432/optuna"
    assert tune.redact("postgresql://db.example/optuna") == "postgresql://db.example/optuna"
    assert tune.redact(str(tmp_path / "study.log")) == str(tmp_path / "study.log")


def test_tuning_starts_only_trials_that_finish_in_time_and_never_spins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    name = tune.study_name("EarlyChoice-v0", "ev_reset")
    calls: list[list[str]] = []
    behaviour: dict[str, Any] = {"trial": True, "code": 0}

    def worker(command: list[str], **kwargs: Any) -> int:
        """A zoo process: one trial, completed (True), pruned or failed, or none (False)."""
        calls.append(command)
        if behaviour["trial"]:
            study = optuna.create_study(study_name=name, storage=tune._backend(storage), load_if_exists=True)
            if behaviour["trial"] is True:
                study.tell(study.ask(), 1.0)
            else:
                study.tell(study.ask(), state=getattr(optuna.trial.TrialState, str(behaviour["trial"])))
        return int(behaviour["code"])

    monkeypatch.setattr(tune.subprocess, "call", worker)
    grid = tmp_path / "grid"
    args = tune.argparse.Namespace(
        trials=5, workers=2, out=tmp_path, grid=grid, n_evaluations=5, eval_episodes=10, n_timesteps=None
    )
    # Nothing timed yet: with a deadline no trial starts (nothing says one fits), without one they all do
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) is None
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 3600) == [0, 0]
    assert calls == []
    # Before the study's first completed trial, the arm's grid runs on the env time it
    for seed, seconds in enumerate((100.0, 300.0, 200.0)):
        _fake_run(grid, "ev_reset", "EarlyChoice-v0", seed, [1.0], seconds=seconds)
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) == 200.0
    assert not tune.fits(200.0, time.monotonic() + 249.0) and tune.fits(200.0, time.monotonic() + 300.0)
    assert tune.fits(None, None) and not tune.fits(None, time.monotonic() + 1e6)
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 240.0)
    assert calls == []
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 3600.0)
    assert len(calls) == 5 and tune.finished_trials(storage, name) == 5
    # The study's own completed trials time it from then on (the fake's trials take no time)
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) < 1.0
    # A process that starts no trial (the zoo found the study full) or fails stops its worker instead of spinning
    nine = tune.argparse.Namespace(**{**vars(args), "trials": 9})
    calls.clear()
    behaviour["trial"] = False
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None) == [0, 0] and len(calls) == 2
    # The zoo exits 1 after a pruned trial while none has completed: the trial counts and the worker goes on
    calls.clear()
    behaviour.update(trial="PRUNED", code=1)
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, tune.argparse.Namespace(**{**vars(args), "trials": 7}), None)
    assert len(calls) == 2 and tune.finished_trials(storage, name) == 7
    # Failed trials do not count; a worker stops after MAX_FAILURES of them in a row
    calls.clear()
    behaviour.update(trial="FAIL", code=1)
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None) == [1, 1]
    assert len(calls) == 2 * tune.MAX_FAILURES and tune.finished_trials(storage, name) == 7

    # An error in a worker reaches the caller
    def broken(command: list[str], **kwargs: Any) -> int:
        raise OSError("no zoo")

    monkeypatch.setattr(tune.subprocess, "call", broken)
    with pytest.raises(OSError, match="no zoo"):
        tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None)


INTERRUPTED_SEARCH = """
import argparse, json, os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
import optuna, tune
optuna.logging.set_verbosity(optuna.logging.ERROR)
out = Path(sys.argv[2])
storage = str(out / "study.log")
name = tune.study_name("EarlyChoice-v0", "ev_reset")
study = optuna.create_study(study_name=name, storage=tune._backend(storage))
space = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
study.tell(study.ask(space), state=optuna.trial.TrialState.FAIL)  # failed earlier, for another reason
calls = []

def interrupted_zoo(command, **kwargs):
    # Ctrl-C reaches the zoo and tune.py: the zoo fails its trial (Optuna's KeyboardInterrupt) and exits
    calls.append(command)
    trial = study.ask(space)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return 0

tune.subprocess.call = interrupted_zoo
args = argparse.Namespace(trials=5, workers=1, out=out, grid=out / "grid", n_evaluations=5, eval_episodes=10,
                          n_timesteps=None)
try:
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, None)
    outcome = "not interrupted"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
trials = optuna.load_study(study_name=name, storage=tune._backend(storage)).get_trials()
print(json.dumps({
    "outcome": outcome, "calls": len(calls), "states": [trial.state.name for trial in trials],
    "requeued": trials[-1].system_attrs.get("fixed_params") == trials[1].params,
}))
"""


def test_tuning_queues_again_a_trial_cut_by_ctrl_c(tmp_path: Path) -> None:
    seen = _interrupted(INTERRUPTED_SEARCH, str(tmp_path))
    # No trial started after the interrupt; the one it cut is queued again with its settings, the earlier
    # failure is not
    assert seen == {"outcome": "KeyboardInterrupt", "calls": 1, "states": ["FAIL", "FAIL", "WAITING"], "requeued": True}


def test_a_database_password_never_reaches_a_command_line(tmp_path: Path) -> None:
    tune = _load("tune")
    # Accepted: a journal file, a URL without a password (libpq reads it from PGPASSWORD or a password file)
    for storage in (str(tmp_path / "study.log"), "postgresql+psycopg://optuna@db.example:5432/optuna"):
        assert tune.check_storage(storage) == storage
    for storage in ("postgresql+psycopg://optuna:s3cret-pw@db.example:5432/optuna", "postgresql://u@h/db?password=s3cret-pw"):
        with pytest.raises(ValueError, match=r"--storage '.*\*\*\*.*' holds the database password") as error:
            tune.check_storage(storage)
        assert "s3cret-pw" not in str(error.value) and "PGPASSWORD" in str(error.value)
    # The command line refuses it before anything runs or is written (the zoo processes it starts would carry it in
    # their command lines, and their pickled study, report_*.pkl, in the study's URL)
    storage = "postgresql+psycopg://optuna:s3cret-pw@127.0.0.1:1/optuna"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "kit" / "tune.py"),
        "optimize",
        "--storage",
        storage,
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "holds the database password" in result.stderr, result.stderr[-2000:]
    assert "s3cret-pw" not in result.stdout + result.stderr and list(tmp_path.iterdir()) == []
    # The zoo command of a trial carries the URL as given: no password in it
    args = tune.argparse.Namespace(n_evaluations=1, eval_episodes=2, n_timesteps=None)
    url = "postgresql+psycopg://optuna@db.example:5432/optuna"
    zoo = tune.optimize_command("EarlyChoice-v0", "ev_reset", url, 0, tmp_path, args)
    assert zoo[zoo.index("--storage") + 1] == url


def _sampled_by(main: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    The settings and raw parameters that ``main``'s zoo command line (``train --algo reset_ppo``) samples for a trial:
    the zoo's own train replaced by one trial of the sampler it would find registered.
    """
    import optuna
    import rl_zoo3.train
    from rl_zoo3 import hyperparams_opt

    for name in ("reset_ppo", "maskable_reset_ppo"):  # restored after the test, as sys.argv
        monkeypatch.setitem(hyperparams_opt.HYPERPARAMS_SAMPLER, name, hyperparams_opt.HYPERPARAMS_SAMPLER.get(name))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    found: dict[str, Any] = {}

    def one_trial() -> None:
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
        found["settings"] = hyperparams_opt.HYPERPARAMS_SAMPLER["reset_ppo"](trial, 2, 8, {})
        found["params"] = dict(trial.params)

    monkeypatch.setattr(rl_zoo3.train, "train", one_trial)
    main(["train", "--algo", "reset_ppo", "--env", "CartPoleNoVel-v1"])
    return found["settings"], found["params"]


def test_tuning_in_ppo_lstm_space_samples_no_window_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sb3_reset_ppo.zoo

    space = _load("ppo_lstm_space")
    settings, params = _sampled_by(space.main, monkeypatch)
    # ppo_lstm's parameters only: the window settings stay at ResetPPO's defaults
    assert not {"window_size", "window_stride", "window_coverage"} & (set(settings) | set(params))
    assert {"n_steps", "batch_size", "gamma", "n_epochs", "policy_kwargs"} <= set(settings)
    assert set(params) == {
        "batch_size_pow", "n_steps_pow", "one_minus_gamma", "one_minus_gae_lambda", "learning_rate", "ent_coef",
        "clip_range", "n_epochs", "max_grad_norm", "net_arch", "activation_fn",
    }  # fmt: skip
    # The package's own command line, after it: its sampler is the package's again, window_size included
    assert sb3_reset_ppo.zoo.sample_reset_ppo_params.__module__ == "sb3_reset_ppo.zoo"
    settings, params = _sampled_by(sb3_reset_ppo.zoo.main, monkeypatch)
    assert "window_size" in params and "window_size" in settings

    # tune.py runs the trials of an arm that keeps today's window defaults with that module, nothing pinned; the other
    # ResetPPO arms with the package's command line and their study's window settings
    tune = _load("tune")
    namespace = tune.argparse.Namespace(n_evaluations=5, eval_episodes=10, n_timesteps=None)
    command = tune.optimize_command("CartPoleNoVel-v1", "tuned_reset", "s.log", 7, tmp_path, namespace)
    assert command[1:3] == ["-m", "benchmarks.kit.ppo_lstm_space"] and "--hyperparams" not in command
    assert command[command.index("--algo") + 1] == "reset_ppo"
    assert command[command.index("--conf-file") + 1].endswith("benchmarks/studies/evidence/evidence.yml")
    command = tune.optimize_command("CartPoleNoVel-v1", "ev_reset", "s.log", 7, tmp_path, namespace)
    assert command[1:3] == ["-m", "sb3_reset_ppo.zoo"] and "window_size:16" in command


def test_tuning_marks_failed_only_the_trial_its_killed_zoo_process_left_running(tmp_path: Path) -> None:
    import optuna

    from sb3_reset_ppo.zoo import TRIAL_OWNER_ATTR

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="s", storage=tune._backend(storage))
    space: dict[str, optuna.distributions.BaseDistribution] = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    trials = [study.ask(space) for _ in range(3)]
    for trial, owner in zip(trials, ("killed", "alive", "killed"), strict=True):
        trial.set_user_attr(TRIAL_OWNER_ATTR, owner)
    study.tell(trials[2], 1.0)  # the killed process's earlier trial, completed: counted once, left alone
    # The killed process's running trial only: another process's running trial goes on
    assert tune.release_trials(storage, "s", "killed") == [0] and tune.release_trials(storage, "s", "nobody") == []
    assert tune.state_counts(storage, "s") == {"FAIL": 1, "RUNNING": 1, "COMPLETE": 1, "WAITING": 1}
    queued = optuna.load_study(study_name="s", storage=tune._backend(storage)).get_trials()[-1]
    assert queued.system_attrs["fixed_params"] == trials[0].params
    assert tune.release_trials(storage, "s", "killed") == []


def test_tuning_names_the_database_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    tune = _load("tune")
    monkeypatch.setattr(tune, "RECONNECT_SECONDS", 2.0)  # --reconnect-seconds
    with socket.socket() as sock:  # a local port that nothing listens on (bound, not listening)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        url = f"postgresql+psycopg://optuna:s3cret-pw@127.0.0.1:{port}/the_study_db"
        start = time.monotonic()
        with pytest.raises(tune.DatabaseUnavailable) as error:
            tune.state_counts(url, "s")
    # Asked again for the time allowed, then an error naming the database, not its password
    assert time.monotonic() - start >= 2.0
    message = str(error.value)
    assert f"postgresql+psycopg://optuna:***@127.0.0.1:{port}/the_study_db did not answer for 2 s" in message
    assert "s3cret-pw" not in message


# tune.py optimize as a process of its own, each trial's zoo process replaced by one that runs a trial of the shared
# study for a second or two (ends it complete) and counts its starts in argv[2]/trials.txt
SIGNALLED_SEARCH = """
import sys
sys.path.insert(0, sys.argv[1])
import tune
FAKE_TRIAL = '''
import os, sys, time
import optuna
from sb3_reset_ppo.zoo import TRIAL_OWNER_ATTR, TRIAL_OWNER_VARIABLE
storage, name, count = sys.argv[1:]
with open(count, "a") as file:
    file.write("started\\\\n")
study = optuna.create_study(study_name=name, storage=optuna.storages.JournalStorage(
    optuna.storages.journal.JournalFileBackend(storage)), load_if_exists=True, direction="maximize")
trial = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
trial.set_user_attr(TRIAL_OWNER_ATTR, os.environ[TRIAL_OWNER_VARIABLE])
time.sleep(1.5)
study.tell(trial, 1.0)
'''
count = sys.argv[2] + "/trials.txt"
tune.optimize_command = lambda env_id, arm, storage, *rest: [
    sys.executable, "-c", FAKE_TRIAL, storage, tune.study_name(env_id, arm), count]
sys.argv = ["tune.py", "optimize", "--envs", "EarlyChoice-v0", "CartPoleNoVel-v1", "--arms", "ev_reset",
            "--trials", "3", "--workers", "1", "--out", sys.argv[2], "--grid", sys.argv[2] + "/grid"]
tune.main()
"""


def test_a_signal_lets_the_running_trial_finish_and_starts_no_other_trial_or_study(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    command = [sys.executable, "-c", SIGNALLED_SEARCH, str(ROOT / "benchmarks" / "kit"), str(tmp_path)]
    count = tmp_path / "trials.txt"
    code, text = bench_helpers.stopped_by(signal.SIGTERM, command, count.exists, tmp_path / "log.txt")
    # Python's exit for an uncaught KeyboardInterrupt: ended by SIGINT (130 in a shell)
    assert code == -signal.SIGINT, text[-4000:]
    line = "stopping (SIGTERM): no new run starts; waiting for the running ones (1); send the signal again to stop them now"
    assert text.count(line) == 1 and "EarlyChoice-v0 ev_reset: stopped with 1 trials in" in text
    # The trial running at the signal completed, once; no other trial started, nor the next env's study
    storage = str(tune.study_path(tmp_path, "EarlyChoice-v0", "ev_reset"))
    trials = optuna.load_study(study_name=tune.study_name("EarlyChoice-v0", "ev_reset"), storage=tune._backend(storage))
    assert [trial.state.name for trial in trials.get_trials()] == ["COMPLETE"]
    assert count.read_text() == "started\n" and not (tmp_path / "CartPoleNoVel-v1").exists()
    sessions = [json.loads(line) for line in (tmp_path / "EarlyChoice-v0" / "ev_reset" / "sessions.jsonl").open()]
    assert [(record["event"], record["trials"]) for record in sessions] == [("start", 0), ("stopped", 1)]
