"""
``MiniGridMemoryS7Flat-v0``: MiniGrid's ``MiniGrid-MemoryS7-v0`` with the agent's 7x7x3 view of object, colour and state
indices as ``float32``, not pixels (``minigrid`` is imported only when the env is made).
"""

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "MiniGridMemoryS7Flat-v0"


class _Float32View(gym.ObservationWrapper):
    """The agent's view as float32 indices."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, spaces.Box)
        self.observation_space = spaces.Box(0.0, float(box.high.max()), shape=box.shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation.astype(np.float32)


def make_memory_s7(**kwargs: Any) -> gym.Env:
    """Make ``MiniGrid-MemoryS7-v0`` with the agent's view only, as float32 (``kwargs`` go to ``gymnasium.make``)."""
    try:
        wrappers = importlib.import_module("minigrid.wrappers")  # importing minigrid registers its envs
    except ImportError as error:
        raise ImportError(f"{ENV_ID} needs the minigrid package: pip install minigrid") from error
    return _Float32View(wrappers.ImgObsWrapper(gym.make("MiniGrid-MemoryS7-v0", **kwargs)))


def register() -> None:
    """Register :data:`ENV_ID` (idempotent; minigrid is not imported)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point="sb3_reset_ppo.envs.minigrid_tasks:make_memory_s7")
