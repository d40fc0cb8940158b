"""Memory tasks: gymnasium's checks, their documented optimal and random returns, their speed, and fresh info dicts."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sb3_reset_ppo.envs  # noqa: F401  (registers the tasks)
from sb3_reset_ppo.envs import CueRecallEnv, EarlyChoiceEnv
from sb3_reset_ppo.envs.popgym_tasks import TASKS as POPGYM_TASKS

TASKS = ["CueRecall-v0", "CueRecallLong-v0", "CueRecallImage-v0", "EarlyChoice-v0"]


@pytest.mark.parametrize("env_id", TASKS)
def test_check_env(env_id: str) -> None:
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", [f"Popgym{task}-v0" for task in POPGYM_TASKS])
def test_check_env_popgym(env_id: str) -> None:
    pytest.importorskip("popgym")
    import warnings

    # The env as gym.make gives it (POPGym's own CountRecall shares its info dicts between calls: the wrapper does not)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version")
        check_env(gym.make(env_id), skip_render_check=True)


def _cue_recall_scripted(env: gym.Env, n_episodes: int, remember: bool) -> float:
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, CueRecallEnv)
    total = 0.0
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=episode)
        # The cue is visible only in the first observation (as a one-hot or as a bright square)
        cue = unwrapped._cue if remember else 0
        assert obs.any()
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(cue)
            total += float(reward)
            done = terminated or truncated
    return total / n_episodes


@pytest.mark.parametrize("env_id", ["CueRecall-v0", "CueRecallLong-v0", "CueRecallImage-v0"])
def test_cue_recall_returns(env_id: str) -> None:
    env = gym.make(env_id)
    # A policy that remembers the cue reaches the documented optimum, 1.0
    assert _cue_recall_scripted(env, 200, remember=True) == 1.0
    # A constant answer scores like a random policy, 1 / n_cues = 0.25
    assert _cue_recall_scripted(env, 2000, remember=False) == pytest.approx(0.25, abs=0.03)


def test_cue_recall_long_outlasts_the_window() -> None:
    env = gym.make("CueRecallLong-v0")
    lengths = []
    for episode in range(50):
        env.reset(seed=episode)
        length, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            length += 1
            done = terminated or truncated
        lengths.append(length)
    assert min(lengths) > 16 and max(lengths) <= 42 and len(set(lengths)) > 5


def test_early_choice_returns() -> None:
    env = gym.make("EarlyChoice-v0")
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, EarlyChoiceEnv)
    rng = np.random.default_rng(0)
    optimal, random_total, first_steps = 0.0, 0.0, 0.0
    n_episodes = 2000
    for episode in range(n_episodes):
        for policy in ("optimal", "random"):
            obs, _ = env.reset(seed=episode)
            done, t = False, 0
            while not done:
                action = int(np.argmax(obs[:-1])) if obs[-1] == 0 else 0
                if policy == "random":
                    action = int(rng.integers(4))
                obs, reward, terminated, truncated, _ = env.step(action)
                if policy == "optimal":
                    optimal += float(reward)
                    first_steps += float(reward) if t < 3 else 0.0
                else:
                    random_total += float(reward)
                done = terminated or truncated
                t += 1
    assert optimal / n_episodes == pytest.approx(unwrapped.optimal_return, abs=0.01)
    assert random_total / n_episodes == pytest.approx(unwrapped.optimal_return / 4, abs=0.05)
    # Most of the return comes from the first steps
    assert first_steps / optimal > 0.9


@pytest.mark.parametrize("env_id", ["CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "CueRecallImage-v0"])
def test_tasks_render_as_sb3_makes_them_without_warnings(env_id: str) -> None:
    import warnings

    from stable_baselines3.common.env_util import make_vec_env

    # make_vec_env asks for render_mode="rgb_array": every task supports it, so gymnasium does not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = make_vec_env(env_id, n_envs=1, seed=0)
        env.reset()
        frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3 and frame.max() > 0
    # gymnasium's window for render_mode="human" needs the frame rate
    assert gym.spec(env_id).entry_point and gym.make(env_id).metadata["render_fps"] > 0


@pytest.mark.parametrize("env_id", [f"Popgym{task}-v0" for task in POPGYM_TASKS])
def test_popgym_tasks_train_through_sb3(env_id: str) -> None:
    pytest.importorskip("popgym")
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    env = make_vec_env(env_id, n_envs=2, seed=0)
    # Tuple (Autoencode) and MultiDiscrete (CountRecall) observations are flattened to one-hot vectors
    assert not isinstance(env.observation_space, (gym.spaces.Tuple, gym.spaces.MultiDiscrete))
    model = ResetPPO("MlpLstmPolicy", env, n_steps=32, batch_size=64, window_size=8, policy_kwargs={"lstm_hidden_size": 8})
    model.learn(128)
    assert model.num_timesteps == 128


def test_minigrid_memory_task_trains_through_sb3() -> None:
    pytest.importorskip("minigrid")
    import warnings

    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no render_mode or re-registration warnings
        env = make_vec_env("MiniGridMemoryS7Flat-v0", n_envs=2, seed=0)
    # The agent's 7x7x3 view of object, colour and state indices, as float32 (not an image SB3 would scale)
    assert env.observation_space.shape == (7, 7, 3) and env.observation_space.dtype == np.float32
    observation = env.reset()
    assert isinstance(observation, np.ndarray) and 0 < observation.max() <= 10
    model = ResetPPO("MlpLstmPolicy", env, n_steps=32, batch_size=64, window_size=8, policy_kwargs={"lstm_hidden_size": 8})
    model.learn(128)
    assert model.num_timesteps == 128


@pytest.mark.parametrize("task", POPGYM_TASKS)
def test_popgym_infos_are_fresh_objects_on_every_call(task: str) -> None:
    pytest.importorskip("popgym")
    env = gym.make(f"Popgym{task}-v0")
    _, reset_info = env.reset(seed=0)
    kept = {key: np.array(value, copy=True) for key, value in reset_info.items()}
    step_infos = [env.step(env.action_space.sample())[4] for _ in range(2)]
    infos = [reset_info, *step_infos]
    for i, info in enumerate(infos):
        for other in infos[i + 1 :]:
            assert info is not other
            assert all(info[key] is not other[key] for key in info.keys() & other.keys())
    # What reset returned is not changed by the steps after it (CountRecall's counts were)
    assert all(np.array_equal(reset_info[key], value) for key, value in kept.items())
