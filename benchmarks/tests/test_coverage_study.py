"""The coverage study's tooling (benchmarks/studies/coverage/PROTOCOL.md): arms, shared runs, pairs, the port report."""

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_helpers import ROOT, _load

run_grid = _load("run_grid")
coverage_report = _load("coverage_report")


def test_coverage_windows_follow_each_envs_settings() -> None:
    # The protocol's table: T=128/batch 128 envs, CartPoleNoVel-v1 (T 32, batch 256), PendulumNoVel-v1 (T 1024)
    expected = {
        "CueRecall-v0": {"cv_inside16": 16, "cv_full16": 16, "cv_full64": 64, "cv_batch": 128, "cv_rollout": 128},
        "CartPoleNoVel-v1": {"cv_inside16": 16, "cv_full16": 16, "cv_full64": 32, "cv_batch": 32, "cv_rollout": 32},
        "PendulumNoVel-v1": {"cv_inside16": 16, "cv_full16": 16, "cv_full64": 64, "cv_batch": 128, "cv_rollout": 1024},
    }
    for env, windows in expected.items():
        for arm, window in windows.items():
            assert run_grid.coverage_window(arm, env) == window
    assert run_grid.coverage_alias("cv_rollout", "CueRecall-v0") == "cv_batch"
    assert run_grid.coverage_alias("cv_rollout", "PendulumNoVel-v1") == "cv_rollout"
    assert run_grid.coverage_alias("cv_batch", "CartPoleNoVel-v1") == "cv_full64"
    # Inside and full never share runs, even at the same length
    assert run_grid.coverage_alias("cv_full16", "CueRecall-v0") == "cv_full16"
    assert run_grid.hyperparams("cv_full64", "CartPoleNoVel-v1") == ["window_coverage:'full'", "window_size:32"]


def test_coverage_grid_trains_each_setting_once_and_timing_seeds_only() -> None:
    envs = run_grid.EVIDENCE_ENVS
    trained = {
        (variant, env, seed)
        for seed in range(10)
        for env in envs
        for variant in run_grid.COVERAGE_VARIANTS
        if run_grid.runs_on("coverage", variant, env, seed)
    }
    # 4 full arms: distinct settings per env only (9 + 9 + 8 + 1 = 27 env-arms) x 10 seeds; timing: 2 x 9 x 2
    assert len(trained) == 27 * 10 + 2 * 9 * 2
    assert ("cv_rppo", "CueRecall-v0", 2) not in trained and ("cv_rppo", "CueRecall-v0", 1) in trained
    assert ("cv_batch", "CartPoleNoVel-v1", 0) not in trained
    # cv_rppo comes first in each (seed, env): its pairs train beside it
    assert run_grid.COVERAGE_VARIANTS[0] == "cv_rppo"
    command = run_grid.command("cv_batch", "CueRecall-v0", 0, Path("/tmp/x"), 20)
    assert command[command.index("--hyperparams") + 1 :] == ["window_coverage:'full'", "window_size:128"]


def test_a_run_is_scored_at_a_time_by_the_one_equal_wall_clock_rule() -> None:
    # Still training: the last evaluation by then (0, the random policy's, before the first); stopped (at or after
    # its last evaluation): its final score, the mean of its last 2 evaluations, as in the compare command
    run = {"times": np.array([10.0, 20.0, 30.0]), "scores": np.array([0.1, 0.5, 0.9]), "learn_seconds": 30.0}
    assert [coverage_report.run_score_at(run, at) for at in (5.0, 10.0, 29.9)] == [0.0, 0.1, 0.5]
    assert coverage_report.run_score_at(run, 30.0) == coverage_report.run_score_at(run, 100.0) == pytest.approx(0.7)
    for at in (5.0, 10.0, 29.9, 30.0, 100.0):
        rule = coverage_report.stats.score_at_time(run["times"], run["scores"], at, coverage_report.FINAL_EVALUATIONS, 0.0)
        assert coverage_report.run_score_at(run, at) == rule


def _timed(variant: str, started: str, seconds: float, **fields: Any) -> dict[str, Any]:
    return {
        "variant": variant, "env": "CueRecall-v0", "seed": 0, "started": started, "seconds": seconds,
        "machine": {"cpu": "x"}, "commit": "c", **fields,
    }  # fmt: skip


