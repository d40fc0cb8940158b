"""``python -m sb3_reset_ppo.compare``: arms, settings, resuming, the statistics and verdict, and a real comparison."""

import json
import os
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sb3_reset_ppo.experiments import compare, executors, runner, stats
from sb3_reset_ppo.experiments.compare import reporting
from sb3_reset_ppo.experiments.runner import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def test_arms_from_algos_and_variants() -> None:
    arms = compare.parse_variants(["reset_ppo", "ppo_lstm"], [["full", "reset_ppo", "window_coverage:'full'"]])
    assert [(a.name, a.algo, a.hyperparams) for a in arms] == [
        ("reset_ppo", "reset_ppo", []),
        ("ppo_lstm", "ppo_lstm", []),
        ("full", "reset_ppo", ["window_coverage:'full'"]),
    ]
    with pytest.raises(ValueError, match="needs NAME ALGO"):
        compare.parse_variants(["ppo_lstm"], [["lonely"]])
    with pytest.raises(ValueError, match="KEY:VALUE"):
        compare.parse_variants(["ppo_lstm"], [["a", "reset_ppo", "window_size=8"]])
    with pytest.raises(ValueError, match=r"\['ppo_lstm'\] appear more than once"):
        compare.parse_variants(["ppo_lstm"], [["ppo_lstm", "reset_ppo"]])
    with pytest.raises(ValueError, match="at least two arms"):
        compare.parse_variants(["ppo_lstm"], None)


def _args(tmp_path: Path, **changes: Any) -> compare.CompareSettings:
    args = compare.parser().parse_args(["--env", "CueRecall-v0", "--out", str(tmp_path / "out")])
    return replace(compare.settings_from_args(args), **changes)


