"""
The zoo rows study's diagnosis runs (benchmarks/studies/zoo_rows/diagnose_runs.py): the action energy read from
MountainCarContinuous returns, and the statistics of the deterministic policy's actions against the returns the env
gives for them.
"""

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
