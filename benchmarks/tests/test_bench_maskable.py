"""benchmarks/speed/bench_maskable.py: MaskableResetPPO's learn() against ResetPPO's, side by side; its stored results."""

import json
from pathlib import Path

import pytest
from bench_helpers import ROOT, _load


def test_bench_maskable_measures_the_same_trajectories_and_writes_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "speed"))  # bench_maskable imports bench_train
    bench = _load("bench_maskable")
    argv = ["--repeats", "2", "--hidden", "8", "--n-envs", "2", "--n-steps", "16", "--n-epochs", "1"]
    results = bench.main([*argv, "--out", str(tmp_path / "out")])
    by_task = {r["task"]: r for r in results}
    # All-valid masks leave the distribution unchanged: the same seed plays the same episodes with and without
    # masks, so the ratio measures masking alone
    valid = by_task["all_valid"]
    assert valid["reset"]["episodes"] == valid["maskable_off"]["episodes"] == valid["maskable"]["episodes"] > 0
    # On the masked task the unmasked models' invalid actions end episodes early: more of them
    masked = by_task["masked"]
    assert masked["reset"]["episodes"] == masked["maskable_off"]["episodes"] > masked["maskable"]["episodes"]
    for r in results:
        runs = [run["learn_cpu"] for run in r["maskable"]["runs"]]
        assert len(runs) == 2 and r["maskable"]["learn_cpu"] == pytest.approx(sum(runs) / 2)
        assert r["maskable"]["learn_over_reset"] == pytest.approx(r["maskable"]["learn_cpu"] / r["reset"]["learn_cpu"])
    stored = json.loads((tmp_path / "out.json").read_text())
    assert stored["results"] == json.loads(json.dumps(results)) and stored["bound"] == 1.15
    text = (tmp_path / "out.txt").read_text()
    assert text.startswith("command: python benchmarks/speed/bench_maskable.py --repeats 2 --hidden 8")
    assert "| masked | 8 |" in text and "| all_valid | 8 |" in text


def test_stored_results_meet_the_issues_bound() -> None:
    stored = json.loads((ROOT / "benchmarks" / "results" / "bench_maskable.json").read_text())
    text = (ROOT / "benchmarks" / "results" / "bench_maskable.txt").read_text()
    assert text.startswith(f"command: {stored['command']}\n")
    assert {(r["task"], r["lstm_hidden_size"]) for r in stored["results"]} >= {("masked", 64), ("all_valid", 64)}
    for r in stored["results"]:
        assert r["maskable"]["learn_over_reset"] <= stored["bound"] == 1.15, r["task"]
        assert f"| {r['task']} | {r['lstm_hidden_size']} |" in text


def test_the_masking_page_states_the_like_for_like_cost_the_bench_measured() -> None:
    # docs/studies/masking_check.md: maskable / RecurrentPPO learn() CPU where both played the same episodes, and the
    # episode ratio where they did not (issue 51: the two kinds of rows are not to be mixed)
    rows = json.loads((ROOT / "benchmarks" / "results" / "bench_maskable.json").read_text())["results"]
    page = " ".join((ROOT / "docs" / "studies" / "masking_check.md").read_text().split())
    same = [r for r in rows if r["maskable"]["episodes"] == r["recurrent_ppo"]["episodes"]]
    different = [r for r in rows if r not in same]
    assert [r["task"] for r in same] == ["all_valid", "all_valid"] and len(different) == 2
    ratio = [r["maskable"]["learn_cpu"] / r["recurrent_ppo"]["learn_cpu"] for r in same]
    assert f"takes {ratio[0]:.2f} (hidden 64) and {ratio[1]:.2f} (hidden 256) of `RecurrentPPO`'s time" in page
    low = [r["maskable"]["learn_cpu"] / r["recurrent_ppo"]["learn_cpu"] for r in different]
    episodes = min(r["recurrent_ppo"]["episodes"] / r["maskable"]["episodes"] for r in different)
    assert f"lower ({low[0]:.2f} and {low[1]:.2f})" in page and f"plays {episodes:.1f} times as many" in page


def test_the_performance_page_states_the_stored_masked_categorical_run() -> None:
    # MaskableResetPPO with masks, its categorical computed without distribution objects, against ResetPPO: the
    # page's table is the stored run, and it says whether the run is within its bound
    stored = json.loads((ROOT / "benchmarks" / "results" / "bench_maskable_categorical.json").read_text())
    assert stored["bound"] == 1.1 and {r["task"] for r in stored["results"]} == {"masked", "all_valid"}
    page = " ".join((ROOT / "docs" / "studies" / "performance.md").read_text().split())
    for r in stored["results"]:
        maskable = r["maskable"]
        row = f"| {r['task']} | {r['reset']['learn_cpu']:.2f} | {maskable['learn_cpu']:.2f} |"
        assert f"{row} {maskable['learn_over_reset']:.3f} |" in page, row
    worst = max(r["maskable"]["learn_over_reset"] for r in stored["results"])
    verdict = "within" if worst <= stored["bound"] else "over"
    assert f"at most {worst:.3f} times ResetPPO's, {verdict} the bound of 1.1" in page