def test_side_by_side_pairs_need_overlap_machine_commit_env_and_seed() -> None:
    rppo = _timed("cv_rppo", "2026-12-04T10:00:00Z", 400)
    inside = _timed("cv_full16", "2026-12-04T10:01:00Z", 60)  # inside the RecurrentPPO run
    late = _timed("cv_full64", "2026-12-04T10:06:10Z", 60)  # overlaps 50 of 60 s: paired
    later = _timed("cv_batch", "2026-12-04T10:06:20Z", 100)  # overlaps 40 of 100 s: not paired
    other_machine = _timed("cv_full16", "2026-12-04T10:01:00Z", 60, machine={"cpu": "y"})
    other_seed = _timed("cv_full16", "2026-12-04T10:01:00Z", 60, seed=1)
    reused = _timed("cv_full16", "2026-12-04T10:01:00Z", 60, reused_from="ev_reset")
    pairs = coverage_report.side_by_side_pairs([inside, late, later, other_machine, other_seed, reused], [rppo])
    assert [run["variant"] for run, _ in pairs] == ["cv_full16", "cv_full64"]


def _port_run(folder: Path, arm: str, seed: int, returns: list[float], seconds: float) -> None:
    steps = [2048 * (i + 1) for i in range(len(returns))]
    record = {
        "arm": arm, "seed": seed, "learn_seconds": seconds, "total_steps": steps[-1],
        "evaluations": [{"timesteps": t, "returns": [r, r]} for t, r in zip(steps, returns, strict=True)],
    }  # fmt: skip
    (folder / arm).mkdir(parents=True, exist_ok=True)
    (folder / arm / f"seed{seed}.json").write_text(json.dumps(record))


def test_port_analysis_per_step_and_equal_wall_clock(tmp_path: Path) -> None:
    # RecurrentPPO learns faster per step but takes 4 times as long; cv_full16 catches up by its own finish
    for seed in range(4):
        _port_run(tmp_path, "rppo", seed, [100, 300, 400, 500 - seed], 400.0)
        _port_run(tmp_path, "cv_full16", seed, [50, 100, 200, 300 + seed], 100.0)
    runs = coverage_report.load_port(tmp_path)
    analysis = coverage_report.port_analysis(runs, random=0.0, reps=200)
    full = analysis["arms"]["cv_full16"]
    # Final: the mean of the last 2 evaluations, (200 + 301.5) / 2 against (400 + 498.5) / 2 on average
    assert full["final_vs_rppo"]["difference"] == pytest.approx((250.75 - 449.25) / 500)
    assert coverage_report.verdict(full["final_vs_rppo"]) == "worse"
    assert full["learn_ratio"] == pytest.approx(0.25)
    # At cv_full16's finish (100 s) RecurrentPPO has done one of 4 evaluations (at 100 s): 100 -> 0.2
    assert full["at_arm_finish"]["rppo_score"] == pytest.approx(0.2)
    assert full["at_arm_finish"]["difference"] == pytest.approx(250.75 / 500 - 0.2)
    # At RecurrentPPO's finish cv_full16 has stopped: its final against RecurrentPPO's final
    assert full["at_rppo_finish"]["difference"] == pytest.approx(full["final_vs_rppo"]["difference"])
    text = coverage_report.port_markdown(analysis)
    assert "| `cv_full16` | 4 |" in text and "0.25" in text


def _grid(better: str, rng: np.random.Generator) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, float]]:
    """A complete synthetic grid: every candidate and cv_rppo, 9 envs, seeds 0-9; ``better`` ends 0.5 higher."""
    runs, timing = [], []
    randoms = {env: coverage_report.report.REFERENCE_RETURN[env] - 1.0 for env in run_grid.EVIDENCE_ENVS}
    for env in run_grid.EVIDENCE_ENVS:
        for arm in [*coverage_report.CANDIDATES, "cv_rppo"]:
            for seed in range(10):
                level = randoms[env] + 0.3 + (0.5 if arm == better else 0.0) + 0.01 * rng.standard_normal()
                curve = np.linspace(randoms[env], level, 20)
                seconds = 400.0 if arm == "cv_rppo" else 100.0
                run = {
                    "variant": arm, "env": env, "seed": seed, "eval_mean": curve, "timesteps": np.arange(1, 21) * 1000.0,
                    "final": float(curve[-2:].mean()), "auc": float(curve.mean()), "started": "2026-12-04T10:00:00Z",
                    "seconds": seconds, "machine": {"cpu": "x"}, "commit": "c",
                }  # fmt: skip
                if seed < 2 and arm in ("cv_rppo", "cv_inside16"):
                    timing.append(dict(run))
                if arm in ("cv_rppo", "cv_inside16"):
                    run["reused_from"] = "ev"
                runs.append(run)
    return runs, timing, randoms


