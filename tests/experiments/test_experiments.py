"""The experiment package: runs through the zoo, their records, local and packed execution, the statistics."""

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sb3_reset_ppo.experiments import executors, runner, stats, training_log
from sb3_reset_ppo.experiments.runner import RunSpec

PACKAGED_CONF = Path(runner.__file__).resolve().parents[1] / "zoo" / "reset_ppo.yml"


def _spec(tmp_path: Path, **changes: Any) -> RunSpec:
    values: dict[str, Any] = {
        "algo": "reset_ppo", "env": "CueRecall-v0", "seed": 3, "run_dir": tmp_path / "run", "conf_file": PACKAGED_CONF,
    }  # fmt: skip
    return RunSpec(**{**values, **changes})


def test_zoo_command_holds_the_runs_settings(tmp_path: Path) -> None:
    spec = _spec(tmp_path, hyperparams=["window_size:32"], gym_packages=["my_envs"], steps=4000, evaluations=8)
    args = runner.zoo_command(spec)
    assert args[:4] == [sys.executable, "-m", "sb3_reset_ppo.zoo", "train"]
    pairs = {args[i]: args[i + 1] for i in range(4, len(args) - 1) if args[i].startswith("-")}
    assert pairs["--algo"] == "reset_ppo" and pairs["--env"] == "CueRecall-v0" and pairs["--seed"] == "3"
    assert pairs["--conf-file"] == str(PACKAGED_CONF) and pairs["-f"] == str(tmp_path / "run")
    # 8 evaluations over 4000 steps, one torch thread, a kept log (every update) only when asked
    assert pairs["--eval-freq"] == "500" and pairs["-n"] == "4000" and pairs["--num-threads"] == "1"
    assert pairs["--log-interval"] == "-1" and runner.zoo_command(_spec(tmp_path, keep_log=True))[-1] == "1"
    assert args[args.index("--gym-packages") + 1] == "my_envs" and args[-2:] == ["--hyperparams", "window_size:32"]
    # Without steps: the file's budget (CueRecall-v0: 3e4), no -n
    default = runner.zoo_command(_spec(tmp_path))
    assert "-n" not in default and default[default.index("--eval-freq") + 1] == str(30_000 // 20)


def test_run_spec_rejects_bad_values_and_round_trips(tmp_path: Path) -> None:
    for name, value in [("eval_episodes", 0), ("evaluations", 2.5), ("steps", -1), ("steps", True)]:
        with pytest.raises(ValueError, match=name):
            _spec(tmp_path, **{name: value})
    spec = _spec(tmp_path, hyperparams=["a:1"], extra={"note": "x"})
    assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    missing = tmp_path / "conf.yml"
    missing.write_text("OtherEnv-v0:\n  n_timesteps: 100\n")
    with pytest.raises(ValueError, match="no entry for env 'CueRecall-v0'"):
        runner.zoo_command(_spec(tmp_path, conf_file=missing))
    missing.write_text("CueRecall-v0:\n  policy: MlpLstmPolicy\n")
    with pytest.raises(ValueError, match="no n_timesteps"):
        runner.zoo_command(_spec(tmp_path, conf_file=missing))


LOG = """
-----------------------------
| time/              |      |
|    fps             | 400  |
|    time_elapsed    | 2    |
|    total_timesteps | 1000 |
-----------------------------
-----------------------------
| time/              |      |
|    time_elapsed    | 6    |
|    total_timesteps | 2000 |
| train/             |      |
|    approx_kl       | 0.01 |
-----------------------------
"""


def _fake_trainer(spec: RunSpec, evaluations: int, exit_code: int = 0) -> list[str]:
    """A trainer that prints a training log and writes the zoo's evaluations file, then exits with ``exit_code``."""
    folder = spec.run_dir / spec.algo / f"{spec.env}_1"
    code = (
        f"import os, numpy; os.makedirs({str(folder)!r}); print({LOG!r}); "
        f"numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=500 * numpy.arange(1, {evaluations} + 1), "
        f"results=numpy.ones(({evaluations}, 2))); raise SystemExit({exit_code})"
    )
    return [sys.executable, "-c", code]


def test_run_one_records_a_finished_run_with_its_log_and_curves(tmp_path: Path) -> None:
    spec = _spec(tmp_path, evaluations=4, keep_log=True, label="mine", extra={"note": 1})
    result = runner.run_one(spec, _fake_trainer(spec, 4))
    stored = json.loads((spec.run_dir / "run.json").read_text())
    assert stored == result and result["variant"] == "mine" and result["note"] == 1 and result["evaluations"] == 4
    assert result["host"] and result["machine"] == runner.machine() and result["started"].endswith("Z")
    assert runner.recorded(spec.run_dir) and runner.status(result, 4) == "ok"
    with gzip.open(spec.run_dir / "log.txt.gz", "rt") as log:
        assert "approx_kl" in log.read()
    rows = training_log.read_csv(spec.run_dir / "progress.csv.gz")
    assert rows == [
        {"time/fps": 400.0, "time/time_elapsed": 2.0, "time/total_timesteps": 1000.0},
        {"time/time_elapsed": 6.0, "time/total_timesteps": 2000.0, "train/approx_kl": 0.01},
    ]
    # Loaded with its evaluations, and learn() seconds at each: interpolated on the log's clock (1000 steps at 400
    # steps/s: 2.5 s, not the whole seconds of time_elapsed; a row without fps: its time_elapsed, 6 s), past its last
    # row at the run's own pace (6 s for 2000 steps)
    layout = tmp_path / "grid" / "mine" / "CueRecall-v0" / "seed3"
    spec2 = _spec(tmp_path, run_dir=layout, evaluations=4, keep_log=True, label="mine")
    runner.run_one(spec2, _fake_trainer(spec2, 4))
    (run,) = runner.load_runs(tmp_path / "grid", final_evaluations=2)
    assert run["timesteps"].tolist() == [500, 1000, 1500, 2000] and run["final"] == 1.0 and run["auc"] == 1.0
    assert runner.elapsed_seconds(run) == pytest.approx([1.25, 2.5, 4.25, 6.0])
    run["timesteps"] = np.array([2500.0])
    assert runner.elapsed_seconds(run) == pytest.approx([7.5])


def test_run_one_records_failures_and_not_cut_runs(tmp_path: Path) -> None:
    spec = _spec(tmp_path, evaluations=4)
    failed = runner.run_one(spec, _fake_trainer(spec, 4, exit_code=3))
    assert runner.status(failed, 4) == "FAILED (3)" and (spec.run_dir / "failed.json").exists()
    assert runner.recorded(spec.run_dir) and not runner.recorded(spec.run_dir, retry_failed=True)
    # Fewer evaluations than asked (the zoo's train exits 0 on Ctrl-C): nothing recorded, trained again
    short = runner.run_one(spec, _fake_trainer(spec, 3))
    assert runner.status(short, 4) == "TRUNCATED (3 evaluations)" and not runner.recorded(spec.run_dir)
    cut = runner.run_one(spec, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert runner.status(cut) == "CUT (signal 9)" and not runner.recorded(spec.run_dir)


def test_load_failed_finds_failed_runs_of_a_layout(tmp_path: Path) -> None:
    run_dir = tmp_path / "arm" / "CueRecall-v0" / "seed0"
    spec = _spec(tmp_path, run_dir=run_dir, evaluations=2)
    runner.run_one(spec, _fake_trainer(spec, 2, exit_code=2))
    (failed,) = runner.load_failed(tmp_path)
    assert failed["returncode"] == 2 and failed["dir"] == run_dir and runner.load_runs(tmp_path) == []


def test_run_local_runs_every_item_once_on_the_workers_and_reports_each() -> None:
    seen: list[int] = []
    lock = threading.Lock()
    active = {"now": 0, "most": 0}

    def train(item: int) -> dict[str, Any]:
        with lock:
            active["now"] += 1
            active["most"] = max(active["most"], active["now"])
        time.sleep(0.02)
        with lock:
            active["now"] -= 1
        return {"item": item}

    todo = list(range(7))
    results = executors.run_local(todo, train, 2, on_result=lambda item, result: seen.append(item))
    assert sorted(seen) == list(range(7)) and sorted(r["item"] for r in results) == list(range(7))
    assert todo == [] and active["most"] == 2
    # A pick that declines (nothing fits in the time left) starts nothing
    todo = [1, 2]
    assert executors.run_local(todo, train, 2, minutes=1, pick=lambda items, left: None) == [] and todo == [1, 2]
    with pytest.raises(ValueError, match="workers must be a positive int, got 0"):
        executors.run_local([1], train, 0)
    with pytest.raises(ValueError, match="minutes must be positive"):
        executors.run_local([1], train, 1, minutes=0)


def test_packed_runs_come_back_whole_and_archives_cannot_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Ray task's body, without Ray: the run trains in a scratch folder and comes back as an archive
    monkeypatch.setattr(runner, "zoo_command", lambda spec: _fake_trainer(spec, 2))
    spec = _spec(tmp_path, run_dir=tmp_path / "driver" / "run", evaluations=2, keep_log=True)
    result, data = executors.train_packed(spec.to_dict())
    assert runner.status(result, 2) == "ok" and not spec.run_dir.exists()
    executors._unpack(data, spec.run_dir)
    assert json.loads((spec.run_dir / "run.json").read_text()) == result
    assert (spec.run_dir / "progress.csv.gz").exists() and runner.evaluations_done(spec.run_dir) == 2
    # An archive with a path leaving the folder is refused
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.FilterError):
        executors._unpack(buffer.getvalue(), tmp_path / "target")
    assert not (tmp_path / "escaped.txt").exists()


def test_run_ray_checks_its_address() -> None:
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="address must be a Ray cluster address"):
        executors.run_ray([], "", init=lambda **kwargs: None)


