"""
The attention defaults study (benchmarks/studies/attention_defaults/): its base file and settings (one attention
argument changed at a time), its tasks apart from the attention study's, its runs and their order, the decision rule,
the report on no runs and on a fake complete study, and one short real run through the runner.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from bench_helpers import ROOT, _fake_run, _load, short_study_run
from torch import nn

from sb3_reset_ppo.experiments import runner, training_log

study = _load("attention_defaults_study")
report = _load("attention_defaults_report")
attention_study = _load("attention_study")
EVIDENCE_CONF = ROOT / "benchmarks" / "studies" / "evidence" / "evidence.yml"


def _zoo_policy_kwargs(command: list[str]) -> dict[str, Any]:
    """The ``policy_kwargs`` a zoo command sets, evaluated as the zoo's ``--hyperparams`` evaluates its values."""
    settings = command[command.index("--hyperparams") + 1 :]
    (value,) = [setting.partition(":")[2] for setting in settings if setting.startswith("policy_kwargs:")]
    return dict(eval(value, {"nn": nn}))


def test_the_base_file_is_the_evidence_studys_entries_with_attention_at_the_base_values() -> None:
    base, evidence = yaml.safe_load(study.CONF.read_text()), yaml.safe_load(EVIDENCE_CONF.read_text())
    assert list(base) == list(study.TASKS)
    # RepeatFirst takes the evidence study's POPGym entry (RepeatPreviousEasy's), at half its budget
    sources = {"CueRecall-v0": ("CueRecall-v0", 3e4), "PopgymRepeatFirstEasy-v0": ("PopgymRepeatPreviousEasy-v0", 5e4)}
    for task, (source, budget) in sources.items():
        ours, theirs = dict(base[task]), dict(evidence[source])
        assert ours.pop("n_timesteps") == budget and (ours.pop("policy"), theirs.pop("policy")) == (
            "MlpTrXLPolicy",
            "MlpLstmPolicy",
        )
        kwargs, lstm_kwargs = study.policy_kwargs(study.BASE, task), eval(theirs.pop("policy_kwargs"))
        ours.pop("policy_kwargs"), theirs.pop("n_timesteps")
        assert ours == theirs, task
        assert {factor: kwargs.pop(factor) for factor in study.FACTORS} == {f: b for f, (b, _) in study.FACTORS.items()}
        assert kwargs == {"net_arch": lstm_kwargs["net_arch"]}, task


def test_each_setting_changes_one_attention_argument_on_the_zoos_command_line(tmp_path: Path) -> None:
    assert len(study.SETTINGS) == 11 and study.SETTINGS[study.BASE] is None
    for task in study.TASKS:
        base = _zoo_policy_kwargs(runner.zoo_command(study.spec(study.BASE, task, 0, tmp_path)))
        assert base == study.policy_kwargs(study.BASE, task)
        for setting, change in study.SETTINGS.items():
            command = runner.zoo_command(study.spec(setting, task, 0, tmp_path))
            kwargs = _zoo_policy_kwargs(command)
            differs = {key for key in base if kwargs[key] != base[key]}
            assert differs == (set() if change is None else {change[0]}), setting
            if change is not None:
                assert kwargs[change[0]] == change[1] and change[1] != base[change[0]]
            settings = command[command.index("--hyperparams") + 1 :]
            assert "window_size:'batch'" in settings and "window_coverage:'full'" in settings
            assert command[command.index("--algo") + 1] == "reset_ppo"
            assert Path(command[command.index("--conf-file") + 1]) == study.CONF
    # The attention policy accepts every setting (width a multiple of the heads, a known encoding)
    from sb3_reset_ppo.common.attention import check_attention_arguments

    for setting in study.SETTINGS:
        kwargs = study.policy_kwargs(setting, "CueRecall-v0")
        check_attention_arguments(
            kwargs["memory_length"], kwargs["trxl_dim"], kwargs["n_trxl_layers"], kwargs["n_attention_heads"],
            kwargs["positional_encoding"], None,
        )  # fmt: skip


def test_no_task_is_a_task_of_the_attention_study() -> None:
    import gymnasium as gym

    import sb3_reset_ppo.envs  # noqa: F401  (registers the tasks)

    assert not set(study.TASKS) & set(attention_study.TASKS)
    assert all(task in gym.registry for task in study.TASKS)


