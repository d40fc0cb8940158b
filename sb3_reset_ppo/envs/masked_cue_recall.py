import numpy as np
from gymnasium import spaces

from sb3_reset_ppo.envs.cue_recall import CueRecallEnv


def normalised_score(episode_return: float, n_cues: int = 4) -> float:
    """
    A :class:`MaskedCueRecallEnv` return (or mean return) on a scale where chance is 0 and perfect recall is 1:
    ``(episode_return - 1 / n_cues) / (1 - 1 / n_cues)``, negative with invalid actions.
    """
    if n_cues < 2:
        raise ValueError(f"n_cues must be at least 2, got {n_cues}")
    chance = 1.0 / n_cues
    return (episode_return - chance) / (1.0 - chance)


class MaskedCueRecallEnv(CueRecallEnv):
    """
    :class:`~sb3_reset_ppo.envs.cue_recall.CueRecallEnv` with invalid actions: memory and action masks both matter.

    The observations are ``CueRecallEnv``'s; the actions are ``0 .. n_cues - 1`` (answers) and ``n_cues ..
    n_cues + n_wait - 1`` (waits), and at each step :meth:`action_masks` says which are valid:

    - before the query: one wait action, drawn uniformly each step and shown only by the mask (reward 0).
    - at the query: the ``n_cues`` answers; the cue gives reward 1 (``info["is_success"]``), another 0; both end it.
    - an invalid action gives reward -1 and ends the episode (``info["invalid_action"]`` is ``True``).

    Returns and bounds: ``docs/api/envs.md``. The other parameters are ``CueRecallEnv``'s.

    :param n_wait: Number of wait actions, one of which is valid at each step before the query
    """

    invalid_reward = -1.0  # reward of an invalid action (which also ends the episode)

    def __init__(
        self, n_cues: int = 4, min_delay: int = 1, max_delay: int = 6, n_wait: int = 2, render_mode: str | None = None
    ) -> None:
        if n_wait < 1:
            raise ValueError(f"n_wait must be at least 1, got {n_wait}")
        super().__init__(n_cues, min_delay, max_delay, render_mode)
        self.n_wait = n_wait
        self.action_space = spaces.Discrete(n_cues + n_wait)
        self._valid_wait = n_cues

    def _is_query(self) -> bool:
        return self._t == self._delay + 1

    def _draw_wait(self) -> None:
        self._valid_wait = self.n_cues + int(self.np_random.integers(self.n_wait))

    def action_masks(self) -> np.ndarray:
        """The valid actions at the current step, bool ``(n_cues + n_wait,)`` (after an episode's end: its last step's)."""
        mask = np.zeros(self.n_cues + self.n_wait, dtype=bool)
        if self._is_query():
            mask[: self.n_cues] = True
        else:
            mask[self._valid_wait] = True
        return mask

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        self._draw_wait()
        return obs, info

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        chosen = int(action)
        if not 0 <= chosen < self.n_cues + self.n_wait:
            raise ValueError(f"action must be in [0, {self.n_cues + self.n_wait}), got {action}")
        if not self.action_masks()[chosen]:
            return self._obs(), self.invalid_reward, True, False, {"invalid_action": True, "is_success": False}
        if self._is_query():
            correct = chosen == self._cue
            return self._obs(), float(correct), True, False, {"invalid_action": False, "is_success": correct}
        self._t += 1
        self._draw_wait()
        return self._obs(), 0.0, False, False, {"invalid_action": False}
