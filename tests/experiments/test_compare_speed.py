"""The compare command's speed finding: ``learn()`` without the evaluations, the ratio of the medians shown, and
no verdict from runs too short or too noisy to judge speed."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sb3_reset_ppo.experiments import compare, runner, training_log


def _log(run_dir: Path, rows: list[dict[str, float]]) -> dict[str, Any]:
    run_dir.mkdir(parents=True)
    training_log.write_csv(rows, run_dir / "progress.csv.gz")
    return {"dir": run_dir, "timesteps": np.array([1000.0, 2000.0])}


def test_learn_seconds_leave_out_the_evaluations(tmp_path: Path) -> None:
    # 2000 steps at 100 steps/s: 20 s on SB3's clock, of which the evaluations took 6 s (cumulative in the log; the
    # evaluation's own row, without fps, carries it to the next training row)
    run = _log(
        tmp_path / "run",
        [
            {"time/fps": 100.0, "time/total_timesteps": 1000.0, runner.EVALUATION_SECONDS: 2.0, "time/iterations": 1.0},
            {"time/total_timesteps": 1500.0, runner.EVALUATION_SECONDS: 4.0},
            {"time/fps": 100.0, "time/total_timesteps": 2000.0, runner.EVALUATION_SECONDS: 6.0, "time/iterations": 2.0},
        ],
    )
    assert runner.elapsed_seconds(run) == pytest.approx([8.0, 14.0])
    assert runner.evaluation_seconds(run) == 6.0 and runner.updates(run) == 2
    # A log without the key (runs recorded before it was logged): SB3's clock as it is, evaluations included
    old = _log(tmp_path / "old", [{"time/fps": 100.0, "time/total_timesteps": 2000.0}])
    assert runner.elapsed_seconds(old) == pytest.approx([10.0, 20.0])
    assert runner.evaluation_seconds(old) is None and runner.updates(old) is None


def test_learn_seconds_never_fall_below_zero_or_go_back(tmp_path: Path) -> None:
    # SB3 logs time_elapsed in whole seconds: 1 s on its clock at step 1000, though the evaluations had taken 1.5 s by
    # then; 3 s at step 2000 with 2.5 s of evaluations
    run = _log(
        tmp_path / "run",
        [
            {"time/time_elapsed": 1.0, "time/total_timesteps": 1000.0, runner.EVALUATION_SECONDS: 1.5},
            {"time/time_elapsed": 3.0, "time/total_timesteps": 2000.0, runner.EVALUATION_SECONDS: 2.5},
        ],
    )
    assert runner.elapsed_seconds(run) == pytest.approx([0.0, 0.5])
    # A later row whose clock, less its evaluations, falls below an earlier one's keeps the earlier seconds
    back = _log(
        tmp_path / "back",
        [
            {"time/fps": 100.0, "time/total_timesteps": 1000.0, runner.EVALUATION_SECONDS: 0.0},
            {"time/fps": 100.0, "time/total_timesteps": 2000.0, runner.EVALUATION_SECONDS: 12.0},
        ],
    )
    assert runner.elapsed_seconds(back) == pytest.approx([10.0, 10.0])


def _run(seed: int, seconds: float, updates: int, evaluating: float | None = 3.0) -> dict[str, Any]:
    return {
        "env": "E", "seed": seed, "final": 1.0 + seed, "auc": 1.0 + seed, "started": "2026-12-04T10:00:00Z",
        "seconds": 60.0, "host": "h", "machine": {}, "commit": "c", "times": np.array([seconds / 2, seconds]),
        "eval_mean": np.array([1.0, 1.0 + seed]), "evaluation_seconds": evaluating, "updates": updates,
    }  # fmt: skip


def _speed_line(by_arm: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, Any], str]:
    summary = compare.analyse(by_arm, "b", 100, 1)
    (line,) = [line for line in compare.verdict(summary, 2) if line.startswith("Per second")]
    return summary, line


def test_the_time_ratio_says_which_ratio_it_is_beside_the_medians() -> None:
    # Medians 5 s and 20 s; the four side-by-side pairs' ratios 0.2, 0.2, 0.3 and 0.3
    by_arm = {"a": [_run(0, 4.0, 30), _run(1, 6.0, 30)], "b": [_run(0, 20.0, 30), _run(1, 20.0, 30)]}
    summary, line = _speed_line(by_arm)
    comparison = summary["comparisons"]["a"]
    assert summary["arms"]["a"]["learn_seconds"] == 5.0 and summary["arms"]["b"]["learn_seconds"] == 20.0
    assert comparison["time_ratio"] == pytest.approx(0.25) and comparison["pair_ratios"] == [0.2, 0.3]
    assert "takes 0.25 of b's time, the median ratio of 4 pairs of runs that trained at the same time on one machine, " in line
    assert "0.20 to 0.30 (median `learn()` 5.0 s (evaluations apart: 3.0 s) against 20.0 s (evaluations apart: 3.0 s)" in line
    table = compare.markdown(
        summary,
        {"env": "E", "command": "c", "conf_file": "f", "hyperparams": [], "seeds": 2, "timesteps": 1, "evaluations": 2,
         "eval_episodes": 1, "final_evaluations": 1, "arms": []},
        [line], [], Path("."),
    )  # fmt: skip
    assert "| a | 2 | " in table and "| 5.0 | 3.0 | " in table and "| 0.25 (4 pairs: 0.20 to 0.30) |" in table


def test_too_short_runs_give_no_speed_verdict() -> None:
    # The README's earlier quick look: 4 updates per run
    by_arm = {"a": [_run(0, 4.0, 4), _run(1, 6.0, 4)], "b": [_run(0, 20.0, 4), _run(1, 20.0, 4)]}
    _, line = _speed_line(by_arm)
    assert "**too short to judge speed**: a run made 4 update(s), fewer than 10" in line and "takes" not in line


def test_pairs_on_both_sides_of_one_give_no_speed_verdict() -> None:
    by_arm = {"a": [_run(0, 15.0, 30), _run(1, 25.0, 30)], "b": [_run(0, 20.0, 30), _run(1, 20.0, 30)]}
    _, line = _speed_line(by_arm)
    assert "**not enough to judge speed**" in line and "0.75 to 1.25" in line and "takes" not in line


def test_runs_whose_logs_do_not_time_evaluations_say_so() -> None:
    by_arm = {"a": [_run(0, 5.0, 30, None), _run(1, 5.0, 30)], "b": [_run(0, 20.0, 30), _run(1, 20.0, 30)]}
    summary, line = _speed_line(by_arm)
    assert summary["arms"]["a"]["evaluation_seconds"] is None
    assert "5.0 s (evaluations included: the runs' logs do not time them)" in line