def _run(env: str, seed: int, started: str, seconds: float, **fields: Any) -> dict[str, Any]:
    return {"env": env, "seed": seed, "started": started, "seconds": seconds, "machine": {"cpu": "A"}, "host": "h",
            "commit": "c", **fields}  # fmt: skip


def test_side_by_side_pairs_need_the_same_machine_commit_and_overlap() -> None:
    base = [_run("E", 0, "2026-12-04T10:00:00Z", 100.0), _run("E", 1, "2026-12-04T11:00:00Z", 100.0)]
    runs = [
        _run("E", 0, "2026-12-04T10:00:10Z", 30.0),  # inside: paired
        _run("E", 1, "2026-12-04T11:01:25Z", 30.0),  # overlaps 15 s of 30: half, paired
        _run("E", 1, "2026-12-04T11:01:26Z", 30.0),  # overlaps 14 s: not
        _run("E", 0, "2026-12-04T10:00:10Z", 30.0, host="other"),
        _run("E", 0, "2026-12-04T10:00:10Z", 30.0, commit="d"),
        _run("F", 0, "2026-12-04T10:00:10Z", 30.0),
    ]
    pairs = stats.side_by_side(runs, base)
    assert [(runs.index(a), base.index(b)) for a, b in pairs] == [(0, 0), (1, 1)]
    assert stats.overlap(runs[0], base[0]) == 30.0 and stats.timestamp("1970-01-01T00:01:00Z") == 60.0


