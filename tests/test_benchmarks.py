"""The benchmark grid runner and the report, on synthetic grids (no training)."""

import calendar
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from scipy.stats import trim_mean

from sb3_reset_ppo.envs import random_policy_return

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(figures), "--reps", "50", "--json", str(tmp_path / "summary.json")],
        check=True,
        capture_output=True,
        timeout=300,
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
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3", "--final-evaluations", "2"],
        check=True,
        capture_output=True,
        timeout=300,
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
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--grid", str(grid), "--out", str(tmp_path / "R.md")]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3", "--json", str(summary_file)]
        + ["--baseline", "mask", "--variants", "reset", "mask"],
        check=True,
        capture_output=True,
        timeout=300,
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


def test_grid_commands_and_resume(tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    steps = run_grid.n_timesteps("CartPoleNoVel-v1")
    mask = run_grid.command("mask", "CartPoleNoVel-v1", 3, tmp_path, 20)
    assert mask[mask.index("--algo") + 1] == "reset_ppo" and mask[mask.index("--seed") + 1] == "3"
    assert mask[mask.index("--eval-freq") + 1] == str(steps // run_grid.EVALUATIONS_PER_RUN)
    assert mask[mask.index("--hyperparams") + 1 :] == ["boundary:'mask'", "weighting:'uniform'"]
    ppo_lstm = run_grid.command("ppo_lstm", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert ppo_lstm[ppo_lstm.index("--conf-file") + 1] == str(run_grid.PPO_LSTM_CONF)
    assert "--hyperparams" not in ppo_lstm
    # Finished runs (run.json present) are skipped: nothing is trained here
    for seed in range(2):
        _fake_run(tmp_path, "reset", "CueRecall-v0", seed, [1.0])
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_grid.py"), "--envs", "CueRecall-v0", "--variants", "reset"]
        + ["--seeds", "2", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "2 of 2 runs already done; 0 to run" in result.stdout


def test_stride_study_settings_jobs_and_equal_time_budget() -> None:
    bench = _load("bench_stride")
    settings = bench.zoo_settings("CartPoleNoVel-v1")
    # ppo_lstm.yml's CartPoleNoVel-v1 entry, as constructor arguments
    assert (settings["n_envs"], settings["n_timesteps"], settings["normalize"]) == (8, 100_000, True)
    kwargs = settings["kwargs"]
    assert (kwargs["n_steps"], kwargs["batch_size"], kwargs["n_epochs"]) == (32, 256, 20)
    assert callable(kwargs["learning_rate"]) and kwargs["learning_rate"](1.0) == 1e-3
    assert kwargs["policy_kwargs"]["lstm_hidden_size"] == 64
    # Whole rollouts (8 envs x 32 steps)
    jobs = bench._jobs(["CartPoleNoVel-v1"], bench.VARIANTS, 1, [])
    assert {job["variant"] for job in jobs} == {"recurrent_ppo", "reset", "reset_stride1"}
    assert all(job["timesteps"] == 100_096 for job in jobs)
    # The equal-time run gets the steps that fit in stride 1's CPU time, once both runs are done
    done = [
        {"env": "CartPoleNoVel-v1", "variant": "reset", "seed": 0, "timesteps": 100_096, "cpu_seconds": 50.0},
        {"env": "CartPoleNoVel-v1", "variant": "reset_stride1", "seed": 0, "timesteps": 100_096, "cpu_seconds": 200.0},
    ]
    jobs = bench._jobs(["CartPoleNoVel-v1"], bench.VARIANTS, 1, done)
    assert [(job["variant"], job["timesteps"]) for job in jobs] == [("recurrent_ppo", 100_096), ("reset_equal_time", 400_384)]


def test_stride_study_summary() -> None:
    bench = _load("bench_stride")
    rows = [
        {"env": "CueRecall-v0", "variant": "reset", "seed": seed, "timesteps": 1024, "eval_return": 0.9 + 0.1 * seed,
         "last10_return": 0.8, "mean_return_over_training": 0.5, "cpu_seconds": 10.0 + seed, "wall_seconds": 12.0}
        for seed in range(2)
    ]  # fmt: skip
    table = bench.summary(rows, ["CueRecall-v0"])
    assert "| CueRecall-v0 | reset | 2 | 1,024 | 0.950 +- 0.071 | 0.800 +- 0.000 | 0.500 +- 0.000 | 10 | 12 |" in table


def test_stride_study_comparisons_report_differences_and_welch_p() -> None:
    bench = _load("bench_stride")
    rows = [
        {"env": "CueRecall-v0", "variant": variant, "seed": seed, "eval_return": value + 0.01 * seed,
         "last10_return": value, "mean_return_over_training": value}
        for variant, value in (("reset", 0.9), ("recurrent_ppo", 0.5))
        for seed in range(3)
    ]  # fmt: skip
    table = bench.comparisons(rows, ["CueRecall-v0"])
    line = next(row for row in table.splitlines() if "reset - recurrent_ppo" in row)
    # A difference of 0.4 with tiny (or no) spread: significant
    assert line == "| CueRecall-v0 | reset - recurrent_ppo | +0.4 (0.00) | +0.4 (0.00) | +0.4 (0.00) |"
    assert "reset_stride1" not in table  # no runs: no row


def test_fresh_memory_study_commands() -> None:
    run_grid = _load("run_grid")
    assert len(run_grid.FRESH_MEMORY_VARIANTS) == 10 and len(run_grid.FRESH_MEMORY_ENVS) == 6
    both = run_grid.command("fm_refresh_burn8_e30", "PopgymAutoencodeEasy-v0", 2, Path("/tmp/x"), 20)
    assert both[both.index("--conf-file") + 1] == str(run_grid.FRESH_MEMORY_CONF)
    assert both[both.index("--hyperparams") + 1 :] == ["memory_refresh:1", "burn_in:8", "n_epochs:30"]
    assert both[both.index("--log-interval") + 1] == "1"
    # 1e5 steps, 20 evaluations
    assert both[both.index("--eval-freq") + 1] == "5000"
    off = run_grid.command("fm_off", "CueRecall-v0", 0, Path("/tmp/x"), 20)
    assert "--hyperparams" not in off
    # The published grid's variants are unchanged
    assert run_grid.conf_file("reset") == run_grid.RESET_PPO_CONF and run_grid.conf_file("ppo_lstm") == run_grid.PPO_LSTM_CONF


def test_gru_study_commands() -> None:
    run_grid = _load("run_grid")
    gru = run_grid.command("gru", "CartPoleNoVel-v1", 3, Path("/tmp/x"), 20)
    assert gru[gru.index("--conf-file") + 1] == str(run_grid.FRESH_MEMORY_CONF)
    assert gru[gru.index("--hyperparams") + 1 :] == ["policy:'MlpGruPolicy'"]
    assert gru[gru.index("--log-interval") + 1] == "1"
    assert set(run_grid.GRU_ENVS) < set(run_grid.FRESH_MEMORY_ENVS)


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
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--grid", str(grid), str(other), "--out", str(out)]
        + ["--figures", str(tmp_path / "figures"), "--reps", "50", "--min-seeds", "3"]
        + ["--variants", "fm_off", "fm_refresh", "--baseline", "fm_off", "--final-evaluations", "2"]
        + ["--notes", str(tmp_path / "study.md"), str(tmp_path / "other.md")],
        check=True,
        capture_output=True,
        timeout=300,
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
    report = _load("report")
    # Sorted p = 0.01, 0.02, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.02), max(0.04, 1 * 0.04)
    assert report.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert report.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


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
    training_log = _load("training_log")
    rows = training_log.parse_tables(LOG)
    assert rows == [
        {"rollout/ep_len_mean": 5.61, "rollout/ep_rew_mean": 0.25, "time/total_timesteps": 1024.0},
        # Non-numbers are left out
        {"eval/mean_reward": 0.2, "train/approx_kl": 0.00776, "train/kept_slot_fraction": 1.0},
    ]
    training_log.write_csv(rows, tmp_path / "progress.csv.gz")
    assert training_log.read_csv(tmp_path / "progress.csv.gz") == rows
    assert training_log.training_rows(tmp_path) == rows


def test_evidence_study_jobs_follow_the_protocol(tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    args = run_grid.argparse.Namespace(seeds=None, study="evidence")
    assert run_grid.seeds_of(args, "CartPoleNoVel-v1") == 20 and run_grid.seeds_of(args, "EarlyChoice-v0") == 20
    assert run_grid.seeds_of(args, "MiniGridMemoryS7Flat-v0") == 10
    assert run_grid.seeds_of(run_grid.argparse.Namespace(seeds=3, study="evidence"), "CartPoleNoVel-v1") == 3
    assert not run_grid.runs_on("evidence", "ev_reset_gru", "MiniGridMemoryS7Flat-v0")
    assert run_grid.runs_on("evidence", "ev_reset_gru", "CartPoleNoVel-v1") and run_grid.runs_on(
        "evidence", "ev_rppo", "PendulumNoVel-v1"
    )
    rppo = run_grid.command("ev_rppo", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert rppo[rppo.index("--algo") + 1] == "ppo_lstm" and rppo[rppo.index("--conf-file") + 1] == str(run_grid.EVIDENCE_CONF)
    # A tuned trial's config file and a smaller budget (the tuning reruns' smoke runs)
    tuned = run_grid.command("ev_reset", "CueRecall-v0", 100, tmp_path, 20, conf=tmp_path / "best.yml", steps=2048)
    assert tuned[tuned.index("--conf-file") + 1] == str(tmp_path / "best.yml")
    assert tuned[tuned.index("-n") + 1] == "2048" and tuned[tuned.index("--eval-freq") + 1] == "102"
    mask = run_grid.command("ev_mask_kept", "CartPoleNoVel-v1", 0, tmp_path, 20)
    assert mask[mask.index("--hyperparams") + 1 :] == ["boundary:'mask'", "weighting:'kept_mean'"]
    # Every env of the study is configured in evidence.yml, and has a reference return for the report
    import yaml

    configured = yaml.safe_load(run_grid.EVIDENCE_CONF.read_text())
    assert set(run_grid.EVIDENCE_ENVS) <= set(configured)
    assert set(run_grid.EVIDENCE_ENVS) <= set(_load("report").REFERENCE_RETURN)


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
    training_log = _load("training_log")
    for seed in range(2):
        _fake_run(grid, "ev_reset", "CueRecall-v0", seed, [0.2, 1.0, 0.3])
        _fake_run(grid, "ev_mask", "CueRecall-v0", seed, [0.2, 0.5, 0.6])
        rows = [{"train/approx_kl": 0.01 * k, "train/kept_slot_fraction": 1.0} for k in range(3)]
        training_log.write_csv(rows, grid / "ev_reset" / "CueRecall-v0" / f"seed{seed}" / "progress.csv.gz")
    out, figures = tmp_path / "RESULTS.md", tmp_path / "figures"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--grid", str(grid), "--out", str(out)]
        + ["--figures", str(figures), "--reps", "50", "--min-seeds", "2", "--variants", "ev_reset", "ev_mask"]
        + ["--baseline", "ev_mask", "--focus", "ev_reset", "--diagnostics", "--title", "Evidence"],
        check=True,
        capture_output=True,
        timeout=300,
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


def test_tuning_rerun_config_is_the_trials_settings(tmp_path: Path) -> None:
    tune = _load("tune")
    raw = {
        "window_size": 8, "batch_size_pow": 6, "n_steps_pow": 8, "one_minus_gamma": 0.01, "one_minus_gae_lambda": 0.05,
        "learning_rate": 1e-3, "ent_coef": 0.01, "clip_range": 0.2, "n_epochs": 5, "max_grad_norm": 0.5,
        "net_arch": "tiny", "activation_fn": "relu",
    }  # fmt: skip
    config = tune.best_config("reset_ppo", "CartPoleNoVel-v1", ROOT / "benchmarks" / "evidence.yml", raw)
    # The sampled settings over the config's (as -optimize trained the trial), the rest of the entry kept
    assert (config["batch_size"], config["n_steps"], config["window_size"], config["n_epochs"]) == (64, 256, 8, 5)
    assert config["gamma"] == pytest.approx(0.99) and config["normalize"] is True
    assert config["policy_kwargs"] == "dict(net_arch=dict(pi=[64], vf=[64]), activation_fn=nn.ReLU)"
    raw.pop("window_size")
    assert "window_size" not in tune.best_config("ppo_lstm", "CartPoleNoVel-v1", ROOT / "benchmarks" / "evidence.yml", raw)
    assert tune.finished_trials(str(tmp_path / "none.log"), "missing") == 0
    command = tune.optimize_command(
        "EarlyChoice-v0",
        "ev_mask_kept",
        "s.log",
        7,
        tmp_path,
        tune.argparse.Namespace(n_evaluations=5, eval_episodes=10, n_timesteps=None),
    )
    # One trial per process (tune.py counts the study's trials; the zoo's --max-total-trials would run until full)
    assert command[command.index("--n-trials") + 1] == "1" and "--max-total-trials" not in command
    assert command[command.index("--storage") + 1] == "s.log" and command[command.index("--seed") + 1] == "7"
    assert command[command.index("--hyperparams") + 1 :] == ["boundary:'mask'", "weighting:'kept_mean'"]


def test_reuse_only_runs_trained_the_same_way() -> None:
    reuse = _load("reuse_runs")
    # evidence.yml copies fresh_memory.yml's entries for our memory tasks and RepeatPrevious
    for env_id in ("CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "PopgymRepeatPreviousEasy-v0"):
        assert reuse.same_training("fm_off", "ev_reset", env_id)
        assert reuse.same_training("fm_refresh", "ev_reset_refresh", env_id)
        assert reuse.same_training("gru", "ev_reset_gru", env_id)
    # CartPoleNoVel-v1 uses the zoo's tuned settings in evidence.yml, RecurrentPPO's defaults in fresh_memory.yml
    assert not reuse.same_training("fm_off", "ev_reset", "CartPoleNoVel-v1")
    assert not reuse.same_training("fm_off", "ev_mask", "CueRecall-v0")
    assert not reuse.same_training("fm_refresh", "ev_reset", "CueRecall-v0")


def test_tuning_marks_trials_of_stopped_workers_failed(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="s", storage=tune._backend(storage))
    study.tell(study.ask(), 1.0)
    cut = study.ask()  # a worker stopped while this trial ran
    cut.suggest_int("n_steps_pow", 3, 12)
    assert tune.fail_stale_trials(storage, "s") == 1
    loaded = optuna.load_study(study_name="s", storage=tune._backend(storage))
    states = [trial.state for trial in loaded.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]
    assert tune.finished_trials(storage, "s") == 1 and tune.fail_stale_trials(storage, "s") == 0
    # The cut trial's settings are tried again by the next trial to start
    again = loaded.ask()
    assert again.suggest_int("n_steps_pow", 3, 12) == cut.params["n_steps_pow"]
    assert tune.state_counts(storage, "s") == {"COMPLETE": 1, "FAIL": 1, "RUNNING": 1}
    assert tune.ended({"COMPLETE": 1, "FAIL": 2, "RUNNING": 5, "PRUNED": 1}) == 4


def test_tuning_best_trial_breaks_ties_by_the_earliest_trial(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="s", storage=tune._backend(storage), direction="maximize")
    with pytest.raises(ValueError, match="no completed trial"):
        tune.best_trial(storage, "s")
    values = [400.0, 500.0, None, 500.0, 499.9, 500.0]  # trial 2 pruned at a higher value
    for value in values:
        trial = study.ask()
        trial.suggest_int("n_steps_pow", 3, 12)
        if value is None:
            trial.report(600.0, step=1)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, value)
    number, value, params, tied = tune.best_trial(storage, "s")
    # Pruned trials never win; among equal values the earliest, as Optuna's best_trial (what the zoo reports)
    assert (number, value, tied) == (1, 500.0, [3, 5]) and number == study.best_trial.number
    assert params == study.trials[1].params
    # The tuned report's summary of the search: states, trial-hours, best trial and its ties
    folder = tmp_path / "EarlyChoice-v0" / "ev_reset"
    folder.mkdir(parents=True)
    journal = tune._backend(str(tune.study_path(tmp_path, "EarlyChoice-v0", "ev_reset")))
    copy = optuna.create_study(study_name=tune.study_name("EarlyChoice-v0", "ev_reset"), storage=journal, direction="maximize")
    for frozen in study.trials:
        copy.add_trial(frozen)
    copy.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={}, distributions={}))
    row = tune.search_summary(tmp_path, ["EarlyChoice-v0"], ["ev_reset"]).splitlines()[-1]
    assert row.startswith("| EarlyChoice-v0 | `ev_reset` | 5 | 1 | 1 | ")
    assert row.endswith(f"| 1 | 500.000 | 3, 5 | n_steps_pow={study.trials[1].params['n_steps_pow']} |")


def test_tuning_rerun_refuses_a_partial_or_missing_search(tmp_path: Path) -> None:
    import optuna

    tune = _load("tune")
    path = tune.study_path(tmp_path, "EarlyChoice-v0", "ev_reset")
    path.parent.mkdir(parents=True)
    study = optuna.create_study(study_name=tune.study_name("EarlyChoice-v0", "ev_reset"), storage=tune._backend(str(path)))
    study.tell(study.ask(), 1.0)
    study.ask()  # running (or left by a stopped worker): not finished
    args = tune.argparse.Namespace(envs=["EarlyChoice-v0"], arms=["ev_reset", "ev_rppo"], trials=2, storage=None, out=tmp_path)
    problems = tune.unfinished_studies(args)
    missing = tune.study_path(tmp_path, "EarlyChoice-v0", "ev_rppo")
    assert problems == ["EarlyChoice-v0 ev_reset: 1 of 2 trials finished", f"EarlyChoice-v0 ev_rppo: no study ({missing})"]
    assert tune.unfinished_studies(tune.argparse.Namespace(**{**vars(args), "arms": ["ev_reset"], "trials": 1})) == []
    # From the command line: a usage error naming the studies, before anything is trained or written
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tune.py"), "rerun", "--envs", "EarlyChoice-v0", "--arms", "ev_reset"]
        + ["--trials", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "EarlyChoice-v0 ev_reset: 1 of 2 trials finished" in result.stderr
    assert not (path.parent / "best.yml").exists()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tune.py"), "optimize", "--trials", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "--trials must be at least 1, got 0" in result.stderr


def test_tuning_records_each_session_with_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    tune = _load("tune")
    calls: list[list[str]] = []

    def worker(command: list[str], **kwargs: Any) -> int:
        """A zoo worker that finishes one trial of the shared study."""
        calls.append(command)
        storage, name = command[command.index("--storage") + 1], command[command.index("--study-name") + 1]
        study = optuna.create_study(study_name=name, storage=tune._backend(storage), load_if_exists=True)
        study.tell(study.ask(), 1.0)
        return 0

    monkeypatch.setattr(tune.subprocess, "call", worker)
    args = tune.argparse.Namespace(
        envs=["EarlyChoice-v0"], arms=["ev_reset"], trials=3, workers=2, storage=None, out=tmp_path,
        n_evaluations=5, eval_episodes=10, n_timesteps=None, seed_offset=0, minutes=None, grid=tmp_path / "grid",
    )  # fmt: skip
    tune.optimize(args)  # two workers, a zoo process per trial: exactly 3 trials
    assert len(calls) == 3 and all(command[command.index("--n-trials") + 1] == "1" for command in calls)
    tune.optimize(tune.argparse.Namespace(**{**vars(args), "trials": 4}))  # resumed with a larger budget: one more
    tune.optimize(tune.argparse.Namespace(**{**vars(args), "trials": 4}))  # 4 >= 4 trials: skipped, nothing recorded
    assert len(calls) == 4
    lines = (tmp_path / "EarlyChoice-v0" / "ev_reset" / "sessions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["event"], r["trials"]) for r in records] == [("start", 0), ("end", 3), ("start", 3), ("end", 4)]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert all(r["commit"] == head and isinstance(r["dirty"], bool) for r in records)
    # The command of the session's first trial (seed 0) as it ran
    (first,) = [command for command in calls[:3] if command[command.index("--seed") + 1] == "0"]
    assert records[0]["command"] == " ".join(first)
    assert records[1]["exit_codes"] == [0, 0]
    # Every trial seeds the zoo's sampler afresh, a resumed study's too: repeated seeds repeat random startup trials
    seeds = [int(command[command.index("--seed") + 1]) for command in calls]
    assert len(set(seeds)) == 4 and all(seed < 1000 for seed in seeds[:3]) and 1000 <= seeds[3] < 2000
    assert [r["seed_base"] for r in records if r["event"] == "start"] == [0, 1000]
    assert tune.worker_seed_base(tmp_path / "EarlyChoice-v0" / "ev_reset", offset=100000) == 102000
    assert tune.worker_seed_base(tmp_path / "nowhere") == 0
    # A database password never reaches the record
    assert tune.redact("postgresql://user:secret@db.example:5432/optuna") == "postgresql://user:***@db.example:5432/optuna"
    assert tune.redact("postgresql://db.example/optuna") == "postgresql://db.example/optuna"
    assert tune.redact(str(tmp_path / "study.log")) == str(tmp_path / "study.log")


def test_tuning_starts_only_trials_that_finish_in_time_and_never_spins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    tune = _load("tune")
    storage = str(tmp_path / "study.log")
    name = tune.study_name("EarlyChoice-v0", "ev_reset")
    calls: list[list[str]] = []
    behaviour: dict[str, Any] = {"trial": True, "code": 0}

    def worker(command: list[str], **kwargs: Any) -> int:
        """A zoo process: one trial, completed (True), pruned or failed, or none (False)."""
        calls.append(command)
        if behaviour["trial"]:
            study = optuna.create_study(study_name=name, storage=tune._backend(storage), load_if_exists=True)
            if behaviour["trial"] is True:
                study.tell(study.ask(), 1.0)
            else:
                study.tell(study.ask(), state=getattr(optuna.trial.TrialState, str(behaviour["trial"])))
        return int(behaviour["code"])

    monkeypatch.setattr(tune.subprocess, "call", worker)
    grid = tmp_path / "grid"
    args = tune.argparse.Namespace(
        trials=5, workers=2, out=tmp_path, grid=grid, n_evaluations=5, eval_episodes=10, n_timesteps=None
    )
    # Nothing timed yet: with a deadline no trial starts (nothing says one fits), without one they all do
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) is None
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 3600) == [0, 0]
    assert calls == []
    # Before the study's first completed trial, the arm's grid runs on the env time it
    for seed, seconds in enumerate((100.0, 300.0, 200.0)):
        _fake_run(grid, "ev_reset", "EarlyChoice-v0", seed, [1.0], seconds=seconds)
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) == 200.0
    assert not tune.fits(200.0, time.monotonic() + 249.0) and tune.fits(200.0, time.monotonic() + 300.0)
    assert tune.fits(None, None) and not tune.fits(None, time.monotonic() + 1e6)
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 240.0)
    assert calls == []
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, time.monotonic() + 3600.0)
    assert len(calls) == 5 and tune.finished_trials(storage, name) == 5
    # The study's own completed trials time it from then on (the fake's trials take no time)
    assert tune.expected_trial_seconds(storage, "EarlyChoice-v0", "ev_reset", grid) < 1.0
    # A process that starts no trial (the zoo found the study full) or fails stops its worker instead of spinning
    nine = tune.argparse.Namespace(**{**vars(args), "trials": 9})
    calls.clear()
    behaviour["trial"] = False
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None) == [0, 0] and len(calls) == 2
    # The zoo exits 1 after a pruned trial while none has completed: the trial counts and the worker goes on
    calls.clear()
    behaviour.update(trial="PRUNED", code=1)
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, tune.argparse.Namespace(**{**vars(args), "trials": 7}), None)
    assert len(calls) == 2 and tune.finished_trials(storage, name) == 7
    # Failed trials do not count; a worker stops after MAX_FAILURES of them in a row
    calls.clear()
    behaviour.update(trial="FAIL", code=1)
    assert tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None) == [1, 1]
    assert len(calls) == 2 * tune.MAX_FAILURES and tune.finished_trials(storage, name) == 7

    # An error in a worker reaches the caller
    def broken(command: list[str], **kwargs: Any) -> int:
        raise OSError("no zoo")

    monkeypatch.setattr(tune.subprocess, "call", broken)
    with pytest.raises(OSError, match="no zoo"):
        tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, nine, None)


