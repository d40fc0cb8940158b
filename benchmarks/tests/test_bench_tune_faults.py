"""
``benchmarks/kit/tune.py optimize`` surviving a killed trial: real zoo processes on a journal-file study, one of
them killed with SIGKILL while its trial trains. Slow (about two minutes on 2 busy cores: three zoo
processes, each importing the RL Zoo and torch), so it runs under ``make test-slow``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_helpers import ROOT

ENV_ID, ARM = "EarlyChoice-v0", "ev_reset"
STUDY = f"{ENV_ID}_{ARM}"  # tune.study_name
TRIALS = 2
# The sampled settings that decide a trial's cost, queued for every trial: one minibatch of 32 steps x 8 envs per
# rollout, one epoch, the smallest network (tests/experiments/test_postgres_tuning.py's)
CHEAP = {"n_steps_pow": 5, "batch_size_pow": 8, "n_epochs": 1, "net_arch": "tiny", "window_size": 8}


def _zoo_processes(marker: str) -> list[int]:
    """The pids of the zoo's ``-optimize`` processes whose command line holds ``marker`` (this test's folder)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            line = (entry / "cmdline").read_bytes()
        except OSError:  # ended meanwhile, or not readable
            continue
        if b"sb3_reset_ppo.zoo" in line and b"-optimize" in line and marker.encode() in line:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the zoo's processes in /proc (Linux)")
def test_a_killed_trial_is_marked_failed_and_trained_again_and_the_study_completes(tmp_path: Path) -> None:
    import optuna

    storage = tmp_path / ENV_ID / ARM / "study.log"
    storage.parent.mkdir(parents=True)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(storage)))  # type: ignore[attr-defined]
    study = optuna.create_study(study_name=STUDY, storage=journal, direction="maximize")
    for _ in range(TRIALS):
        study.enqueue_trial(CHEAP)
    tune = [
        sys.executable, str(ROOT / "benchmarks" / "kit" / "tune.py"), "optimize", "--envs", ENV_ID, "--arms", ARM,
        "--trials", str(TRIALS), "--workers", "1", "--n-timesteps", "2048", "--n-evaluations", "2",
        "--eval-episodes", "2", "--out", str(tmp_path),
    ]  # fmt: skip
    process = subprocess.Popen(
        tune, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    killed: list[int] = []
    try:
        # The first trial's zoo process, killed once its trial is running and has sampled its settings (it trains)
        deadline = time.monotonic() + 300
        while not killed and process.poll() is None and time.monotonic() < deadline:
            running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            pids = _zoo_processes(str(tmp_path))
            if running and len(running[0].params) > len(CHEAP) and len(pids) == 1:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(running[0].number)
            time.sleep(0.2)
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        for pid in _zoo_processes(str(tmp_path)):  # none but on a failure: this test's own zoo processes only
            os.kill(pid, signal.SIGKILL)
    text = output.decode(errors="replace")
    logs = text + "\n" + (storage.parent / "worker0.txt").read_text(errors="replace")[-3000:]
    assert killed == [0], logs
    assert process.returncode == 0, logs
    # The killed process's trial is marked failed, queued again with all its settings, and trained again in the same
    # session; the study completes with its budget and counts no trial twice
    assert f"{ENV_ID} {ARM} worker 0: trial(s) [0] left running by its zoo process (exit code -9) marked failed" in text
    trials = optuna.load_study(study_name=STUDY, storage=journal).get_trials()
    states = [trial.state.name for trial in trials]
    assert states == ["FAIL", "COMPLETE", "COMPLETE"], logs
    # (trials 0 and 1 are the two queued at the start, trial 2 the killed one's settings queued again)
    assert trials[2].params == trials[0].params and trials[1].params != trials[0].params
    assert f"{ENV_ID} {ARM}: {TRIALS} trials in " in text, logs
