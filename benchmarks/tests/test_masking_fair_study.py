"""The fair masking study's runner (benchmarks/studies/masking_fair/): arms' envs, the mask wrapper, resume, a run's record."""

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from bench_helpers import _load

import benchmarks.envs  # noqa: F401  (registers the tasks)
import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)

study = _load("masking_fair_study")


def test_mask_in_observation_appends_the_mask() -> None:
    env = study.MaskInObservation(gym.make("LeducMatch-v0"))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (22,) and obs.shape == (22,)
    np.testing.assert_array_equal(obs[-3:], env.unwrapped.action_masks().astype(np.float32))
    obs, *_ = env.step(np.int64(2))
    np.testing.assert_array_equal(obs[-3:], env.unwrapped.action_masks().astype(np.float32))
    with pytest.raises(ValueError, match="observation space"):
        study.MaskInObservation(gym.make("CueRecallImage-v0"))


@pytest.mark.parametrize(
    ("arm", "size"),
    [
        ("maskable_reset_ppo", 11), ("maskable_ppo_stack", 16 * 11), ("reset_ppo_mask_obs", 17),
        ("maskable_ppo_stack_full", 142 * 11),
    ],
)  # fmt: skip
def test_each_arm_sees_what_the_protocol_says(arm: str, size: int) -> None:
    env = study.make_env("MaskedCueRecallFair-v0", arm, 2, 0)
    assert env.observation_space.shape == (size,)
    assert env.reset().shape == (2, size)
    masks = np.stack(env.env_method("action_masks"))
    assert masks.shape == (2, 6) and (masks.sum(axis=1) == 1).all()
    with pytest.raises(ValueError, match="arm"):
        study.make_env("MaskedCueRecallFair-v0", "ppo", 1, 0)


def test_the_full_stack_holds_the_cue_of_every_delay() -> None:
    # The query comes delay + 1 steps after the cue: the longest delay (140 with the registered defaults) plus 2
    env: Any = gym.make("MaskedCueRecallFair-v0").unwrapped
    frames = study.frames_for_every_delay("MaskedCueRecallFair-v0")
    assert frames == env.long_delays[1] + 2 == 142
    assert env.frame_stack_optimum(frames) == pytest.approx(1.0) and env.frame_stack_optimum(frames - 1) < 0.999
    assert study.frames_stacked("MaskedCueRecallFair-v0", "maskable_ppo_stack_full") == frames
    assert study.frames_stacked("MaskedCueRecallFair-v0", "maskable_ppo_stack") == 16
    with pytest.raises(ValueError, match="delay_probabilities"):
        study.frames_for_every_delay("LeducMatch-v0")
    with pytest.raises(ValueError, match="runs on"):
        study.make_env("LeducMatch-v0", "maskable_ppo_stack_full", 1, 0)


def test_jobs_skip_recorded_and_failed_runs(tmp_path: Path) -> None:
    jobs = study.jobs_to_do(tmp_path, list(study.TASKS), list(study.ARMS), [0, 1])
    # Every arm on both tasks, but the full stack on MaskedCueRecallFair-v0 only
    assert len(jobs) == 2 * (len(study.TASKS) * len(study.ARMS) - 1) == 22
    assert ("LeducMatch-v0", "maskable_ppo_stack_full") not in {(job["task"], job["arm"]) for job in jobs}
    assert [job["seed"] for job in jobs] == sorted(job["seed"] for job in jobs)  # seed by seed
    done = study.result_path(tmp_path, "LeducMatch-v0", "maskable_ppo", 0)
    failed = study.result_path(tmp_path, "LeducMatch-v0", "maskable_ppo", 1)
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    failed.with_name(failed.stem + ".failed.txt").write_text("Traceback")
    assert len(study.jobs_to_do(tmp_path, list(study.TASKS), list(study.ARMS), [0, 1])) == len(jobs) - 2
    with pytest.raises(ValueError, match="tasks"):
        study.jobs_to_do(tmp_path, ["CartPole-v1"], ["maskable_ppo"], [0])


