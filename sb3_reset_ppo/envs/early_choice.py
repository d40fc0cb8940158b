import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_reset_ppo.envs.cue_recall import METADATA, check_render_mode, row_image


class EarlyChoiceEnv(gym.Env[np.ndarray, np.int64]):
    """
    The opening decisions of each episode carry most of the return.

    The first ``n_decisions`` steps each show a target (one-hot of ``n_choices``); choosing it gives reward 1. Then
    come ``filler`` steps (uniform in ``[min_filler, max_filler]``, the last component set) where action 0 gives 0.01,
    the others 0: most of the return is earned at the steps that masking under-weights (:attr:`optimal_return`).

    :param n_choices: Number of targets (and actions)
    :param n_decisions: Decision steps at the start of each episode
    :param min_filler: Fewest filler steps
    :param max_filler: Most filler steps
    :param render_mode: ``None`` or ``"rgb_array"`` (the observation as a row of gray pixels)
    """

    metadata = METADATA

    def __init__(
        self,
        n_choices: int = 4,
        n_decisions: int = 3,
        min_filler: int = 10,
        max_filler: int = 40,
        render_mode: str | None = None,
    ) -> None:
        if n_choices < 2 or n_decisions < 1 or not 0 <= min_filler <= max_filler:
            raise ValueError(
                "need n_choices >= 2, n_decisions >= 1 and 0 <= min_filler <= max_filler, got "
                f"n_choices={n_choices}, n_decisions={n_decisions}, min_filler={min_filler}, max_filler={max_filler}"
            )
        self.render_mode = check_render_mode(render_mode)
        self.n_choices = n_choices
        self.n_decisions = n_decisions
        self.min_filler = min_filler
        self.max_filler = max_filler
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_choices + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_choices)
        self._targets = np.zeros(n_decisions, dtype=np.int64)
        self._length = 0
        self._t = 0

    @property
    def optimal_return(self) -> float:
        """Expected return of the best policy."""
        return self.n_decisions + 0.01 * (self.min_filler + self.max_filler) / 2

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n_choices + 1, dtype=np.float32)
        if self._t < self.n_decisions:
            obs[self._targets[self._t]] = 1.0
        else:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._targets = self.np_random.integers(self.n_choices, size=self.n_decisions)
        self._length = self.n_decisions + int(self.np_random.integers(self.min_filler, self.max_filler + 1))
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._t < self.n_decisions:
            reward = float(int(action) == self._targets[self._t])
        else:
            reward = 0.01 if int(action) == 0 else 0.0
        self._t += 1
        return self._obs(), reward, self._t >= self._length, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return row_image(self._obs())