def test_score_at_and_significance() -> None:
    times, scores = np.array([1.0, 2.0, 4.0]), np.array([0.1, 0.2, 0.4])
    assert stats.score_at(times, scores, 0.5, before_first=-1.0) == -1.0
    assert stats.score_at(times, scores, 2.0, before_first=-1.0) == 0.2
    assert stats.score_at(times, scores, 9.0, before_first=-1.0) == 0.4
    assert stats.significance(0.6, 0.9, 0.5) == "better" and stats.significance(0.1, 0.4, 0.5) == "worse"
    assert stats.significance(0.4, 0.6, 0.5) == "not significant"


def test_aggregate_probability_of_improvement_brute_force() -> None:
    # P(X > Y) over all pairs of runs (ties count half): rliable's estimate for one task
    x, y = np.array([[3.0], [1.0], [4.0], [1.0]]), np.array([[2.0], [1.0], [0.0], [5.0]])
    expected = np.mean([(a > b) + 0.5 * (a == b) for a in x[:, 0] for b in y[:, 0]])
    point, interval, poi, poi_ci = stats.aggregate({"x": x, "y": y}, reps=200, baseline="y")
    assert stats.probability_triple(poi, poi_ci, "x,y")[0] == pytest.approx(expected)
    low, high = stats.probability_triple(poi, poi_ci, "x,y")[1:]
    assert 0.0 <= low <= expected <= high <= 1.0
    # IQM of 4 runs: the mean of the middle two
    assert point["x"][0] == pytest.approx(2.0) and interval["x"].shape == (2, 2)
    with pytest.raises(ValueError, match="baseline 'z' is not one of"):
        stats.aggregate({"x": x}, reps=10, baseline="z")