INTERRUPTED_SEARCH = """
import argparse, json, os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
import optuna, tune
optuna.logging.set_verbosity(optuna.logging.ERROR)
out = Path(sys.argv[2])
storage = str(out / "study.log")
name = tune.study_name("EarlyChoice-v0", "ev_reset")
study = optuna.create_study(study_name=name, storage=tune._backend(storage))
space = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
study.tell(study.ask(space), state=optuna.trial.TrialState.FAIL)  # failed earlier, for another reason
calls = []

def interrupted_zoo(command, **kwargs):
    # Ctrl-C reaches the zoo and tune.py: the zoo fails its trial (Optuna's KeyboardInterrupt) and exits
    calls.append(command)
    trial = study.ask(space)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return 0

tune.subprocess.call = interrupted_zoo
args = argparse.Namespace(trials=5, workers=1, out=out, grid=out / "grid", n_evaluations=5, eval_episodes=10,
                          n_timesteps=None)
try:
    tune.run_trials("EarlyChoice-v0", "ev_reset", storage, 0, args, None)
    outcome = "not interrupted"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
trials = optuna.load_study(study_name=name, storage=tune._backend(storage)).get_trials()
print(json.dumps({
    "outcome": outcome, "calls": len(calls), "states": [trial.state.name for trial in trials],
    "requeued": trials[-1].system_attrs.get("fixed_params") == trials[1].params,
}))
"""


