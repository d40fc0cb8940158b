"""
The zoo rows study's diagnosis runs (benchmarks/studies/zoo_rows/diagnose_runs.py): the action energy read from
MountainCarContinuous returns, and the statistics of the deterministic policy's actions against the returns the env
gives for them.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from bench_helpers import _load

runs = _load("diagnose_runs")


def test_the_energy_of_an_episode_is_read_from_its_return() -> None:
    # 100 - 0.1 * 80 = 92 over 90 steps; 100 - 0.1 * 60 = 94 over 60 steps; a timed-out episode is left out
    energy = runs.stored_energy([92.0, 94.0, -50.0], [90, 60, 999])
    assert energy["reached_goal"] == pytest.approx(2 / 3)
    assert energy["mean_length"] == pytest.approx(75.0)
    assert energy["mean_episode_energy"] == pytest.approx(70.0)
    assert energy["mean_step_energy"] == pytest.approx((80 / 90 + 60 / 60) / 2)


def test_action_statistics_are_the_actions_the_env_charges_for() -> None:
    import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel envs)
    import torch as th
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    env = make_vec_env("MountainCarContinuousNoVel-v0", n_envs=1, seed=3)
    kwargs = {"lstm_hidden_size": 8, "log_std_init": 1.0}
    model = ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, use_sde=True, seed=3, policy_kwargs=kwargs)
    # Mean actions of about 0.3: a return well above the Monitor's rounding (6 decimals)
    with th.no_grad():
        dict(model.policy.action_net.named_parameters())["weight"].mul_(1000.0)
    untrained = runs.action_statistics(model, env, n_episodes=1)
    (length,) = untrained["episode_lengths"]
    (episode_return,) = untrained["episode_returns"]
    assert untrained["steps"] == length == runs.TIME_LIMIT  # an untrained policy does not reach the goal
    # Without the goal the return is the energy cost alone: -0.1 * sum(a^2) over the clipped actions
    assert episode_return == pytest.approx(-runs.ENERGY_COST * untrained["mean_action_squared"] * length, abs=1e-5)
    assert episode_return < -1.0
    assert untrained["saturated_share"] == 0.0 and 0.0 < untrained["mean_abs_mean_action"] < 1.0
    assert untrained["mean_action_std"] > 0.0
    assert untrained["exp_log_std"] == pytest.approx(np.e, rel=1e-6)
    # A mean action of 1.5 everywhere: clipped to 1, every step saturated, 0.1 per step charged (pushing right only
    # never climbs out of the valley)
    with th.no_grad():
        for name, parameter in model.policy.action_net.named_parameters():
            parameter.fill_(1.5 if name == "bias" else 0.0)
    pushing = runs.action_statistics(model, env, n_episodes=1)
    assert pushing["saturated_share"] == 1.0 and pushing["mean_action_squared"] == 1.0
    assert pushing["mean_abs_mean_action"] == pytest.approx(1.5)
    (length,) = pushing["episode_lengths"]
    (episode_return,) = pushing["episode_returns"]
    assert length == runs.TIME_LIMIT and episode_return == pytest.approx(-runs.ENERGY_COST * length, abs=1e-5)
    # The policy's own method again after the measurement
    assert "_get_action_dist_from_latent" not in vars(model.policy)


def test_a_variant_arm_trains_with_its_settings() -> None:
    diagnose = _load("diagnose")
    # The variant with inside coverage is the inside arm again: the same update, to the last bit
    summary = diagnose.diagnose("CartPoleNoVel-v1", 0, variant={"window_coverage": "inside"})
    assert summary["variant"] == {"window_coverage": "inside"}
    assert set(summary["arms"]) == {"ppo_lstm", "ppo_lstm_unsplit", "reset_ppo", "reset_ppo_inside", "reset_ppo_variant"}
    distances = summary["update_distance"]
    assert distances["reset_ppo_variant vs ppo_lstm_unsplit"] == distances["reset_ppo_inside vs ppo_lstm_unsplit"] < 1e-3
    # (NOTES.md: inside coverage reproduces RecurrentPPO's unsplit update there; the default ends 2.3% away)
    assert distances["reset_ppo vs ppo_lstm_unsplit"] > 1e-2


def test_a_discrete_policy_records_its_episodes_only() -> None:
    import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel envs)
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    env = make_vec_env("CartPoleNoVel-v1", n_envs=1, seed=3)
    model = ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, seed=3, policy_kwargs={"lstm_hidden_size": 8})
    statistics = runs.action_statistics(model, env, n_episodes=2)
    assert set(statistics) == {"episode_returns", "episode_lengths", "steps"}
    # CartPole pays 1 per step: each return is its episode's length
    assert statistics["episode_returns"] == [float(length) for length in statistics["episode_lengths"]]
    assert statistics["steps"] == sum(statistics["episode_lengths"]) and len(statistics["episode_lengths"]) == 2


def _table(**values: float) -> str:
    """One of SB3's logger tables, as a run's stdout holds it."""
    rows = "\n".join(f"|    {key:<14}| {value:<10}|" for key, value in values.items())
    return f"---------------------------------\n| train/            |           |\n{rows}\n---------------------------------\n"


def test_the_last_updates_leave_out_what_a_categorical_policy_does_not_log() -> None:
    log = "".join(_table(approx_kl=0.01 * i, clip_fraction=0.1, entropy_loss=-0.6) for i in range(1, 8))
    # The last 5 tables (approx_kl 0.03 to 0.07); no train/std, no rollout/ep_rew_mean in these tables
    assert runs.final_training(log) == pytest.approx(
        {"last5_approx_kl": 0.05, "last5_clip_fraction": 0.1, "last5_entropy_loss": -0.6}
    )
    assert runs.final_training("no table") == {}


def test_a_discrete_variant_is_compared_with_both_study_arms_on_score() -> None:
    env = "CartPoleNoVel-v1"
    variant = [{"env": env, "variant": "inside", "seed": seed, "score": 500.0} for seed in range(4)]
    stored = [{"algo": "ppo_lstm", "seed": seed, "score": 400.0 + seed, "parameters_sha256": "a"} for seed in range(4)]
    stored += [{"algo": "reset_ppo", "seed": seed, "score": 300.0, "parameters_sha256": "b"} for seed in range(4)]
    summary = runs.summarise(variant, stored)
    comparisons = summary["comparisons"]
    assert set(comparisons) == {"inside vs study_ppo_lstm", "study_reset_ppo vs study_ppo_lstm", "inside vs study_reset_ppo"}
    assert all(set(measures) == {"score"} for measures in comparisons.values())  # no energy on CartPole
    assert comparisons["inside vs study_reset_ppo"]["score"]["difference"] == pytest.approx(200.0)
    assert comparisons["inside vs study_ppo_lstm"]["score"]["difference"] == pytest.approx(500.0 - 401.5)
    assert comparisons["study_reset_ppo vs study_ppo_lstm"]["score"]["seeds"] == [0, 1, 2, 3]


def test_a_variant_run_trains_evaluates_and_resumes(tmp_path: Path) -> None:
    """The training path: one short run of a variant in its subprocess, stored, then skipped when run again."""
    records = tmp_path / "diagnosis.json"
    argv = ["--env", "CartPoleNoVel-v1", "--variants", "inside", "--seeds", "0", "--timesteps", "256", "--json", str(records)]
    runs.main(argv)
    (record,) = json.loads(records.read_text())["runs"]
    assert (record["env"], record["variant"], record["seed"]) == ("CartPoleNoVel-v1", "inside", 0)
    assert record["hyperparams"] == ["window_coverage:'inside'"] and record["same_episodes"] is True
    assert len(record["episode_returns"]) == 50 and record["score"] == pytest.approx(np.mean(record["episode_returns"]))
    stamp = records.stat().st_mtime_ns
    runs.main(argv)  # nothing left to train: the file is only summarised again
    assert len(json.loads(records.read_text())["runs"]) == 1 and records.stat().st_mtime_ns >= stamp
