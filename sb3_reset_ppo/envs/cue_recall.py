import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Rendering: "rgb_array" natively; gymnasium adds "human" (a pygame window) from it, at this frame rate
METADATA = {"render_modes": ["rgb_array"], "render_fps": 4}


def check_render_mode(render_mode: str | None) -> str | None:
    """Return ``render_mode``, or raise a ``ValueError`` unless it is ``None`` or ``"rgb_array"``."""
    if render_mode not in (None, "rgb_array"):
        raise ValueError(
            f"render_mode must be None or 'rgb_array' (gymnasium.make(..., render_mode='human') wraps the latter "
            f"in a window), got {render_mode!r}"
        )
    return render_mode


def row_image(obs: np.ndarray) -> np.ndarray:
    """A vector observation as a row of gray pixels, 8x8 each: ``(n,) -> (8, 8 * n, 3)`` uint8."""
    row = np.repeat(obs * 255, 8).astype(np.uint8)
    return np.repeat(row[None, :, None], 8, axis=0).repeat(3, axis=2)


class CueRecallEnv(gym.Env[np.ndarray, np.int64]):
    """
    Remember a cue shown at the first step of the episode and name it when asked.

    The first observation shows one of ``n_cues`` cues (one-hot), the next ``delay`` (uniform in ``[min_delay,
    max_delay]``) are blank, then a query (last component 1) asks for the cue: naming it gives reward 1 and ends the
    episode; actions at other steps have no effect. Returns and bounds: ``docs/api/envs.md``.

    :param n_cues: Number of distinct cues (and actions)
    :param min_delay: Shortest number of blank steps between cue and query
    :param max_delay: Longest number of blank steps between cue and query
    :param render_mode: ``None`` or ``"rgb_array"`` (a row of gray pixels; ``gymnasium.make`` adds ``"human"``)
    """

    metadata = METADATA

    def __init__(self, n_cues: int = 4, min_delay: int = 1, max_delay: int = 6, render_mode: str | None = None) -> None:
        if n_cues < 2:
            raise ValueError(f"n_cues must be at least 2, got {n_cues}")
        if not 0 <= min_delay <= max_delay:
            raise ValueError(f"need 0 <= min_delay <= max_delay, got min_delay={min_delay}, max_delay={max_delay}")
        self.render_mode = check_render_mode(render_mode)
        self.n_cues = n_cues
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_cues + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_cues)
        self._cue = 0
        self._delay = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n_cues + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        elif self._t == self._delay + 1:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.n_cues))
        self._delay = int(self.np_random.integers(self.min_delay, self.max_delay + 1))
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._t == self._delay + 1:
            reward = float(int(action) == self._cue)
            return self._obs(), reward, True, False, {}
        self._t += 1
        return self._obs(), 0.0, False, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return row_image(self._obs())


class CueRecallImageEnv(CueRecallEnv):
    """
    :class:`CueRecallEnv` with 64x64 grayscale image observations (for ``CnnLstmPolicy``).

    The cue is a bright 16x16 square in one of ``n_cues`` positions; blank steps are black frames; the
    query frame has a bright border. The parameters are :class:`CueRecallEnv`'s, with at most 16 cues.
    """

    size = 64

    def __init__(self, n_cues: int = 4, min_delay: int = 1, max_delay: int = 6, render_mode: str | None = None) -> None:
        if not 2 <= n_cues <= 16:
            raise ValueError(f"n_cues must be between 2 and 16 for images, got {n_cues}")
        super().__init__(n_cues, min_delay, max_delay, render_mode)
        self.observation_space = spaces.Box(0, 255, shape=(self.size, self.size, 1), dtype=np.uint8)
        # (n_cues + 2, 64, 64, 1): one frame per cue, the blank frame, the query frame
        self._frames = np.zeros((n_cues + 2, self.size, self.size, 1), dtype=np.uint8)
        for cue in range(n_cues):
            row, col = divmod(cue, 4)
            self._frames[cue, row * 16 : row * 16 + 16, col * 16 : col * 16 + 16] = 255
        self._frames[-1, :2], self._frames[-1, -2:], self._frames[-1, :, :2], self._frames[-1, :, -2:] = 255, 255, 255, 255

    def _obs(self) -> np.ndarray:
        if self._t == 0:
            return self._frames[self._cue].copy()
        if self._t == self._delay + 1:
            return self._frames[-1].copy()
        return self._frames[-2].copy()

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.repeat(self._obs(), 3, axis=2)