def test_tuning_queues_again_a_trial_cut_by_ctrl_c(tmp_path: Path) -> None:
    seen = _interrupted(INTERRUPTED_SEARCH, str(tmp_path))
    # No trial started after the interrupt; the one it cut is queued again with its settings, the earlier
    # failure is not
    assert seen == {"outcome": "KeyboardInterrupt", "calls": 1, "states": ["FAIL", "FAIL", "WAITING"], "requeued": True}


def test_every_study_keeps_its_records_and_ignores_models_and_raw_logs() -> None:
    """What the studies write is committed or ignored by .gitignore as the protocols say (logs kept compressed)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tune = _load("tune")
    rerun = tune.OUT.relative_to(ROOT) / "runs" / "tuned_ev_reset" / "EarlyChoice-v0" / "seed100"
    study = tune.study_path(tune.OUT, "EarlyChoice-v0", "ev_reset").relative_to(ROOT)
    evidence = Path("benchmarks/results/evidence/ev_reset/CueRecall-v0/seed0")
    zoo = Path("reset_ppo/CueRecall-v0_1")
    kept = [
        *(run / name for run in (rerun, evidence) for name in ("run.json", "log.txt.gz", "progress.csv.gz")),
        *(run / zoo / "evaluations.npz" for run in (rerun, evidence)),
        study, study.with_name("sessions.jsonl"), study.with_name("worker0.txt"),
    ]  # fmt: skip
    ignored = [
        *(run / "log.txt" for run in (rerun, evidence)),
        *(run / zoo / "CueRecall-v0.zip" for run in (rerun, evidence)),
        evidence / zoo / "0.monitor.csv",
        study.parent / "worker0" / "reset_ppo" / "report_EarlyChoice-v0_1-trials-50000-tpe-median_1796143083.csv",
    ]
    paths = [str(path) for path in kept + ignored]
    result = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert set(result.stdout.split()) == {str(path) for path in ignored}


def test_precondition_reruns_and_compares_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    precondition = _load("precondition")
    with pytest.raises(ValueError, match="ARM/ENV/SEED"):
        precondition.parse_run("ev_reset/CueRecall-v0")
    with pytest.raises(ValueError, match="ARM/ENV/SEED"):
        precondition.parse_run("nope/CueRecall-v0/0")
    assert precondition.parse_run("ev_rppo/CueRecall-v0/3") == ("ev_rppo", "CueRecall-v0", 3)
    curve = [0.1, 0.5, 0.9, 1.0]
    for arm in ("ev_reset", "ev_rppo"):
        _fake_run(tmp_path / "evidence", arm, "CueRecall-v0", 0, curve)
    monkeypatch.setattr(precondition.run_grid, "code_version", lambda: {"commit": "abcdef0123", "dirty": False})
    trained: list[str] = []

    def rerun(job: dict[str, Any]) -> dict[str, Any]:
        """ev_reset trains the same again; ev_rppo differs in its third evaluation."""
        trained.append(job["variant"])
        means = curve if job["variant"] == "ev_reset" else [0.1, 0.5, 0.8, 1.0]
        _fake_run(tmp_path / "evidence" / "precondition" / "abcdef0", job["variant"], job["env"], job["seed"], means)
        return {"variant": job["variant"], "env": job["env"], "seed": job["seed"], "returncode": 0, "seconds": 1.0}

    monkeypatch.setattr(precondition.run_grid, "run_one", rerun)
    runs = ["ev_reset/CueRecall-v0/0", "ev_rppo/CueRecall-v0/0"]
    monkeypatch.setattr(sys, "argv", ["precondition.py", *runs, "--results", str(tmp_path), "--workers", "1"])
    with pytest.raises(SystemExit) as exit_info:
        precondition.main()
    assert exit_info.value.code == 1
    summary = json.loads((tmp_path / "evidence" / "precondition" / "abcdef0" / "summary.json").read_text())
    assert summary["runs"][0] == {"run": runs[0], "equal": True}
    assert summary["runs"][1]["equal"] is False and summary["runs"][1]["first_difference"] == 2
    assert summary["runs"][1]["max_mean_difference"] == pytest.approx(0.1)
    # Resumed: the re-runs are there, nothing trains again; with only the equal run the check passes
    monkeypatch.setattr(sys, "argv", ["precondition.py", runs[0], "--results", str(tmp_path)])
    precondition.main()
    assert trained == ["ev_reset", "ev_rppo"]
    # A stored run that is missing is an error before anything trains
    monkeypatch.setattr(sys, "argv", ["precondition.py", "ev_mask/CueRecall-v0/0", "--results", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match=r"run\.json missing"):
        precondition.main()


def test_evidence_report_writes_the_protocols_reports_and_readme_tables(tmp_path: Path) -> None:
    evidence_report = _load("evidence_report")
    grid, out_dir = tmp_path / "evidence", tmp_path / "out"
    for seed in range(2):
        _fake_run(grid, "ev_reset", "CueRecall-v0", seed, [0.2, 0.9, 1.0])
        _fake_run(grid, "ev_mask", "CueRecall-v0", seed, [0.2, 0.3, 0.4])
        _fake_run(grid, "ev_reset_stride1", "CueRecall-v0", seed, [0.2, 0.5, 0.6])
    # A secondary arm on an env the protocol does not run it on is not reported
    _fake_run(grid, "ev_reset_stride1", "PendulumNoVel-v1", 0, [-1000.0, -900.0, -800.0])
    # A run with fewer evaluations than every other (here 3 stand for the protocol's 20) is a failed run
    _fake_run(grid, "ev_mask", "CueRecallLong-v0", 0, [0.1, 0.2])

    def write_reports(*only: str) -> str:
        command = [sys.executable, str(ROOT / "benchmarks" / "evidence_report.py"), "--out-dir", str(out_dir)]
        command += ["--evidence", str(grid), "--tuned", str(tmp_path / "missing"), "--min-seeds", "2", "--reps", "50"]
        command += ["--evaluations", "3", *(["--only", *only] if only else [])]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=600).stdout

    assert "no finished tuned re-run" in write_reports() and not (out_dir / "RESULTS_evidence_tuned.md").exists()
    primary = (out_dir / "RESULTS.md").read_text()
    assert primary.startswith("# Evidence: reset-and-continue against masking")
    # The study's notes, then the other studies', before the tables
    assert primary.index("## Protocol, deviations and reading") < primary.index("## Other studies")
    assert primary.index("## Other studies") < primary.index("## Aggregate")
    assert "--final-evaluations 2" in primary and "`python benchmarks/run_grid.py --study evidence" in primary
    # The report's command, quoted for a shell, with paths in the repository relative to its root
    assert "--title 'Evidence: reset-and-continue against masking (benchmarks/PROTOCOL.md, primary arms)'" in primary
    assert "--notes benchmarks/RESULTS_evidence_notes.md benchmarks/RESULTS_notes.md" in primary
    assert evidence_report.repository_path(ROOT / "benchmarks") == Path("benchmarks")
    assert evidence_report.repository_path(tmp_path) == tmp_path.resolve()
    assert "| ev_reset | 2 | 0.950 +- 0.000 |" in primary and "| ev_reset_stride1 |" not in primary
    assert "ev_mask CueRecallLong-v0 seed 0 (2 evaluations within its budget, not 3)" in primary
    assert "### CueRecallLong-v0" not in primary
    secondary = (out_dir / "RESULTS_evidence_secondary.md").read_text()
    assert "| ev_reset_stride1 | 2 | 0.550 +- 0.000 |" in secondary and "PendulumNoVel-v1" not in secondary
    assert "ev_mask |" not in secondary
    summary = json.loads((out_dir / "results" / "evidence_primary_summary.json").read_text())
    assert summary["baseline"] == "ev_reset" and summary["aggregate"]["final"]["envs"] == ["CueRecall-v0"]
    tables = (out_dir / "results" / "evidence_readme_tables.md").read_text()
    assert "primary" in tables and "secondary" in tables and "`ev_mask`" in tables
    assert (out_dir / "figures" / "evidence" / "aggregate.png").stat().st_size > 0
    # The protocol's rules applied to the summaries: a claim where the interval excludes 0.5, "undecided" where an
    # arm the rule needs has not run
    claims = (out_dir / "RESULTS_evidence_decisions.md").read_text()
    assert "- primary report: seeds 0 to 1 of 1 env: an interim look, not the protocol's aggregate" in claims
    assert "- `ev_mask` is beaten by `ev_reset` (P(`ev_mask` > `ev_reset`) = 0.00 (0.00 to 0.00)" in claims
    assert "Interim look (see above)" in claims
    assert "- `ev_reset_stride1` is beaten by `ev_reset`" in claims and "Tuned re-runs not finished yet" in claims
    assert (
        "| `boundary` | stays `'reset'` unless a mask arm beats `ev_reset` in the aggregate primary endpoint | undecided"
        in claims
    )
    assert "`python benchmarks/decisions.py --primary " in claims
    # Rewriting one report keeps the others' README tables and claims (read from their stored summaries)
    write_reports("secondary")
    assert (out_dir / "results" / "evidence_readme_tables.md").read_text() == tables
    assert "- `ev_mask` is beaten by `ev_reset`" in (out_dir / "RESULTS_evidence_decisions.md").read_text()
    # Q4: the tuned re-runs on their fresh seeds, against the tuned ev_reset
    # The protocol's settings, as the committed reports are made
    commands = evidence_report.report_commands(out_dir, grid, tmp_path / "tuned", 10, 2000, evidence_report.REPORTS)
    for name, argv in commands.items():
        assert argv[argv.index("--final-evaluations") + 1] == "2" and argv[argv.index("--min-seeds") + 1] == "10"
        assert argv[argv.index("--reps") + 1] == "2000" and "--diagnostics" in argv
        assert argv[argv.index("--evaluations") + 1] == "20"
        assert argv[argv.index("--first-seed") + 1] == ("100" if name == "tuned" else "0")
    primary, secondary = commands["primary"], commands["secondary"]
    assert primary[primary.index("--variants") + 1 : primary.index("--baseline")] == [
        "ev_reset",
        "ev_reset_importance",
        "ev_mask",
        "ev_mask_kept",
        "ev_rppo",
    ]
    assert secondary[secondary.index("--variants") + 1 : secondary.index("--baseline")] == [
        "ev_reset",
        "ev_reset_stride1",
        "ev_reset_gru",
        "ev_reset_refresh",
    ]
    assert secondary[secondary.index("--envs") + 1 : secondary.index("--out")] == [
        "CueRecall-v0",
        "EarlyChoice-v0",
        "CartPoleNoVel-v1",
        "PopgymRepeatPreviousEasy-v0",
    ]
    assert primary[primary.index("--baseline") + 1] == secondary[secondary.index("--baseline") + 1] == "ev_reset"
    tuned = commands["tuned"]
    assert tuned[tuned.index("--first-seed") + 1] == "100" and tuned[tuned.index("--baseline") + 1] == "tuned_ev_reset"
    assert tuned[tuned.index("--grid") + 1] == str(tmp_path / "tuned")
    notes = tuned[tuned.index("--notes") + 1 : tuned.index("--final-evaluations")]
    assert notes == [str(evidence_report.NOTES)]
    # Once `tune.py rerun` has summarised the searches, the tuned report shows them first
    (tmp_path / "SEARCH.md").write_text("## The searches (Q4)\n")
    tuned = evidence_report.report_commands(out_dir, grid, tmp_path / "tuned", 10, 2000, ["tuned"])["tuned"]
    notes = tuned[tuned.index("--notes") + 1 : tuned.index("--final-evaluations")]
    assert notes == [str(tmp_path / "SEARCH.md"), str(evidence_report.NOTES)]


def test_runs_record_when_and_on_which_machine_they_trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid, report = _load("run_grid"), _load("report")
    # A trainer that only writes its evaluations: run_one's record, not training, is under test
    evaluations = {"count": run_grid.EVALUATIONS_PER_RUN}

    def fake_trainer(variant: str, env_id: str, seed: int, run_dir: Path, *args: Any, **kwargs: Any) -> list[str]:
        folder = run_dir / "reset_ppo" / f"{env_id}_1"
        code = (
            f"import numpy; numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=numpy.arange({evaluations['count']}))"
        )
        return [sys.executable, "-c", f"import os; os.makedirs({str(folder)!r}); {code}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": tmp_path / "run", "eval_episodes": 1}
    result = run_grid.run_one(job)
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored == result and stored["returncode"] == 0 and stored["evaluations"] == 20
    assert run_grid.completed(result) and run_grid.status(result) == "ok"
    assert stored["machine"] == run_grid.machine() and stored["machine"]["cores"] == os.cpu_count()
    # Read from Linux's CPU description: the first model name, the extensions among the flags; absent elsewhere
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: CPU A\nflags\t\t: fpu sse avx2 amx_tile\n\n"
        "processor\t: 1\nmodel name\t: CPU A\nflags\t\t: fpu sse avx2 amx_tile\n"
    )
    assert run_grid.machine(cpuinfo) == {"cpu": "CPU A", "cores": os.cpu_count(), "extensions": ["avx2", "amx_tile"]}
    assert run_grid.machine(tmp_path / "absent")["cpu"] == "unknown CPU"
    # The report's own machine is described the same way
    assert report.hardware().startswith(report.machine_name(run_grid.machine()) + ", ")
    assert abs(calendar.timegm(time.strptime(stored["started"], "%Y-%m-%dT%H:%M:%SZ")) - time.time()) < 600
    # The report counts the runs per machine, runs from before the record as not recorded
    a = {"cpu": "CPU A", "cores": 2, "extensions": ["avx2"]}
    b = {"cpu": "CPU B", "cores": 2, "extensions": []}
    text = report.machines([{"machine": a}, {"machine": a}, {"machine": b}, {}])
    assert text == "CPU A, 2 cores (avx2): 2 runs; CPU B, 2 cores: 1 run; " + (
        "not recorded (runs made before run.json recorded the machine): 1 run"
    )


def test_a_run_cut_short_with_exit_0_is_not_stored_as_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid = _load("run_grid")
    # The zoo's train swallows KeyboardInterrupt and exits 0 with the evaluations made so far
    count = {"evaluations": 7}

    def fake_trainer(variant: str, env_id: str, seed: int, run_dir: Path, *args: Any, **kwargs: Any) -> list[str]:
        folder = run_dir / "reset_ppo" / f"{env_id}_1"
        save = f"numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=numpy.arange({count['evaluations']}))"
        return [sys.executable, "-c", f"import os, numpy; os.makedirs({str(folder)!r}); {save}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": tmp_path / "run", "eval_episodes": 1}
    result = run_grid.run_one(job)
    assert result["returncode"] == 0 and result["evaluations"] == 7
    assert not run_grid.completed(result) and run_grid.status(result) == "TRUNCATED (7 evaluations)"
    assert not (tmp_path / "run" / "run.json").exists()  # the grid trains it again next time
    # One short of the budget is still cut short; the whole budget (or more: rollouts overshoot) is finished
    count["evaluations"] = run_grid.EVALUATIONS_PER_RUN - 1
    assert not run_grid.completed(run_grid.run_one(job))
    count["evaluations"] = run_grid.EVALUATIONS_PER_RUN + 1
    assert run_grid.completed(run_grid.run_one(job)) and (tmp_path / "run" / "run.json").exists()
    # No evaluations file (or several, or one cut while being written) counts as none; a failed exit stays a failure
    assert run_grid.evaluations_done(tmp_path / "absent") == 0
    partial = tmp_path / "partial" / "reset_ppo" / "CueRecall-v0_1"
    partial.mkdir(parents=True)
    (partial / "evaluations.npz").write_bytes(b"PK\x03\x04 cut")
    assert run_grid.evaluations_done(tmp_path / "partial") == 0
    assert run_grid.status({"returncode": 2, "evaluations": 0}) == "FAILED (2)"
    # Runs stored before run.json recorded the count were all checked to hold their 20 evaluations
    assert run_grid.completed({"returncode": 0})


def test_a_run_that_fails_with_an_error_is_recorded_and_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid = _load("run_grid")
    exit_with = {"code": "raise SystemExit(3)"}

    def fake_trainer(*args: Any, **kwargs: Any) -> list[str]:
        return [sys.executable, "-c", f"print('training broke'); {exit_with['code']}"]

    monkeypatch.setattr(run_grid, "command", fake_trainer)
    run_dir = tmp_path / "run"
    job = {"variant": "reset", "env": "CueRecall-v0", "seed": 0, "run_dir": run_dir, "eval_episodes": 1}
    result = run_grid.run_one(job)
    assert result["returncode"] == 3 and run_grid.status(result) == "FAILED (3)"
    # Recorded with its log (for the report and for tracing), not as finished; the grid does not train it again
    assert json.loads((run_dir / "failed.json").read_text()) == result and not (run_dir / "run.json").exists()
    with gzip.open(run_dir / "log.txt.gz", "rt") as log:
        assert "training broke" in log.read()
    assert run_grid.recorded(run_dir) and not run_grid.recorded(run_dir, retry_failed=True)
    # A trainer killed by a signal (a session's end) was cut, not failed: nothing recorded, trained next time
    exit_with["code"] = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = run_grid.run_one(job)
    assert result["returncode"] == -9 and not run_grid.recorded(run_dir) and run_grid.status(result) == "CUT (signal 9)"
    assert not (run_dir / "failed.json").exists()  # the earlier attempt's record went with its folder
    # A later attempt that finishes replaces the record
    exit_with["code"] = "pass"
    monkeypatch.setattr(run_grid, "evaluations_done", lambda run_dir: run_grid.EVALUATIONS_PER_RUN)
    assert run_grid.completed(run_grid.run_one(job)) and (run_dir / "run.json").exists()
    assert not (run_dir / "failed.json").exists()
    # The grid's command line: a failed run counts as done and is named, unless --retry-failed
    failed_dir = tmp_path / "grid" / "reset" / "CueRecall-v0" / "seed0"
    failed_dir.mkdir(parents=True)
    (failed_dir / "failed.json").write_text(json.dumps({"returncode": 3}))
    grid = [sys.executable, str(ROOT / "benchmarks" / "run_grid.py"), "--envs", "CueRecall-v0", "--variants", "reset"]
    grid += ["--seeds", "2", "--out", str(tmp_path / "grid"), "--forecast"]
    output = subprocess.run(grid, check=True, capture_output=True, text=True, timeout=120).stdout
    assert "1 of 2 runs already done; 1 to run" in output
    assert (
        "1 failed with an error (failed.json; not retried; --retry-failed retries them): reset CueRecall-v0 seed 0" in output
    )
    output = subprocess.run([*grid, "--retry-failed"], check=True, capture_output=True, text=True, timeout=120).stdout
    assert "0 of 2 runs already done; 2 to run" in output and "retried now" in output


def test_forecast_of_the_remaining_runs_from_medians_of_finished_ones(tmp_path: Path) -> None:
    run_grid = _load("run_grid")

    def job(variant: str, env_id: str, seed: int, seconds: float | None = None, **fields: Any) -> dict[str, Any]:
        run_dir = tmp_path / variant / env_id / f"seed{seed}"
        if seconds is not None:
            run_dir.mkdir(parents=True)
            run = {"returncode": 0, "seconds": seconds, **fields}
            (run_dir / "run.json").write_text(json.dumps(run))
        return {"variant": variant, "env": env_id, "seed": seed, "run_dir": run_dir}

    jobs = [
        # a: median 3600 s of its own runs (the reused one, 60 s, is ignored), 2 runs to do
        job("a", "E1", 0, 1800.0),
        job("a", "E1", 1, 3600.0),
        job("a", "E1", 2, 7200.0),
        job("a", "E1", 3, 60.0, reused_from="x"),
        job("a", "E1", 4),
        job("a", "E1", 5),
        # b: only reused runs, so they time it: 1800 s, 1 run to do
        job("b", "E1", 0, 1800.0, reused_from="x"),
        job("b", "E1", 1),
        # c: nothing finished
        job("c", "E2", 0),
    ]
    todo = [j for j in jobs if not (j["run_dir"] / "run.json").exists()]
    text = run_grid.forecast(jobs, todo, 2)
    # c's run is not counted, so the total is a lower bound
    assert text.splitlines()[0].startswith("forecast: 4 runs to do, at least 2.5 core-hours, at least 1.2 wall-hours on 2")
    assert "core-hours by variant: a 2.0, b 0.5" in text and "core-hours by env: E1 2.5" in text
    assert "not counted (no finished run yet): c on E2 (1)" in text
    assert run_grid.median_times(jobs) == {("a", "E1"): 3600.0, ("b", "E1"): 1800.0}


def test_grid_starts_only_runs_that_finish_before_the_time_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    times = {("long", "E"): 3000.0, ("short", "E"): 100.0}

    def jobs() -> list[dict[str, Any]]:
        return [
            {"variant": variant, "env": "E", "seed": seed, "run_dir": tmp_path / variant / str(seed)}
            for variant, seed in (("long", 0), ("short", 0), ("new", 0), ("short", 1))
        ]

    todo = jobs()
    # No limit: the grid's order, an untimed pair included
    assert [run_grid.next_job(todo, times, None)["variant"] for _ in range(4)] == ["long", "short", "new", "short"]
    assert todo == [] and run_grid.next_job(todo, times, None) is None
    # 1 hour left: the long run (3000 s x 1.25 margin) and the untimed one wait; the short ones go, in order
    todo = jobs()
    assert run_grid.next_job(todo, times, 3600.0)["seed"] == 0 and run_grid.next_job(todo, times, 3600.0)["seed"] == 1
    assert run_grid.next_job(todo, times, 3600.0) is None and [job["variant"] for job in todo] == ["long", "new"]
    # The margin: 3000 s fits in 3750 s, not in 3749 s
    assert run_grid.next_job(jobs(), times, 3749.0)["variant"] == "short"
    assert run_grid.next_job(jobs(), times, 3750.0)["variant"] == "long"
    # The workers: every run that fits is trained once, the others are left for later
    trained: list[str] = []

    def fake_run(job: dict[str, Any]) -> dict[str, Any]:
        trained.append(f"{job['variant']}{job['seed']}")
        return {**job, "returncode": 0, "seconds": 1.0}

    monkeypatch.setattr(run_grid, "run_one", fake_run)
    todo = jobs()
    results = run_grid.run_until(todo, times, 2, minutes=60)
    assert sorted(trained) == ["short0", "short1"] and len(results) == 2 and [j["variant"] for j in todo] == ["long", "new"]
    trained.clear()
    assert len(run_grid.run_until(jobs(), times, 2, minutes=None)) == 4 and len(trained) == 4

    # A worker's error reaches the caller, and no new run starts after it
    def failing_run(job: dict[str, Any]) -> dict[str, Any]:
        raise OSError(f"disk full at {job['variant']}")

    monkeypatch.setattr(run_grid, "run_one", failing_run)
    with pytest.raises(OSError, match="disk full"):
        run_grid.run_until(jobs(), times, 1, minutes=None)


# Run in a fresh interpreter (a hang becomes a timeout, and no earlier test's threads or signal state is shared),
# with SIGINT as a shell's Ctrl-C delivers it: a real signal to the process
INTERRUPTED_GRID = """
import json, os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may inherit SIGINT ignored
sys.path.insert(0, sys.argv[1])
import run_grid
trained, ended = [], []

