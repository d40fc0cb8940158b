"""
The benchmark grid (``benchmarks/kit/run_grid.py``): the studies' commands and jobs, run records, failed and cut runs,
the forecast, the time limit and interrupts, and what the studies commit (no training).
"""

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench_helpers import ROOT, _fake_run, _interrupted, _load

from benchmarks.kit.scripts import run_script
from sb3_reset_ppo.experiments import executors, runner, stats

# ResetPPO's window settings before the coverage study, named by the earlier studies' runs
OLD_DEFAULTS = ["window_coverage:'inside'", "window_size:16"]


def test_grid_commands_and_resume(tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    steps = runner.budget("CartPoleNoVel-v1", run_grid.RESET_PPO_CONF)
    mask = run_grid.command("mask", "CartPoleNoVel-v1", 3, tmp_path, 20)
    assert mask[mask.index("--algo") + 1] == "reset_ppo" and mask[mask.index("--seed") + 1] == "3"
    assert mask[mask.index("--eval-freq") + 1] == str(steps // runner.EVALUATIONS_PER_RUN)
    # The studies before the coverage study name the defaults of their time (windows of 16 inside the rollout);
    # grid.yml names its window_size per env, which the command line would override: only the coverage is added
    assert mask[mask.index("--hyperparams") + 1 :] == ["boundary:'mask'", "weighting:'uniform'", OLD_DEFAULTS[0]]
    ppo_lstm = run_grid.command("ppo_lstm", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert ppo_lstm[ppo_lstm.index("--conf-file") + 1] == str(run_grid.PPO_LSTM_CONF)
    assert "--hyperparams" not in ppo_lstm
    # Finished runs (run.json present) are skipped: nothing is trained here
    for seed in range(2):
        _fake_run(tmp_path, "reset", "CueRecall-v0", seed, [1.0])
    grid = ["benchmarks/kit/run_grid.py", "--envs", "CueRecall-v0", "--variants", "reset", "--seeds", "2"]
    printed = run_script([*grid, "--out", str(tmp_path)], capture=True)
    assert "2 of 2 runs already done; 0 to run" in printed


def test_fresh_memory_study_commands() -> None:
    run_grid = _load("run_grid")
    assert len(run_grid.FRESH_MEMORY_VARIANTS) == 10 and len(run_grid.FRESH_MEMORY_ENVS) == 6
    both = run_grid.command("fm_refresh_burn8_e30", "PopgymAutoencodeEasy-v0", 2, Path("/tmp/x"), 20)
    assert both[both.index("--conf-file") + 1] == str(run_grid.FRESH_MEMORY_CONF)
    assert both[both.index("--hyperparams") + 1 :] == ["memory_refresh:1", "burn_in:8", "n_epochs:30", *OLD_DEFAULTS]
    assert both[both.index("--log-interval") + 1] == "1"
    # 1e5 steps, 20 evaluations
    assert both[both.index("--eval-freq") + 1] == "5000"
    off = run_grid.command("fm_off", "CueRecall-v0", 0, Path("/tmp/x"), 20)
    assert off[off.index("--hyperparams") + 1 :] == OLD_DEFAULTS
    # The published grid's variants are unchanged
    assert run_grid.conf_file("reset") == run_grid.RESET_PPO_CONF and run_grid.conf_file("ppo_lstm") == run_grid.PPO_LSTM_CONF


def test_gru_study_commands() -> None:
    run_grid = _load("run_grid")
    gru = run_grid.command("gru", "CartPoleNoVel-v1", 3, Path("/tmp/x"), 20)
    assert gru[gru.index("--conf-file") + 1] == str(run_grid.FRESH_MEMORY_CONF)
    assert gru[gru.index("--hyperparams") + 1 :] == ["policy:'MlpGruPolicy'", *OLD_DEFAULTS]
    assert gru[gru.index("--log-interval") + 1] == "1"
    assert set(run_grid.GRU_ENVS) < set(run_grid.FRESH_MEMORY_ENVS)


def test_evidence_study_jobs_follow_the_protocol(tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    args = run_grid.argparse.Namespace(seeds=None, study="evidence")
    assert run_grid.seeds_of(args, "CartPoleNoVel-v1") == 20 and run_grid.seeds_of(args, "EarlyChoice-v0") == 20
    assert run_grid.seeds_of(args, "MiniGridMemoryS7Flat-v0") == 10
    assert run_grid.seeds_of(run_grid.argparse.Namespace(seeds=3, study="evidence"), "CartPoleNoVel-v1") == 3
    assert not run_grid.runs_on("evidence", "ev_reset_gru", "MiniGridMemoryS7Flat-v0")
    assert run_grid.runs_on("evidence", "ev_reset_gru", "CartPoleNoVel-v1") and run_grid.runs_on(
        "evidence", "ev_rppo", "PendulumNoVel-v1"
    )
    rppo = run_grid.command("ev_rppo", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert rppo[rppo.index("--algo") + 1] == "ppo_lstm" and rppo[rppo.index("--conf-file") + 1] == str(run_grid.EVIDENCE_CONF)
    # A tuned trial's config file and a smaller budget (the tuning reruns' smoke runs)
    tuned = run_grid.command("ev_reset", "CueRecall-v0", 100, tmp_path, 20, conf=tmp_path / "best.yml", steps=2048)
    assert tuned[tuned.index("--conf-file") + 1] == str(tmp_path / "best.yml")
    assert tuned[tuned.index("-n") + 1] == "2048" and tuned[tuned.index("--eval-freq") + 1] == "102"
    # A tuned trial's file names its window length: only the coverage of the study's time is added
    assert tuned[tuned.index("--hyperparams") + 1 :] == ["boundary:'reset'", "weighting:'uniform'", OLD_DEFAULTS[0]]
    mask = run_grid.command("ev_mask_kept", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert mask[mask.index("--hyperparams") + 1 :] == ["boundary:'mask'", "weighting:'kept_mean'", *OLD_DEFAULTS]
    # Every env of the study is configured in evidence.yml, and has a reference return for the report
    import yaml

    configured = yaml.safe_load(run_grid.EVIDENCE_CONF.read_text())
    assert set(run_grid.EVIDENCE_ENVS) <= set(configured)
    assert set(run_grid.EVIDENCE_ENVS) <= set(_load("report").REFERENCE_RETURN)


def test_every_study_keeps_its_records_and_ignores_models_and_raw_logs() -> None:
    """
    What the studies write is committed or ignored by .gitignore as the protocols say: a stored study's records and
    logs are committed as its tables (benchmarks/kit/rundata.py), its folder is ignored (unpacked from the tables),
    its notes are kept, and models and raw logs are never committed.
    """
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tune = _load("tune")
    rundata = _load("rundata")
    rerun = tune.OUT.relative_to(ROOT) / "runs" / "tuned_ev_reset" / "EarlyChoice-v0" / "seed100"
    study = tune.study_path(tune.OUT, "EarlyChoice-v0", "ev_reset").relative_to(ROOT)
    evidence = Path("benchmarks/results/evidence/ev_reset/CueRecall-v0/seed0")
    zoo = Path("reset_ppo/CueRecall-v0_1")
    results = rundata.RESULTS.relative_to(ROOT)
    kept = [
        *(table(name, results) for name in ("evidence", "tuning") for table in (rundata.runs_table, rundata.logs_table)),
        results / rundata.CODE_VERSIONS.name, tune.OUT.relative_to(ROOT) / "SEARCH.md",
    ]  # fmt: skip
    ignored = [
        *(run / name for run in (rerun, evidence) for name in ("run.json", "log.txt.gz", "progress.csv.gz")),
        *(run / zoo / "evaluations.npz" for run in (rerun, evidence)),
        study, study.with_name("sessions.jsonl"), study.with_name("worker0.txt"),
        *(run / "log.txt" for run in (rerun, evidence)),
        *(run / zoo / "CueRecall-v0.zip" for run in (rerun, evidence)),
        evidence / zoo / "0.monitor.csv",
        study.parent / "worker0" / "reset_ppo" / "report_EarlyChoice-v0_1-trials-50000-tpe-median_1796143083.csv",
    ]  # fmt: skip
    paths = [str(path) for path in kept + ignored]
    result = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert set(result.stdout.split()) == {str(path) for path in ignored}


def test_runs_record_when_and_on_which_machine_they_trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid, report = _load("run_grid"), _load("report")
    # A trainer that only writes its evaluations: run_one's record, not training, is under test
    evaluations = {"count": runner.EVALUATIONS_PER_RUN}

    def fake_trainer(variant: str, env_id: str, seed: int, run_dir: Path, *args: Any, **kwargs: Any) -> list[str]:
        folder = run_dir / "reset_ppo" / f"{env_id}_1"
        code = (
            f"import numpy; numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=numpy.arange({evaluations['count']}))"
        )
        return [sys.executable, "-c", f"import os; os.makedirs({str(folder)!r}); {code}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": tmp_path / "run", "eval_episodes": 1}
    result = run_grid.run_one(job)
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored == result and stored["returncode"] == 0 and stored["evaluations"] == 20
    assert runner.completed(result) and run_grid.status(result) == "ok"
    assert stored["machine"] == runner.machine() and stored["machine"]["cores"] == os.cpu_count()
    # Read from Linux's CPU description: the first model name, the extensions among the flags; absent elsewhere
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: CPU A\nflags\t\t: fpu sse avx2 amx_tile\n\n"
        "processor\t: 1\nmodel name\t: CPU A\nflags\t\t: fpu sse avx2 amx_tile\n"
    )
    assert runner.machine(cpuinfo) == {"cpu": "CPU A", "cores": os.cpu_count(), "extensions": ["avx2", "amx_tile"]}
    assert runner.machine(tmp_path / "absent")["cpu"] == "unknown CPU"
    # The report's own machine is described the same way
    assert report.hardware().startswith(report.machine_name(runner.machine()) + ", ")
    assert abs(stats.timestamp(stored["started"]) - time.time()) < 600 and stored["started"][-5] == "."  # milliseconds
    # The report counts the runs per machine, runs from before the record as not recorded
    a = {"cpu": "CPU A", "cores": 2, "extensions": ["avx2"]}
    b = {"cpu": "CPU B", "cores": 2, "extensions": []}
    text = report.machines([{"machine": a}, {"machine": a}, {"machine": b}, {}])
    assert text == "CPU A, 2 cores (avx2): 2 runs; CPU B, 2 cores: 1 run; " + (
        "not recorded (runs made before run.json recorded the machine): 1 run"
    )


def test_a_run_cut_short_with_exit_0_is_not_stored_as_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid = _load("run_grid")
    # The zoo's train swallows KeyboardInterrupt and exits 0 with the evaluations made so far
    count = {"evaluations": 7}

    def fake_trainer(variant: str, env_id: str, seed: int, run_dir: Path, *args: Any, **kwargs: Any) -> list[str]:
        folder = run_dir / "reset_ppo" / f"{env_id}_1"
        save = f"numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=numpy.arange({count['evaluations']}))"
        return [sys.executable, "-c", f"import os, numpy; os.makedirs({str(folder)!r}); {save}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": tmp_path / "run", "eval_episodes": 1}
    result = run_grid.run_one(job)
    assert result["returncode"] == 0 and result["evaluations"] == 7
    assert not runner.completed(result) and run_grid.status(result) == "TRUNCATED (7 evaluations)"
    assert not (tmp_path / "run" / "run.json").exists()  # the grid trains it again next time
    # One short of the budget is still cut short; the whole budget (or more: rollouts overshoot) is finished
    count["evaluations"] = runner.EVALUATIONS_PER_RUN - 1
    assert not runner.completed(run_grid.run_one(job))
    count["evaluations"] = runner.EVALUATIONS_PER_RUN + 1
    assert runner.completed(run_grid.run_one(job)) and (tmp_path / "run" / "run.json").exists()
    # No evaluations file (or several, or one cut while being written) counts as none; a failed exit stays a failure
    assert runner.evaluations_done(tmp_path / "absent") == 0
    partial = tmp_path / "partial" / "reset_ppo" / "CueRecall-v0_1"
    partial.mkdir(parents=True)
    (partial / "evaluations.npz").write_bytes(b"PK\x03\x04 cut")
    assert runner.evaluations_done(tmp_path / "partial") == 0
    assert run_grid.status({"returncode": 2, "evaluations": 0}) == "FAILED (2)"
    # Runs stored before run.json recorded the count were all checked to hold their 20 evaluations
    assert runner.completed({"returncode": 0})


def test_a_run_that_fails_with_an_error_is_recorded_and_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid = _load("run_grid")
    exit_with = {"code": "raise SystemExit(3)"}

    def fake_trainer(*args: Any, **kwargs: Any) -> list[str]:
        return [sys.executable, "-c", f"print('training broke'); {exit_with['code']}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    run_dir = tmp_path / "run"
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": run_dir, "eval_episodes": 1}
    result = run_grid.run_one(job)
    assert result["returncode"] == 3 and run_grid.status(result) == "FAILED (3)"
    # Recorded with its log (for the report and for tracing), not as finished; the grid does not train it again
    assert json.loads((run_dir / "failed.json").read_text()) == result and not (run_dir / "run.json").exists()
    with gzip.open(run_dir / "log.txt.gz", "rt") as log:
        assert "training broke" in log.read()
    assert run_grid.recorded(run_dir) and not run_grid.recorded(run_dir, retry_failed=True)
    # A trainer killed by a signal (a session's end) was cut, not failed: nothing recorded, trained next time
    exit_with["code"] = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = run_grid.run_one(job)
    assert result["returncode"] == -9 and not run_grid.recorded(run_dir) and run_grid.status(result) == "CUT (signal 9)"
    assert not (run_dir / "failed.json").exists()  # the earlier attempt's record went with its folder
    # A later attempt that finishes replaces the record
    exit_with["code"] = "pass"
    monkeypatch.setattr(runner, "evaluations_done", lambda run_dir: runner.EVALUATIONS_PER_RUN)
    assert runner.completed(run_grid.run_one(job)) and (run_dir / "run.json").exists()
    assert not (run_dir / "failed.json").exists()
    # The grid's command line: a failed run counts as done and is named, unless --retry-failed
    failed_dir = tmp_path / "grid" / "reset" / "CueRecall-v0" / "seed0"
    failed_dir.mkdir(parents=True)
    (failed_dir / "failed.json").write_text(json.dumps({"returncode": 3}))
    grid = ["benchmarks/kit/run_grid.py", "--envs", "CueRecall-v0", "--variants", "reset"]
    grid += ["--seeds", "2", "--out", str(tmp_path / "grid"), "--forecast"]
    output = run_script(grid, capture=True)
    assert "1 of 2 runs already done; 1 to run" in output
    assert (
        "1 failed with an error (failed.json; not retried; --retry-failed retries them): reset CueRecall-v0 seed 0" in output
    )
    output = run_script([*grid, "--retry-failed"], capture=True)
    assert "0 of 2 runs already done; 2 to run" in output and "retried now" in output


def test_forecast_of_the_remaining_runs_from_medians_of_finished_ones(tmp_path: Path) -> None:
    run_grid = _load("run_grid")

    def job(variant: str, env_id: str, seed: int, seconds: float | None = None, **fields: Any) -> dict[str, Any]:
        run_dir = tmp_path / variant / env_id / f"seed{seed}"
        if seconds is not None:
            run_dir.mkdir(parents=True)
            run = {"returncode": 0, "seconds": seconds, **fields}
            (run_dir / "run.json").write_text(json.dumps(run))
        return {"variant": variant, "env": env_id, "seed": seed, "run_dir": run_dir}

    jobs = [
        # a: median 3600 s of its own runs (the reused one, 60 s, is ignored), 2 runs to do
        job("a", "E1", 0, 1800.0),
        job("a", "E1", 1, 3600.0),
        job("a", "E1", 2, 7200.0),
        job("a", "E1", 3, 60.0, reused_from="x"),
        job("a", "E1", 4),
        job("a", "E1", 5),
        # b: only reused runs, so they time it: 1800 s, 1 run to do
        job("b", "E1", 0, 1800.0, reused_from="x"),
        job("b", "E1", 1),
        # c: nothing finished
        job("c", "E2", 0),
    ]
    todo = [j for j in jobs if not (j["run_dir"] / "run.json").exists()]
    text = run_grid.forecast(jobs, todo, 2)
    # c's run is not counted, so the total is a lower bound
    assert text.splitlines()[0].startswith("forecast: 4 runs to do, at least 2.5 core-hours, at least 1.2 wall-hours on 2")
    assert "core-hours by variant: a 2.0, b 0.5" in text and "core-hours by env: E1 2.5" in text
    assert "not counted (no finished run yet): c on E2 (1)" in text
    assert run_grid.median_times(jobs) == {("a", "E1"): 3600.0, ("b", "E1"): 1800.0}


def test_a_study_resumed_on_another_machine_says_so(tmp_path: Path) -> None:
    """The stored runs of another CPU are named with their count; runs of this machine, or without one, are not."""
    run_grid = _load("run_grid")
    here = {"cpu": "This CPU", "cores": 2, "extensions": ["avx2"]}
    other = {"cpu": "Other CPU", "cores": 2, "extensions": ["avx2", "avx512f"]}

    def job(seed: int, machine: dict[str, Any] | None, stored: bool = True) -> dict[str, Any]:
        run_dir = tmp_path / "a" / "E1" / f"seed{seed}"
        if stored:
            run_dir.mkdir(parents=True)
            run = {"returncode": 0, "seconds": 1.0} | ({} if machine is None else {"machine": machine})
            (run_dir / "run.json").write_text(json.dumps(run))
        return {"variant": "a", "env": "E1", "seed": seed, "run_dir": run_dir}

    same = [job(0, here), job(1, None), job(2, None, stored=False)]
    assert run_grid.machine_note(same, here) is None
    mixed = [*same, job(3, other), job(4, other), job(5, here | {"cores": 4})]
    note = run_grid.machine_note(mixed, here)
    assert note is not None and note.startswith("machines: 3 stored runs trained on another machine (2 on Other CPU, 2 ")
    assert "1 on This CPU, 4 cores (avx2)" in note and note.endswith(
        "this one is This CPU, 2 cores (avx2): the " + ("study's seconds compare only within one machine")
    )


def test_grid_starts_only_runs_that_finish_before_the_time_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_grid = _load("run_grid")
    times = {("long", "E"): 3000.0, ("short", "E"): 100.0}

    def jobs() -> list[dict[str, Any]]:
        return [
            {"variant": variant, "env": "E", "seed": seed, "run_dir": tmp_path / variant / str(seed)}
            for variant, seed in (("long", 0), ("short", 0), ("new", 0), ("short", 1))
        ]

    todo = jobs()
    # No limit: the grid's order, an untimed pair included
    assert [run_grid.next_job(todo, times, None)["variant"] for _ in range(4)] == ["long", "short", "new", "short"]
    assert todo == [] and run_grid.next_job(todo, times, None) is None
    # 1 hour left: the long run (3000 s x 1.25 margin) and the untimed one wait; the short ones go, in order
    todo = jobs()
    assert run_grid.next_job(todo, times, 3600.0)["seed"] == 0 and run_grid.next_job(todo, times, 3600.0)["seed"] == 1
    assert run_grid.next_job(todo, times, 3600.0) is None and [job["variant"] for job in todo] == ["long", "new"]
    # The margin: 3000 s fits in 3750 s, not in 3749 s
    assert run_grid.next_job(jobs(), times, 3749.0)["variant"] == "short"
    assert run_grid.next_job(jobs(), times, 3750.0)["variant"] == "long"
    # The workers: every run that fits is trained once, the others are left for later
    trained: list[str] = []

    def fake_run(job: dict[str, Any]) -> dict[str, Any]:
        trained.append(f"{job['variant']}{job['seed']}")
        return {**job, "returncode": 0, "seconds": 1.0}

    monkeypatch.setattr(run_grid, "run_one", fake_run)
    todo = jobs()
    results = run_grid.run_until(todo, times, 2, minutes=60)
    assert sorted(trained) == ["short0", "short1"] and len(results) == 2 and [j["variant"] for j in todo] == ["long", "new"]
    # The log says why each run waits, and how to time the untimed one
    assert capsys.readouterr().out.splitlines()[-1] == (
        "2 runs left for later: 1 not expected to finish in the time left; 1 not timed yet (--minutes starts only runs "
        "of a variant and env with a finished run): run the study once without --minutes to time them"
    )
    trained.clear()
    assert len(run_grid.run_until(jobs(), times, 2, minutes=None)) == 4 and len(trained) == 4

    # A worker's error reaches the caller, and no new run starts after it
    def failing_run(job: dict[str, Any]) -> dict[str, Any]:
        raise OSError(f"disk full at {job['variant']}")

    monkeypatch.setattr(run_grid, "run_one", failing_run)
    with pytest.raises(OSError, match="disk full"):
        run_grid.run_until(jobs(), times, 1, minutes=None)


def test_a_study_runner_starts_no_untimed_run_under_minutes_and_says_how_to_time_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study_runner = _load("study_runner")
    every = [{"variant": variant, "env": "E", "seed": 0, "run_dir": tmp_path / variant} for variant in ("timed", "new")]
    (tmp_path / "timed").mkdir()
    (tmp_path / "timed" / "run.json").write_text(json.dumps({"returncode": 0, "seconds": 3600.0}))
    todo = [{**every[0], "seed": 1}, every[1]]  # nothing fits in a minute: no run starts
    study_runner.train(todo, every, workers=1, minutes=1.0)
    assert len(todo) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "2 runs left for later: 1 not expected to finish in the time left; 1 not timed yet (--minutes starts only runs "
        "of a variant and env with a finished run): run the study once without --minutes to time them"
    )


# Run in a fresh interpreter (a hang becomes a timeout, and no earlier test's threads or signal state is shared),
# with SIGINT as a shell's Ctrl-C delivers it: a real signal to the process
INTERRUPTED_GRID = """
import json, os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may inherit SIGINT ignored
sys.path.insert(0, sys.argv[1])
import run_grid
trained, ended = [], []

def interrupted_run(job):
    trained.append(job["seed"])
    if len(trained) == 2:
        os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)
    ended.append(job["seed"])
    return {**job, "returncode": 0, "seconds": 0.05}

run_grid.run_one = interrupted_run
todo = [{"variant": "a", "env": "E", "seed": seed, "run_dir": None} for seed in range(50)]
try:
    run_grid.run_until(todo, {}, 2, minutes=None)
    outcome = "not interrupted"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
print(json.dumps({"outcome": outcome, "trained": trained, "ended": ended, "left": len(todo)}))
"""


def test_an_interrupted_grid_starts_no_new_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Ctrl-C while the second run trains (the zoo's train then exits 0, see run_one): the runs already started
    # end, the other 48 are not started, and the caller sees the interrupt
    seen = _interrupted(INTERRUPTED_GRID)
    assert seen["outcome"] == "KeyboardInterrupt"
    # The waiting thread takes the signal at once: only the runs started before it, give or take one
    assert 2 <= len(seen["trained"]) <= 10 and seen["left"] == 50 - len(seen["trained"])
    # ... and it returns only once the running ones have ended (an interrupted Thread.join would not wait)
    assert sorted(seen["ended"]) == sorted(seen["trained"])

    # The same harness runs tune.py's workers: one worker's error stops the others' loops too
    loops = [0, 0]

    def work(index: int, stop: threading.Event) -> None:
        while not stop.is_set() and loops[index] < 10_000:
            loops[index] += 1
            if index == 0 and loops[0] == 3:
                raise ValueError("worker 0 broke")
            time.sleep(0.001)

    with pytest.raises(ValueError, match="worker 0 broke"):
        executors.run_workers(work, 2)
    assert loops[0] == 3 and loops[1] < 10_000


def test_published_grid_keeps_its_config() -> None:
    run_grid = _load("run_grid")
    assert run_grid.RESET_PPO_CONF == ROOT / "benchmarks" / "kit" / "grid.yml"
    assert run_grid.conf_file("reset") == run_grid.conf_file("mask") == run_grid.RESET_PPO_CONF
    grid = yaml.safe_load(run_grid.RESET_PPO_CONF.read_text())
    # The grid's envs trained every window every epoch
    for env_id in run_grid.DEFAULT_ENVS:
        assert grid[env_id]["window_stride"] == 1 and grid[env_id]["window_size"] == 16
    packaged = yaml.safe_load((ROOT / "sb3_reset_ppo" / "zoo" / "reset_ppo.yml").read_text())
    # The packaged config sets no window setting (ResetPPO's defaults) and covers the grid's envs
    for env_id in run_grid.DEFAULT_ENVS:
        assert "window_stride" not in packaged[env_id] and "window_size" not in packaged[env_id]
