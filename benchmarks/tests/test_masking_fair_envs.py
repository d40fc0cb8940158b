"""
The fair masking study's tasks: MaskedCueRecallFair-v0 (masks from the observation only, the memoryless optimum of
1/2 by enumeration, brute force and simulation) and LeducMatch-v0 (OpenSpiel's Leduc poker per step, its
opponents, the exact bounds of a policy with and without memory of earlier hands).
"""

import itertools
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import benchmarks.envs  # noqa: F401  (registers the tasks)
from benchmarks.envs.fair_masked_cue_recall import FairMaskedCueRecallEnv, mask_from_observation
from benchmarks.envs.leduc_match import STYLES, LeducMatchEnv, hand_values, is_strong, style_action

N_CUES, N_WAIT = 4, 2


def _play(env: FairMaskedCueRecallEnv, seed: int, choose: Callable[[list[np.ndarray]], int]) -> tuple[float, int, int, dict]:
    """One episode with only valid actions; ``choose(history of observations)`` picks the answer at the query."""
    obs, info = env.reset(seed=seed)
    history = [obs]
    total, steps = 0.0, 0
    while True:
        mask = env.action_masks()
        if obs[-1] == 1.0:  # the query: one of the two candidates
            action = choose(history)
            assert mask[action]
        else:
            action = int(np.flatnonzero(mask)[0])
        obs, reward, terminated, truncated, step_info = env.step(np.int64(action))
        history.append(obs)
        total, steps = total + float(reward), steps + 1
        if terminated or truncated:
            return total, steps, info["delay"], step_info


def _candidates(obs: np.ndarray) -> list[int]:
    return [int(a) for a in np.flatnonzero(obs[N_CUES + N_WAIT : 2 * N_CUES + N_WAIT])]


def _remembered_cue(history: list[np.ndarray], k: int | None = None) -> int:
    """The cue if one of the last ``k`` observations (all if ``None``) shows it, else the first candidate."""
    seen = history if k is None else history[-k:]
    for obs in seen:
        if obs[:N_CUES].any():
            return int(np.argmax(obs[:N_CUES]))
    return _candidates(history[-1])[0]


def test_fair_env_checks() -> None:
    check_env(gym.make("MaskedCueRecallFair-v0").unwrapped)
    sb3_check_env(FairMaskedCueRecallEnv(), warn=True)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), actions=st.lists(st.integers(0, N_CUES + N_WAIT - 1), min_size=1, max_size=60))
def test_fair_masks_are_what_the_observation_shows(seed: int, actions: list[int]) -> None:
    # Any actions, valid or not: the mask is a function of the observation at every step, and an invalid action
    # changes nothing but the reward (and the count that ends the episode at the 10th)
    env = FairMaskedCueRecallEnv(short_delays=(1, 12), long_delays=(20, 30))
    obs, _ = env.reset(seed=seed)
    invalid = 0
    for action in actions:
        mask = env.action_masks()
        np.testing.assert_array_equal(mask, mask_from_observation(obs, N_CUES, N_WAIT))
        assert mask.sum() == (2 if obs[-1] == 1.0 else 1)
        new_obs, reward, terminated, _, info = env.step(np.int64(action))
        assert info["invalid_action"] == (not mask[action])
        if not mask[action]:
            invalid += 1
            assert reward == -0.1
            np.testing.assert_array_equal(new_obs, obs)
            assert terminated == (invalid == 10)
        if terminated:
            break
        obs = new_obs


def test_fair_memoryless_optimum_by_enumeration_and_brute_force() -> None:
    # The query shows the candidates {cue, distractor}: cue uniform, distractor uniform among the other cues. Every
    # deterministic memoryless answer (a choice of one candidate for each of the 6 pairs) scores exactly 1/2, so the
    # best one does (and a stochastic one, a mixture of them); before the query the shown wait is free to take
    pairs = list(itertools.combinations(range(N_CUES), 2))
    outcomes = [
        (cue, other, 1.0 / (N_CUES * (N_CUES - 1))) for cue in range(N_CUES) for other in range(N_CUES) if other != cue
    ]
    values = []
    for choice in itertools.product((0, 1), repeat=len(pairs)):
        answer = {pair: pair[bit] for pair, bit in zip(pairs, choice, strict=True)}
        values.append(sum(p * (answer[(min(cue, other), max(cue, other))] == cue) for cue, other, p in outcomes))
    assert len(values) == 64
    assert max(values) == pytest.approx(0.5) and min(values) == pytest.approx(0.5)


def test_fair_returns_of_memoryless_frame_stack_and_memory_policies() -> None:
    env = FairMaskedCueRecallEnv()
    # The analytical values of the docstring
    assert env.frame_stack_optimum(1) == 0.5 and env.frame_stack_optimum(2) == 0.5
    assert env.frame_stack_optimum(16) == pytest.approx(0.875)
    assert env.frame_stack_optimum(142) == pytest.approx(1.0)
    assert sum(env.delay_probabilities().values()) == pytest.approx(1.0)
    n = 3000
    memoryless = [_play(env, seed, lambda h: _candidates(h[-1])[0]) for seed in range(n)]
    stacked = [_play(env, seed, lambda h: _remembered_cue(h, 16)) for seed in range(n)]
    memory = [_play(env, seed, _remembered_cue) for seed in range(n)]
    assert all(ret == 1.0 for ret, *_ in memory)
    for runs, expected in ((memoryless, 0.5), (stacked, 0.875)):
        returns = np.array([ret for ret, *_ in runs])
        assert abs(returns.mean() - expected) < 4 * returns.std() / np.sqrt(n)
    # Lengths: delay + 2 steps with valid actions only; a quarter of the delays (about) are long ones
    delays = np.array([delay for _, _, delay, _ in memory])
    assert all(steps == delay + 2 for _, steps, delay, _ in memory)
    assert set(delays) <= set(range(1, 13)) | set(range(130, 141))
    assert abs((delays >= 130).mean() - 0.25) < 0.05
    # A long delay puts the cue more than 128 steps (the default window with n_steps=128) before the query
    assert delays.max() + 1 > 128