def test_packed_runs_train_with_the_files_text_not_the_drivers_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On another machine the driver's path does not exist: the task writes the text it was sent and trains with it
    def trainer_that_reads_its_conf(spec: RunSpec) -> list[str]:
        assert spec.conf_file.read_text() == "CueRecall-v0:\n  n_timesteps: 1000\n" and spec.conf_file != absent
        return _fake_trainer(spec, 2)

    absent = tmp_path / "driver_only" / "settings.yml"
    monkeypatch.setattr(runner, "zoo_command", trainer_that_reads_its_conf)
    spec = _spec(tmp_path, conf_file=absent, evaluations=2, steps=1000)
    result, _ = executors.train_packed(spec.to_dict(), "CueRecall-v0:\n  n_timesteps: 1000\n")
    assert runner.status(result, 2) == "ok"


class _FakeRay:
    """Enough of Ray's API for run_ray: tasks run at once; a task's outcome is chosen by its seed."""

    class exceptions:
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            pass

        class WorkerCrashedError(RayError):
            pass

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], str | None]] = []

    def remote(self, **options: Any) -> Any:
        fake = self

        class Task:
            @staticmethod
            def remote(values: dict[str, Any], conf_text: str | None) -> int:
                fake.sent.append((values, conf_text))
                return len(fake.sent) - 1

        return lambda function: Task

    def wait(self, refs: list[int], num_returns: int) -> tuple[list[int], list[int]]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: int) -> tuple[dict[str, Any], bytes]:
        values, _ = self.sent[ref]
        if values["seed"] == 1:
            raise self.exceptions.RayTaskError("ValueError in the task")
        if values["seed"] == 2:
            raise self.exceptions.WorkerCrashedError("the worker died")
        folder = Path(values["run_dir"])
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as archive:
            record = json.dumps({"returncode": 0}).encode()
            info = tarfile.TarInfo("run.json")
            info.size = len(record)
            archive.addfile(info, io.BytesIO(record))
        return {"seed": values["seed"], "returncode": 0, "folder": str(folder)}, data.getvalue()

    def cancel(self, ref: int, force: bool = False) -> None:
        pass


def test_run_ray_sends_settings_records_task_errors_and_retries_lost_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    specs = [_spec(tmp_path, seed=seed, run_dir=tmp_path / f"seed{seed}") for seed in range(3)]
    seen: list[str] = []
    results = executors.run_ray(
        specs, "auto", on_result=lambda spec, result: seen.append(runner.status(result)), init=lambda **kw: None,
        attempts=1,
    )  # fmt: skip
    # Every task got the file's text and the budget read on the driver (CueRecall-v0: 3e4 steps)
    assert [values["steps"] for values, _ in fake.sent] == [30_000] * 3
    assert all(text == PACKAGED_CONF.read_text() for _, text in fake.sent)
    # Seed 0 came back and was unpacked; seed 1's task raised: failed, recorded with the error; seed 2 was lost with
    # its worker: not recorded, trained next time
    assert seen == ["ok", "FAILED (1)", "CUT (signal 1)"] and len(results) == 3
    assert json.loads((tmp_path / "seed0" / "run.json").read_text()) == {"returncode": 0}
    failed = json.loads((tmp_path / "seed1" / "failed.json").read_text())
    assert "RayTaskError: ValueError in the task" in failed["error"] and runner.recorded(tmp_path / "seed1")
    assert not runner.recorded(tmp_path / "seed2")


def test_run_ray_sends_a_lost_run_again_and_stores_each_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    lost: list[int] = []
    get = fake.get

    def lost_the_first_time(ref: int) -> tuple[dict[str, Any], bytes]:
        # Seed 3's first task is lost with its node; every later one comes back (seed 2's never does)
        if fake.sent[ref][0]["seed"] == 3 and not lost:
            lost.append(ref)
            raise fake.exceptions.WorkerCrashedError("the node died")
        return get(ref)

    monkeypatch.setattr(fake, "get", lost_the_first_time)
    specs = [_spec(tmp_path, seed=seed, run_dir=tmp_path / f"seed{seed}") for seed in (0, 2, 3)]
    seen: list[tuple[int, str]] = []
    again: list[tuple[int, int]] = []
    results = executors.run_ray(
        specs, "auto", on_result=lambda spec, result: seen.append((spec.seed, runner.status(result))),
        init=lambda **kw: None, on_lost=lambda spec, result, attempt: again.append((spec.seed, attempt)),
    )  # fmt: skip
    # Seed 3 was sent again and came back; seed 2 was sent three times in all, then left for next time
    assert [values["seed"] for values, _ in fake.sent] == [0, 2, 3, 2, 3, 2]
    assert again == [(2, 2), (3, 2), (2, 3)]
    # One record per run, each reported once; the runs that came back stored once, in their own folders
    assert sorted(seen) == [(0, "ok"), (2, "CUT (signal 1)"), (3, "ok")] and len(results) == 3
    assert runner.recorded(tmp_path / "seed0") and runner.recorded(tmp_path / "seed3")
    assert not runner.recorded(tmp_path / "seed2")
    with pytest.raises(ValueError, match="attempts must be a positive int"):
        executors.run_ray(specs, "auto", init=lambda **kw: None, attempts=0)


