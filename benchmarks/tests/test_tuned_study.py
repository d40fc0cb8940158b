"""
The tuned study's runner (``benchmarks/studies/tuned/tuned_study.py``): the top trials of a search, the selection's
runs and its rule, the fresh-seed runs of the selected trial, its runs stopped by a signal (fake searches and runs,
no training).
"""

import json
import signal
import sys
from pathlib import Path
from typing import Any

import bench_helpers
import pytest
from bench_helpers import ROOT, _fake_run, _load

from benchmarks.kit import rundata
from sb3_reset_ppo.experiments import runner

study = _load("tuned_study")

# Raw parameters of the zoo's ppo_lstm sampler (a trial of either arm's search)
PARAMS: dict[str, Any] = {
    "batch_size_pow": 6, "n_steps_pow": 8, "one_minus_gamma": 0.01, "one_minus_gae_lambda": 0.05,
    "learning_rate": 1e-3, "ent_coef": 0.01, "clip_range": 0.2, "n_epochs": 5, "max_grad_norm": 0.5,
    "net_arch": "tiny", "activation_fn": "relu",
}  # fmt: skip


def _search(path: Path, name: str, trials: list[tuple[str, float | None]]) -> None:
    """A journal study of ppo_lstm trials: (state, value) each, in trial-number order."""
    import optuna

    path.parent.mkdir(parents=True, exist_ok=True)
    storage = study.tune._backend(str(path))
    search = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    for number, (state, value) in enumerate(trials):
        params: dict[str, Any] = {**PARAMS, "n_epochs": number + 1}  # the trial's number, readable in its settings
        distributions: dict[str, Any] = {
            key: optuna.distributions.CategoricalDistribution([item]) for key, item in params.items()
        }
        search.add_trial(
            optuna.trial.create_trial(
                state=getattr(optuna.trial.TrialState, state), value=value, distributions=distributions, params=params
            )
        )


def test_top_trials_rank_completed_trials_by_value_then_number(tmp_path: Path) -> None:
    trials = [("COMPLETE", 1.0), ("PRUNED", None), ("COMPLETE", 3.0), ("COMPLETE", 1.0), ("FAIL", None), ("COMPLETE", 3.0)]
    path = tmp_path / "study.log"
    _search(path, "s", trials)
    top = study.tune.top_trials(str(path), "s", 3)
    # Ties go to the earlier trial; pruned and failed trials never count
    assert [(number, value) for number, value, _ in top] == [(2, 3.0), (5, 3.0), (0, 1.0)]
    assert top[0][2]["n_epochs"] == 3
    with pytest.raises(ValueError, match="4 completed trials, fewer than 5"):
        study.tune.top_trials(str(path), "s", 5)
    with pytest.raises(ValueError, match="count must be at least 1"):
        study.tune.top_trials(str(path), "s", 0)


