"""
The tuned study's report (``benchmarks/studies/tuned/tuned_report.py``) regenerated from fake fresh-seed runs: the
endpoints, the tests, the time comparison and the selection, the same page twice.
"""

import json
import shutil
from pathlib import Path

import pytest
from bench_helpers import _fake_run, _load

from sb3_reset_ppo.experiments import training_log

report = _load("tuned_report")
MACHINE = {"cpu": "Fake CPU", "cores": 2, "extensions": []}


def _runs(out: Path, seeds: range = range(300, 310)) -> None:
    """
    Fresh-seed runs of both arms, 5 evaluations of 1000 steps each, ResetPPO twice as fast, a seed's two runs started
    together (odd seeds: RecurrentPPO's an hour later): on CartPoleNoVel-v1 every ResetPPO run ends above every
    RecurrentPPO run; on EarlyChoice-v0 they end alike; PendulumNoVel-v1 has ResetPPO's only.
    """
    for seed in seeds:
        shift = seed - 300
        arms: dict[str, dict[str, list[float]]] = {
            "CartPoleNoVel-v1": {"tuned_reset": [0, 100, 200, 300, 400 + shift], "ev_rppo": [0, 50, 100, 150, 200 + shift]},
            "EarlyChoice-v0": {"tuned_reset": [0, 1, 2, 3, 3.0 + shift], "ev_rppo": [0, 1, 1, 2, 3.0 + shift]},
            "PendulumNoVel-v1": {"tuned_reset": [-900, -500, -300, -200, -150 - shift]},
        }
        for env, by_arm in arms.items():
            for arm, means in by_arm.items():
                trial = {"tuned_reset": 4, "ev_rppo": 12}[arm]
                hour = 15 if arm == "ev_rppo" and seed % 2 else 14
                _fake_run(
                    out / "fresh",
                    arm,
                    env,
                    seed,
                    means,
                    trial=trial,
                    commit="0123456789ab",
                    dirty=False,
                    machine=MACHINE,
                    started=f"2026-12-07T{hour}:00:00.000Z",
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
    # The IQM of 400 to 409: the mean of the middle half, 402 to 407
    assert cartpole["arms"]["tuned_reset"]["final"][0] == pytest.approx(404.5)
    assert cartpole["arms"]["ev_rppo"]["trials"] == [12] and cartpole["arms"]["ev_rppo"]["runs"] == 10
    # The mean over the evaluations: the curve's area over the budget, normalised
    assert cartpole["arms"]["ev_rppo"]["auc"][0] == pytest.approx((0 + 50 + 100 + 150 + 204.5) / 5, abs=1.0)
    final = cartpole["comparison"]["final"]
    # Every ResetPPO run above every RecurrentPPO run: P = 1, the exact two-sided p of 10 against 10 is 2 / C(20, 10);
    # Holm over the two envs with both arms (Pendulum has one arm: not tested)
    assert final["probability"][0] == 1.0 and final["p"] == pytest.approx(2 / 184756) and final["method"] == "exact"
    assert summary["family"] == 2 and final["p_holm"] == pytest.approx(2 * 2 / 184756)
    assert summary["envs"]["EarlyChoice-v0"]["comparison"]["final"]["probability"][0] == pytest.approx(0.5)
    assert report.verdict(final) == "better" and final["verdict"] == "better"
    assert report.verdict(summary["envs"]["EarlyChoice-v0"]["comparison"]["final"]) == "not significant"
    # learn() seconds from the training logs: 5000 steps at 200 and 100 steps/s; at ResetPPO's 25 s RecurrentPPO has
    # been evaluated at 10 and 20 s (its second evaluation, 50)
    time = cartpole["comparison"]["time"]
    assert time["median_seconds"] == {"tuned_reset": 25.0, "ev_rppo": 50.0} and time["ratio"] == 0.5
    # Every seed's two runs on one machine; the even seeds' also at one time
    assert time["faster"] == "tuned_reset" and time["pairs"] == 10 and time["side_by_side"] == 5
    assert time["return_at"]["ev_rppo"][0] == pytest.approx(50.0) and time["return_at"]["tuned_reset"][0] == 404.5
    assert "comparison" not in summary["envs"]["PendulumNoVel-v1"]
    assert list(cartpole["arms"]) == ["tuned_reset", "ev_rppo"]  # ResetPPO first on the page
    assert "| CartPoleNoVel-v1 |" not in page and "## CartPoleNoVel-v1" in page
    assert "| ResetPPO | 4 | 7: 1.000 (500.000), **4: 2.000** (490.000), 9: 2.000 (480.000)" in page
    assert "median ratio ResetPPO / RecurrentPPO over 10 seeds 0.50 (a seed's two runs on one machine; 5 of" in page
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
    assert time["pairs"] == 9 and time["ratio"] == 0.5 and time["side_by_side"] == 4
    assert "median ratio ResetPPO / RecurrentPPO over 9 seeds 0.50" in (tmp_path / "page" / "RESULTS.md").read_text()


def test_an_env_is_tested_only_once_both_arms_have_every_fresh_seed(tmp_path: Path) -> None:
    """CartPoleNoVel-v1 with 9 of RecurrentPPO's 10 seeds: its numbers are shown, no verdict, and not in Holm's family."""
    runs = tmp_path / "tuned"
    _runs(runs)
    shutil.rmtree(runs / "fresh" / "ev_rppo" / "CartPoleNoVel-v1" / "seed309")
    arguments = ["--runs", str(runs), "--out", str(tmp_path / "page"), "--summaries", str(tmp_path), "--reps", "50"]
    report.main(arguments)
    summary = json.loads((tmp_path / "tuned_summary.json").read_text())
    cartpole, early = summary["envs"]["CartPoleNoVel-v1"], summary["envs"]["EarlyChoice-v0"]
    assert not cartpole["complete"] and early["complete"] and summary["family"] == 1
    final = cartpole["comparison"]["final"]
    assert "p_holm" not in final and final["verdict"] == report.NO_VERDICT and final["probability"][0] == 1.0
    # EarlyChoice-v0 alone in the family: its Holm p is its own
    assert early["comparison"]["final"]["p_holm"] == pytest.approx(early["comparison"]["final"]["p"])
    page = (tmp_path / "page" / "RESULTS.md").read_text()
    assert f"| - | {report.NO_VERDICT} |" in page and "tests: 1 on the final return" in page


def test_a_fresh_run_of_another_trial_than_the_selected_one_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "tuned"
    _runs(runs)
    path = runs / "fresh" / "tuned_reset" / "CartPoleNoVel-v1" / "seed303" / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "trial": 7}))
    arguments = ["--runs", str(runs), "--out", str(tmp_path / "page"), "--summaries", str(tmp_path), "--reps", "50"]
    with pytest.raises(ValueError, match=r"CartPoleNoVel-v1 seed 303 trained trial 7, but the selected trial is 4"):
        report.main(arguments)
