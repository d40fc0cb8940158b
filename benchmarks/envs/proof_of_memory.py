"""
The proof-of-memory task of CleanRL's ``ppo_trxl`` (``cleanrl/ppo_trxl/pom_env.py``, ``PoMEnv``, registered there as
``ProofofMemory-v0``) and of MarcoMeter's episodic-transformer-memory-ppo (``PocMemoryEnv``), written here from its
rules (Pleines et al., "Memory Gym", arXiv 2309.17207, whose code these are).
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ProofOfMemoryEnv(gym.Env[np.ndarray, np.int64]):
    """
    Walk to the rewarding end of a short corridor whose ends are shown only at the start.

    The agent stands on a corridor of cells ``-1, -0.8, ..., 0.8, 1`` (steps of 0.2), starting on one of
    ``-0.4, -0.2, 0, 0.2, 0.4`` drawn uniformly. One end is rewarding, the other punishing, drawn each episode. The
    observation is ``[left end, position, right end]``: the ends as +1 (rewarding) or -1 (punishing) in the first
    observation and in those returned by the first two steps, during which the agent cannot move; 0 afterwards.
    From the third step on, action 1 moves right and action 0 left. Reaching an end ends the episode with reward
    ``+1.6`` at the rewarding end and ``-1.6`` at the punishing one (as in the reference: 1 plus the time penalty of
    6 steps); every other moving step costs 0.1. The registered id cuts episodes at 16 steps (the reference's limit),
    so a walk that never reaches an end returns -1.4.

    Optimal return 1.2 on average (remember the rewarding end and walk to it: 1.7 - 0.1 x the 5 cells on average to
    walk); a policy without memory of the first observations can only guess, -0.4 on average.

    Differences from the reference, none of which changes the rules: the start and the ends are drawn from the env's
    own generator (``reset(seed=...)`` makes episodes reproducible; the reference draws from numpy's global one), no
    ``info`` entries (SB3's ``Monitor`` records returns and lengths), no rendering.
    """

    # The reference's constants: cell width, time penalty per moving step, steps with the ends shown and no move
    STEP_SIZE = 0.2
    TIME_PENALTY = 0.1
    SHOW_STEPS = 2
    STARTS = (-0.4, -0.2, 0.0, 0.2, 0.4)
    # Reaching an end: 1 plus the time penalty of the int(1 / STEP_SIZE) + 1 = 6 steps the reference names its
    # minimum
    END_REWARD = 1.0 + (int(1.0 / STEP_SIZE) + 1) * TIME_PENALTY

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._goals = np.zeros(2, dtype=np.float32)
        # The position in cells from the centre (-5 .. 5): integers, so that no rounding decides when an end is reached
        self._cell = 0
        self._steps = 0

    @property
    def position(self) -> float:
        """The agent's position on the corridor, ``-1`` to ``1``."""
        return round(self._cell * self.STEP_SIZE, 2)

    def _obs(self, show: bool) -> np.ndarray:
        left, right = (self._goals[0], self._goals[1]) if show else (0.0, 0.0)
        return np.array([left, self.position, right], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._cell = int(self.np_random.integers(-2, 3))
        self._goals = np.array([1.0, -1.0] if self.np_random.integers(2) else [-1.0, 1.0], dtype=np.float32)
        self._steps = 0
        return self._obs(show=True), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._steps += 1
        if self._steps <= self.SHOW_STEPS:  # frozen, the ends still shown
            return self._obs(show=True), 0.0, False, False, {}
        self._cell += 1 if int(action) == 1 else -1
        ends = int(1.0 / self.STEP_SIZE)
        if abs(self._cell) == ends:
            goal = self._goals[0] if self._cell < 0 else self._goals[1]
            return self._obs(show=False), float(goal) * self.END_REWARD, True, False, {}
        return self._obs(show=False), -self.TIME_PENALTY, False, False, {}