def test_a_run_records_what_the_protocol_needs(tmp_path: Path) -> None:
    [job] = study.jobs_to_do(tmp_path, ["MaskedCueRecallFair-v0"], ["reset_ppo_mask_obs"], [3])
    record = study.run({**job, "total_steps": 2 * study.ROLLOUT, "snapshot_every": 1, "eval_episodes": 4})
    stored = json.loads(Path(job["path"]).read_text())
    assert stored["num_timesteps"] == 2 * study.ROLLOUT == record["num_timesteps"]
    assert Path(job["path"]).with_name("seed_3.log.txt.gz").exists()
    evaluations = stored["evaluations"]
    assert [e["timesteps"] for e in evaluations] == [0, study.ROLLOUT, 2 * study.ROLLOUT]
    assert evaluations[0]["training_episodes"] == 0 < evaluations[-1]["training_episodes"]
    assert evaluations[0]["learn_cpu_seconds"] == 0.0 < evaluations[-1]["learn_cpu_seconds"] <= stored["learn_cpu_seconds"]
    for evaluation in evaluations:
        assert len(evaluation["returns"]) == len(evaluation["invalid"]) == len(evaluation["delays"]) == 4
        # A return is the valid answer's reward (0 or 1) plus -0.1 per invalid action
        for ret, invalid in zip(evaluation["returns"], evaluation["invalid"], strict=True):
            assert ret + 0.1 * invalid == pytest.approx(round(ret + 0.1 * invalid))
    assert stored["settings"] == study.COMMON and stored["mask_in_observation"] and not stored["masking"]
    assert "commit" in stored and stored["seed"] == 3
    assert study.jobs_to_do(tmp_path, ["MaskedCueRecallFair-v0"], ["reset_ppo_mask_obs"], [3]) == []


def test_a_full_stack_run_records_its_frames(tmp_path: Path) -> None:
    [job] = study.jobs_to_do(tmp_path, list(study.TASKS), ["maskable_ppo_stack_full"], [0])
    assert job["task"] == "MaskedCueRecallFair-v0"
    study.run({**job, "total_steps": study.ROLLOUT, "snapshot_every": 1, "eval_episodes": 3})
    stored = json.loads(Path(job["path"]).read_text())
    assert stored["frame_stack"] == 142 and stored["masking"] and stored["algorithm"] == "MaskablePPO"
    assert [e["timesteps"] for e in stored["evaluations"]] == [0, study.ROLLOUT]
    # Masked: no invalid action in training's evaluations
    assert all(n == 0 for e in stored["evaluations"] for n in e["invalid"])
    assert study.jobs_to_do(tmp_path, list(study.TASKS), ["maskable_ppo_stack_full"], [0]) == []


report = _load("masking_fair_report")


def _fake(task: str, arm: str, seed: int, level: float, rng: np.random.Generator, cpu: float = 5.0) -> dict:
    """
    A run whose evaluations' returns rise to ``level`` (fair task: 0 or 1 answers, Leduc: chips), ``cpu`` ``learn()``
    CPU seconds between evaluations.
    """
    evaluations = []
    for index in range(21):
        mean = level * index / 20
        if task == "MaskedCueRecallFair-v0":
            returns = (rng.random(20) < mean).astype(float).tolist()
            extra = {"delays": rng.choice([5, 135], size=20).tolist()}
        else:
            returns = (mean + rng.normal(0, 1, size=20)).tolist()
            extra = {"styles": rng.choice(["honest", "bluffer"], size=20).tolist()}
        evaluations.append({
            "timesteps": 10_240 * index, "training_episodes": 300 * index, "learn_cpu_seconds": cpu * index,
            "learn_wall_seconds": 6.0 * index, "returns": returns, "lengths": [5] * 20, "invalid": [0] * 20, **extra,
        })  # fmt: skip
    return {
        "task": task, "arm": arm, "seed": seed, "evaluations": evaluations, "learn_cpu_seconds": cpu * 20,
        "commit": "0123456789", "dirty": False, "command": "fake", "machine": {"cpu": "fake", "cores": 2},
    }  # fmt: skip