def test_grid_analysis_and_decision_on_a_synthetic_grid() -> None:
    runs, timing, randoms = _grid("cv_full16", np.random.default_rng(0))
    assert coverage_report.complete(runs, [*coverage_report.CANDIDATES, "cv_rppo"], run_grid.EVIDENCE_ENVS)
    assert not coverage_report.complete(runs[1:], [*coverage_report.CANDIDATES, "cv_rppo"], run_grid.EVIDENCE_ENVS)
    grid = coverage_report.grid_analysis(runs, timing, randoms, reps=50)
    over = grid["endpoints"]["over_training"]["vs_cv_rppo"]
    assert over["cv_full16"][1] > 0.5  # better, interval above 0.5
    speed = grid["seconds_per_step"]
    assert speed["cv_rppo CueRecall-v0"] == pytest.approx(400 / 20000) and speed["cv_full16 CueRecall-v0"] == pytest.approx(
        100 / 20000
    )
    # At the faster arm's finish (a quarter of RecurrentPPO's time), RecurrentPPO has reached a quarter of its curve
    assert grid["equal_wall_clock_vs_cv_rppo"]["cv_inside16"][0] == pytest.approx(1.0)
    # The same moment named by the arm; at RecurrentPPO's finish every arm has stopped: its final against RecurrentPPO's
    assert grid["at_arm_finish_vs_cv_rppo"]["cv_inside16"][0] == pytest.approx(1.0)
    assert grid["at_rppo_finish_vs_cv_rppo"]["cv_full16"] == grid["endpoints"]["final"]["vs_cv_rppo"]["cv_full16"]
    port = {"arms": {arm: {"final_vs_rppo": {"high": 0.1}, "over_training_vs_rppo": {"high": 0.1}, "learn_ratio": 0.3}
                     for arm in ("cv_inside16", "cv_full16", "cv_full64", "cv_batch")}}  # fmt: skip
    ratios = {arm: [0.2, 0.45] for arm in coverage_report.CANDIDATES}
    decision = coverage_report.decide(grid, port, ratios)
    assert decision["default"] == "cv_full16" and decision["candidates"]["cv_full16"]["qualifies"]
    # Too slow in one setting: cv_full16 no longer qualifies
    decision = coverage_report.decide(grid, port, {**ratios, "cv_full16": [0.2, 0.6]})
    assert not decision["candidates"]["cv_full16"]["qualifies"] and decision["default"] != "cv_full16"
    assert coverage_report.decide({"complete": False}, port, ratios) == {"pending": ["the grid"]}
    text = coverage_report.analysis_markdown(grid, coverage_report.decide(grid, port, ratios), ratios)
    assert "New default: `cv_full16`" in text
    # Every claim with its interval: IQMs, P against the old defaults, per-env differences (Holm), collapses
    assert "| `cv_full16` | 0.78" in text and "| `cv_full16` | 0.780 (" in text  # P against cv_rppo; IQM final
    per_env = [line for line in text.splitlines() if line.startswith("| CueRecall-v0 | `cv_full16` |")]
    assert len(per_env) == 2 and all(line.split(" | ")[2].startswith("+") for line in per_env)
    assert "| `cv_full16` | 1.00 (1.00 to 1.00), better |" in text  # P(> cv_inside16)
    # Same speed as cv_inside16: both have finished at either moment, so their finals decide
    versus = grid["equal_wall_clock_vs_cv_inside16"]["cv_full16"]
    assert versus["at_faster_finish"][0] == versus["at_slower_finish"][0] == 1.0
    # Synthetic curves end 0.3 (cv_full16 0.8) normalised, below the solved threshold: no run solves
    assert coverage_report.report.SOLVED_AT > 0.8 and grid["collapses"]["cv_full16"] == [0, 90, 0, 0]
    assert "| `cv_full16` | 0 of 90 | - |" in text
    assert coverage_report.grid_markdown(runs, timing, []).startswith("## Grid\n")
    assert coverage_report.grid_markdown(runs[1:], timing, []).startswith("## Grid (in progress)")


