"""
``predict`` of ResetPPO's policies: with ``Dict`` observations the number of envs is read key by key; a state of
the wrong shape is refused naming the shape expected.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers import RandomEpisodeEnv, small_reset_ppo
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_reset_ppo import ResetPPO

# Two spaces, so that reversing the keys changes the first key's number of dimensions both ways:
# a grid then a flag, and a flag then a grid (gymnasium sorts a Dict's keys)
SPACES = {
    "grid_first": spaces.Dict({"a_grid": spaces.Box(-1.0, 1.0, shape=(2, 3)), "b_flag": spaces.Discrete(3)}),
    "flag_first": spaces.Dict({"a_flag": spaces.Discrete(3), "b_grid": spaces.Box(-1.0, 1.0, shape=(2, 3))}),
}


def _env(observation_space: spaces.Dict) -> gym.Env:
    env = RandomEpisodeEnv()
    env.observation_space = observation_space
    return env


def _model(policy: str, observation_space: spaces.Dict) -> ResetPPO:
    env = DummyVecEnv([lambda: _env(observation_space)])
    kwargs = {"lstm_hidden_size": 4, "net_arch": [4]}
    return ResetPPO(policy, env, n_steps=8, batch_size=8, seed=0, policy_kwargs=kwargs)


def _observation(observation_space: spaces.Dict, n_envs: int | None, seed: int) -> dict[str, np.ndarray]:
    """``n_envs`` observations (``None``: one, without the batch dimension), keys in the space's order."""
    observation_space.seed(seed)
    samples = [observation_space.sample() for _ in range(n_envs or 1)]
    batched = {key: np.stack([sample[key] for sample in samples]) for key in observation_space.spaces}
    return batched if n_envs is not None else {key: value[0] for key, value in batched.items()}


@pytest.mark.parametrize("space_name", sorted(SPACES))
@pytest.mark.parametrize("n_envs", [None, 2])
@pytest.mark.parametrize("cell,n_states", [("Lstm", 2), ("Gru", 1)])
def test_predict_reads_n_envs_of_a_dict_observation_key_by_key(
    space_name: str, n_envs: int | None, cell: str, n_states: int
) -> None:
    observation_space = SPACES[space_name]
    model = _model(f"MultiInput{cell}Policy", observation_space)
    in_order = _observation(observation_space, n_envs, seed=1)
    reversed_keys = {key: in_order[key] for key in reversed(list(in_order))}
    assert list(reversed_keys) != list(observation_space.spaces)
    # A non-zero memory, so that the action depends on it
    rng = np.random.default_rng(0)
    state = tuple(rng.normal(size=(1, n_envs or 1, 4)).astype(np.float32) for _ in range(n_states))
    expected_action, expected_state = model.predict(in_order, state=state, deterministic=True)
    action, new_state = model.predict(reversed_keys, state=state, deterministic=True)
    np.testing.assert_array_equal(action, expected_action)
    assert expected_state is not None and new_state is not None and len(new_state) == n_states
    for got, expected in zip(new_state, expected_state, strict=True):
        np.testing.assert_array_equal(got, expected)
    assert np.shape(action) == ((n_envs,) if n_envs is not None else ())
    # The state of a wrong number of envs is still refused, naming the number read from the observation
    wrong = tuple(np.zeros((1, 3, 4), dtype=np.float32) for _ in range(n_states))
    with pytest.raises(ValueError, match=rf"for {n_envs or 1} observation"):
        model.predict(reversed_keys, state=wrong)


@pytest.mark.parametrize("cell", ["Lstm", "Gru"])
def test_predict_refuses_dict_keys_of_different_numbers_of_envs(cell: str) -> None:
    observation_space = SPACES["grid_first"]
    model = _model(f"MultiInput{cell}Policy", observation_space)
    observation: dict[str, np.ndarray] = {
        "a_grid": np.zeros((2, 2, 3), dtype=np.float32),
        "b_flag": np.zeros(3, dtype=np.int64),
    }
    with pytest.raises(ValueError, match=r"different numbers of observations \(n_envs\): \{'a_grid': 2, 'b_flag': 3\}"):
        model.predict(observation)


@pytest.mark.parametrize("cell,n_states", [("Lstm", 2), ("Gru", 1)])
def test_predict_rejects_a_wrong_state_with_a_value_error(cell: str, n_states: int) -> None:
    model = small_reset_ppo(policy=f"Mlp{cell}Policy", n_envs=3)
    observations = model.get_env().reset()  # type: ignore[union-attr]
    layers, hidden = 1, 8
    good = tuple(np.zeros((layers, 3, hidden), dtype=np.float32) for _ in range(n_states))
    model.predict(observations, state=good)  # type: ignore[arg-type]
    wrong_envs = tuple(np.zeros((layers, 2, hidden), dtype=np.float32) for _ in range(n_states))
    wrong_length = tuple(np.zeros((layers, 3, hidden), dtype=np.float32) for _ in range(3 - n_states))
    for state in (wrong_envs, wrong_length, np.zeros((layers, 3, hidden))):
        with pytest.raises(ValueError, match=r"state"):
            model.predict(observations, state=state)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(1, 3, 8\) for 3 observation"):
        model.predict(observations, state=wrong_envs)  # type: ignore[arg-type]