def test_selection_trains_the_top_five_on_three_seeds_and_picks_the_best_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "tuned"
    # ResetPPO's search is this study's; RecurrentPPO's the Q4 search
    _search(out / "search" / "CartPoleNoVel-v1" / "tuned_reset" / "study.log", "CartPoleNoVel-v1_tuned_reset",
            [("COMPLETE", float(v)) for v in (5, 9, 1, 7, 9, 3, 8)])  # fmt: skip
    q4 = tmp_path / "tuning"
    _search(q4 / "CartPoleNoVel-v1" / "ev_rppo" / "study.log", "CartPoleNoVel-v1_ev_rppo", [("COMPLETE", 1.0)] * 6)
    # The protocol selects from a whole search only
    with pytest.raises(ValueError, match="has 7 of its 30 trials finished"):
        study.selection_jobs("CartPoleNoVel-v1", "tuned_reset", out, None, q4)
    jobs = study.selection_jobs("CartPoleNoVel-v1", "tuned_reset", out, None, q4, trials=7)
    assert [(j["extra"]["trial"], j["seed"]) for j in jobs][:4] == [(1, 200), (1, 201), (1, 202), (4, 200)]
    assert sorted({j["extra"]["trial"] for j in jobs}) == [0, 1, 3, 4, 6] and len(jobs) == 15
    folder = out / "selection" / "CartPoleNoVel-v1" / "tuned_reset"
    assert jobs[0]["run_dir"] == folder / "trial1" / "seed200" and jobs[0]["conf"] == folder / "trial1.yml"
    assert {j["variant"] for j in jobs} == {"tuned_reset"} and {j["eval_episodes"] for j in jobs} == {20}
    config = study.yaml.safe_load(jobs[0]["conf"].read_text())["CartPoleNoVel-v1"]
    # The trial's settings over evidence.yml's entry, at the env's budget, with ResetPPO's default windows
    assert (config["n_epochs"], config["n_steps"], config["n_timesteps"], config["window_size"]) == (2, 256, 1e5, "batch")
    rppo = study.selection_jobs("CartPoleNoVel-v1", "ev_rppo", out, None, q4, trials=6)
    assert sorted({j["extra"]["trial"] for j in rppo}) == [0, 1, 2, 3, 4]
    assert "window_size" not in study.yaml.safe_load(rppo[0]["conf"].read_text())["CartPoleNoVel-v1"]
    # Both arms' runs interleaved, trial by trial and seed by seed: two workers train them side by side
    assert [j["variant"] for j in study.interleaved(jobs + rppo)][:4] == ["tuned_reset", "ev_rppo"] * 2

    finals = {1: [1.0, 2.0, 3.0], 4: [3.0, 1.0, 2.0], 6: [0.0, 0.0, 6.0], 0: [1.0, 1.0, 1.0], 3: [2.0, 2.0, 1.0]}

    def store(number: int, seed: int) -> None:
        # <selection>/<env>/<arm>/trial<k>/seed<s>/ is the grid layout <grid>/<variant>/<env>/seed<s> one level down
        _fake_run(folder.parent, "tuned_reset", f"trial{number}", seed, [0.0, finals[number][seed - 200]], trial=number)

    for number in finals:
        for seed in study.SELECTION_SEEDS:
            if (number, seed) != (3, 202):
                store(number, seed)
    # Not before every run is stored
    assert study.select(folder, list(finals)) is None
    store(3, 202)
    chosen = study.select(folder, list(finals))
    # Trials 1, 4 and 6 tie at a mean of 2 (6 by one lucky seed); the earliest, 1, is selected
    assert chosen is not None and chosen["trial"] == 1 and chosen["mean"] == pytest.approx(2.0)
    assert chosen["finals"]["6"] == [0.0, 0.0, 6.0] and chosen["means"]["0"] == pytest.approx(1.0)

    # The fresh seeds train the selected trial's file, once its selection is stored
    assert study.fresh_jobs("CartPoleNoVel-v1", "tuned_reset", out, None) == []
    (folder / study.SELECTED).write_text(json.dumps(chosen))
    fresh = study.fresh_jobs("CartPoleNoVel-v1", "tuned_reset", out, None)
    assert [j["seed"] for j in fresh] == list(range(300, 310)) and {j["conf"] for j in fresh} == {folder / "trial1.yml"}
    assert fresh[0]["run_dir"] == out / "fresh" / "tuned_reset" / "CartPoleNoVel-v1" / "seed300"
    assert fresh[0]["extra"] == {"stage": "fresh", "trial": 1}
    # Under --minutes, the selected trial's selection runs (10 + seed s each: median 211 s) time its fresh runs until
    # one of those has finished; the other trials' runs do not
    timing = study.selection_timing("CartPoleNoVel-v1", "tuned_reset", out)
    assert [j["run_dir"] for j in timing] == [folder / "trial1" / f"seed{s}" for s in study.SELECTION_SEEDS]
    assert study.run_grid.median_times(timing) == {("tuned_reset", "CartPoleNoVel-v1"): 211.0}
    assert study.selection_timing("CartPoleNoVel-v1", "ev_rppo", out) == []
    started: list[int] = []

    def fake_until(todo: list[dict[str, Any]], times: dict[Any, float], *_: Any) -> None:
        taken = study.run_grid.next_job(todo, times, 300.0)
        started.extend([] if taken is None else [taken["seed"]])

    monkeypatch.setattr(study.run_grid, "run_until", fake_until)
    study.train(fresh, 1, 5.0, out)  # untimed: nothing starts under a time limit
    study.train(fresh, 1, 5.0, out, timed_by=timing)  # 211 s x 1.25 fits in 300 s
    _fake_run(out / "fresh", "tuned_reset", "CartPoleNoVel-v1", 300, [0.0])  # a fresh run of 310 s times them now
    study.train(fresh, 1, 5.0, out, timed_by=timing)
    assert started == [300]
    with pytest.raises(ValueError, match="no search of tuned_reset on EarlyChoice-v0"):
        study.selection_jobs("EarlyChoice-v0", "tuned_reset", out, None, q4, trials=1)


