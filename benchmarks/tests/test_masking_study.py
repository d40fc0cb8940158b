"""The masking study's tooling (benchmarks/studies/masking/PROTOCOL.md): the report's statistics and the runner's resume."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_helpers import _load

masking_study = _load("masking_study")
masking_report = _load("masking_report")

EVALUATIONS = 16  # step 0 and 15 after training starts, as the protocol's runs


def _record(arm: str, seed: int, success: float, rng: np.random.Generator, episodes: int = 40) -> dict[str, Any]:
    """A synthetic run: every evaluation's episodes succeed (return 1) with probability ``success``, else 0 or -1."""
    evaluations = []
    for index in range(EVALUATIONS):
        p = 0.25 if index == 0 else success
        returns = np.where(rng.random(episodes) < p, 1.0, rng.choice([0.0, -1.0], size=episodes))
        # No two runs tie (the Mann-Whitney test is then exact, and fast): a tiny shift per arm and seed
        returns[0] += 1e-4 * (seed + 10 * list(masking_study.ARMS).index(arm))
        evaluations.append({
            "timesteps": 2048 * index, "learn_cpu_seconds": 1.5 * index, "learn_wall_seconds": 2.0 * index,
            "returns": returns.tolist(), "lengths": [5] * episodes,
        })  # fmt: skip
    return {
        "arm": arm, "seed": seed, "evaluations": evaluations, "learn_cpu_seconds": 22.5, "learn_wall_seconds": 30.0,
        "commit": "0" * 40, "dirty": False, "machine": {"cpu": "test", "cores": 2}, "command": "test",
    }  # fmt: skip


def _write(folder: Path, successes: dict[str, float], seeds: int = 10) -> None:
    rng = np.random.default_rng(0)
    for arm, success in successes.items():
        for seed in range(seeds):
            path = masking_study.result_path(folder, arm, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_record(arm, seed, success, rng)))


def _comparison(summary: dict[str, Any], other: str, endpoint: str) -> dict[str, Any]:
    (match,) = [c for c in summary["comparisons"] if c["other"] == other and c["endpoint"] == endpoint]
    return match


def test_report_calls_a_clearly_better_arm_better_and_equal_arms_not_significant(tmp_path: Path) -> None:
    # (a) succeeds in 98% of episodes, (b) in 20% (below chance: many invalid actions), (c) as (a)
    _write(tmp_path, {"maskable_reset_ppo": 0.98, "reset_ppo": 0.2, "maskable_ppo": 0.98})
    runs = masking_report.load_runs(tmp_path)
    summary = masking_report.analyse(runs, reps=200)
    for endpoint in ("final", "over_training"):
        better = _comparison(summary, "reset_ppo", endpoint)
        assert better["verdict"] == "better"
        assert better["probability"][0] == 1.0 and better["p_holm"] < 0.05
        same = _comparison(summary, "maskable_ppo", endpoint)
        assert same["verdict"] == "not significant"
        assert same["probability"][1] < 0.5 < same["probability"][2]
    # The family is the protocol's 4 tests, Holm-adjusted: no adjusted p below its raw p
    assert len(summary["comparisons"]) == 4
    assert all(c["p_holm"] >= c["p"] for c in summary["comparisons"])
    # Both arms solve on every seed: the criterion fails because (c) solves too
    assert summary["success"]["a_solved"] == 10 and summary["success"]["c_solved"] == 10
    assert summary["success"]["holds"] is False
    # The normalised score of the final evaluations: near (0.98 - 0.25) / 0.75 for (a)
    assert summary["arms"]["maskable_reset_ppo"]["final"]["iqm"][0] == pytest.approx(0.973, abs=0.03)


def test_report_success_criterion_and_worse_verdict(tmp_path: Path) -> None:
    # (a) fails (chance), (b) solves, (c) at chance: (a) is worse than (b); the criterion does not hold
    _write(tmp_path, {"maskable_reset_ppo": 0.25, "reset_ppo": 0.99, "maskable_ppo": 0.25})
    summary = masking_report.analyse(masking_report.load_runs(tmp_path), reps=200)
    assert _comparison(summary, "reset_ppo", "final")["verdict"] == "worse"
    assert summary["success"]["a_solved"] == 0 and summary["success"]["holds"] is False
    # And the criterion holds where (a) solves and (c) stays at chance
    _write(tmp_path, {"maskable_reset_ppo": 0.99})
    summary = masking_report.analyse(masking_report.load_runs(tmp_path), reps=200)
    assert summary["success"]["holds"] is True
    assert _comparison(summary, "maskable_ppo", "final")["verdict"] == "better"


