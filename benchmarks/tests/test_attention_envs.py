"""The attention study's tasks (benchmarks/envs/): the proof-of-memory task's rules, POPGym's RepeatPreviousMedium."""

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import benchmarks.envs  # noqa: F401  (registers the tasks)
from benchmarks.envs.proof_of_memory import ProofOfMemoryEnv


def walk(env: gym.Env, policy: Any, seed: int) -> tuple[list[np.ndarray], list[float], bool, bool]:
    """One episode: its observations (the first included), rewards, and how it ended (terminated, truncated)."""
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = env.step(policy(observations))
        observations.append(obs)
        rewards.append(float(reward))
    return observations, rewards, terminated, truncated


def to_the_reward(observations: list[np.ndarray]) -> np.int64:
    """The optimal policy: towards the end shown rewarding in the first observation."""
    return np.int64(1 if observations[0][2] > 0 else 0)


def test_the_ends_are_shown_in_the_first_three_observations_only_and_the_agent_waits() -> None:
    env = gym.make("ProofOfMemory-v0")
    for seed in range(20):
        observations, rewards, _, _ = walk(env, lambda _: np.int64(1), seed)
        first = observations[0]
        assert sorted(first[[0, 2]].tolist()) == [-1.0, 1.0] and round(float(first[1]), 2) in ProofOfMemoryEnv.STARTS
        for obs in observations[1:3]:  # the two frozen steps: the same observation, no reward
            np.testing.assert_array_equal(obs, first)
        assert rewards[:2] == [0.0, 0.0]
        for obs in observations[3:]:
            assert obs[0] == obs[2] == 0.0
        # From the third step on, action 1 moves one cell (0.2) right per step
        positions = [float(obs[1]) for obs in observations[2:]]
        np.testing.assert_allclose(np.diff(positions), 0.2, atol=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_the_rewarding_end_pays_1_6_and_every_other_moving_step_costs_0_1(seed: int) -> None:
    env = gym.make("ProofOfMemory-v0")
    observations, rewards, terminated, truncated = walk(env, to_the_reward, seed)
    start = float(observations[0][1])
    cells = round(((1.0 - start) if observations[0][2] > 0 else (1.0 + start)) / 0.2)
    assert terminated and not truncated and len(rewards) == 2 + cells
    np.testing.assert_allclose(rewards[2:-1], -0.1)
    assert rewards[-1] == pytest.approx(1.6) and abs(float(observations[-1][1])) == pytest.approx(1.0)
    assert sum(rewards) == pytest.approx(1.7 - 0.1 * cells)
    # The other way: the punishing end
    _, rewards, terminated, _ = walk(env, lambda o: np.int64(1 - to_the_reward(o)), seed)
    assert terminated and rewards[-1] == pytest.approx(-1.6)


def test_an_episode_that_reaches_no_end_is_cut_at_16_steps() -> None:
    env = gym.make("ProofOfMemory-v0")
    _, rewards, terminated, truncated = walk(env, lambda observations: np.int64(len(observations) % 2), 0)
    assert truncated and not terminated and len(rewards) == 16
    assert sum(rewards) == pytest.approx(-1.4)


def test_returns_with_and_without_memory_and_reproducible_episodes() -> None:
    env = gym.make("ProofOfMemory-v0")
    firsts = [walk(env, to_the_reward, seed)[0][0] for seed in range(400)]
    # Starts and ends drawn uniformly: every start, both layouts
    assert {round(float(obs[1]), 2) for obs in firsts} == set(ProofOfMemoryEnv.STARTS)
    assert 0.4 < np.mean([obs[2] > 0 for obs in firsts]) < 0.6
    optimal = np.mean([sum(walk(env, to_the_reward, seed)[1]) for seed in range(400)])
    guess = np.mean([sum(walk(env, lambda _: np.int64(1), seed)[1]) for seed in range(400)])
    assert optimal == pytest.approx(1.2, abs=0.05) and guess == pytest.approx(-0.4, abs=0.2)
    np.testing.assert_array_equal(env.reset(seed=3)[0], env.reset(seed=3)[0])
    check_env(ProofOfMemoryEnv(), skip_render_check=True)


def test_repeat_previous_medium_asks_for_the_suit_32_steps_back() -> None:
    env: Any = gym.make("PopgymRepeatPreviousMedium-v0")
    assert env.observation_space == gym.spaces.Discrete(4) and env.action_space == gym.spaces.Discrete(4)
    assert env.unwrapped.k == 32
    # The card shown now is the newest of the 32 a step looks back over: name the suit shown 31 steps before it
    _, rewards, terminated, _ = walk(env, lambda seen: np.int64(seen[-32] if len(seen) >= 32 else 0), 0)
    # Two decks: 103 steps; naming that suit every time earns the most a run can (POPGym scores to 1)
    assert terminated and len(rewards) == 103 and sum(rewards) == pytest.approx(1.0)
    _, rewards, _, _ = walk(env, lambda seen: np.int64(seen[-33] if len(seen) >= 33 else 0), 0)
    assert sum(rewards) < 0
