"""MaskedCueRecall-v0: checks, masks, the documented returns of memory, memoryless and mask-blind policies."""

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers the tasks)
from sb3_reset_ppo.envs import MaskedCueRecallEnv
from sb3_reset_ppo.envs.masked_cue_recall import normalised_score

# A policy: (observation, mask, rng, memory) -> action; memory is a dict kept for one episode
Policy = Callable[[np.ndarray, np.ndarray, np.random.Generator, dict], int]


def _run(env: MaskedCueRecallEnv, policy: Policy, n_episodes: int, seed: int = 0) -> tuple[float, list[dict]]:
    """Mean return of ``policy`` over ``n_episodes`` and the last info of each episode."""
    rng = np.random.default_rng(seed)
    total, last_infos = 0.0, []
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed + episode)
        memory: dict = {}
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(np.int64(policy(obs, env.action_masks(), rng, memory)))
            total += float(reward)
            done = terminated or truncated
        last_infos.append(info)
    return total / n_episodes, last_infos


def _oracle(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator, memory: dict) -> int:
    # Remembers the first observation's cue (from the observation, not from the env's private state)
    n_cues = obs.shape[0] - 1
    if "cue" not in memory:
        assert obs[:n_cues].sum() == 1
        memory["cue"] = int(np.argmax(obs[:n_cues]))
    if obs[-1] == 1:
        return memory["cue"]
    return int(np.flatnonzero(mask)[0])


def _valid_no_memory(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator, memory: dict) -> int:
    # A uniformly random valid action: what a masked policy without memory can do at best
    return int(rng.choice(np.flatnonzero(mask)))


def _first_valid(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator, memory: dict) -> int:
    # A deterministic memoryless masked policy: always answers 0 at the query
    return int(np.flatnonzero(mask)[0])


def _mask_blind(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator, memory: dict) -> int:
    # Knows the rules but not the mask: the first wait action before the query, the remembered cue at it
    n_cues = obs.shape[0] - 1
    if "cue" not in memory:
        memory["cue"] = int(np.argmax(obs[:n_cues]))
    return memory["cue"] if obs[-1] == 1 else n_cues


def test_registered_and_checked() -> None:
    env = gym.make("MaskedCueRecall-v0")
    assert isinstance(env.unwrapped, MaskedCueRecallEnv)
    assert env.action_space == gym.spaces.Discrete(6)
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(MaskedCueRecallEnv(), warn=True)
    # sb3-contrib finds the masks through gymnasium's wrappers and through a VecEnv
    assert is_masking_supported(env)
    vec_env = make_vec_env("MaskedCueRecall-v0", n_envs=3, seed=0)
    assert get_action_masks(vec_env).shape == (3, 6)


@pytest.mark.parametrize("kwargs", [{}, {"n_cues": 3, "min_delay": 0, "max_delay": 2, "n_wait": 1}, {"n_wait": 4}])
def test_masks_at_every_step(kwargs: dict) -> None:
    env = MaskedCueRecallEnv(**kwargs)
    n_cues, n_wait = env.n_cues, env.n_wait
    lengths, waits = set(), set()
    for episode in range(100):
        obs, _ = env.reset(seed=episode)
        steps, done = 0, False
        while not done:
            mask = env.action_masks()
            assert mask.dtype == bool
            assert mask.shape == (n_cues + n_wait,)
            # Calling it again gives the same mask (the valid wait is drawn once per step)
            np.testing.assert_array_equal(env.action_masks(), mask)
            if obs[-1] == 1:
                # The query: exactly the answers
                np.testing.assert_array_equal(mask, np.arange(n_cues + n_wait) < n_cues)
            else:
                # Before the query: exactly one wait action
                assert np.flatnonzero(mask).tolist() in [[n_cues + w] for w in range(n_wait)]
                waits.add(int(np.flatnonzero(mask)[0]))
            obs, _, terminated, truncated, info = env.step(np.int64(np.flatnonzero(mask)[-1]))
            assert not info["invalid_action"]
            steps += 1
            done = terminated or truncated
        lengths.add(steps)
    # Episodes of a valid policy last delay + 2 steps, every delay occurs, and every wait action is drawn
    assert lengths == set(range(env.min_delay + 2, env.max_delay + 3))
    assert waits == set(range(n_cues, n_cues + n_wait))


def test_oracle_with_memory_is_perfect() -> None:
    mean_return, infos = _run(MaskedCueRecallEnv(), _oracle, 300)
    assert mean_return == 1.0
    assert normalised_score(mean_return) == 1.0
    assert all(info["is_success"] and not info["invalid_action"] for info in infos)