def interrupted_run(job):
    trained.append(job["seed"])
    if len(trained) == 2:
        os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)
    ended.append(job["seed"])
    return {**job, "returncode": 0, "seconds": 0.05}

run_grid.run_one = interrupted_run
todo = [{"variant": "a", "env": "E", "seed": seed, "run_dir": None} for seed in range(50)]
try:
    run_grid.run_until(todo, {}, 2, minutes=None)
    outcome = "not interrupted"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
print(json.dumps({"outcome": outcome, "trained": trained, "ended": ended, "left": len(todo)}))
"""


def _interrupted(script: str, *args: str) -> dict[str, Any]:
    """Run one of the interrupt scripts and return what it printed last (JSON)."""
    result = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "benchmarks"), *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_an_interrupted_grid_starts_no_new_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_grid = _load("run_grid")
    # Ctrl-C while the second run trains (the zoo's train then exits 0, see run_one): the runs already started
    # end, the other 48 are not started, and the caller sees the interrupt
    seen = _interrupted(INTERRUPTED_GRID)
    assert seen["outcome"] == "KeyboardInterrupt"
    # The waiting thread takes the signal at once: only the runs started before it, give or take one
    assert 2 <= len(seen["trained"]) <= 10 and seen["left"] == 50 - len(seen["trained"])
    # ... and it returns only once the running ones have ended (an interrupted Thread.join would not wait)
    assert sorted(seen["ended"]) == sorted(seen["trained"])

    # The same harness runs tune.py's workers: one worker's error stops the others' loops too
    loops = [0, 0]

    def work(index: int, stop: threading.Event) -> None:
        while not stop.is_set() and loops[index] < 10_000:
            loops[index] += 1
            if index == 0 and loops[0] == 3:
                raise ValueError("worker 0 broke")
            time.sleep(0.001)

    with pytest.raises(ValueError, match="worker 0 broke"):
        run_grid.run_workers(work, 2)
    assert loops[0] == 3 and loops[1] < 10_000


PRIMARY_ENVS = [
    "CueRecall-v0",
    "CueRecallLong-v0",
    "EarlyChoice-v0",
    "CartPoleNoVel-v1",
    "PendulumNoVel-v1",
    "PopgymRepeatPreviousEasy-v0",
    "PopgymNoisyPositionOnlyCartPoleEasy-v0",
    "PopgymCountRecallEasy-v0",
    "MiniGridMemoryS7Flat-v0",
]
SECONDARY_ENVS = ["CueRecall-v0", "EarlyChoice-v0", "CartPoleNoVel-v1", "PopgymRepeatPreviousEasy-v0"]


def _row(env: str, variant: str, difference: float, p_holm: float) -> dict[str, Any]:
    """A per-env difference row of report.py --json (interval: the difference +- 1)."""
    return {
        "env": env,
        "variant": variant,
        "difference": [difference, difference - 1, difference + 1],
        "p": p_holm,
        "p_holm": p_holm,
    }


def _summary(
    baseline: str,
    probabilities: dict[str, list[float]],
    rows: list[dict[str, Any]],
    envs: list[str] | None = None,
    seeds: list[int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """
    A report.py --json summary with the given aggregate P(X > baseline) over ``envs`` (default: the primary
    report's 9) and ``seeds`` (default 0 to 9), per-env rows ``rows`` plus a not-significant row for every other
    (env, variant).
    """
    envs = PRIMARY_ENVS if envs is None else envs
    variants = [baseline, *probabilities]
    iqm = {v: [0.5, 0.4, 0.6] for v in variants}
    aggregate = {"envs": envs, "seeds": list(range(10)) if seeds is None else seeds, "iqm": iqm}
    given = {(row["env"], row["variant"]) for row in rows}
    rows = rows + [_row(env, v, 0.1, 0.9) for env in envs for v in probabilities if (env, v) not in given]
    return {
        "baseline": baseline,
        "variants": variants,
        "final_evaluations": 2,
        "reps": 2000,
        "bootstrap_seed": 0,
        "evaluations": 20,
        "failed": [],
        "aggregate": {key: {**aggregate, "probability_of_improvement": probabilities} for key in ("final", "auc")}
        if probabilities
        else {},
        "differences": {"final": rows, "auc": []},
        **extra,
    }


def _with_probabilities(summary: dict[str, Any], **probabilities: list[float]) -> dict[str, Any]:
    """``summary`` with some P(X > baseline) of the final aggregate replaced."""
    final = summary["aggregate"]["final"]
    new = {**final, "probability_of_improvement": {**final["probability_of_improvement"], **probabilities}}
    return {**summary, "aggregate": {**summary["aggregate"], "final": new}}


def test_the_protocols_aggregate_drops_envs_with_failed_runs_and_needs_its_arms_and_bootstrap() -> None:
    decisions = _load("decisions")
    arms = {"ev_reset_importance": [0.7, 0.55, 0.85], "ev_mask": [0.3, 0.2, 0.45], "ev_mask_kept": [0.5, 0.4, 0.6]}
    arms["ev_rppo"] = [0.2, 0.1, 0.3]
    full = _summary("ev_reset", arms, [])
    assert decisions.coverage(full, "primary")[0] is True
    # A failed run of an aggregate seed takes its env out of the protocol's aggregate (amendment 3) ...
    failed = [{"variant": "ev_mask", "env": "MiniGridMemoryS7Flat-v0", "seed": 4, "reason": "exit code 1"}]
    without = [env for env in PRIMARY_ENVS if env != "MiniGridMemoryS7Flat-v0"]
    # (the env's per-env tests remain, from its other seeds)
    minigrid_rows = [_row("MiniGridMemoryS7Flat-v0", arm, 0.1, 0.9) for arm in arms]
    eight = _summary("ev_reset", arms, minigrid_rows, envs=without, failed=failed)
    assert decisions.coverage(eight, "primary") == (True, "seeds 0 to 9 of 8 envs: the protocol's aggregate")
    assert decisions.decisions(eight, None)[1].fired is True
    # ... so the aggregate over all 9 envs is then not the protocol's, nor is one without the env and no failure
    assert decisions.coverage(_summary("ev_reset", arms, [], failed=failed), "primary")[0] is False
    covered, text = decisions.coverage(_summary("ev_reset", arms, [], envs=without), "primary")
    assert covered is False and "of 9 envs" in text
    # A failure of a later seed (20-seed envs) or of an arm the report does not hold leaves the env in
    later = [{**failed[0], "seed": 15}, {**failed[0], "variant": "ev_reset_gru", "seed": 0}]
    assert decisions.coverage(_summary("ev_reset", arms, [], failed=later), "primary")[0] is True
    # Every arm of the report, and the protocol's bootstrap
    fewer = _summary("ev_reset", {k: v for k, v in arms.items() if k != "ev_rppo"}, [])
    covered, text = decisions.coverage(fewer, "primary")
    assert covered is False and "the protocol's are ev_reset, ev_reset_importance, ev_mask, ev_mask_kept, ev_rppo" in text
    covered, text = decisions.coverage({**full, "reps": 200}, "primary")
    assert covered is False and "200 bootstrap resamples" in text
    # ... and a report that checked every run's 20 evaluations (runs with others are failed runs)
    covered, text = decisions.coverage({**full, "evaluations": None}, "primary")
    assert covered is False and "made with --evaluations None" in text
    assert all(d.fired is None for d in decisions.decisions({**full, "reps": 200}, None)[:2])
    # A summary from before failures were listed as runs is refused, naming the key
    with pytest.raises(ValueError, match="failed"):
        decisions.validate({**full, "failed": ["ev_mask MiniGridMemoryS7Flat-v0 seed 4"]}, "primary")
    with pytest.raises(ValueError, match="'reps'"):
        decisions.validate({k: v for k, v in full.items() if k != "reps"}, "primary")


def test_decisions_apply_the_protocols_rules_to_the_estimates() -> None:
    decisions = _load("decisions")
    not_significant = [0.5, 0.4, 0.6]
    primary = _summary(
        "ev_reset",
        {
            "ev_reset_importance": [0.7, 0.55, 0.85],
            "ev_mask": [0.3, 0.2, 0.45],
            "ev_mask_kept": not_significant,
            "ev_rppo": [0.2, 0.1, 0.3],
        },
        # Importance significantly better on one env: no veto (only "worse" vetoes)
        [_row("CueRecall-v0", "ev_reset_importance", 0.3, 0.01), _row("PendulumNoVel-v1", "ev_rppo", -3.0, 0.04)],
    )
    assert decisions.coverage(primary, "primary") == (True, "seeds 0 to 9 of 9 envs: the protocol's aggregate")
    boundary, weighting, stride, gru, refresh = decisions.decisions(primary, None)
    # Neither mask arm beats ev_reset (one n.s.): reset stays, and the README must say it is not significant
    assert boundary.fired is False and boundary.outcome.startswith("stays `'reset'`; the README says")
    assert "P(`ev_mask_kept` > `ev_reset`) = 0.50 (0.40 to 0.60)" in boundary.evidence
    # A point estimate above 0.5 is not enough: the interval must exclude 0.5
    assert decisions.decide_boundary(_with_probabilities(primary, ev_mask=[0.6, 0.45, 0.7])).fired is False
    # Reset beating both mask arms needs no "not significant" remark
    beaten = _with_probabilities(primary, ev_mask_kept=[0.2, 0.1, 0.4])
    assert decisions.decide_boundary(beaten).outcome == "stays `'reset'`"
    # Importance beats ev_reset in the aggregate and is worse on no env: the rule fires
    assert weighting.fired is True and weighting.outcome == "becomes `'importance'`" and not boundary.notes
    # ... not with an interval that includes 0.5, even with a point estimate above it ...
    for triple in ([0.6, 0.45, 0.75], not_significant):
        assert decisions.decide_weighting(_with_probabilities(primary, ev_reset_importance=triple)).fired is False
    # ... nor if it is significantly worse on one env (Holm), however good the aggregate
    vetoed_rows = [_row("PendulumNoVel-v1", "ev_reset_importance", -1.0, 0.03)]
    every_arm = primary["aggregate"]["final"]["probability_of_improvement"]
    vetoed = decisions.decide_weighting(_summary("ev_reset", every_arm, vetoed_rows))
    assert vetoed.fired is False and vetoed.outcome == "stays `'uniform'`"
    assert "PendulumNoVel-v1 -1 (-2 to +0, Holm p 0.030)" in vetoed.evidence
    # An env without its test (fewer than 2 seeds there) cannot pass the veto: undecided, not "worse on no env"
    untested = {
        **primary,
        "differences": {"final": [r for r in primary["differences"]["final"] if r["env"] != "CueRecall-v0"]},
    }
    assert (
        decisions.decide_weighting(untested).outcome == "undecided: no per-env test of `ev_reset_importance` on CueRecall-v0"
    )
    # A NaN p-value or difference is never significant
    assert decisions.env_verdict(_row("X", "a", -1.0, float("nan"))) == "n.s."
    assert decisions.env_verdict(_row("X", "a", float("nan"), 0.01)) == "n.s."
    # A mask arm that beats ev_reset changes the boundary, with that arm's weighting; the better of two wins
    masked = _with_probabilities(primary, ev_mask=[0.62, 0.52, 0.7], ev_mask_kept=[0.66, 0.51, 0.8])
    changed, weighting_too = decisions.decisions(masked, None)[:2]
    assert (
        changed.fired is True and changed.outcome == "becomes `boundary='mask'` with `weighting='kept_mean'` (`ev_mask_kept`)"
    )
    # Both rules fire: the protocol has no rule for the combination, and the document says so
    assert weighting_too.fired is True and "mask with importance weighting was not run" in changed.notes[0]
    assert "- `boundary`: the new boundary comes with its arm's weighting" in decisions.document(masked, None, None)
    # An interim aggregate (2 seeds, or fewer envs) decides nothing but shows its numbers
    interim = _summary("ev_reset", primary["aggregate"]["final"]["probability_of_improvement"], [], seeds=[0, 1])
    assert decisions.coverage(interim, "primary")[1].startswith("seeds 0 to 1 of 9 envs: an interim look")
    for decision in decisions.decisions(interim, None)[:2]:
        assert decision.fired is None and "an interim look" in decision.outcome and "P(`" in decision.evidence
    one_env = _summary("ev_reset", {"ev_mask": [0.3, 0.2, 0.4], "ev_mask_kept": [0.3, 0.2, 0.4]}, [], envs=["CueRecall-v0"])
    assert decisions.decide_boundary(one_env).fired is None
    # Without the secondary report (or its aggregate) its decisions are undecided, never a silent "stays"
    assert stride.fired is None and gru.fired is None and refresh.fired is None
    assert stride.outcome == "undecided: no aggregate of `ev_reset_stride1` yet"
    assert decisions.decide_boundary(_summary("ev_reset", {}, [])).fired is None
    wall_time = {
        "CueRecall-v0": {"ev_reset_stride1": {"seconds": 30.0, "paired_median_ratio": 2.9, "pairs": 4}},
        # No run side by side with one of ev_reset: no ratio (a ratio of means would mix sessions and machines)
        "EarlyChoice-v0": {"ev_reset_stride1": {"seconds": 9.0, "paired_median_ratio": None, "pairs": 0}},
    }  # fmt: skip
    probabilities = {
        "ev_reset_stride1": [0.6, 0.45, 0.75],
        "ev_reset_gru": [0.7, 0.6, 0.8],
        "ev_reset_refresh": [0.4, 0.2, 0.55],
    }
    secondary = _summary("ev_reset", probabilities, [], envs=SECONDARY_ENVS, wall_time=wall_time)
    _, _, stride, gru, refresh = decisions.decisions(primary, secondary)
    # Stride 1's cost is reported next to its decision either way: same-session pairs only
    assert stride.fired is False and stride.outcome == "stays `window_size`"
    assert stride.evidence.endswith(
        "CueRecall-v0 2.90 (4 same-session pairs), EarlyChoice-v0 not comparable (no run side by side with one of `ev_reset`)"
    )
    without_times = {k: v for k, v in secondary.items() if k != "wall_time"}
    assert (
        "wall times not in the summary" in decisions.decide_opt_in(without_times, "ev_reset_stride1", "s", "a", "b").evidence
    )
    assert gru.fired is True and "MlpGruPolicy" in gru.outcome and refresh.fired is False
    # The protocol's wording: a claim only where the interval excludes 0.5
    assert decisions.wording([0.7, 0.55, 0.85], "ev_reset_gru", "ev_reset") == "`ev_reset_gru` beats `ev_reset`"
    assert decisions.wording([0.3, 0.2, 0.45], "ev_mask", "ev_reset") == "`ev_mask` is beaten by `ev_reset`"
    assert decisions.wording([0.6, 0.45, 0.7], "ev_mask", "ev_reset") == "`ev_mask` against `ev_reset`: not significant"
    text = decisions.comparison(primary, "ev_rppo")
    assert text.startswith("- `ev_rppo` is beaten by `ev_reset` (P(`ev_rppo` > `ev_reset`) = 0.20 (0.10 to 0.30)")
    assert "worse on PendulumNoVel-v1 -3 (-4 to -2, Holm p 0.040)" in text and "better on none" in text
    # The secondary endpoint gets the same wording, and so does each group of envs
    assert text.endswith("Over training (secondary endpoint): `ev_rppo` is beaten by `ev_reset` (P = 0.20 (0.10 to 0.30)).")
    groups = {"NoVel": {"envs": ["A", "B"], "final": {"probability_of_improvement": {"ev_mask": [0.6, 0.52, 0.7]}}}}
    table = decisions.group_table({**primary, "groups": groups}, ["ev_mask", "ev_rppo"])
    assert table[2:] == [
        "| NoVel (2 envs) | `ev_mask` | 0.60 (0.52 to 0.70) | better | - |  |",
        "| NoVel (2 envs) | `ev_rppo` | - |  | - |  |",
    ]
    assert decisions.group_table(primary, ["ev_mask"]) == []
    # Q4: the tuned verdict next to the untuned one on the same env, compared as verdicts
    tuned = _summary(
        "tuned_ev_reset",
        {"tuned_ev_rppo": [0.4, 0.3, 0.5], "tuned_ev_mask_kept": [0.5, 0.4, 0.6]},
        [_row("PendulumNoVel-v1", "tuned_ev_rppo", -1.0, 0.2), _row("EarlyChoice-v0", "tuned_ev_mask_kept", 1.0, 0.01)],
        envs=["EarlyChoice-v0", "CartPoleNoVel-v1"],
        seeds=list(range(100, 110)),
    )
    q4 = decisions.tuned_lines(tuned, primary)
    pendulum = next(line for line in q4 if line.startswith("- PendulumNoVel-v1, `tuned_ev_rppo`"))
    assert ": n.s., " in pendulum and pendulum.endswith(
        "the untuned difference is not confirmed after tuning (not significant)"
    )
    early = next(line for line in q4 if line.startswith("- EarlyChoice-v0, `tuned_ev_mask_kept`"))
    assert early.endswith("significant only after tuning")
    cartpole = next(line for line in q4 if line.startswith("- CartPoleNoVel-v1, `tuned_ev_rppo`"))
    assert cartpole.endswith("the same conclusion as untuned")
    assert decisions.q4_reading("worse", "better") == "reversed after tuning"
    assert "untuned `ev_rppo` - `ev_reset`: not run" in decisions.tuned_lines(tuned, None)[0]
    document = decisions.document(primary, secondary, tuned)
    assert "- tuned report: seeds 100 to 109 of 2 envs: the protocol's aggregate." in document
    assert "Holm over the tuned table: 2 envs x 2 comparisons" in document
    assert "Interim look" not in document and "Interim look" in decisions.document(interim, None, None)
    assert "## Decisions" in document and "| `weighting` |" in document and "| `GRU` |" in document
    assert "Tuned re-runs not finished yet" in decisions.document(primary, None, None)
    # Wrong input names the report and what is wrong
    with pytest.raises(ValueError, match="primary: the summary has no 'differences'"):
        decisions.document({k: v for k, v in primary.items() if k != "differences"}, None, None)
    with pytest.raises(ValueError, match="secondary: baseline 'ev_mask'; the protocol's secondary report uses 'ev_reset'"):
        decisions.document(primary, {**secondary, "baseline": "ev_mask"}, None)
    with pytest.raises(ValueError, match="final_evaluations 1"):
        decisions.document({**primary, "final_evaluations": 1}, None, None)