def test_a_fresh_seeds_two_runs_start_together() -> None:
    """
    Each seed's RecurrentPPO run first, its ResetPPO run only once that one has started or is stored: two workers
    train a seed's runs side by side, and under --minutes a pair whose RecurrentPPO run does not fit starts neither.
    """
    run_grid = study.run_grid

    def job(arm: str, seed: int) -> dict[str, Any]:
        return {"variant": arm, "env": "CartPoleNoVel-v1", "seed": seed}

    jobs = study.fresh_order([job("tuned_reset", 300), job("tuned_reset", 301), job("ev_rppo", 301), job("ev_rppo", 300)])
    assert [(j["variant"], j["seed"]) for j in jobs] == [
        ("ev_rppo", 300), ("tuned_reset", 300), ("ev_rppo", 301), ("tuned_reset", 301)
    ]  # fmt: skip
    times = {("ev_rppo", "CartPoleNoVel-v1"): 1000.0, ("tuned_reset", "CartPoleNoVel-v1"): 100.0}
    # 500 s left: RecurrentPPO's runs do not fit, so no ResetPPO run starts either (without the rule one would)
    assert run_grid.next_job(list(jobs), times, 500.0, ready=study.partner_started) is None
    assert run_grid.next_job(list(jobs), times, 500.0) == job("tuned_reset", 300)
    # No limit: the pairs in order, each ResetPPO run after its partner has left the queue
    todo = list(jobs)
    taken = [run_grid.next_job(todo, times, None, ready=study.partner_started) for _ in range(4)]
    assert taken == jobs and todo == []
    # A ResetPPO run whose partner is stored (not in the queue) is ready; one whose partner waits is not
    assert study.partner_started(job("tuned_reset", 301), [job("tuned_reset", 301)])
    assert not study.partner_started(job("tuned_reset", 301), [job("tuned_reset", 301), job("ev_rppo", 301)])
    # With 1,500 s left the first pair fits: its RecurrentPPO run, then its ResetPPO run
    todo = list(jobs)
    assert run_grid.next_job(todo, times, 1500.0, ready=study.partner_started) == job("ev_rppo", 300)
    assert run_grid.next_job(todo, times, 1500.0, ready=study.partner_started) == job("tuned_reset", 300)


# The study's train() in a process of its own, on fake runs of 2 s (each writes run_one's marker, then its record)
STOPPED_SELECTION = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import tuned_study
from benchmarks.kit import run_grid
from sb3_reset_ppo.experiments import runner

def run_one(job):
    job["run_dir"].mkdir(parents=True)
    (job["run_dir"] / runner.RUN_MARKER).write_text("")
    time.sleep(2)
    record = {"variant": "a", "env": "T", "seed": job["seed"], "returncode": 0, "seconds": 2.0, "evaluations": 20}
    runner.write_record(job["run_dir"] / runner.RUN_FILE, record)
    return record

run_grid.run_one = run_one
out = Path(sys.argv[2])
tuned_study.train([{"variant": "a", "env": "T", "seed": seed, "run_dir": out / "a" / "T" / f"seed{seed}"}
                   for seed in range(4)], 1, None, out)
"""


def test_a_signal_stops_the_runs_after_the_running_one_and_stores_the_study(tmp_path: Path) -> None:
    out = tmp_path / "tuned"
    command = [sys.executable, "-c", STOPPED_SELECTION, str(ROOT / "benchmarks" / "studies" / "tuned"), str(out)]
    first = out / "a" / "T" / "seed0"
    code, text = bench_helpers.stopped_by(signal.SIGTERM, command, (first / runner.RUN_MARKER).exists, tmp_path / "log.txt")
    # Python's exit for an uncaught KeyboardInterrupt: ended by SIGINT (130 in a shell)
    assert code == -signal.SIGINT, text[-4000:]
    line = "stopping (SIGTERM): no new run starts; waiting for the running ones (1); send the signal again to stop them now"
    assert text.count(line) == 1 and text.count(": ok in ") == 1, text
    # The running run finished and is recorded; no other started; the study is stored as its tables
    assert json.loads((first / runner.RUN_FILE).read_text())["returncode"] == 0
    assert [path.relative_to(out).as_posix() for path in out.glob("*/*/seed*")] == ["a/T/seed0"]
    assert f"stored: 2 files in 1 rows -> {rundata.runs_table('tuned', tmp_path)}" in text