def test_fair_seeding_is_deterministic() -> None:
    def trajectory(seed: int) -> list[np.ndarray]:
        env = FairMaskedCueRecallEnv()
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        rng = np.random.default_rng(0)
        for _ in range(50):
            obs, _, terminated, _, _ = env.step(np.int64(rng.integers(N_CUES + N_WAIT)))
            seen.append(obs)
            if terminated:
                break
        return seen

    for seed in (0, 1, 7):
        np.testing.assert_array_equal(np.array(trajectory(seed)), np.array(trajectory(seed)))
    # Different seeds, different episodes (cue, wait shown or delay differ for some pair)
    assert len({np.array(trajectory(seed)).tobytes() for seed in range(8)}) > 1


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_cues": 1}, "n_cues"),
        ({"n_wait": 0}, "n_wait"),
        ({"short_delays": (5, 2)}, "short_delays"),
        ({"long_delays": (-1, 2)}, "long_delays"),
        ({"long_probability": 1.5}, "long_probability"),
        ({"invalid_reward": 0.5}, "invalid_reward"),
        ({"max_invalid": 0}, "max_invalid"),
    ],
)
def test_fair_bad_arguments_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        FairMaskedCueRecallEnv(**kwargs)


def test_leduc_checks() -> None:
    check_env(gym.make("LeducMatch-v0").unwrapped)
    sb3_check_env(LeducMatchEnv(n_hands=2), warn=True)


def test_leduc_styles() -> None:
    # honest: raises strong, checks weak; calls a raise strong, folds weak. bluffer: the other way round; calls all
    king, jack, public_jack = 4, 0, 1
    assert is_strong(king, None) and not is_strong(jack, None) and is_strong(jack, public_jack)
    assert style_action("honest", king, None, facing_bet=False) == 2
    assert style_action("honest", jack, None, facing_bet=False) == 1
    assert style_action("honest", jack, None, facing_bet=True) == 0
    assert style_action("honest", jack, public_jack, facing_bet=True) == 1
    assert style_action("bluffer", jack, None, facing_bet=False) == 2
    assert style_action("bluffer", king, None, facing_bet=False) == 1
    assert all(style_action("bluffer", card, None, facing_bet=True) == 1 for card in range(6))
    with pytest.raises(ValueError, match="style"):
        style_action("maniac", 0, None, facing_bet=False)
    with pytest.raises(ValueError, match="private_card"):
        is_strong(6, None)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_leduc_steps_masks_and_episode_length(seed: int) -> None:
    env = LeducMatchEnv(n_hands=4)
    obs, info = env.reset(seed=seed)
    assert info["style"] in STYLES
    rng = np.random.default_rng(seed)
    steps, hand_starts = 0, 0
    while True:
        mask = env.action_masks()
        # The mask is the observation's last 3 numbers, and OpenSpiel's legal actions
        np.testing.assert_array_equal(mask, obs[-3:] > 0.5)
        np.testing.assert_array_equal(np.flatnonzero(mask), env._state.legal_actions())
        # A hand's first decision shows only the private card and the antes: nothing of earlier hands
        if obs[14] == 1.0 and obs[15] == 1.0 and not obs[8:14].any():
            hand_starts += 1
        obs, _, terminated, truncated, info = env.step(np.int64(rng.choice(np.flatnonzero(mask))))
        steps += 1
        assert not info["invalid_action"]
        if terminated or truncated:
            break
    # 1 to 4 decisions of player 0 a hand
    assert 4 <= steps <= 16 and hand_starts >= 1


def test_leduc_invalid_actions_and_seeding() -> None:
    env = LeducMatchEnv(n_hands=2)
    obs, _ = env.reset(seed=3)
    assert not env.action_masks()[0]  # player 0 opens: no bet to fold to
    for count in range(1, 11):
        new_obs, reward, terminated, _, info = env.step(np.int64(0))
        assert info["invalid_action"] and reward == -1.0 and terminated == (count == 10)
        np.testing.assert_array_equal(new_obs, obs)
    a, b = LeducMatchEnv(), LeducMatchEnv()
    assert a.reset(seed=5)[1] == b.reset(seed=5)[1]
    for _ in range(5):
        np.testing.assert_array_equal(a.step(np.int64(1))[0], b.step(np.int64(1))[0])
    with pytest.raises(ValueError, match="n_hands"):
        LeducMatchEnv(n_hands=0)


def test_leduc_bounds_with_and_without_memory() -> None:
    # Exact (OpenSpiel's best response): memoryless at most 1.60 chips a hand, knowing the style at most 2.15
    values = hand_values()
    assert values["honest"] == pytest.approx(0.8)
    assert values["bluffer"] == pytest.approx(3.5)
    assert values["mixture"] == pytest.approx(1.6)
    assert values["oracle"] == pytest.approx(2.15)
