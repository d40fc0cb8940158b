"""
The benchmark that decided the thread advice (benchmarks/speed/bench_threads.py), its stored results, and that every
benchmark that trains takes a thread count. The advice itself is tested with the package (tests/common/test_threads.py).
"""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.tests.bench_helpers import ROOT, _load
from sb3_reset_ppo.common.utils import ONE_THREAD_MAX_HIDDEN_SIZE


def _table_row(text: str, setting: str, algo: str, condition: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {setting} | {algo} | {condition} |"))


def test_bench_threads_measures_each_thread_count_in_a_fresh_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load("bench_threads")
    # The busy condition's process sleeps here instead of spinning: the test checks that each condition is measured
    # and reported, and a spinning loop would take a core from the other test worker for the whole measurement
    assert "while os.getppid() == parent:" in bench.BUSY_LOOP
    sleeping = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent:\n    time.sleep(0.1)\n"
    monkeypatch.setattr(bench, "BUSY_LOOP", sleeping)
    # One thread only: on the shared cores of a test run, more would take minutes (which is the benchmark's point)
    argv = ["--settings", "mlp_gru64", "--threads", "1", "--conditions", "idle", "busy", "--repeats", "1"]
    results = bench.main([*argv, "--learn-steps", "64", "--timeout", "300", "--out", str(tmp_path / "out")])
    (result,) = results  # RecurrentPPO has no GRU: ResetPPO only
    assert result["algo"] == "reset_ppo" and result["learn_steps"] == 64
    for condition in ("idle", "busy"):
        one = result["figures"][condition]["1"]
        assert one["torch_threads"] == [1] and one["wall"] > 0 and one["cpu"] > 0 and one["timed_out"] == 0
        assert 0 <= one["load"][0] <= one["load"][1]
    text = (tmp_path / "out.txt").read_text()
    assert text.startswith("command: python benchmarks/speed/bench_threads.py --settings mlp_gru64 --threads 1 --conditions")
    assert "| mlp_gru64 | ResetPPO | busy |" in text
    assert json.loads((tmp_path / "out.json").read_text())["results"] == json.loads(json.dumps(results))


def test_a_measurement_with_torchs_default_sets_no_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child gets no OMP_NUM_THREADS / MKL_NUM_THREADS, and "default" makes no set_num_threads call
    bench = _load("bench_threads")
    seen: dict[str, Any] = {}

    def fake_run(command: list[str], **kwargs: Any) -> Any:
        seen.update(command=command, env=kwargs["env"])
        return type("Done", (), {"returncode": 0, "stdout": '{"learn_wall": 1.0, "learn_cpu": 1.0, "torch_threads": 2}\n'})

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    run = bench.measure("mlp_lstm64", "reset_ppo", "default", 64, bench.parse_args([]))
    assert run["torch_threads"] == 2 and run["timed_out"] is False and "OMP_NUM_THREADS" not in seen["env"]
    assert seen["command"][-5:] == ["mlp_lstm64", "reset_ppo", "default", "64", "0"]


def test_bench_threads_marks_a_median_of_stopped_runs_as_a_lower_bound() -> None:
    bench = _load("bench_threads")

    def run(wall: float, stopped: bool = False) -> dict[str, Any]:
        return {"learn_wall": wall, "learn_cpu": None if stopped else wall, "timed_out": stopped, "load": 1.0,
                "torch_threads": None if stopped else 2}  # fmt: skip

    assert bench.summarise([run(1.0), run(2.0), run(30.0, True)])["wall_censored"] is False
    summary = bench.summarise([run(1.0), run(30.0, True), run(30.0, True)])
    assert summary["wall_censored"] is True and summary["wall"] == 30.0 and summary["timed_out"] == 2
    assert summary["cpu"] == 1.0 and summary["torch_threads"] == [2]


TRAINING_BENCHMARKS = ["bench_train", "bench_memory", "bench_maskable", "bench_consecutive", "bench_stride"]

# Each script run as `python SCRIPT --help` runs it (as __main__, its folder first on sys.path), all in one interpreter:
# one import of torch and SB3 instead of one a script. Prints {script: [exit code, stdout, stderr]} as JSON
_HELP_OF_EACH = """
import contextlib, io, json, runpy, sys
found = {}
for path in sys.argv[1:]:
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv, sys.path[0] = [path, "--help"], path.rsplit("/", 1)[0]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    found[path.rsplit("/", 1)[1][:-3]] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def benchmark_help() -> dict[str, list[Any]]:
    """Each training benchmark's ``--help``: its exit code, stdout and stderr."""
    scripts = [str(ROOT / "benchmarks" / "speed" / f"{script}.py") for script in TRAINING_BENCHMARKS]
    result = subprocess.run([sys.executable, "-c", _HELP_OF_EACH, *scripts], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("script", TRAINING_BENCHMARKS)
def test_every_benchmark_that_trains_takes_a_thread_count(script: str, benchmark_help: dict[str, list[Any]]) -> None:
    # One thread by default (what bench_threads.py measured to be fastest), --threads to change it
    returncode, stdout, stderr = benchmark_help[script]
    assert returncode == 0, stderr[-2000:]
    assert "--threads THREADS" in stdout
    source = (ROOT / "benchmarks" / "speed" / f"{script}.py").read_text()
    assert re.search(r'add_argument\("--threads", type=int, default=1\b', source)


def _ratios(name: str) -> dict[tuple[str, int, str], list[float]]:
    """
    A stored bench_threads result: for each (policy, hidden size, condition), every repeat's seconds with 2 threads and
    with torch's default over the same repeat's seconds with one (a stopped run counts its stopping time: a lower bound).
    """
    stored = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
    text = (ROOT / "benchmarks" / "results" / f"{name}.txt").read_text()
    assert text.startswith(f"command: {stored['command']}\n")
    assert {r["setting"] for r in stored["results"]} == {"mlp_lstm64", "mlp_lstm256", "mlp_gru64", "cnn_lstm64", "cnn_lstm256"}
    assert {r["algo"] for r in stored["results"]} == {"reset_ppo", "recurrent_ppo"}
    ratios: dict[tuple[str, int, str], list[float]] = {}
    for r in stored["results"]:
        for condition in ("idle", "busy"):
            figures = r["figures"][condition]
            assert f"| {r['setting']} | {'ResetPPO' if r['algo'] == 'reset_ppo' else 'RecurrentPPO'} | {condition} |" in text
            for repeat, one in enumerate(figures["1"]["runs"]):
                assert not one["timed_out"] and one["load"] > 0
                for threads in ("2", "default"):
                    ratio = figures[threads]["runs"][repeat]["learn_wall"] / one["learn_wall"]
                    ratios.setdefault((r["policy"][:3], r["hidden"], condition), []).append(ratio)
    return ratios


def test_the_stored_measurements_are_what_the_advice_says() -> None:
    # Two runs of benchmarks/speed/bench_threads.py: on a quiet machine (nothing else running) and on one shared with other
    # work. Up to ONE_THREAD_MAX_HIDDEN_SIZE, without convolutions, one thread was faster in every measurement of
    # both; beside a busy process in every setting; above that size, or with convolutions, more threads were faster on
    # the idle machine, so the advice leaves them out
    quiet, shared = _ratios("bench_threads_quiet"), _ratios("bench_threads")
    for ratios in (quiet, shared):
        advised = [value for (policy, hidden, _), values in ratios.items() if policy == "Mlp" for value in values
                   if hidden <= ONE_THREAD_MAX_HIDDEN_SIZE]  # fmt: skip
        assert len(advised) == 36 and min(advised) > 1.0
        busy = [value for (_, _, condition), values in ratios.items() if condition == "busy" for value in values]
        assert len(busy) == 54 and min(busy) > 1.5
    assert ONE_THREAD_MAX_HIDDEN_SIZE == 64
    assert min(quiet["Mlp", 256, "idle"]) < 1.0 and max(quiet["Cnn", 64, "idle"] + quiet["Cnn", 256, "idle"]) < 1.0


def test_the_performance_pages_thread_table_is_the_stored_measurements() -> None:
    def cell(name: str, group: tuple[str, set[int]], conditions: tuple[str, ...]) -> str:
        stored = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
        values = [
            (figures[threads]["runs"][repeat]["learn_wall"] / one["learn_wall"], figures[threads]["runs"][repeat]["timed_out"])
            for r in stored["results"] if r["policy"].startswith(group[0]) and r["hidden"] in group[1]
            for condition in conditions for figures in [r["figures"][condition]]
            for repeat, one in enumerate(figures["1"]["runs"]) for threads in ("2", "default")
        ]  # fmt: skip
        low, (high, stopped) = min(value for value, _ in values), max(values)
        return f"{low:.2f} to {'more than 5' if stopped else f'{high:.2f}'}"

    page = (ROOT / "docs" / "studies" / "performance.md").read_text()
    rows = {
        "MLP, hidden size 64 (LSTM, GRU)": ("Mlp", {64}),
        "MLP, LSTM 256": ("Mlp", {256}),
        "CNN, LSTM 64 and 256": ("Cnn", {64, 256}),
    }
    for label, group in rows.items():
        cells = [cell("bench_threads_quiet", group, ("idle",)), cell("bench_threads_quiet", group, ("busy",)),
                 cell("bench_threads", group, ("idle", "busy"))]  # fmt: skip
        assert f"| {label} | {' | '.join(cells)} |" in page, (label, cells)