@pytest.mark.parametrize("policy", [_valid_no_memory, _first_valid])
def test_valid_policy_without_memory_scores_chance(policy: Policy) -> None:
    mean_return, infos = _run(MaskedCueRecallEnv(), policy, 3000)
    assert not any(info["invalid_action"] for info in infos)
    # 1 / n_cues = 0.25: normalised 0 (standard error of the mean about 0.008, so 0.03 is over 3.5 of them)
    assert mean_return == pytest.approx(0.25, abs=0.03)
    assert normalised_score(mean_return) == pytest.approx(0.0, abs=0.04)


def test_mask_blind_policy_fails_even_with_memory() -> None:
    mean_return, infos = _run(MaskedCueRecallEnv(), _mask_blind, 3000)
    # Survives each of the delay + 1 steps before the query with probability 1/2: with delays 1..6, reaches it
    # in mean(2 ** -(delay + 1)) = 0.0820 of episodes (and then answers right); the others end at -1
    reach = np.mean([2.0 ** -(delay + 1) for delay in range(1, 7)])
    assert mean_return == pytest.approx(reach - (1 - reach), abs=0.03)
    assert np.mean([info["invalid_action"] for info in infos]) == pytest.approx(1 - reach, abs=0.015)
    assert normalised_score(mean_return) < -1.2


def test_mask_blind_policy_is_perfect_with_one_wait_action() -> None:
    # With n_wait=1 the valid action can be read from the observation: masks are not needed
    assert _run(MaskedCueRecallEnv(n_wait=1), _mask_blind, 100)[0] == 1.0


def test_invalid_actions() -> None:
    env = MaskedCueRecallEnv()
    obs, _ = env.reset(seed=0)
    cue = int(np.argmax(obs[:4]))
    # An answer before the query: reward -1, the episode ends
    _, reward, terminated, truncated, info = env.step(np.int64(cue))
    assert (reward, terminated, truncated, info) == (-1.0, True, False, {"invalid_action": True, "is_success": False})
    # The invalid wait action before the query
    env.reset(seed=0)
    invalid_wait = int(np.flatnonzero(~env.action_masks() & (np.arange(6) >= 4))[0])
    _, reward, terminated, _, info = env.step(np.int64(invalid_wait))
    assert (reward, terminated, info["invalid_action"]) == (-1.0, True, True)
    # A wait action at the query
    env.reset(seed=0)
    while env.action_masks()[4:].any():
        env.step(np.int64(np.flatnonzero(env.action_masks())[0]))
    _, reward, terminated, _, info = env.step(np.int64(4))
    assert (reward, terminated, info["invalid_action"]) == (-1.0, True, True)
    # Out of the action space
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action must be in"):
        env.step(np.int64(6))


def test_answers_at_the_query() -> None:
    env = MaskedCueRecallEnv()
    for answer_right in (True, False):
        obs, _ = env.reset(seed=1)
        cue = int(np.argmax(obs[:4]))
        while obs[-1] != 1:
            obs, reward, terminated, _, _ = env.step(np.int64(np.flatnonzero(env.action_masks())[0]))
            assert (reward, terminated) == (0.0, False)
        answer = cue if answer_right else (cue + 1) % 4
        _, reward, terminated, _, info = env.step(np.int64(answer))
        assert (reward, terminated, info["is_success"]) == (float(answer_right), True, answer_right)


def test_seeding_is_reproducible() -> None:
    env = MaskedCueRecallEnv()
    runs = []
    for _ in range(2):
        env.reset(seed=7)
        masks = [env.action_masks()]
        while env.action_masks()[4:].any():
            env.step(np.int64(np.flatnonzero(env.action_masks())[0]))
            masks.append(env.action_masks())
        runs.append(np.stack(masks))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_normalised_score() -> None:
    assert normalised_score(1.0) == 1.0
    assert normalised_score(0.25) == 0.0
    assert normalised_score(-1.0) == pytest.approx(-5 / 3)
    assert normalised_score(0.5, n_cues=2) == 0.0
    with pytest.raises(ValueError, match="n_cues must be at least 2, got 1"):
        normalised_score(1.0, n_cues=1)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n_wait": 0}, "n_wait must be at least 1, got 0"),
        ({"n_cues": 1}, "n_cues must be at least 2, got 1"),
        ({"min_delay": 3, "max_delay": 2}, "need 0 <= min_delay <= max_delay"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MaskedCueRecallEnv(**kwargs)
