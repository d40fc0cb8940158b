"""
The tuned study's report (``benchmarks/studies/tuned/tuned_report.py``) regenerated from fake fresh-seed runs: the
endpoints, the tests, the time comparison and the selection, the same page twice.
"""

import json
from pathlib import Path

import pytest
from bench_helpers import _fake_run, _load

from sb3_reset_ppo.experiments import training_log

report = _load("tuned_report")
MACHINE = {"cpu": "Fake CPU", "cores": 2, "extensions": []}


def _runs(out: Path) -> None:
    """
    Fresh-seed runs of both arms, 5 evaluations of 1000 steps each, ResetPPO twice as fast: on CartPoleNoVel-v1 every
    ResetPPO run ends above every RecurrentPPO run; on EarlyChoice-v0 they end alike; PendulumNoVel-v1 has ResetPPO's only.
    """
    for seed in range(300, 305):
        shift = seed - 300
        arms: dict[str, dict[str, list[float]]] = {
            "CartPoleNoVel-v1": {"tuned_reset": [0, 100, 200, 300, 400 + shift], "ev_rppo": [0, 50, 100, 150, 200 + shift]},
            "EarlyChoice-v0": {"tuned_reset": [0, 1, 2, 3, 3.0 + shift], "ev_rppo": [0, 1, 1, 2, 3.0 + shift]},
            "PendulumNoVel-v1": {"tuned_reset": [-900, -500, -300, -200, -150 - shift]},
        }
        for env, by_arm in arms.items():
            for arm, means in by_arm.items():
                trial = {"tuned_reset": 4, "ev_rppo": 12}[arm]
                _fake_run(
                    out / "fresh", arm, env, seed, means, trial=trial, commit="0123456789ab", dirty=False, machine=MACHINE
                )
                fps = {"tuned_reset": 200.0, "ev_rppo": 100.0}[arm]
                rows = [{"time/total_timesteps": 5000.0, "time/fps": fps}]
                training_log.write_csv(rows, out / "fresh" / arm / env / f"seed{seed}" / "progress.csv.gz")
    chosen = {"trial": 4, "mean": 2.0, "means": {"7": 1.0, "4": 2.0, "9": 2.0, "1": 0.5, "3": 0.1}, "seeds": [200, 201, 202]}
    chosen["search_values"] = {"7": 500.0, "4": 490.0, "9": 480.0, "1": 470.0, "3": 460.0}
    folder = out / "selection" / "CartPoleNoVel-v1" / "tuned_reset"
    folder.mkdir(parents=True)
    (folder / "selected.json").write_text(json.dumps(chosen))


def test_the_report_regenerates_from_the_stored_runs(tmp_path: Path) -> None:
    runs = tmp_path / "tuned"
    _runs(runs)
    arguments = ["--runs", str(runs), "--out", str(tmp_path / "page"), "--summaries", str(tmp_path), "--reps", "50"]
    report.main(arguments)
    page = (tmp_path / "page" / "RESULTS.md").read_text()
    summary = json.loads((tmp_path / "tuned_summary.json").read_text())
    assert list(summary["envs"]) == ["EarlyChoice-v0", "CartPoleNoVel-v1", "PendulumNoVel-v1"]
    cartpole = summary["envs"]["CartPoleNoVel-v1"]
    assert cartpole["arms"]["tuned_reset"]["final"][0] == pytest.approx(402.0)
    assert cartpole["arms"]["ev_rppo"]["trials"] == [12] and cartpole["arms"]["ev_rppo"]["runs"] == 5
    # The mean over the evaluations: the curve's area over the budget, normalised
    assert cartpole["arms"]["ev_rppo"]["auc"][0] == pytest.approx((0 + 50 + 100 + 150 + 202) / 5, abs=1.0)
    final = cartpole["comparison"]["final"]
    # Every ResetPPO run above every RecurrentPPO run: P = 1, the exact two-sided p of 5 against 5 is 2 / 252;
    # Holm over the two envs with both arms (Pendulum has one arm: not tested)
    assert final["probability"][0] == 1.0 and final["p"] == pytest.approx(2 / 252) and final["method"] == "exact"
    assert summary["family"] == 2 and final["p_holm"] == pytest.approx(2 * 2 / 252)
    assert summary["envs"]["EarlyChoice-v0"]["comparison"]["final"]["probability"][0] == pytest.approx(0.5)
    assert report.verdict(final) == "better"
    assert report.verdict(summary["envs"]["EarlyChoice-v0"]["comparison"]["final"]) == "not significant"
    # learn() seconds from the training logs: 5000 steps at 200 and 100 steps/s; at ResetPPO's 25 s RecurrentPPO has
    # been evaluated at 10 and 20 s (its second evaluation, 50)
    time = cartpole["comparison"]["time"]
    assert time["median_seconds"] == {"tuned_reset": 25.0, "ev_rppo": 50.0} and time["ratio"] == 0.5
    assert time["faster"] == "tuned_reset" and time["pairs"] == 5
    assert time["return_at"]["ev_rppo"][0] == pytest.approx(50.0) and time["return_at"]["tuned_reset"][0] == 402.0
    assert "comparison" not in summary["envs"]["PendulumNoVel-v1"]
    assert list(cartpole["arms"]) == ["tuned_reset", "ev_rppo"]  # ResetPPO first on the page
    assert "| CartPoleNoVel-v1 |" not in page and "## CartPoleNoVel-v1" in page
    assert "| ResetPPO | 4 | 7: 1.000 (500.000), **4: 2.000** (490.000), 9: 2.000 (480.000)" in page
    assert "median ratio ResetPPO / RecurrentPPO over 5 seeds 0.50" in page
    assert (tmp_path / "page" / "figures" / "learning_curves.png").stat().st_size > 0
    # The same runs give the same page and summary
    report.main(arguments)
    assert (tmp_path / "page" / "RESULTS.md").read_text() == page
    assert json.loads((tmp_path / "tuned_summary.json").read_text()) == summary
    with pytest.raises(SystemExit):
        report.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "x"), "--summaries", str(tmp_path)])


def test_the_time_ratio_pairs_only_runs_of_one_machine(tmp_path: Path) -> None:
    """A seed whose two runs trained on two CPUs gives no time ratio: the other seeds do."""
    runs = tmp_path / "tuned"
    _runs(runs)
    path = runs / "fresh" / "ev_rppo" / "CartPoleNoVel-v1" / "seed300" / "run.json"
    record = json.loads(path.read_text())
    record["machine"] = {**MACHINE, "cpu": "Another CPU"}
    path.write_text(json.dumps(record))
    arguments = ["--runs", str(runs), "--out", str(tmp_path / "page"), "--summaries", str(tmp_path), "--reps", "50"]
    report.main(arguments)
    time = json.loads((tmp_path / "tuned_summary.json").read_text())["envs"]["CartPoleNoVel-v1"]["comparison"]["time"]
    assert time["pairs"] == 4 and time["ratio"] == 0.5
    assert "median ratio ResetPPO / RecurrentPPO over 4 seeds 0.50" in (tmp_path / "page" / "RESULTS.md").read_text()