def test_wall_clock_figure_and_random_return_cache(tmp_path: Path) -> None:
    runs, timing, randoms = _grid("cv_full16", np.random.default_rng(1))
    speed, pairs = coverage_report.seconds_per_step(runs, timing)
    # Every candidate's seeds 0 and 1 overlap cv_rppo's timing runs of the same env and seed (cv_inside16 via its re-runs)
    assert pairs == 9 * 2 * len(coverage_report.CANDIDATES)
    path = coverage_report.wall_clock_figure(runs, speed, randoms, tmp_path / "wall.png")
    assert path is not None and path.stat().st_size > 10_000
    assert coverage_report.wall_clock_figure(runs, {}, randoms, tmp_path / "none.png") is None
    # Arms that share runs on an env are one curve with all their names: "batch" and "rollout" coincide where
    # batch_size >= n_steps, and on CartPoleNoVel-v1 (32-step rollouts) the windows of 64 are clipped to 32 as well
    for env in run_grid.EVIDENCE_ENVS:
        groups = coverage_report.sharing_names(env)
        assert sorted(name for names in groups.values() for name in names) == sorted([*coverage_report.CANDIDATES, "cv_rppo"])
        for first, names in groups.items():
            assert names[0] == first
            assert all(run_grid.coverage_alias(name, env) == first for name in names)
            assert len({run_grid.coverage_window(name, env) for name in names if name != "cv_rppo"}) <= 1
    assert coverage_report.sharing_names("CartPoleNoVel-v1")["cv_full64"] == ["cv_full64", "cv_batch", "cv_rollout"]
    assert coverage_report.sharing_names("PendulumNoVel-v1")["cv_batch"] == ["cv_batch"]
    cache = tmp_path / "random.json"
    cache.write_text(json.dumps({"CueRecall-v0": 0.25}))
    # A cached env is not measured again
    assert coverage_report.random_returns(["CueRecall-v0"], cache) == {"CueRecall-v0": 0.25}


def test_pairs_in_a_disturbed_period_are_left_out_of_the_timings(tmp_path: Path) -> None:
    runs, timing, _ = _grid("cv_full16", np.random.default_rng(2))
    _, pairs = coverage_report.seconds_per_step(runs, timing)
    path = tmp_path / "disturbed.json"
    # Every synthetic run starts at 10:00:00: a period at 10:01 overlaps them all; one at 11:00 none
    path.write_text(json.dumps([{"from": "2026-12-04T11:00:00Z", "to": "2026-12-04T11:05:00Z", "what": "later"}]))
    assert coverage_report.seconds_per_step(runs, timing, coverage_report.load_disturbed(path))[1] == pairs > 0
    path.write_text(json.dumps([{"from": "2026-12-04T10:01:00Z", "to": "2026-12-04T10:02:00Z", "what": "tests"}]))
    speed, none = coverage_report.seconds_per_step(runs, timing, coverage_report.load_disturbed(path))
    assert none == 0 and speed == {}
    assert coverage_report.load_disturbed(tmp_path / "missing.json") == []


def test_reused_runs_are_checked_by_their_returns_where_bits_differ() -> None:
    env = "CueRecall-v0"
    reference = coverage_report.report.REFERENCE_RETURN[env]
    randoms = {env: 0.0}

    def row(seed: int, rerun: float, stored: float, equal: bool = False) -> dict[str, Any]:
        scale = reference  # normalised = return / reference with a random return of 0
        return {"variant": "cv_rppo", "env": env, "seed": seed, "equal": equal,
                "final": [rerun * scale, stored * scale], "auc": [rerun * scale, stored * scale]}  # fmt: skip

    # Bitwise-equal pairs are left out; the others' normalised differences are +0.1, +0.2, -0.1
    reuse = [row(0, 0.5, 0.4), row(1, 0.7, 0.5), row(2, 0.3, 0.4), row(3, 0.9, 0.1, equal=True)]
    result = coverage_report.reuse_returns(reuse, randoms)["cv_rppo"]["final"]
    assert result["pairs"] == 3 and result["difference"][0] == pytest.approx(0.2 / 3)
    assert result["difference"][1] <= result["difference"][0] <= result["difference"][2] and 0 < result["p"] <= 1
    text = coverage_report.grid_markdown([], [], reuse, coverage_report.reuse_returns(reuse, randoms))
    assert "Returns of the 3 `cv_rppo` re-runs that differ bitwise" in text and "final +0.067" in text
    # The reuse check names the runs that differ as differing (seed 3 is the one bitwise equal)
    assert (
        "Reuse check: 1 of 4 re-trained timing runs have evaluations bitwise equal to the reused run; the other 3 "
        "differ: cv_rppo CueRecall-v0 seed 0, cv_rppo CueRecall-v0 seed 1, cv_rppo CueRecall-v0 seed 2." in text
    )
    assert "Reuse check: 2 of 2 re-trained timing runs have evaluations bitwise equal to the reused run." in (
        coverage_report.grid_markdown([], [], [row(0, 0.5, 0.5, equal=True), row(1, 0.5, 0.5, equal=True)])
    )


