"""
Helpers shared by the tests of the benchmark scripts (``benchmarks/``): loading a script as a module, a fake
finished run, one short run through a study's runner, running an interrupt script in a fresh interpreter, and stopping
a study's command by a signal.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as th

# Two cores are shared by two pytest workers: one torch thread each (as the package's tests/conftest.py sets)
th.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]


def script(name: str) -> Path:
    """The benchmark script ``name`` (``benchmarks/kit/``, ``benchmarks/speed/`` or a study's folder): names are unique."""
    paths = sorted((ROOT / "benchmarks").glob(f"**/{name}.py"))
    assert len(paths) == 1, f"{name}.py: {paths}"
    return paths[0]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, script(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Each study's regenerated pages and summaries, made once per test session (the report takes long)
_REGENERATED: dict[str, tuple[Path, Path]] = {}


def regenerated(name: str, scratch: Path) -> tuple[Path, Path]:
    """
    The pages and summaries of study ``name`` regenerated from its stored runs (the kit's report command), made once
    per test session: tests that read them mark themselves ``xdist_group(name)`` so that one worker makes them.

    :param name: The study (its folder's name)
    :param scratch: The session's scratch folder (``tmp_path_factory.getbasetemp()``)
    :return: The pages' folder and the summaries' folder
    """
    if name not in _REGENERATED:
        studies = _load("studies")
        pages, summaries = scratch / f"regenerated_{name}" / "pages", scratch / f"regenerated_{name}" / "summaries"
        studies.report(studies.load(name), pages, summaries)
        _REGENERATED[name] = pages, summaries
    return _REGENERATED[name]


def _fake_run(
    grid: Path,
    variant: str,
    env_id: str,
    seed: int,
    eval_means: list[float],
    budget: int | None = None,
    **run_fields: Any,
) -> None:
    """
    A finished run as run_grid.py leaves it: run.json and the zoo's evaluations.npz (an evaluation every 1000
    steps), with the zoo's saved config.yml when ``budget`` is given.
    """
    run_dir = grid / variant / env_id / f"seed{seed}"
    algo = "ppo_lstm" if variant == "ppo_lstm" else "reset_ppo"
    zoo_dir = run_dir / algo / f"{env_id}_1"
    zoo_dir.mkdir(parents=True)
    n_evaluations, n_episodes = len(eval_means), 4
    np.savez(
        zoo_dir / "evaluations.npz",
        timesteps=1000 * np.arange(1, n_evaluations + 1),
        # (n_evaluations,) -> (n_evaluations, n_episodes): every episode of an evaluation returns its mean
        results=np.repeat(np.array(eval_means)[:, None], n_episodes, axis=1),
        ep_lengths=np.ones((n_evaluations, n_episodes)),
    )
    if budget is not None:
        (zoo_dir / env_id).mkdir()
        # The zoo's format (an OrderedDict as a list of pairs)
        (zoo_dir / env_id / "config.yml").write_text(
            "!!python/object/apply:collections.OrderedDict\n- - - n_envs\n    - 8\n"
            f"  - - n_timesteps\n    - {float(budget)}\n  - - policy\n    - MlpLstmPolicy\n"
        )
    run = {"variant": variant, "env": env_id, "seed": seed, "returncode": 0, "seconds": 10.0 + seed, "command": "x"}
    (run_dir / "run.json").write_text(json.dumps({**run, **run_fields}))


def short_study_run(
    study: ModuleType, report: ModuleType, folder: Path, steps: int, option: str, variant: str, task: str
) -> dict[str, Any]:
    """
    One short run of a study through its runner (``--steps``, one worker, one seed, into ``folder`` under the study's
    folder name), checked: it finished with its evaluations and its commit, the study's folder was stored as its
    tables, and the study's report reads the run's ``learn()`` seconds.

    :param study: The study's runner module (its ``main`` and ``OUT``)
    :param report: The study's report module (its ``load``)
    :param folder: The folder of the study's folder and its tables
    :param steps: Env steps of the run
    :param option: The runner's variants option without its dashes (``arms`` or ``settings``)
    :param variant: The arm or setting
    :param task: The task
    :return: The run's record (``run.json``)
    """
    out = folder / study.OUT.name
    arguments = ["--out", str(out), "--steps", str(steps), "--allow-dirty", "--workers", "1", "--seeds", "1"]
    study.main([*arguments, f"--{option}", variant, "--tasks", task])
    record: dict[str, Any] = json.loads((out / variant / task / "seed0" / "run.json").read_text())
    assert record["returncode"] == 0 and record["evaluations"] >= 20 and len(record["commit"]) == 40
    assert (folder / f"{out.name}.runs.jsonl.gz").is_file()
    runs, _ = report.load(out)
    assert runs[task][variant][0]["learn_seconds"] is not None
    return record


def _interrupted(code: str, *args: str) -> dict[str, Any]:
    """Run one of the interrupt scripts and return what it printed last (JSON)."""
    result = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks" / "kit"), *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


# The longest tests of benchmarks/tests, longest first (by their measured durations; a fresh clone's first study
# regeneration also unpacks the stored runs' tables, about 5 CPU s). They run first (conftest.py): pytest orders the
# paths of the command line by folder, so a long test may otherwise start last and leave the other xdist worker idle
# at the end. test_test_order.py checks that each id is collected
LONGEST_FIRST = (
    "benchmarks/tests/test_studies.py::test_regenerated_pages_equal_the_stored_ones[gru]",
    "benchmarks/tests/test_studies.py::test_regenerated_pages_equal_the_stored_ones[masking_fair]",
    "benchmarks/tests/test_bench_tune.py::test_tuning_rerun_refuses_a_partial_or_missing_search",
    "benchmarks/tests/test_bench_tune.py::test_tuning_queues_again_a_trial_cut_by_ctrl_c",
    "benchmarks/tests/test_zoo_rows_study.py::test_a_signal_lets_the_running_run_finish_and_starts_no_other",
    "benchmarks/tests/test_bench_threads.py::test_bench_threads_measures_each_thread_count_in_a_fresh_process",
    "benchmarks/tests/test_masking_fair_envs.py::test_fair_returns_of_memoryless_frame_stack_and_memory_policies",
    "benchmarks/tests/test_bench_decisions.py::test_evidence_report_writes_the_protocols_reports_and_readme_tables",
)


def longest_first(items: list[pytest.Item]) -> None:
    """Put the tests of ``LONGEST_FIRST`` first, in its order; every other test keeps its place."""
    rank = {node_id: index for index, node_id in enumerate(LONGEST_FIRST)}
    # list.sort is stable: the tests not listed keep their collection order, after the listed ones
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))


def stopped_by(
    signum: int, command: list[str], started: Callable[[], bool], log: Path, seconds: float = 300
) -> tuple[int, str]:
    """
    Start a study's ``command`` (its output to ``log``, in a session of its own so that only it gets the signal, as
    from ``kill PID``), send it ``signum`` once ``started()`` holds, and return its exit code and output once it ends.
    """
    with open(log, "wb") as output:
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        options: dict[str, Any] = {"stdout": output, "stderr": subprocess.STDOUT, "cwd": ROOT, "env": environment}
        process = subprocess.Popen(command, start_new_session=True, **options)
    try:
        deadline = time.monotonic() + seconds
        while not started():
            assert process.poll() is None and time.monotonic() < deadline, f"not started:\n{log.read_text()[-4000:]}"
            time.sleep(0.1)
        process.send_signal(signum)
        return process.wait(seconds), log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