def test_verdict_needs_both_the_interval_and_the_test() -> None:
    assert masking_report.verdict(0.6, 0.9, 0.01) == "better"
    assert masking_report.verdict(0.1, 0.4, 0.01) == "worse"
    assert masking_report.verdict(0.4, 0.9, 0.01) == "not significant"  # interval holds 0.5
    assert masking_report.verdict(0.6, 0.9, 0.05) == "not significant"  # adjusted p not below 0.05


def test_endpoints_and_first_solved() -> None:
    scores = np.array([-1.0] + [0.0] * 5 + [0.95] * 7 + [0.9, 0.6, 0.9])
    run = {"scores": scores, "timesteps": 2048.0 * np.arange(16), "cpu": 1.5 * np.arange(16)}
    values = masking_report.endpoints(run)
    assert values["final"] == pytest.approx(0.8)  # the last 3 of the 15 evaluations after step 0
    assert values["over_training"] == pytest.approx(np.mean(scores[1:]))  # step 0 excluded
    assert masking_report.first_solved(run) == (2048.0 * 6, 1.5 * 6)
    assert masking_report.first_solved({**run, "scores": np.full(16, 0.5)}) is None


def test_report_writes_results_and_figure(tmp_path: Path) -> None:
    results = tmp_path / "results_in"
    _write(results, {"maskable_reset_ppo": 0.99, "reset_ppo": 0.1, "maskable_ppo": 0.3}, seeds=3)
    masking_report.main([
        "--results", str(results), "--out", str(tmp_path), "--summaries", str(tmp_path / "results"), "--reps", "50",
        "--notes", str(tmp_path / "none.md"),
    ])  # fmt: skip
    text = (tmp_path / "RESULTS.md").read_text()
    assert "(a) 3 of 3, (c) 0 of 3: **does not hold**" in text  # 3 seeds: not "most" of 10
    assert (tmp_path / "figures" / "learning_curves.png").stat().st_size > 0
    assert json.loads((tmp_path / "results" / "masking_summary.json").read_text())["success"]["a_solved"] == 3


def test_runner_resume_skips_finished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finished = masking_study.result_path(tmp_path, "maskable_ppo", 0)
    finished.parent.mkdir(parents=True)
    finished.write_text("{}")
    jobs = masking_study.jobs_to_do(tmp_path, ["maskable_ppo", "reset_ppo"], [0, 1])
    assert [(j["arm"], j["seed"]) for j in jobs] == [("reset_ppo", 0), ("maskable_ppo", 1), ("reset_ppo", 1)]
    with pytest.raises(ValueError, match="unknown arms"):
        masking_study.jobs_to_do(tmp_path, ["rppo"], [0])
    # A real run of a few hundred steps, then a rerun that finds nothing to do and leaves the record untouched
    argv = ["--seeds", "1", "--arms", "maskable_reset_ppo", "--workers", "1", "--out", str(tmp_path)]
    masking_study.main([*argv, "--total-steps", "256", "--eval-episodes", "2"])
    path = masking_study.result_path(tmp_path, "maskable_reset_ppo", 0)
    record = json.loads(path.read_text())
    assert [e["timesteps"] for e in record["evaluations"]] == [0, 1024]  # step 0 and the end (one rollout of 8 x 128)
    assert record["masking"] is True and record["total_steps"] == 256
    assert path.with_name("seed_0.log.txt.gz").exists()
    before = path.read_text()
    masking_study.main([*argv, "--total-steps", "256", "--eval-episodes", "2"])
    assert "0 runs to do" in capsys.readouterr().out
    assert path.read_text() == before


def test_later_evaluations_after_solving_do_not_count_the_first_to_solve(tmp_path: Path) -> None:
    # Every (a) run solves at its first evaluation after the initial one (success 1.0 from index 1), so the later
    # evaluations are the EVALUATIONS - 2 after that one, per run (issue 51's audit: the solving one was counted too)
    _write(tmp_path, {"maskable_reset_ppo": 1.0, "reset_ppo": 0.2, "maskable_ppo": 0.3}, seeds=3)
    summary = masking_report.analyse(masking_report.load_runs(tmp_path), reps=50)
    entry = summary["arms"]["maskable_reset_ppo"]
    assert entry["reached"] == 3 and entry["evaluations_after_solved"] == 3 * (EVALUATIONS - 2)
    assert entry["relapses"] == [0, 0, 0]