def test_the_stored_reuse_check_says_which_runs_differ() -> None:
    # The stored report (benchmarks/studies/coverage/RESULTS.md) states the check as the generator now writes it
    reuse = json.loads((ROOT / "benchmarks" / "results" / "coverage_summary.json").read_text())["reuse_check"]
    differ = [f"{r['variant']} {r['env']} seed {r['seed']}" for r in reuse if not r["equal"]]
    equal = len(reuse) - len(differ)
    line = next(
        line
        for line in (ROOT / "benchmarks" / "studies" / "coverage" / "RESULTS.md").read_text().splitlines()
        if line.startswith("Reuse")
    )
    assert line == (
        f"Reuse check: {equal} of {len(reuse)} re-trained timing runs have evaluations bitwise equal to the reused run; "
        f"the other {len(differ)} differ: {', '.join(differ)}."
    )


timing_pairs = _load("timing_pairs")


def test_timing_pairs_fill_the_arms_without_a_grid_pair(tmp_path: Path) -> None:
    runs, timing, _ = _grid("cv_full16", np.random.default_rng(3))
    # cv_full64 on CueRecall-v0 trained an hour after cv_rppo's timing runs there: no pair
    for run in runs:
        if run["variant"] == "cv_full64" and run["env"] == "CueRecall-v0":
            run["started"] = "2026-12-04T11:00:00Z"
    speed, pairs = coverage_report.seconds_per_step(runs, timing)
    assert coverage_report.missing_timings(speed) == [("cv_full64", "CueRecall-v0")]
    # Arms that share another arm's runs on an env never need their own pair
    assert coverage_report.trained_arms("CartPoleNoVel-v1") == ["cv_inside16", "cv_full16", "cv_full64"]
    dirs = timing_pairs.pair_dirs("cv_full64", "CueRecall-v0", 1, tmp_path)
    assert dirs == {
        "cv_rppo": tmp_path / "cv_full64" / "cv_rppo" / "CueRecall-v0" / "seed1",
        "cv_full64": tmp_path / "cv_full64" / "cv_full64" / "CueRecall-v0" / "seed1",
    }
    jobs = timing_pairs.pair_jobs("cv_full64", "CueRecall-v0", 1, 20, tmp_path)
    assert [job["variant"] for job in jobs] == ["cv_rppo", "cv_full64"]
    assert all(job["extra"] == {"timing_pair": "cv_full64"} for job in jobs)
    assert not timing_pairs.pair_done(dirs)
    # The pair's runs started together: they count by the same rule, and give cv_full64 its timing there
    pair = [
        _timed("cv_rppo", "2026-12-04T12:00:00Z", 300, seed=1, timing_pair="cv_full64"),
        _timed("cv_full64", "2026-12-04T12:00:00Z", 90, seed=1, timing_pair="cv_full64"),
    ]
    pair[1]["timesteps"] = pair[0]["timesteps"] = np.arange(1, 21) * 1000.0
    speed, with_pair = coverage_report.seconds_per_step(runs, timing, pairs_runs=pair)
    assert with_pair == pairs + 1 and coverage_report.missing_timings(speed) == []
    assert speed[("cv_full64", "CueRecall-v0")] == pytest.approx(90 / 20000)
    # A pair in a disturbed period is left out like any other
    path = tmp_path / "disturbed.json"
    path.write_text(json.dumps([{"from": "2026-12-04T12:01:00Z", "to": "2026-12-04T12:02:00Z", "what": "tests"}]))
    speed, _ = coverage_report.seconds_per_step(runs, timing, coverage_report.load_disturbed(path), pair)
    assert ("cv_full64", "CueRecall-v0") not in speed


