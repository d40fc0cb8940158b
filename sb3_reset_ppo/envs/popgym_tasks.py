"""
POPGym's memory tasks as ``Popgym<Task>-v0``: ``popgym.envs.<Task>()`` with a ``Tuple`` or ``MultiDiscrete`` observation
flattened to one-hot vectors and fresh info dicts (:class:`FreshInfo`); ``popgym`` is imported only when one is made.
"""

import copy
import importlib
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

# POPGym tasks registered as Popgym<Task>-v0: the memory tasks of the benchmark (Easy level)
TASKS = (
    "RepeatPreviousEasy",
    "RepeatFirstEasy",
    "AutoencodeEasy",
    "CountRecallEasy",
    "PositionOnlyCartPoleEasy",
    "NoisyPositionOnlyCartPoleEasy",
)


class FreshInfo(gym.Wrapper[Any, Any, Any, Any]):
    """
    Return a new info dict, sharing no object with an earlier one, from every ``reset`` and ``step``.

    POPGym's CountRecall returns its running counts array itself in every info dict, so an info kept by the user
    (a ``Monitor``, a callback, gymnasium's ``check_env``) changes with the steps after it.
    """

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        return observation, copy.deepcopy(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, copy.deepcopy(info)


def make_popgym(task: str, **kwargs: Any) -> gym.Env:
    """
    Make the POPGym task ``task`` (a class name of ``popgym.envs``), with a ``Tuple`` or ``MultiDiscrete``
    observation flattened and fresh info dicts (:class:`FreshInfo`).

    :param task: E.g. ``"RepeatPreviousEasy"``
    :param kwargs: Passed to the task's constructor
    """
    try:
        envs = importlib.import_module("popgym.envs")
    except ImportError as error:
        raise ImportError(f"Popgym{task}-v0 needs the popgym package: pip install popgym") from error
    kwargs.pop("render_mode", None)  # POPGym tasks do not render; make_vec_env asks for rgb_array
    env: gym.Env = FreshInfo(getattr(envs, task)(**kwargs))
    if isinstance(env.observation_space, (spaces.Tuple, spaces.MultiDiscrete)):
        env = gym.wrappers.FlattenObservation(env)
    return env


def register() -> None:
    """Register ``Popgym<Task>-v0`` for every task of :data:`TASKS` (idempotent; popgym is not imported)."""
    for task in TASKS:
        env_id = f"Popgym{task}-v0"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point="sb3_reset_ppo.envs.popgym_tasks:make_popgym", kwargs={"task": task})