def _store(folder: Path, levels: dict[str, tuple[float, float]], seeds: int, cpu: dict[str, float] | None = None) -> None:
    """Fake runs of the arms at their (fair, Leduc) ``levels``, seeds 0 to ``seeds - 1`` (an arm on its tasks only)."""
    rng = np.random.default_rng(0)
    for arm, (fair, leduc) in levels.items():
        for seed in range(seeds):
            for task, level in (("MaskedCueRecallFair-v0", fair), ("LeducMatch-v0", leduc)):
                if study.runs_on(task, arm):
                    path = study.result_path(folder, task, arm, seed)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(_fake(task, arm, seed, level, rng, (cpu or {}).get(arm, 5.0))))


def test_report_on_partial_runs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    levels = {
        "maskable_reset_ppo": (1.0, 16.0), "maskable_ppo": (0.5, 11.0), "maskable_ppo_stack": (0.9, 12.0),
        "recurrent_ppo_mask_obs": (0.8, 12.0),
    }  # fmt: skip
    for arm, (fair, leduc) in levels.items():
        for seed in range(3 if arm != "maskable_ppo_stack" else 2):  # partial: fewer seeds for one arm
            for task, level in (("MaskedCueRecallFair-v0", fair), ("LeducMatch-v0", leduc)):
                path = study.result_path(tmp_path, task, arm, seed)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(_fake(task, arm, seed, level, rng)))
    summary = report.analyse(report.load(tmp_path), reps=10)
    fair = summary["tasks"]["MaskedCueRecallFair-v0"]
    assert fair["arms"]["maskable_ppo_stack"]["runs"] == 2
    # The memoryless arm never reaches 0.75 (two evaluations in a row); the memory arm does, every run
    assert fair["arms"]["maskable_ppo"]["steps_to_threshold"]["reached"] == 0
    assert fair["arms"]["maskable_reset_ppo"]["steps_to_threshold"]["reached"] == 3
    low, high = fair["arms"]["maskable_reset_ppo"]["final"][1:]
    assert 0.8 < low <= high <= 1.0
    comparison = fair["comparisons"]["maskable_ppo"]
    assert comparison["final"]["probability"][0] == 1.0 and comparison["steps_to_threshold"]["probability"][0] == 1.0
    # Three comparisons a task: 6 tests in the primary family (Holm over them), 12 in the secondary, 3 of the fair
    # task's success rate
    assert summary["families"] == {"primary": 6, "secondary": 12, "success": 3}
    # Like for like: both arms' CPU seconds at the same training episodes (the fakes: 5 s per 300 episodes)
    same = fair["like_for_like"]
    assert same["episodes"] == pytest.approx(6000) and same["ratio"] == pytest.approx(1.0)
    assert same["cpu"][0][0] == pytest.approx(100.0)
    assert comparison["final"]["p_holm"] >= comparison["final"]["p"]
    assert set(summary["tasks"]["LeducMatch-v0"]["arms"]["maskable_ppo"]["by_style"]) == {"bluffer", "honest"}
    text = "\n".join(report.lines(summary))
    assert "maskable_reset_ppo vs maskable_ppo, final return: P(improvement) 1.000" in text


def test_threshold_crossing_needs_two_evaluations_in_a_row() -> None:
    evaluations = [{"returns": [value]} for value in (0.2, 0.8, 0.6, 0.8, 0.9, 0.7)]
    assert report.crossing(evaluations, 0.75) == 3
    assert report.crossing(evaluations[:2], 0.75) == 1  # the last evaluation alone
    assert report.crossing(evaluations[:1], 0.75) is None


ORIGINAL = {
    "maskable_reset_ppo": (1.0, 11.0), "maskable_ppo": (0.5, 10.0), "maskable_ppo_stack": (0.9, 9.0),
    "recurrent_ppo_mask_obs": (0.8, 10.0), "reset_ppo_mask_obs": (0.8, 10.0),
}  # fmt: skip


