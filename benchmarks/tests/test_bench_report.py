"""
The benchmark report (``benchmarks/kit/report.py``) on synthetic grids (no training), with its statistics (Holm,
collapses, training diagnostics), the power calculation and the README tables.
"""

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_helpers import _fake_run, _load
from scipy.stats import trim_mean

from benchmarks.kit import report
from benchmarks.kit.scripts import run_script
from sb3_reset_ppo.envs import random_policy_return
from sb3_reset_ppo.experiments import stats, training_log


def test_report_on_a_synthetic_grid(tmp_path: Path) -> None:
    grid = tmp_path / "grid"
    for seed in range(5):
        # reset ends at the reference return of both envs, mask strictly below it
        _fake_run(grid, "reset", "CueRecall-v0", seed, [0.5, 1.0])
        _fake_run(grid, "mask", "CueRecall-v0", seed, [0.4, 0.9, 0.6 + 0.01 * seed])
        _fake_run(grid, "reset", "EarlyChoice-v0", seed, [2.0, 3.25])
        _fake_run(grid, "mask", "EarlyChoice-v0", seed, [1.5, 3.0, 2.5 - 0.1 * seed])
    for seed in range(2):  # too few seeds: per-env table only, not in the aggregates
        # trained in another session than mask's runs, twice as slow: no same-session pair
        _fake_run(grid, "reset", "CartPoleNoVel-v1", seed, [100.0, 200.0], seconds=2 * (10.0 + seed), commit="other")
        _fake_run(grid, "mask", "CartPoleNoVel-v1", seed, [100.0, 300.0])
    out, figures = tmp_path / "RESULTS.md", tmp_path / "figures"
    run_script(
        ["benchmarks/kit/report.py", "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(figures), "--reps", "50", "--json", str(tmp_path / "summary.json")],
        capture=True,
    )
    text = out.read_text()
    lines = text.splitlines()
    # The JSON summary holds the same estimates as the tables
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["aggregate"]["final"]["envs"] == ["CueRecall-v0", "EarlyChoice-v0"]
    assert summary["aggregate"]["final"]["iqm"]["reset"] == [1.0, 1.0, 1.0]
    assert summary["aggregate"]["final"]["probability_of_improvement"] == {"reset": [1.0, 1.0, 1.0]}
    assert summary["groups"]["memory tasks"]["final"]["iqm"]["reset"] == [1.0, 1.0, 1.0]
    cartpole = [row for row in summary["differences"]["final"] if row["env"] == "CartPoleNoVel-v1"]
    assert len(cartpole) == 1 and cartpole[0]["variant"] == "reset" and cartpole[0]["difference"][0] == -100.0
    assert any(line.startswith("| CartPoleNoVel-v1 | reset - mask | -100.000 (") for line in lines)
    # Wall times as the per-env table shows them (seconds 10 + seed; seeds 0 to 4 paired with mask's)
    assert summary["wall_time"]["CueRecall-v0"]["reset"] == {"seconds": 12.0, "paired_median_ratio": 1.0, "pairs": 5}
    # Per env: final return and return over training of every seed
    assert "| reset | 5 | 1.000 +- 0.000 | 0.750 +- 0.000 | 2000 | 12 | 1.00 (5) |" in lines
    # the last evaluation is the final return, not the best one
    assert "| mask | 5 | 0.620 +- 0.016 | 0.640 +- 0.005 | 3000 | 12 | 1.00 (5) |" in lines
    # No side-by-side pair: no ratio (a ratio of means over sessions would mix machines)
    assert "| reset | 2 | 200.000 +- 0.000 | 150.000 +- 0.000 | 2000 | 21 | - |" in lines
    assert summary["wall_time"]["CartPoleNoVel-v1"]["reset"] == {"seconds": 21.0, "paired_median_ratio": None, "pairs": 0}
    # Aggregates over the two complete envs: reset sits at the reference (normalised 1) and beats mask everywhere
    final_table = text.split("## Aggregate: final normalised return")[1]
    assert "Over 2 envs (CueRecall-v0, EarlyChoice-v0), seeds 0 to 4 of each." in final_table
    assert "| reset | 1.000 (1.000 to 1.000) | 1.000 (1.000 to 1.000) |" in final_table
    assert "| reset vs mask | 1.000 (1.000 to 1.000) |" in final_table
    # mask: IQM of (score - random) / (reference - random) over 2 envs x 5 seeds, random measured as the report does
    random = {env: random_policy_return(env, 500, 0) for env in ("CueRecall-v0", "EarlyChoice-v0")}
    mask_final = [(0.6 + 0.01 * seed - random["CueRecall-v0"]) / (1.0 - random["CueRecall-v0"]) for seed in range(5)]
    mask_final += [(2.5 - 0.1 * seed - random["EarlyChoice-v0"]) / (3.25 - random["EarlyChoice-v0"]) for seed in range(5)]
    assert f"| mask | {trim_mean(mask_final, 0.25):.3f} (" in final_table
    assert "CartPoleNoVel-v1" in text.split("Not in the aggregate")[1].splitlines()[0]
    group_rows = [line for line in lines if line.startswith("| memory tasks (2 envs) | reset |")]
    assert len(group_rows) == 1 and "| 1.000 (1.000 to 1.000) | 1.000 (1.000 to 1.000) |" in group_rows[0]
    assert not any(line.startswith("| NoVel control") for line in lines)
    # reset's mean is below mask's only on CartPoleNoVel (final 200 vs 300; over training 150 vs 200)
    assert "- final return: CartPoleNoVel-v1 (200.000 vs 300.000)" in lines
    assert "- return over training: CartPoleNoVel-v1 (150.000 vs 200.000)" in lines
    for name in ("aggregate", "aggregate_auc", "aggregate_probability_of_improvement", "learning_curves"):
        assert (figures / f"{name}.png").stat().st_size > 0


def test_report_uses_evaluations_within_the_budget_and_never_replaces_a_missing_seed(tmp_path: Path) -> None:
    grid = tmp_path / "grid"
    for seed in range(3):
        # The zoo finished a rollout past the 2,500-step budget: the evaluations at 3000 and 4000 do not count
        _fake_run(grid, "reset", "CueRecall-v0", seed, [0.3, 0.5, 0.9, 0.9], budget=2500)
        _fake_run(grid, "reset", "EarlyChoice-v0", seed, [2.0, 3.0], reused_from="elsewhere", seconds=30.0)
        _fake_run(grid, "mask", "EarlyChoice-v0", seed, [2.0, 2.5])
    # mask on CueRecall: seed 1 failed and seed 3 must not stand in for it
    for seed in (0, 2, 3):
        _fake_run(grid, "mask", "CueRecall-v0", seed, [0.3, 0.4])
    _fake_run(grid, "mask", "CueRecall-v0", 1, [0.3], returncode=1)
    out = tmp_path / "RESULTS.md"
    run_script(
        ["benchmarks/kit/report.py", "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3", "--final-evaluations", "2"],
        capture=True,
    )
    text = out.read_text()
    lines = text.splitlines()
    # reset on CueRecall: last 2 evaluations within the budget (0.3, 0.5), the last one at step 2000
    # Wall time: 11 s on average; paired by seed (mask seed 1 failed): seeds 0 and 2, ratio 1
    assert "| reset | 3 | 0.400 +- 0.000 | 0.400 +- 0.000 | 2000 | 11 | 1.00 (2) |" in lines
    assert "| mask | 3 | 0.350 +- 0.000 | 0.350 +- 0.000 | 2000 | 12 | 1.00 (3) |" in lines
    # Reused runs are counted, but never paired (no ratio)
    assert "| reset | 3 (3 reused) | 2.500 +- 0.000 | 2.500 +- 0.000 | 2000 | 30 | - |" in lines
    assert "Over 1 envs (EarlyChoice-v0), seeds 0 to 2 of each." in text
    assert "CueRecall-v0" in text.split("Not in the aggregate")[1].splitlines()[0]
    assert (
        "Failed runs (left out everywhere; an env with a failed run among seeds 0 to 2 leaves the aggregates): "
        "mask CueRecall-v0 seed 1 (exit code 1)." in lines
    )


def test_report_lists_runs_that_failed_and_shows_an_undefined_p(tmp_path: Path) -> None:
    grid = tmp_path / "grid"
    for seed in range(3):
        # Both arms at the reference on every seed: Welch's p is undefined (no variance), not 1
        _fake_run(grid, "reset", "CueRecall-v0", seed, [0.5, 1.0])
        _fake_run(grid, "mask", "CueRecall-v0", seed, [0.5, 1.0])
        # ev_reset's runs on EarlyChoice all reused from another study: no comparable wall-time ratio
        _fake_run(grid, "reset", "EarlyChoice-v0", seed, [2.0, 3.0], reused_from="elsewhere")
        _fake_run(grid, "mask", "EarlyChoice-v0", seed, [2.0, 2.5 + 0.1 * seed])
    # As run_grid.py leaves a run whose trainer exited with an error: failed.json and a log, no run.json
    failed_dir = grid / "mask" / "EarlyChoice-v0" / "seed3"
    failed_dir.mkdir(parents=True)
    failed_run = {"variant": "mask", "env": "EarlyChoice-v0", "seed": 3, "returncode": 2, "evaluations": 0}
    (failed_dir / "failed.json").write_text(json.dumps(failed_run))
    # A failed attempt that a later attempt replaced (run.json there) is not a failure
    _fake_run(grid, "reset", "EarlyChoice-v0", 3, [2.0, 3.0])
    (grid / "reset" / "EarlyChoice-v0" / "seed3" / "failed.json").write_text(json.dumps({**failed_run, "variant": "reset"}))
    summary_file = tmp_path / "summary.json"
    run_script(
        ["benchmarks/kit/report.py", "--grid", str(grid), "--out", str(tmp_path / "R.md")]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3", "--json", str(summary_file)]
        + ["--baseline", "mask", "--variants", "reset", "mask"],
        capture=True,
    )
    text = (tmp_path / "R.md").read_text()
    summary = json.loads(summary_file.read_text())
    assert summary["failed"] == [{"variant": "mask", "env": "EarlyChoice-v0", "seed": 3, "reason": "exit code 2"}]
    assert (
        "Failed runs (left out everywhere; an env with a failed run among seeds 0 to 2 leaves the aggregates): "
        "mask EarlyChoice-v0 seed 3 (exit code 2)." in text
    )
    assert summary["reps"] == 50 and summary["bootstrap_seed"] == 0 and summary["evaluations"] is None
    cue = next(row for row in summary["differences"]["final"] if row["env"] == "CueRecall-v0")
    assert cue["p"] is None and cue["p_holm"] == 1.0
    assert "| CueRecall-v0 | reset - mask | +0.000 (+0.000 to +0.000) | undefined (both constant) | 1.000 |" in text
    # reset's own runs on EarlyChoice: only seed 3 (its other runs are reused); mask's baseline runs are all its own
    early = summary["wall_time"]["EarlyChoice-v0"]["reset"]
    assert set(early) == {"seconds", "paired_median_ratio", "pairs"}  # no ratio of means over mixed sessions


def test_wall_time_ratio_pairs_runs_of_one_seed_and_one_session() -> None:
    report = _load("report")

    def run(seed: int, seconds: float, commit: str, **fields: Any) -> dict[str, Any]:
        return {"seed": seed, "seconds": seconds, "commit": commit, **fields}

    baseline = [run(0, 10.0, "a"), run(1, 20.0, "a"), run(2, 25.0, "b"), run(3, 10.0, "b", reused_from="x")]
    arm = [
        run(0, 30.0, "a"),  # ratio 3
        run(1, 80.0, "a"),  # ratio 4
        run(2, 500.0, "c"),  # another session's machine than the baseline's seed 2: not paired
        run(3, 40.0, "b"),  # the baseline's run is reused: not paired
        run(4, 40.0, "a"),  # no baseline run of seed 4
    ]
    assert report.paired_time_ratio(arm, baseline) == (3.5, 2)
    ratio, pairs = report.paired_time_ratio([run(2, 50.0, "c")], baseline)
    assert np.isnan(ratio) and pairs == 0
    assert report.paired_time_ratio([run(0, 5.0, "a", reused_from="y")], baseline)[1] == 0
    # Where both runs record their machine, one commit on two machines is not a pair
    on = [run(0, 10.0, "a", machine={"cpu": "A"}), run(1, 10.0, "a", machine={"cpu": "A"})]
    assert report.paired_time_ratio(
        [run(0, 20.0, "a", machine={"cpu": "A"}), run(1, 50.0, "a", machine={"cpu": "B"})], on
    ) == (
        2.0,
        1,
    )


def test_readme_tables_from_a_summary() -> None:
    tables = _load("readme_tables")
    summary = {
        "baseline": "off",
        "variants": ["off", "a", "b"],
        "final_evaluations": 2,
        "aggregate": {
            key: {
                "envs": ["X", "Y"],
                "seeds": list(range(10)),
                "iqm": {"off": [0.5, 0.4, 0.6], "a": [0.7, 0.6, 0.8], "b": [0.3, 0.2, 0.4]},
                "probability_of_improvement": {"a": [0.7, 0.55, 0.85], "b": [0.45, 0.3, 0.6]},
            }
            for key in ("final", "auc")
        },
        "differences": {
            "final": [
                {"env": "X", "variant": "a", "difference": [0.2, 0.1, 0.3], "p": 0.001, "p_holm": 0.004},
                {"env": "Y", "variant": "b", "difference": [-0.1, -0.3, 0.1], "p": 0.03, "p_holm": 0.09},
            ],
            "auc": [],
        },
    }
    lines = tables.aggregate_table("10 epochs", summary)
    assert lines[0] == "10 epochs: 2 envs, seeds 0 to 9, final = mean of the last 2 evaluations."
    assert "| `off` | 0.50 (0.40 to 0.60) | - |  | 0.50 (0.40 to 0.60) | - |  |" in lines
    assert (
        "| `a` | 0.70 (0.60 to 0.80) | 0.70 (0.55 to 0.85) | better | 0.70 (0.60 to 0.80) | 0.70 (0.55 to 0.85) | better |"
        in lines
    )
    assert "| `b` | 0.30 (0.20 to 0.40) | 0.45 (0.30 to 0.60) | n.s. |" in lines[-1]
    assert tables.verdict([0.3, 0.1, 0.45]) == "worse"
    assert tables.significant_differences(summary, "final") == "a on X +0.2 (+0.1 to +0.3, Holm p 0.004)"
    assert tables.significant_differences(summary, "auc") == "none"
    # A partial grid: no env has every variant's aggregate seeds yet
    partial = {**summary, "aggregate": {}}
    assert tables.aggregate_table("primary", partial) == [
        "primary: no aggregate yet (no env has the aggregate seeds of every variant)."
    ]


def test_report_of_another_study_with_its_baseline_and_final_evaluations(tmp_path: Path) -> None:
    grid, other = tmp_path / "grid", tmp_path / "other"
    for seed in range(3):
        _fake_run(grid, "fm_off", "CueRecall-v0", seed, [0.2, 0.4, 0.6])
        # The arm compared with it, in another results folder
        _fake_run(other, "fm_refresh", "CueRecall-v0", seed, [0.2, 0.8, 1.0])
        _fake_run(grid, "reset", "CueRecall-v0", seed, [0.0, 0.0, 0.0])  # another study's: not reported
    out = tmp_path / "RESULTS.md"
    (tmp_path / "study.md").write_text("## The study's notes\n")
    (tmp_path / "other.md").write_text("## Other studies\n")
    run_script(
        ["benchmarks/kit/report.py", "--grid", str(grid), str(other), "--out", str(out)]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3"]
        + ["--variants", "fm_off", "fm_refresh", "--baseline", "fm_off", "--final-evaluations", "2"]
        + ["--notes", str(tmp_path / "study.md"), str(tmp_path / "other.md")],
        capture=True,
    )
    text = out.read_text()
    # Several notes files, in the order given, before the first table
    assert text.index("## The study's notes") < text.index("## Other studies") < text.index("## Aggregate")
    # final = mean of the last 2 evaluations: (0.4 + 0.6) / 2 and (0.8 + 1.0) / 2
    assert "| fm_off | 3 | 0.500 +- 0.000 |" in text and "| fm_refresh | 3 | 0.900 +- 0.000 |" in text
    assert "| fm_refresh vs fm_off | 1.000 (1.000 to 1.000) |" in text
    assert "| reset |" not in text and "Where reset does not beat" not in text
    # Per-env differences with Holm-adjusted p-values: refresh ends 0.4 above off on every seed
    assert "| CueRecall-v0 | fm_refresh - fm_off | +0.400 (+0.400 to +0.400) | 0.000 | 0.000 |" in text


def test_holm_adjustment_matches_its_definition() -> None:
    # Sorted p = 0.01, 0.02, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.02), max(0.04, 1 * 0.04)
    assert stats.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize(
    ("probability", "p_holm", "expected"),
    [
        ([0.9, 0.7, 1.0], 0.01, "better"),
        ([0.1, 0.0, 0.3], 0.01, "worse"),
        ([0.9, 0.7, 1.0], 0.05, "not significant"),  # Holm's p must be below 0.05
        ([0.7, 0.4, 0.9], 0.01, "not significant"),  # the interval holds 1/2
        ([0.9, 0.5, 1.0], 0.01, "not significant"),  # an interval that ends at 1/2 does not exclude it
    ],
)
def test_a_verdict_needs_holms_p_and_an_interval_that_excludes_one_half(
    probability: list[float], p_holm: float, expected: str
) -> None:
    assert report.holm_verdict(probability, p_holm) == expected


LOG = """Using cpu device
---------------------------------
| rollout/           |          |
|    ep_len_mean     | 5.61     |
|    ep_rew_mean     | 0.25     |
| time/              |          |
|    total_timesteps | 1024     |
---------------------------------
Eval num_timesteps=1496, episode_reward=0.20 +/- 0.40
-----------------------------------------
| eval/                      |          |
|    mean_reward             | 0.2      |
| train/                     |          |
|    approx_kl               | 0.00776  |
|    clip_range              | lin      |
|    kept_slot_fraction      | 1        |
-----------------------------------------
"""


def test_training_log_tables_to_csv_and_back(tmp_path: Path) -> None:
    rows = training_log.parse_tables(LOG)
    assert rows == [
        {"rollout/ep_len_mean": 5.61, "rollout/ep_rew_mean": 0.25, "time/total_timesteps": 1024.0},
        # Non-numbers are left out
        {"eval/mean_reward": 0.2, "train/approx_kl": 0.00776, "train/kept_slot_fraction": 1.0},
    ]
    training_log.write_csv(rows, tmp_path / "progress.csv.gz")
    assert training_log.read_csv(tmp_path / "progress.csv.gz") == rows
    assert training_log.training_rows(tmp_path) == rows


def test_progress_csv_writes_the_curves_of_stored_runs_from_their_logs(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for run_dir in runs:
        run_dir.mkdir()
        with gzip.open(run_dir / "log.txt.gz", "wt") as log:
            log.write(LOG)
    _load("progress_csv").main([str(run_dir) for run_dir in runs])
    for run_dir in runs:
        assert training_log.read_csv(run_dir / "progress.csv.gz") == training_log.parse_tables(LOG)


def test_collapse_statistics() -> None:
    report = _load("report")
    # Normalised: solved at the 2nd evaluation (0.95), then 0.85 (kept) and 0.5 (a collapse)
    assert report.collapse_stats(np.array([0.1, 0.95, 0.85, 0.5]), 0.0, 1.0) == (True, 1, 2)
    assert report.collapse_stats(np.array([0.1, 0.5]), 0.0, 1.0) == (False, 0, 0)
    # Raw returns are normalised with the random and reference returns
    assert report.collapse_stats(np.array([100.0, 480.0, 300.0]), 20.0, 500.0) == (True, 1, 1)


def test_power_calculation() -> None:
    power = _load("power")
    # A standardised difference of 1.07 (CartPoleNoVel's reset - mask in the first grid) needs 15 seeds per arm
    assert power.seeds_for_power(1.07) == 15
    assert power.power(1.07, 15) >= 0.8 > power.power(1.07, 14)
    # The textbook value: d = 0.8 needs 26 per arm for 80% power at the 5% level
    assert power.seeds_for_power(0.8) == 26
    assert abs(power.detectable_effect(10) - 1.32) < 0.01


def test_report_draws_diagnostics_and_counts_collapses(tmp_path: Path) -> None:
    grid = tmp_path / "grid"
    for seed in range(2):
        _fake_run(grid, "ev_reset", "CueRecall-v0", seed, [0.2, 1.0, 0.3])
        _fake_run(grid, "ev_mask", "CueRecall-v0", seed, [0.2, 0.5, 0.6])
        rows = [{"train/approx_kl": 0.01 * k, "train/kept_slot_fraction": 1.0} for k in range(3)]
        training_log.write_csv(rows, grid / "ev_reset" / "CueRecall-v0" / f"seed{seed}" / "progress.csv.gz")
    out, figures = tmp_path / "RESULTS.md", tmp_path / "figures"
    run_script(
        ["benchmarks/kit/report.py", "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(figures), "--reps", "50", "--min-seeds", "2", "--variants", "ev_reset", "ev_mask"]
        + ["--baseline", "ev_mask", "--focus", "ev_reset", "--diagnostics", "--title", "Evidence"],
        capture=True,
    )
    text = out.read_text()
    assert text.startswith("# Evidence")
    # random 0.25 on CueRecall: 1.0 solves, 0.3 collapses; mask never solves
    assert "| CueRecall-v0 | ev_reset | 2 of 2 | 2 of 2 (100%) |" in text
    assert "| CueRecall-v0 | ev_mask | 0 of 2 | - |" in text
    assert (figures / "diagnostics_CueRecall-v0.png").stat().st_size > 0
    assert "## Where ev_reset does not beat ev_mask" in text
    # Other keys on request (--diagnostic-keys); a key no run logged is left blank, a run without a log skipped
    report = _load("report")
    runs = [
        {"env": "CueRecall-v0", "variant": variant, "dir": grid / variant / "CueRecall-v0" / "seed0"}
        for variant in ("ev_reset", "ev_mask")
    ]
    path = tmp_path / "keys.png"
    assert report.diagnostics_figure(runs, "CueRecall-v0", ["ev_reset", "ev_mask"], path, ["approx_kl", "memory_staleness"])
    assert path.stat().st_size > 0
    assert not report.diagnostics_figure(runs[1:], "CueRecall-v0", ["ev_mask"], tmp_path / "none.png", ["approx_kl"])


def test_a_moved_file_is_found_where_it_is_now_outside_the_stored_runs() -> None:
    report = _load("report")
    # Recorded at benchmarks/ (or in a folder since renamed), now in the studies' folder
    assert report.moved("benchmarks/evidence.yml") == "benchmarks/studies/evidence/evidence.yml"
    assert report.moved("benchmarks/old/evidence.yml") == "benchmarks/studies/evidence/evidence.yml"
    # Still where it was, not under benchmarks/, in no folder, or in several (every study has a study.yml)
    assert report.moved("benchmarks/README.md") == "benchmarks/README.md"
    assert report.moved("other/evidence.yml") == "other/evidence.yml"
    assert report.moved("benchmarks/no_such_file.yml") == "benchmarks/no_such_file.yml"
    assert report.moved("benchmarks/study.yml") == "benchmarks/study.yml"
    # Files of the stored runs never count (each run's folder holds a run.json)
    assert report.moved("benchmarks/run.json") == "benchmarks/run.json"
