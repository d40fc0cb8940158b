"""
The attention study (benchmarks/studies/attention/): its hyperparameter files differ only in the memory cell, its runs
and their order, the recall task's delays against the window, the report on fake runs (partial and complete), and one
short real run through the runner.
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

study = _load("attention_study")
report = _load("attention_report")
# The attention settings the protocol fixes (PROTOCOL.md, Attention settings)
ATTENTION = {
    "memory_length": 32, "trxl_dim": 64, "n_trxl_layers": 2, "n_attention_heads": 4,
    "positional_encoding": "sinusoidal", "gated": False,
}  # fmt: skip


def _entries(path: Path) -> dict[str, dict[str, Any]]:
    """A zoo file's entries with their ``policy_kwargs`` evaluated as the zoo evaluates them."""
    entries = yaml.safe_load(path.read_text())
    for entry in entries.values():
        entry["policy_kwargs"] = eval(entry["policy_kwargs"], {"nn": nn})
    return entries


def test_the_attention_arms_file_differs_from_the_others_only_in_the_memory_cell() -> None:
    lstm, trxl = _entries(study.CONF), _entries(study.TRXL_CONF)
    assert list(lstm) == list(trxl) == list(study.TASKS)
    for task in study.TASKS:
        a, b = dict(lstm[task]), dict(trxl[task])
        assert (a.pop("policy"), b.pop("policy")) == ("MlpLstmPolicy", "MlpTrXLPolicy")
        cell_a, cell_b = a.pop("policy_kwargs"), b.pop("policy_kwargs")
        assert a == b, task
        assert cell_b.pop("trxl_dim") == cell_a.pop("lstm_hidden_size") == 64
        assert cell_b.pop("enable_critic_trxl", True) == cell_a.pop("enable_critic_lstm", True)
        assert {key: cell_b.pop(key) for key in list(ATTENTION) if key != "trxl_dim"} == {
            key: value for key, value in ATTENTION.items() if key != "trxl_dim"
        }
        assert cell_a == cell_b, task
    # CartPoleNoVel-v1: the RL Zoo's tuned ppo_lstm entry, verbatim
    import rl_zoo3

    zoo = yaml.safe_load((Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo_lstm.yml").read_text())
    assert yaml.safe_load(study.CONF.read_text())["CartPoleNoVel-v1"] == zoo["CartPoleNoVel-v1"]


def test_runs_go_seed_by_seed_and_each_arm_trains_as_the_protocol_says(tmp_path: Path) -> None:
    jobs = study.jobs(list(study.TASKS), list(study.ARMS), 2, tmp_path)
    assert len(jobs) == 2 * len(study.TASKS) * len(study.ARMS)
    assert [(j["seed"], j["env"], j["variant"]) for j in jobs[:4]] == [(0, "ProofOfMemory-v0", arm) for arm in study.ARMS]
    assert jobs[len(jobs) // 2]["seed"] == 1
    commands = {arm: runner.zoo_command(study.spec(arm, "ProofOfMemory-v0", 0, tmp_path)) for arm in study.ARMS}
    for arm, command in commands.items():
        assert command[command.index("--gym-packages") + 1] == "benchmarks.envs"
        assert command[command.index("--algo") + 1] == ("ppo_lstm" if arm == "rppo" else "reset_ppo")
        conf = Path(command[command.index("--conf-file") + 1])
        assert conf == (study.TRXL_CONF if arm == "trxl" else study.CONF)
        settings = command[command.index("--hyperparams") + 1 :] if "--hyperparams" in command else []
        assert ("window_size:16" in settings) == (arm != "rppo")
        assert ("policy:'MlpGruPolicy'" in settings) == (arm == "gru")
    assert study.spec("lstm", "CartPoleNoVel-v1", 3, tmp_path).run_dir == tmp_path / "lstm" / "CartPoleNoVel-v1" / "seed3"
    with pytest.raises(ValueError, match="arm must be one of"):
        study.spec("ppo", "CartPoleNoVel-v1", 0, tmp_path)
    with pytest.raises(ValueError, match="task must be one of"):
        study.spec("trxl", "CartPole-v1", 0, tmp_path)


def test_every_recall_cue_outlasts_the_window_and_stays_within_the_attentions_reach() -> None:
    import gymnasium as gym

    import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallLong-v0)

    env: Any = gym.make("CueRecallLong-v0").unwrapped
    window = int(study.WINDOW[0].split(":")[1])
    # The query comes delay + 1 steps after the cue: past the window for every delay, within L x K for every delay
    assert env.min_delay + 1 > window
    assert env.max_delay + 1 <= int(str(ATTENTION["n_trxl_layers"])) * int(str(ATTENTION["memory_length"]))


def _runs(folder: Path, tasks: list[str], arms: dict[str, float], seeds: int, timed: bool = True) -> None:
    """Fake finished runs: every arm's evaluations rise to its final level (plus a small seed offset)."""
    for task in tasks:
        for arm, level in arms.items():
            for seed in range(seeds):
                means = list(np.linspace(0.0, level, 20) + 0.001 * seed)
                _fake_run(folder, arm, task, seed, means)
                if timed:  # learn() at 2 (attention) or 1 s per 1000 steps, 1 s of it evaluations
                    pace = 2.0 if arm == "trxl" else 1.0
                    rows = [
                        {"time/total_timesteps": 1000.0 * k, "time/fps": 1000.0 / pace, "time/evaluation_seconds": 1.0}
                        for k in range(1, 21)
                    ]
                    training_log.write_csv(rows, folder / arm / task / f"seed{seed}" / "progress.csv.gz")


def test_the_report_on_partial_runs_states_numbers_and_no_verdict(tmp_path: Path) -> None:
    _runs(tmp_path / "runs", ["ProofOfMemory-v0"], {"trxl": 1.2, "lstm": 0.0}, seeds=3)
    pages = tmp_path / "pages"
    report.main(["--runs", str(tmp_path / "runs"), "--out", str(pages), "--summaries", str(tmp_path), "--reps", "50"])
    summary = json.loads((tmp_path / report.SUMMARY).read_text())
    assert summary["runs"] == 6 and summary["planned"] == 200 and not summary["complete"]
    assert summary["status"].startswith("Incomplete: 6 of 200 runs stored, so no verdict yet")
    task = summary["tasks"]["ProofOfMemory-v0"]
    # Final return: the mean of the last 3 evaluations of 20
    expected = np.mean(np.linspace(0.0, 1.2, 20)[-3:]) + 0.001
    assert task["arms"]["trxl"]["final"][0] == pytest.approx(expected, abs=1e-9)
    assert task["arms"]["lstm"]["learn_seconds"][0] == pytest.approx(19.0)  # 20 s less 1 s of evaluations
    assert task["equal_time_seconds"] == pytest.approx(19.0)
    # At 19 s the attention runs (2 s per 1000 steps, less the evaluations) have trained half their budget
    assert task["arms"]["trxl"]["at_equal_time"][0] < task["arms"]["trxl"]["final"][0]
    assert set(task["comparisons"]) == {"lstm"} and task["pending"] == list(study.ARMS)
    # No comparison states a verdict before every run is stored, though its numbers are shown
    assert {result["verdict"] for result in task["comparisons"]["lstm"].values()} == {report.NO_VERDICT}
    assert summary["tasks"]["CartPoleNoVel-v1"]["arms"] == {}
    # The policies' sizes, as the hyperparameter files build them: PROTOCOL.md's table (Budgets)
    assert task["parameters"] == {"trxl": 127_043, "lstm": 43_843, "gru": 35_011, "rppo": 43_843}
    assert summary["tasks"]["PopgymAutoencodeEasy-v0"]["parameters"]["trxl"] == 127_557
    page = (pages / "RESULTS.md").read_text()
    assert page.startswith("# ") and "| ResetPPO, GRU | 0 | - | - | - | - | 35,011 |" in page and "Incomplete" in page
    assert f"| {report.NO_VERDICT} |" in page and "| not significant |" not in page
    # Where the runs trained (the fake runs record no machine)
    assert summary["dirty"] == 0 and "Runs: 6; commits: " in page and "Machines: not recorded" in page
    assert (pages / "figures" / "learning_curves.png").is_file()


def test_the_report_on_a_complete_study_states_each_comparisons_verdict(tmp_path: Path) -> None:
    levels = {"trxl": 1.0, "lstm": 0.5, "gru": 0.5, "rppo": 1.0}
    _runs(tmp_path / "runs", list(study.TASKS), levels, seeds=study.SEEDS, timed=False)
    summary = report.analyse(report.load(tmp_path / "runs")[0], reps=50)
    assert summary["complete"] and summary["status"].startswith("Complete")
    assert summary["families"] == {"final": 15, "at_equal_time": 0}  # untimed runs: no equal-time comparison
    comparisons = summary["tasks"]["CueRecallLong-v0"]["comparisons"]
    assert comparisons["lstm"]["final"]["verdict"] == "higher"
    assert comparisons["lstm"]["final"]["probability"][0] == pytest.approx(1.0)
    # The same levels: seeds interleave, no difference is stated
    assert comparisons["rppo"]["final"]["verdict"] == "not significant"
    assert report.verdict([0.2, 0.05, 0.4], 0.01) == "lower" and report.verdict([0.2, 0.05, 0.4], 0.2) == "not significant"


@pytest.mark.slow
def test_one_short_run_through_the_runner_is_stored_with_its_commit(tmp_path: Path) -> None:
    record = short_study_run(study, report, tmp_path, 2048, "arms", "trxl", "ProofOfMemory-v0")
    assert "--gym-packages benchmarks.envs" in record["command"] and str(ROOT) in record["command"]