def test_report_says_pending_until_the_amendments_arm_has_runs(tmp_path: Path) -> None:
    _store(tmp_path, ORIGINAL, 3, cpu={"recurrent_ppo_mask_obs": 20.0, "reset_ppo_mask_obs": 4.0})
    runs = report.load(tmp_path)
    summary = report.analyse(runs, reps=10)
    fair, leduc = summary["tasks"]["MaskedCueRecallFair-v0"], summary["tasks"]["LeducMatch-v0"]
    assert fair["pending"] == ["maskable_ppo_stack_full"] and leduc["pending"] == []
    assert fair["amended"] == {"maskable_ppo_stack_full": "pending (0 of 10 runs stored)"} and "amended" not in leduc
    page = report.markdown(summary, runs)
    assert "| maskable_ppo_stack_full | 0 of 10 | pending | pending |" in page
    assert "maskable_ppo_stack_full: pending (0 of 10 runs stored)" in page and "Runs: 30 of 110" in page
    # Success rate: the share of the final evaluations' episodes with a positive return, a family of 4 (Holm)
    record = runs["MaskedCueRecallFair-v0"]["maskable_ppo"][0]
    returns = [r for e in record["evaluations"][-3:] for r in e["returns"]]
    assert report.endpoints(record)["success"] == pytest.approx(np.mean(np.array(returns) > 0))
    assert summary["families"] == {"primary": 8, "secondary": 16, "success": 4}
    assert "success" not in leduc["comparisons"]["maskable_ppo"] and "success" not in leduc["arms"]["maskable_ppo"]
    success = fair["comparisons"]["maskable_ppo"]["success"]
    assert success["probability"][0] == 1.0 and success["p_holm"] >= success["p"]
    # The whole run's CPU seconds, seed by seed: 5 s against RecurrentPPO's 20 s and ResetPPO's 4 s per evaluation
    ratios = fair["cost_ratios"]
    assert ratios["maskable_reset_ppo"]["recurrent_ppo_mask_obs"]["median"] == pytest.approx([0.25, 0.25, 0.25])
    assert ratios["maskable_reset_ppo"]["recurrent_ppo_mask_obs"]["of_sums"] == pytest.approx(0.25)
    assert ratios["reset_ppo_mask_obs"]["recurrent_ppo_mask_obs"]["median"][0] == pytest.approx(0.2)
    assert ratios["maskable_reset_ppo"]["reset_ppo_mask_obs"]["seeds"] == 3
    text = "\n".join(report.lines(summary))
    assert "their intervals do not overlap, so masking changes the cost too" in text
    # No arm above 12.8 on LeducMatch-v0: uninformative, said plainly; the fair task's arms are above its 0.5
    assert leduc["below_memoryless"] and not fair["below_memoryless"]
    assert "Uninformative at this budget" in page.split("## LeducMatch-v0")[1]
    assert "Uninformative" not in page.split("## LeducMatch-v0")[0]
    # The full stack's family is named where it runs only
    assert "The amendment's arms" in page.split("## LeducMatch-v0")[0]
    assert "The amendment's arms" not in page.split("## LeducMatch-v0")[1]


def test_report_with_the_amendments_arm_keeps_the_protocols_families(tmp_path: Path) -> None:
    _store(tmp_path, ORIGINAL, 3)
    before = report.analyse(report.load(tmp_path), reps=10)
    _store(tmp_path, {"maskable_ppo_stack_full": (0.7, 0.0)}, 2)  # partial: 2 of its 10 runs
    runs = report.load(tmp_path)
    assert "maskable_ppo_stack_full" not in runs["LeducMatch-v0"]
    after = report.analyse(runs, reps=10)
    fair = after["tasks"]["MaskedCueRecallFair-v0"]
    assert fair["pending"] == [] and fair["arms"]["maskable_ppo_stack_full"]["runs"] == 2
    # Its tests are a family of their own (p as it is); the protocol's families and their Holm p stay as they were
    assert after["families"] == before["families"]
    for key in ("final", "steps_to_threshold", "cpu_to_threshold", "success"):
        result = fair["comparisons"]["maskable_ppo_stack_full"][key]
        assert result["family"] == "amendment" and result["p_holm"] == result["p"]
    for arm in ORIGINAL:
        if arm != "maskable_reset_ppo":
            assert fair["comparisons"][arm] == before["tasks"]["MaskedCueRecallFair-v0"]["comparisons"][arm]
    assert fair["amended"]["maskable_ppo_stack_full"].endswith("2 of 10 runs stored so far)")
    page = report.markdown(after, runs)
    assert "| maskable_ppo_stack_full | 2 of 10 |" in page and "pending" not in page
    assert "| maskable_ppo_stack_full | final return |" in page