def test_load_pairs_reads_every_arms_folder(tmp_path: Path) -> None:
    assert coverage_report.load_pairs(tmp_path / "none") == []
    for variant in ("cv_rppo", "cv_batch"):
        run_dir = tmp_path / "cv_batch" / variant / "CueRecall-v0" / "seed0"
        (run_dir / "algo" / "CueRecall-v0_1").mkdir(parents=True)
        np.savez(run_dir / "algo" / "CueRecall-v0_1" / "evaluations.npz", timesteps=np.array([1000, 2000]),
                 results=np.ones((2, 3)))  # fmt: skip
        (run_dir / "run.json").write_text(json.dumps({"variant": variant, "env": "CueRecall-v0", "seed": 0}))
    loaded = coverage_report.load_pairs(tmp_path)
    assert sorted(run["variant"] for run in loaded) == ["cv_batch", "cv_rppo"]


def test_a_pair_keeps_both_cores_busy_until_its_longer_run_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    started: list[str] = []

    def fake_run_one(job: dict[str, Any]) -> dict[str, Any]:
        time.sleep(2.0 if job["variant"] == "cv_rppo" else 0.2)
        return {"variant": job["variant"], "seconds": 1.0, "returncode": 0}

    def fake_command(spec: Any) -> list[str]:
        started.append(str(spec.run_dir))
        # A filler that would run far longer than the pair: it must be stopped when cv_rppo ends
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    monkeypatch.setattr(timing_pairs.run_grid, "run_one", fake_run_one)
    monkeypatch.setattr(timing_pairs.runner, "zoo_command", fake_command)
    jobs = timing_pairs.pair_jobs("cv_full16", "CueRecall-v0", 0, 20, tmp_path / "pairs")
    begin = time.monotonic()
    results = timing_pairs.run_pair(jobs, tmp_path / "scratch")
    assert [r["variant"] for r in results] == ["cv_rppo", "cv_full16"]
    # The arm's worker ran a filler copy of the arm while cv_rppo trained, stopped when cv_rppo ended
    assert started and all("filler1_" in path for path in started)
    assert time.monotonic() - begin < 10


def test_a_pair_counts_only_side_by_side_and_undisturbed(tmp_path: Path) -> None:
    dirs = timing_pairs.pair_dirs("cv_full16", "CueRecall-v0", 0, tmp_path)
    assert not timing_pairs.pair_done(dirs)
    records = {
        "cv_rppo": _timed("cv_rppo", "2026-12-04T12:00:00Z", 300, returncode=0),
        "cv_full16": _timed("cv_full16", "2026-12-04T12:00:00Z", 90, returncode=0),
    }
    for variant, run_dir in dirs.items():
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps(records[variant]))
    assert timing_pairs.pair_done(dirs)
    assert not timing_pairs.pair_done(dirs, [(coverage_report.stats.timestamp("2026-12-04T12:01:00Z"),
                                              coverage_report.stats.timestamp("2026-12-04T12:02:00Z"))])  # fmt: skip
    (dirs["cv_full16"] / "run.json").write_text(json.dumps({**records["cv_full16"], "started": "2026-12-04T13:00:00Z"}))
    assert not timing_pairs.pair_done(dirs)


def test_other_trainers_are_found_by_their_command_line() -> None:
    import subprocess

    # A process whose command line reads like a zoo trainer's (its arguments after -c are only argv)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-m", "sb3_reset_ppo.zoo", "train"])
    try:
        import time

        # Until the child has exec'd, its command line is still the parent's
        for _ in range(50):
            if any("time.sleep(30)" in command for command in timing_pairs.other_trainers()):
                break
            time.sleep(0.1)
        assert any("time.sleep(30)" in command for command in timing_pairs.other_trainers())
    finally:
        process.kill()
        process.wait()
    assert not any("time.sleep(30)" in command for command in timing_pairs.other_trainers())


def test_speed_table_divides_by_recurrent_ppo_per_env() -> None:
    env, other = run_grid.EVIDENCE_ENVS[0], run_grid.EVIDENCE_ENVS[1]
    lines = coverage_report.speed_table({f"cv_rppo {env}": 0.004, f"cv_batch {env}": 0.001, f"cv_batch {other}": 0.002})
    row = next(line for line in lines if line.startswith(f"| {env} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
    assert cells[coverage_report.CANDIDATES.index("cv_batch")] == "0.25"
    assert sum(bool(cell) for cell in cells) == 1
    # No cv_rppo timing on the other env: no ratio there
    assert not any(cell.strip() for cell in next(line for line in lines if line.startswith(f"| {other} |")).split("|")[2:])
    assert coverage_report.speed_table({}) == []