def test_run_one_never_deletes_a_folder_it_did_not_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A folder of someone else's (e.g. the current folder, reached through an odd env id): refused, left as it is
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    spec = _spec(tmp_path, run_dir=foreign, evaluations=2)
    with pytest.raises(FileExistsError, match=r"run_dir '.*mine' exists and is not a run's folder"):
        runner.run_one(spec, _fake_trainer(spec, 2))
    assert [path.name for path in foreign.iterdir()] == ["precious.txt"]
    assert (foreign / "precious.txt").read_text() == "keep me"
    # Nor does a Ray run's result replace it, or a Ray comparison start with it among its runs
    monkeypatch.setattr(runner, "zoo_command", lambda spec: _fake_trainer(spec, 2))
    _, data = executors.train_packed(_spec(tmp_path, run_dir=tmp_path / "elsewhere", evaluations=2).to_dict())
    with pytest.raises(FileExistsError, match="is not a run's folder"):
        executors._unpack(data, foreign)
    assert (foreign / "precious.txt").exists()
    monkeypatch.setitem(sys.modules, "ray", _FakeRay())

    def connect(**kwargs: Any) -> None:
        raise AssertionError("nothing may start before the folders are checked")

    with pytest.raises(FileExistsError, match="is not a run's folder"):
        executors.run_ray([spec], "auto", init=connect)
    # An empty folder is used; an earlier attempt's folder (the runner's marker: a run cut by a signal) is replaced
    empty = _spec(tmp_path, run_dir=tmp_path / "empty", evaluations=2)
    empty.run_dir.mkdir()
    assert runner.status(runner.run_one(empty, _fake_trainer(empty, 2)), 2) == "ok"
    cut = _spec(tmp_path, run_dir=tmp_path / "cut", evaluations=2)
    runner.run_one(cut, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert (cut.run_dir / runner.RUN_MARKER).exists() and not runner.recorded(cut.run_dir)
    (cut.run_dir / "left_over.txt").write_text("x")
    assert runner.status(runner.run_one(cut, _fake_trainer(cut, 2)), 2) == "ok"
    assert not (cut.run_dir / "left_over.txt").exists()
    # A failed run recorded before the marker existed (failed.json only) is trained again with --retry-failed
    old = tmp_path / "old_failed"
    old.mkdir()
    (old / runner.FAILED_FILE).write_text("{}")
    runner.check_run_dir(old)


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not yet reaped by its new parent, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_the_trainer_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # A driver (a Ray worker, a compare command) killed with SIGKILL, as a forced Ray cancellation kills a worker: the
    # trainer it started must not train on as an orphan
    pid_file = tmp_path / "trainer.pid"
    trainer = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    driver = (
        "import sys; from pathlib import Path; from sb3_reset_ppo.experiments import runner; "
        f"spec = runner.RunSpec('reset_ppo', 'CueRecall-v0', 0, Path({str(tmp_path / 'run')!r}), Path('x.yml')); "
        f"runner.run_one(spec, [sys.executable, '-c', {trainer!r}])"
    )
    process = subprocess.Popen([sys.executable, "-c", driver])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        trainer_pid = int(pid_file.read_text())
        assert _alive(trainer_pid)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 10
        while _alive(trainer_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        still_running = _alive(trainer_pid)
        if still_running:
            os.kill(trainer_pid, signal.SIGKILL)
        assert not still_running, "the trainer outlived the process that started it"
    finally:
        process.kill()
        process.wait()


def test_stale_scratch_folders_of_killed_workers_are_removed(tmp_path: Path) -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead, alive = finished.pid, os.getppid()
    for pid in (dead, alive, os.getpid()):
        (tmp_path / f"{executors.scratch_prefix(pid)}abc").mkdir()
    # Not this machine's (another container sharing the folder: its pids mean nothing here), not a scratch folder
    kept = [f"{executors.SCRATCH_PREFIX}{dead}_otherhost_abc", f"{executors.SCRATCH_PREFIX}notapid", "unrelated"]
    for name in kept:
        (tmp_path / name).mkdir()
    assert executors.remove_stale_scratch(tmp_path) == [tmp_path / f"{executors.scratch_prefix(dead)}abc"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [f"{executors.scratch_prefix(alive)}abc", f"{executors.scratch_prefix()}abc", *kept]
    )
    # train_packed's own folder carries this process's prefix
    assert executors.scratch_prefix().startswith(f"{executors.SCRATCH_PREFIX}{os.getpid()}_")


def test_a_run_stopped_by_then_counts_its_final_score() -> None:
    times, scores = np.array([1.0, 2.0, 4.0]), np.array([0.1, 0.2, 0.6])
    # Still training: the last evaluation by then; stopped (at or past its last evaluation): the mean of the last 2
    assert [stats.score_at_time(times, scores, at, 2, before_first=-1.0) for at in (0.5, 1.0, 3.9)] == [-1.0, 0.1, 0.2]
    assert stats.score_at_time(times, scores, 4.0, 2, -1.0) == stats.score_at_time(times, scores, 9.0, 2, -1.0)
    assert stats.score_at_time(times, scores, 9.0, 2, -1.0) == pytest.approx(0.4)
    assert stats.score_at_time(times, scores, 9.0, 1, -1.0) == 0.6 and stats.score_at_time(times, scores, 9.0, 5, -1.0) == 0.3
    with pytest.raises(ValueError, match="final_evaluations must be a positive int, got 0"):
        stats.score_at_time(times, scores, 1.0, 0, -1.0)
    with pytest.raises(ValueError, match=r"times and scores must be 1-D of one length, got shapes \(3,\) and \(2,\)"):
        stats.score_at_time(times, scores[:2], 1.0, 2, -1.0)


def _rank_sum_p(x: list[float], y: list[float]) -> float:
    """The two-sided exact permutation p-value of the rank sum (midranks), by enumerating every split."""
    import itertools

    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([x, y]))
    center = len(x) * (len(ranks) + 1) / 2
    observed = abs(ranks[: len(x)].sum() - center)
    sums = np.array([ranks[list(split)].sum() for split in itertools.combinations(range(len(ranks)), len(x))])
    return float(np.mean(np.abs(sums - center) >= observed - 1e-9))


def test_mann_whitney_is_exact_without_ties_and_a_permutation_test_with_them() -> None:
    from scipy.stats import mannwhitneyu

    # 10 runs against 10 without ties: the exact distribution (scipy's default would take the normal approximation)
    x, y = [float(v) for v in range(10)], [v + 0.5 for v in range(2, 12)]
    p, method = stats.mann_whitney(x, y)
    assert method == "exact" and p == pytest.approx(mannwhitneyu(x, y, method="exact").pvalue, rel=1e-12)
    assert p != pytest.approx(mannwhitneyu(x, y).pvalue, rel=1e-3)
    # ...which is also the permutation distribution of the rank sum (the same test, no ties)
    assert p == pytest.approx(_rank_sum_p(x, y), rel=1e-9)
    # 10 against 10 with ties: every one of the 184,756 splits enumerated
    x, y = [0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0], [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 5.0, 6.0]
    p, method = stats.mann_whitney(x, y)
    assert method == "permutation" and p == pytest.approx(_rank_sum_p(x, y), rel=1e-9)
    assert p != pytest.approx(mannwhitneyu(x, y).pvalue, rel=1e-3)
    # More splits than PERMUTATIONS (15 against 15: 155 million): random splits, seeded, close to the enumeration's
    x15, y15 = [*x, 0.0, 1.0, 2.0, 6.0, 7.0], [*y, 4.0, 5.0, 6.0, 7.0, 8.0]
    p, method = stats.mann_whitney(x15, y15)
    assert method == "permutation (monte carlo)" and p == stats.mann_whitney(x15, y15)[0]
    assert p == pytest.approx(mannwhitneyu(x15, y15).pvalue, abs=0.01)  # the normal approximation is good here
    # Nothing to test
    assert stats.mann_whitney([1.0, 1.0], [1.0]) == (1.0, "undefined") and stats.mann_whitney([], [1.0]) == (1.0, "undefined")