def test_the_settings_are_one_frozen_object_the_check_returns(tmp_path: Path) -> None:
    settings = _args(tmp_path)
    assert compare.check(settings) is settings and settings.baseline == "ppo_lstm" and settings.out == tmp_path / "out"
    with pytest.raises(FrozenInstanceError):
        settings.seeds = 3  # type: ignore[misc]
    # Settings built in Python are checked as the command line's are, naming the option, its value and what it may be
    with pytest.raises(TypeError, match="--seeds must be an int, got '3'"):
        compare.check(replace(settings, seeds="3"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--workers must be at least 1, got 0"):
        compare.check(replace(settings, workers=0))
    with pytest.raises(ValueError, match=r"--baseline 'x' is not one of the arms \['reset_ppo', 'ppo_lstm'\]"):
        compare.check(replace(settings, baseline="x"))


def test_the_hyperparameter_file_every_arm_trains_with(tmp_path: Path) -> None:
    # The package's file where it has the env (the zoo's ppo_lstm settings and the memory tasks)
    path, text = compare.resolve_conf(_args(tmp_path))
    assert path == compare.PACKAGED_CONF and text == compare.PACKAGED_CONF.read_text()
    # An env it lacks: a file with --policy, --n-envs and --timesteps, everything else at the defaults (written by
    # main once the settings are checked)
    path, text = compare.resolve_conf(_args(tmp_path, env="MyEnv-v0", timesteps=5000, n_envs=4))
    assert path == tmp_path / "out" / "conf.yml" and not path.exists()
    assert yaml.safe_load(text) == {"MyEnv-v0": {"policy": "MlpLstmPolicy", "n_envs": 4, "n_timesteps": 5000}}
    with pytest.raises(ValueError, match="give --timesteps"):
        compare.resolve_conf(_args(tmp_path, env="MyEnv-v0"))
    own = tmp_path / "own.yml"
    own.write_text("Other-v0:\n  policy: MlpLstmPolicy\n")
    with pytest.raises(ValueError, match="no entry for env 'CueRecall-v0'"):
        compare.resolve_conf(_args(tmp_path, conf_file=str(own)))
    own.write_text("CueRecall-v0:\n  policy: MlpLstmPolicy\n")
    with pytest.raises(ValueError, match="has no n_timesteps: give --timesteps"):
        compare.resolve_conf(_args(tmp_path, conf_file=str(own)))
    own.write_text("CueRecall-v0: [unclosed\n")
    with pytest.raises(ValueError, match="is not valid YAML"):
        compare.resolve_conf(_args(tmp_path, conf_file=str(own)))
    with pytest.raises(ValueError, match="is not a file"):
        compare.resolve_conf(_args(tmp_path, conf_file=str(tmp_path / "absent.yml")))


def test_arms_checks_name_budget_algorithm_and_packages() -> None:
    with pytest.raises(ValueError, match="they name folders"):
        compare.parse_variants(["ppo_lstm"], [["../up", "reset_ppo"]])
    with pytest.raises(ValueError, match="give the budget with --timesteps"):
        compare.parse_variants(["ppo_lstm"], [["short", "reset_ppo", "n_timesteps:1000"]])
    with pytest.raises(ValueError, match="--hyperparams: give the budget with --timesteps"):
        compare.check_hyperparams(["gamma:0.9", "n_timesteps : 5"], "--hyperparams")
    arms = compare.parse_variants(["reset_ppo", "ppo_lstm"], None)
    compare.check_algos(arms)
    with pytest.raises(ValueError, match=r"unknown algorithms \['reset_pp'\] \(did you mean reset_ppo for reset_pp\?\)"):
        compare.check_algos(compare.parse_variants(["reset_pp", "ppo_lstm"], None))
    compare.check_env("CueRecall-v0", ["sb3_reset_ppo.envs"])
    with pytest.raises(ValueError, match=r"--gym-packages no_such_package_here cannot be imported here \(ModuleNotFound"):
        compare.check_env("CueRecall-v0", ["no_such_package_here"])
    # A namespaced env id names one folder
    assert compare.env_folder("gymnasium_env/GridWorld-v0") == "gymnasium_env-GridWorld-v0"


def test_resuming_needs_the_same_settings(tmp_path: Path) -> None:
    settings = {"env": "E", "seeds": 2, "timesteps": 100, "conf_sha256": "a"}
    compare.check_settings(tmp_path, settings)
    compare.check_settings(tmp_path, {**settings, "seeds": 5})  # more seeds: the same comparison, grown
    with pytest.raises(ValueError, match=r"other settings \(timesteps\)"):
        compare.check_settings(tmp_path, {**settings, "timesteps": 200})
    # An edited hyperparameter file is another comparison too
    with pytest.raises(ValueError, match=r"other settings \(conf_sha256\)"):
        compare.check_settings(tmp_path, {**settings, "conf_sha256": "b"})


def test_the_plan_puts_each_seeds_arms_side_by_side(tmp_path: Path) -> None:
    arms = compare.parse_variants(["reset_ppo", "ppo_lstm"], [["w64", "reset_ppo", "window_size:64"]])
    settings = _args(tmp_path, seeds=2, timesteps=4000, hyperparams=("gamma:0.9",), arms=tuple(arms))
    specs = compare.plan(settings, compare.PACKAGED_CONF)
    assert [(s.label, s.seed) for s in specs] == [(a, seed) for seed in range(2) for a in ("reset_ppo", "ppo_lstm", "w64")]
    assert specs[2].hyperparams == ["gamma:0.9", "window_size:64"] and specs[0].steps == 4000 and specs[0].keep_log
    assert specs[4].run_dir == tmp_path / "out" / "runs" / "ppo_lstm" / "CueRecall-v0" / "seed1"


def _fake_trainer(returns: dict[str, float], pace: dict[str, float]) -> Any:
    """
    A zoo stand-in: each run writes 4 evaluations of ``returns[label] + seed / 10`` and a training log whose clock
    runs at ``pace[label]`` seconds per 1000 steps.
    """

    def command(spec: RunSpec) -> list[str]:
        label = spec.label or spec.algo
        value = returns[label] + spec.seed / 10
        folder = spec.run_dir / spec.algo / f"{spec.env}_1"
        rows = [f"|    time_elapsed    | {pace[label] * k} |\n|    total_timesteps | {1000 * k} |" for k in range(1, 5)]
        log = "".join(f"\n------\n| time/ |  |\n{row}\n------\n" for row in rows)
        code = (
            f"import os, numpy; os.makedirs({str(folder)!r}); print({log!r}); "
            f"numpy.savez({str(folder / 'evaluations.npz')!r}, timesteps=1000 * numpy.arange(1, 5), "
            f"results=numpy.full((4, 3), {value}))"
        )
        return [sys.executable, "-c", code]

    return command


def test_compare_trains_reports_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    fake = _fake_trainer({"reset_ppo": 5.0, "ppo_lstm": 1.0}, {"reset_ppo": 1, "ppo_lstm": 4})
    monkeypatch.setattr(runner, "zoo_command", fake)
    out = tmp_path / "out"
    argv = ["--env", "CueRecall-v0", "--seeds", "5", "--timesteps", "4000", "--evaluations", "4", "--out", str(out)]
    argv += ["--workers", "2", "--reps", "200"]
    report = compare.main(argv)
    printed = capsys.readouterr().out
    assert "0 of 10 runs already done; 10 to train on 2 local workers" in printed and "[10/10]" in printed
    summary = json.loads((out / "summary.json").read_text())
    comparison = summary["comparisons"]["reset_ppo"]
    # ResetPPO's every run beats every RecurrentPPO run: P = 1 at the end, over training and at equal time, and the
    # exact Mann-Whitney p (2 / 252 for 5 against 5) times the report's 3 tests (Holm) is below 0.05
    assert comparison["final"][0] == 1.0 and comparison["auc"][0] == 1.0
    assert comparison["p"]["final"] == pytest.approx(2 / 252) and summary["tests"] == 3
    assert comparison["p_holm"]["final"] == pytest.approx(3 * 2 / 252)
    assert summary["arms"]["reset_ppo"]["final"][0] == pytest.approx(5.2)  # IQM of 5.0 to 5.4: 5.1, 5.2, 5.3
    # learn() seconds from the logs' clocks (4 s and 16 s); runs that trained at the same time: ratio 0.25
    assert summary["arms"]["reset_ppo"]["learn_seconds"] == 4 and summary["arms"]["ppo_lstm"]["learn_seconds"] == 16
    assert comparison["time_ratio"] == pytest.approx(0.25) and comparison["time_pairs"] >= 1
    assert comparison["equal_time"]["seconds"] == 4 and comparison["equal_time"]["probability"][0] == 1.0
    text = report.read_text()
    assert "**reset_ppo is better** than ppo_lstm" in text and "use 10 or more seeds" not in text
    assert (out / "figures" / "return_vs_steps.png").exists() and (out / "figures" / "return_vs_seconds.png").exists()
    # Resumed: nothing trains again; other settings in the same folder are refused
    compare.main(argv)
    assert "10 of 10 runs already done; 0 to train" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        compare.main([*argv[:5], "8000", *argv[6:]])
    assert "other settings (timesteps)" in capsys.readouterr().err
    # Fewer seeds: the report takes seeds 0 to 1 only (and, with so few, calls nothing significant)
    compare.main([*argv[:3], "2", *argv[4:], "--report-only"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"]["reset_ppo"]["runs"] == 2 and summary["comparisons"]["reset_ppo"]["final"][:2] == [1.0, 1.0]
    assert all("not significant" in line for line in summary["verdict"][:2])


def test_few_seeds_are_never_called_significant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 runs against 3 that never overlap: every bootstrap resample gives P = 1, but the exact test's p is 0.1
    fake = _fake_trainer({"reset_ppo": 5.0, "ppo_lstm": 1.0}, {"reset_ppo": 1, "ppo_lstm": 1})
    monkeypatch.setattr(runner, "zoo_command", fake)
    out = tmp_path / "out"
    argv = ["--env", "CueRecall-v0", "--seeds", "3", "--timesteps", "4000", "--evaluations", "4", "--out", str(out)]
    compare.main([*argv, "--workers", "2", "--reps", "200"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["comparisons"]["reset_ppo"]["final"] == [1.0, 1.0, 1.0]
    assert summary["comparisons"]["reset_ppo"]["p"]["final"] == pytest.approx(0.1)
    # Every run ahead: said in words, not as the degenerate interval 1.00 (1.00 to 1.00)
    assert "reset_ppo was ahead of ppo_lstm in every pair of runs" in summary["verdict"][0]
    assert "**not significant**" in summary["verdict"][0] and "1.00 (1.00 to 1.00)" not in summary["verdict"][0]
    assert "use 10 or more seeds" in summary["verdict"][-1]


def test_equal_returns_are_not_significant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        runner, "zoo_command", _fake_trainer({"reset_ppo": 1.0, "ppo_lstm": 1.0}, {"reset_ppo": 1, "ppo_lstm": 1})
    )
    out = tmp_path / "out"
    argv = ["--env", "CueRecall-v0", "--seeds", "4", "--timesteps", "4000", "--evaluations", "4", "--out", str(out)]
    compare.main([*argv, "--workers", "2", "--reps", "200"])
    summary = json.loads((out / "summary.json").read_text())
    final = summary["comparisons"]["reset_ppo"]["final"]
    assert final[0] == 0.5 and final[1] < 0.5 < final[2]
    assert any("(**not significant**)" in line for line in summary["verdict"])


def test_analyse_needs_runs_of_both_arms_and_times_only_side_by_side_pairs() -> None:
    def run(seed: int, final: float, started: str, host: str = "h") -> dict[str, Any]:
        return {
            "env": "E", "seed": seed, "final": final, "auc": final, "started": started, "seconds": 10.0, "host": host,
            "machine": {}, "commit": "c", "times": np.array([5.0, 10.0]), "eval_mean": np.array([final, final]),
        }  # fmt: skip

    with pytest.raises(ValueError, match="nothing to compare yet"):
        compare.analyse({"a": [run(0, 1.0, "2026-12-04T10:00:00Z")], "b": []}, "b", 100, 2)
    # Runs on other machines, or at other times: no time ratio (machines differ in speed)
    by_arm = {
        "a": [run(0, 1.0, "2026-12-04T10:00:00Z", host="x"), run(1, 2.0, "2026-12-04T12:00:00Z")],
        "b": [run(0, 1.0, "2026-12-04T10:00:00Z"), run(1, 2.0, "2026-12-04T10:00:00Z")],
    }
    summary = compare.analyse(by_arm, "b", 100, 2)
    assert summary["comparisons"]["a"]["time_ratio"] is None and summary["comparisons"]["a"]["time_pairs"] == 0
    text = " ".join(compare.verdict(summary, 2))
    assert "no a run trained at the same time as a b run on one machine" in text
    assert "The runs trained on 2 machines" in text
    # A run of another seed that trained at the same time on the same machine pairs with both b runs
    by_arm["a"][1] = run(1, 2.0, "2026-12-04T10:00:02Z")
    summary = compare.analyse(by_arm, "b", 100, 2)
    assert summary["comparisons"]["a"]["time_pairs"] == 2 and summary["comparisons"]["a"]["time_ratio"] == 1.0


def _timed_run(seed: int, times: list[float], returns: list[float], final_evaluations: int = 2) -> dict[str, Any]:
    """A finished run as :func:`compare.load` gives it: evaluations at ``times`` seconds of ``learn()``."""
    return {
        "env": "E", "seed": seed, "started": "2026-12-04T10:00:00Z", "seconds": times[-1], "host": "h", "machine": {},
        "commit": "c", "times": np.array(times), "eval_mean": np.array(returns),
        "final": float(np.mean(returns[-final_evaluations:])), "auc": float(np.mean(returns)),
    }  # fmt: skip


def test_equal_wall_clock_scores_a_stopped_run_by_its_final_return() -> None:
    # The faster arm stops at 2 s, its last two evaluations 0.2 and 0.8 (final return 0.5 with 2 final evaluations);
    # the baseline, still training at 2 s, has 0.6 then. One rule (stats.score_at_time): the stopped run counts its
    # final return, the same number as the final endpoint, not its last evaluation
    arm = [_timed_run(seed, [1.0, 2.0], [0.2 + seed / 100, 0.8 + seed / 100]) for seed in range(3)]
    base = [_timed_run(seed, [1.0, 2.0, 3.0, 4.0], [0.6 + seed / 100] * 4) for seed in range(3)]
    result = compare.equal_time(arm, base, 100, final_evaluations=2)
    assert result is not None and result["seconds"] == 2.0
    arm_scores, base_scores = result["scores"]
    assert arm_scores == pytest.approx([run["final"] for run in arm]) and arm_scores == pytest.approx([0.5, 0.51, 0.52])
    assert base_scores == pytest.approx([0.6, 0.61, 0.62]) and result["probability"][0] == 0.0
    # With --final-evaluations 1 the final return is the last evaluation, and so is the score then
    result = compare.equal_time(arm, base, 100, final_evaluations=1)
    assert result is not None and result["scores"][0] == pytest.approx([0.8, 0.81, 0.82]) and result["probability"][0] == 1.0
    # The report's analysis uses the same rule
    summary = compare.analyse({"a": arm, "b": base}, "b", 100, 2)
    assert summary["comparisons"]["a"]["equal_time"]["probability"][0] == 0.0


def test_report_p_values_are_exact_or_a_permutation_test(tmp_path: Path) -> None:
    from scipy.stats import mannwhitneyu

    def runs(finals: list[float]) -> list[dict[str, Any]]:
        return [_timed_run(seed, [1.0, 2.0], [value, value]) for seed, value in enumerate(finals)]

    # 10 runs against 10, no ties in the final returns: exact (scipy's default: the normal approximation)
    a, b = [float(v) for v in range(10)], [v + 0.5 for v in range(3, 13)]
    summary = compare.analyse({"a": runs(a), "b": runs(b)}, "b", 100, 2)
    comparison = summary["comparisons"]["a"]
    assert comparison["p_method"]["final"] == "exact"
    assert comparison["p"]["final"] == pytest.approx(mannwhitneyu(a, b, method="exact").pvalue, rel=1e-12)
    assert comparison["p"]["final"] != pytest.approx(mannwhitneyu(a, b).pvalue, rel=1e-3)
    # With ties: the permutation test over all 184,756 splits of the 20 runs
    a, b = [0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0], [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 5.0, 6.0]
    summary = compare.analyse({"a": runs(a), "b": runs(b)}, "b", 100, 2)
    comparison = summary["comparisons"]["a"]
    assert comparison["p_method"]["final"] == "permutation"
    assert comparison["p"]["final"] == pytest.approx(stats.mann_whitney(a, b)[0])
    assert comparison["p"]["final"] != pytest.approx(mannwhitneyu(a, b).pvalue, rel=1e-3)
    # The report says which method gave its p-values
    text = compare.markdown(summary, {"env": "E", "command": "c", "conf_file": "f", "hyperparams": [], "seeds": 10,
                                      "timesteps": 1, "evaluations": 2, "eval_episodes": 1, "final_evaluations": 2,
                                      "arms": []}, [], [], tmp_path)  # fmt: skip
    assert "an exact permutation test on midranks where they have ties" in text
    assert "At equal wall-clock time a run that has stopped counts its final return" in text


def test_odd_env_ids_are_refused_naming_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    for good in ("CueRecall-v0", "gymnasium_env/GridWorld-v0", "ALE/Pong-v5", "MyEnv", "my.env-v10", "ns:x/a:b-v1"):
        assert compare.check_env_id(good) == good
    for bad in ("", "..", ".", "..-v0", "../x", "x/..", "a/b/c", "/abs", "a\\b", "ns/", "x y"):
        with pytest.raises(ValueError, match=r"--env '.*' is not an env id: expected \[namespace/\]name\[-v<version>\]"):
            compare.check_env_id(bad)
    # `--env ..` once made compare/.. (the current folder) the comparison's folder: refused before anything is written
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        compare.main(["--env", "..", "--timesteps", "100", "--report-only"])
    assert "--env '..' is not an env id" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_a_runs_is_never_replaced(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    foreign = out / "runs" / "reset_ppo" / "CueRecall-v0" / "seed0"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        compare.main(["--env", "CueRecall-v0", "--seeds", "1", "--timesteps", "100", "--out", str(out), "--workers", "1"])
    assert "is not a run's folder" in capsys.readouterr().err and (foreign / "notes.txt").read_text() == "mine"
    assert not (out / "runs" / "ppo_lstm").exists()  # refused before anything trained


def test_bad_command_lines_name_the_option(tmp_path: Path, capsys: Any) -> None:
    base = ["--env", "CueRecall-v0", "--out", str(tmp_path / "out")]
    for extra, message in [
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
        (["--baseline", "ppo"], "--baseline 'ppo' is not one of the arms"),
        (["--final-evaluations", "5", "--evaluations", "4"], "--final-evaluations (5) must be at most --evaluations (4)"),
        (["--variant", "x"], "--variant needs NAME ALGO"),
    ]:
        with pytest.raises(SystemExit):
            compare.main([*base, *extra])
        assert message in capsys.readouterr().err


def test_compare_on_a_real_task(tmp_path: Path) -> None:
    """
    The documented command, trained for real through the RL Zoo (ResetPPO and RecurrentPPO, 2 seeds each), with a
    small budget: two rollouts of 8 envs x 128 steps, and 2 episodes for each of the 20 evaluations (evaluating one
    episode at a time took more of the run's CPU than its training).
    """
    out = tmp_path / "compare"
    command = [sys.executable, "-m", "sb3_reset_ppo.compare", "--env", "CueRecall-v0", "--seeds", "2", "--timesteps", "2048"]
    result = subprocess.run(
        [*command, "--eval-episodes", "2", "--out", str(out), "--workers", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"]["reset_ppo"]["runs"] == 2 and summary["arms"]["ppo_lstm"]["runs"] == 2
    probability = summary["comparisons"]["reset_ppo"]["final"]
    assert 0.0 <= probability[1] <= probability[0] <= probability[2] <= 1.0
    for arm in ("reset_ppo", "ppo_lstm"):
        for seed in range(2):
            run = json.loads((out / "runs" / arm / "CueRecall-v0" / f"seed{seed}" / "run.json").read_text())
            assert run["returncode"] == 0 and run["evaluations"] >= 20 and f"--algo {arm}" in run["command"]
    text = (out / "REPORT.md").read_text()
    assert "## Verdict" in text and "P(reset_ppo > ppo_lstm)" in text and "use 10 or more seeds" in text
    assert f"report: {out / 'REPORT.md'}" in result.stdout


def test_a_probability_of_0_or_1_reads_as_every_pair() -> None:
    # Every run of one arm behind (or ahead of) every run of the other: the interval is one point; the sentence says
    # what happened and whether the test can call it significant, not "P = 0.00 (0.00 to 0.00) ... not significant"
    when = "Per env step, at the end of training"
    behind = reporting._probability_sentence("ResetPPO", "RecurrentPPO", [0.0, 0.0, 0.0], when, 0.3, 3)
    assert behind == (
        "Per env step, at the end of training, ResetPPO was behind RecurrentPPO in every pair of runs "
        "(P(ResetPPO > RecurrentPPO) = 0), but with so few runs that is **not significant**; Mann-Whitney p = 0.300 "
        "(Holm-adjusted over the report's 3 tests)."
    )
    worse = reporting._probability_sentence("ResetPPO", "RecurrentPPO", [0.0, 0.0, 0.0], when, 0.01, 3)
    assert worse.startswith(f"{when}, **ResetPPO is worse** than RecurrentPPO: ResetPPO was behind RecurrentPPO in every")
    ahead = reporting._probability_sentence("ResetPPO", "RecurrentPPO", [1.0, 1.0, 1.0], when, 0.01, 3)
    assert "**ResetPPO is better** than RecurrentPPO: ResetPPO was ahead of RecurrentPPO in every pair" in ahead
    for sentence in (behind, worse, ahead):
        assert "(0.00 to 0.00)" not in sentence and "(1.00 to 1.00)" not in sentence
    # Anywhere between, the interval as before
    middle = reporting._probability_sentence("ResetPPO", "RecurrentPPO", [0.4, 0.2, 0.6], when, 0.5, 3)
    assert "P(ResetPPO > RecurrentPPO) = 0.40 (0.20 to 0.60)" in middle and "(**not significant**)" in middle


def test_a_typo_in_the_env_id_is_refused_before_anything_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped command: the cause on screen ("did you mean"), a non-zero exit, and no folder left behind (in this
    # process: test_compare_on_a_real_task runs the entry point)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        compare.main(["--env", "CueRecal-v0", "--seeds", "2", "--timesteps", "4000"])
    assert stopped.value.code == 2
    stdout, stderr = capsys.readouterr()
    assert "--env CueRecal-v0 is not a registered env id: did you mean CueRecall-v0?" in stderr
    assert "to train" not in stdout and list(tmp_path.iterdir()) == []


def _refused(argv: list[str], capsys: Any) -> str:
    with pytest.raises(SystemExit) as stopped:
        compare.main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_every_check_comes_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing may train")

    monkeypatch.setattr(executors, "run_local", never)
    out = tmp_path / "out"
    base = ["--env", "CueRecall-v0", "--seeds", "1", "--timesteps", "100", "--out", str(out)]
    # An algorithm the zoo does not know, with the closest name
    assert "unknown algorithms ['ppo_lstn'] (did you mean ppo_lstm for ppo_lstn?)" in _refused(
        [*base, "--algos", "reset_ppo", "ppo_lstn"], capsys
    )
    # A module of --gym-packages that cannot be imported
    assert "--gym-packages not_a_module_here cannot be imported here" in _refused(
        [*base, "--gym-packages", "not_a_module_here"], capsys
    )
    # An extra that is not installed (here: rliable, which the report needs), named with the command that installs it
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rliable" else find_spec(name, *a))
    assert 'needs rliable, which cannot be imported here: in the clone of sb3-reset-ppo, pip install -e ".[compare]"' in (
        _refused(base, capsys)
    )
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    # An output folder that is a file
    (tmp_path / "file").write_text("mine")
    assert "is a file, not a folder" in _refused([*base[:-1], str(tmp_path / "file")], capsys)
    assert (tmp_path / "file").read_text() == "mine"
    # A bad --num-threads
    assert "--num-threads must be a positive int or -1" in _refused([*base, "--num-threads", "0"], capsys)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]  # nothing else was written


def test_a_failed_runs_last_log_lines_are_printed_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    def failing(spec: RunSpec) -> list[str]:
        code = "import sys; print('\\n'.join(f'line {k}' for k in range(40)), flush=True); sys.exit('ValueError: the cause')"
        return [sys.executable, "-c", code]

    monkeypatch.setattr(runner, "zoo_command", failing)
    out = tmp_path / "out"
    argv = ["--env", "CueRecall-v0", "--seeds", "1", "--timesteps", "100", "--out", str(out), "--workers", "1"]
    with pytest.raises(SystemExit):
        compare.main(argv)
    printed = capsys.readouterr().out
    log = out / "runs" / "reset_ppo" / "CueRecall-v0" / "seed0" / "log.txt"
    assert "reset_ppo seed 0: FAILED (1)" in printed and f"    its log: {log}, last lines:\n" in printed
    shown = printed.split(f"its log: {log}, last lines:\n", 1)[1].split("\n[", 1)[0].splitlines()
    assert shown[-1] == "      ValueError: the cause" and shown[0] == f"      line {40 - runner.LOG_TAIL_LINES + 1}"
    assert len(shown) == runner.LOG_TAIL_LINES
    # The record keeps them
    record = json.loads((log.parent / runner.FAILED_FILE).read_text())
    assert record["log_tail"] == [line.strip() for line in shown]


def test_num_threads_reaches_every_run_and_is_a_setting(tmp_path: Path) -> None:
    args = compare.parser().parse_args(["--env", "CueRecall-v0", "--timesteps", "100", "--num-threads", "2"])
    settings = compare.check(compare.settings_from_args(args))
    assert settings.workers == max((os.cpu_count() or 1) // 2, 1)  # one core per thread
    (spec, *_) = compare.plan(replace(settings, out=tmp_path), compare.PACKAGED_CONF)
    command = runner.zoo_command(spec)
    assert command[command.index("--num-threads") + 1] == "2"
    # By default one thread, as the zoo's runs always had
    default = compare.parser().parse_args(["--env", "CueRecall-v0"])
    assert default.num_threads == 1 and RunSpec("a", "E", 0, tmp_path, tmp_path).num_threads == 1
    with pytest.raises(ValueError, match="num_threads must be a positive int or -1"):
        RunSpec("a", "E", 0, tmp_path, tmp_path, num_threads=0)
    # A comparison recorded before the setting existed trained with one thread: resumable with the default only
    (tmp_path / compare.SETTINGS_FILE).write_text(json.dumps({"env": "E", "seeds": 2}))
    compare.check_settings(tmp_path, {"env": "E", "seeds": 2, "num_threads": 1})
    with pytest.raises(ValueError, match=r"other settings \(num_threads\)"):
        compare.check_settings(tmp_path, {"env": "E", "seeds": 2, "num_threads": 2})