def test_runs_go_seed_by_seed_and_task_by_task(tmp_path: Path) -> None:
    jobs = study.jobs(list(study.TASKS), list(study.SETTINGS), 2, tmp_path)
    assert len(jobs) == 2 * len(study.TASKS) * len(study.SETTINGS)
    first = [(j["seed"], j["env"], j["variant"]) for j in jobs[: len(study.SETTINGS)]]
    assert first == [(0, "CueRecall-v0", setting) for setting in study.SETTINGS]
    assert jobs[len(jobs) // 2]["seed"] == 1
    run = study.spec("gated_true", "PopgymRepeatFirstEasy-v0", 3, tmp_path)
    assert run.run_dir == tmp_path / "gated_true" / "PopgymRepeatFirstEasy-v0" / "seed3"
    assert run.extra["factor"] == "gated" and run.extra["value"] is True and run.eval_episodes == 10
    with pytest.raises(ValueError, match="setting must be one of"):
        study.spec("n_trxl_layers_4", "CueRecall-v0", 0, tmp_path)
    with pytest.raises(ValueError, match="task must be one of"):
        study.spec(study.BASE, "CueRecallLong-v0", 0, tmp_path)


def test_the_rule_judges_each_value_and_decides_each_factor() -> None:
    # Better with evidence, worse, not worse; cheaper only at <= 80% of the base's learn() seconds on every task
    assert report.judge([0.8, 0.6, 0.95], [1.5, 1.5]) == "better"
    assert report.judge([0.2, 0.05, 0.4], [0.5, 0.5]) == "worse"
    assert report.judge([0.55, 0.4, 0.7], [0.7, 0.8]) == "not worse, cheaper"
    assert report.judge([0.55, 0.4, 0.7], [0.7, 0.81]) == "not worse"
    assert report.judge([0.55, 0.4, 0.7], [0.7, None]) == "not worse"
    assert report.judge(None, [0.5, 0.5]) == "pending"
    # Two values better: the higher probability; better with evidence before cheaper; else the base stays
    assert report.decide(2, {1: ("better", 0.7), 3: ("better", 0.9)}) == 3
    assert report.decide(2, {1: ("not worse, cheaper", 0.6), 3: ("better", 0.58)}) == 3
    assert report.decide(2, {1: ("not worse, cheaper", 0.45), 3: ("not worse", 0.6)}) == 1
    assert report.decide(2, {1: ("not worse", 0.6), 3: ("worse", 0.1)}) == 2


def _runs(folder: Path, levels: dict[str, float], paces: dict[str, float], seeds: int) -> None:
    """
    Fake finished runs of every task: each setting's evaluations rise to its level (plus a small seed offset), its
    learn() at its pace (seconds per 1000 steps; 1 s of each run's time is evaluations).
    """
    for task in study.TASKS:
        for setting in study.SETTINGS:
            for seed in range(seeds):
                _fake_run(folder, setting, task, seed, list(np.linspace(0.0, levels.get(setting, 0.5), 20) + 0.001 * seed))
                pace = paces.get(setting, 1.0)
                rows = [
                    {"time/total_timesteps": 1000.0 * k, "time/fps": 1000.0 / pace, "time/evaluation_seconds": 1.0}
                    for k in range(1, 21)
                ]
                training_log.write_csv(rows, folder / setting / task / f"seed{seed}" / "progress.csv.gz")


def test_the_report_with_no_runs_says_so_and_decides_nothing(tmp_path: Path) -> None:
    pages = tmp_path / "pages"
    report.main(["--runs", str(tmp_path / "none"), "--out", str(pages), "--summaries", str(tmp_path), "--reps", "20"])
    summary = json.loads((tmp_path / report.SUMMARY).read_text())
    assert summary["runs"] == 0 and summary["planned"] == 110 and not summary["complete"]
    assert summary["status"].startswith("No runs yet: 0 of 110 runs stored")
    assert all(entry["decision"] == "pending" for entry in summary["factors"].values())
    page = (pages / "RESULTS.md").read_text()
    assert (
        page.startswith("# ")
        and "No runs yet" in page
        and "| `gated` | False | True | - | - / - | pending | pending |" in page
    )


def test_the_report_on_a_complete_study_applies_the_decision_rule(tmp_path: Path) -> None:
    levels = {
        study.BASE: 0.5,
        "n_trxl_layers_1": 0.9,  # better on every seed and task
        # Both better, 16 by less (its final returns 0.0025 above the base's: 22 of 25 seed pairs): 64 is chosen
        "memory_length_16": 0.5 + 0.0025 * 19 / 18, "memory_length_64": 0.9,
        "positional_encoding_none": 0.2,  # worse, although cheaper
    }  # fmt: skip
    paces = {"n_attention_heads_1": 0.5, "positional_encoding_none": 0.5, "trxl_dim_32": 0.9}
    _runs(tmp_path / "runs", levels, paces, seeds=study.SEEDS)
    summary = report.analyse(report.load(tmp_path / "runs")[0], reps=50)
    assert summary["complete"] and summary["runs"] == 110
    decisions = {factor: entry["decision"] for factor, entry in summary["factors"].items()}
    assert decisions == {
        "memory_length": 64, "n_trxl_layers": 1, "n_attention_heads": 1, "trxl_dim": 64,
        "positional_encoding": "sinusoidal", "gated": False,
    }  # fmt: skip
    values = summary["factors"]["n_attention_heads"]["values"]["n_attention_heads_1"]
    # The same returns (the seeds interleave), about half the learn() seconds: not worse, and cheaper
    assert values["probability"][0] == pytest.approx(0.5) and values["judgement"] == "not worse, cheaper"
    assert values["cost_ratios"] == pytest.approx([(10.0 - 1.0) / (20.0 - 1.0)] * 2)
    assert summary["factors"]["trxl_dim"]["values"]["trxl_dim_32"]["judgement"] == "not worse"  # 10% cheaper: not enough
    memory = summary["factors"]["memory_length"]["values"]
    assert memory["memory_length_16"]["judgement"] == memory["memory_length_64"]["judgement"] == "better"
    assert memory["memory_length_16"]["probability"][0] == pytest.approx(22 / 25)
    assert summary["factors"]["positional_encoding"]["values"]["positional_encoding_none"]["judgement"] == "worse"
    assert summary["status"].startswith("Complete: all 110 runs stored; by the protocol's rule: memory_length 32 -> 64")
    page = report.markdown(summary, [])
    assert "| `n_trxl_layers` | 2 | 1 | 1.00 (1.00 to 1.00) | 1.00 / 1.00 | better | 1 |" in page


def test_a_value_whose_runs_failed_on_a_task_is_never_chosen(tmp_path: Path) -> None:
    _runs(tmp_path / "runs", {"gated_true": 0.9}, {}, seeds=study.SEEDS)
    runs = report.load(tmp_path / "runs")[0]
    del runs["PopgymRepeatFirstEasy-v0"]["gated_true"]  # its 5 runs failed there
    assert not report.analyse(runs, reps=20)["complete"]
    summary = report.analyse(runs, reps=20, failed=study.SEEDS)
    gated = summary["factors"]["gated"]
    assert summary["complete"] and gated["values"]["gated_true"]["judgement"] == "failed" and gated["decision"] is False
    assert summary["status"].startswith("Complete: 105 of 110 runs stored, 5 failed; by the protocol's rule: every")


def test_the_runner_refuses_uncommitted_package_changes_and_smoke_tests_into_the_studys_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "code_version", lambda: {"dirty": True})
    with pytest.raises(SystemExit):
        study.main(["--out", str(tmp_path / "attention_defaults"), "--forecast"])
    assert "uncommitted changes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        study.main(["--steps", "256", "--allow-dirty"])
    assert "needs --out" in capsys.readouterr().err
    study.main(["--out", str(tmp_path / "attention_defaults"), "--forecast", "--allow-dirty", "--seeds", "1"])
    assert "0 of 22 runs already stored; 22 to run" in capsys.readouterr().out


@pytest.mark.slow
def test_one_short_run_through_the_runner_is_stored_with_its_commit(tmp_path: Path) -> None:
    record = short_study_run(study, report, tmp_path, 256, "settings", "n_trxl_layers_1", "CueRecall-v0")
    assert "n_trxl_layers=1" in record["command"] and record["setting"] == "n_trxl_layers_1"
