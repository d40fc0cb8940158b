"""
``MaskedCueRecallFair-v0``: a masked memory task whose masks show nothing the observation does not.

The first masked task (:class:`~sb3_reset_ppo.envs.masked_cue_recall.MaskedCueRecallEnv`) says which wait action is
valid only through the mask, so a policy without masks cannot know it from its observation, and before its query
every step of a masked policy is forced. Here every mask is a function of the observation it comes with
(:func:`mask_from_observation`), and the query asks the policy to choose between two candidates, one of them the
cue, so a masked policy without memory has a real choice and a known optimum (1/2).
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from benchmarks.envs import check_invalid_actions
from sb3_reset_ppo.envs.cue_recall import METADATA, check_render_mode, row_image


def mask_from_observation(obs: np.ndarray, n_cues: int, n_wait: int) -> np.ndarray:
    """
    The valid actions that a :class:`FairMaskedCueRecallEnv` observation shows.

    :param obs: An observation, shape ``(2 * n_cues + n_wait + 1,)``
    :param n_cues: The env's number of cues
    :param n_wait: The env's number of wait actions
    :return: A bool array of shape ``(n_cues + n_wait,)``: the answers shown as candidates, then the wait shown
    """
    if obs.shape != (2 * n_cues + n_wait + 1,):
        raise ValueError(f"obs must have shape ({2 * n_cues + n_wait + 1},), got {obs.shape}")
    candidates = obs[n_cues + n_wait : 2 * n_cues + n_wait] > 0.5
    wait = obs[n_cues : n_cues + n_wait] > 0.5
    return np.concatenate([candidates, wait])


class FairMaskedCueRecallEnv(gym.Env[np.ndarray, np.int64]):
    """
    Remember a cue across a delay that is sometimes longer than ResetPPO's default window, with action masks that
    depend only on the current observation.

    Actions: ``0 .. n_cues - 1`` answer, ``n_cues .. n_cues + n_wait - 1`` wait. Observations have
    ``2 * n_cues + n_wait + 1`` components: the cue (one-hot, first step only), the valid wait action (one-hot,
    every step before the query), the two candidate answers (two ones, query step only), and a query flag (last
    component). The mask (:meth:`action_masks`) is exactly what the observation shows
    (:func:`mask_from_observation`): the shown wait before the query, the two candidates at the query.

    An episode: the cue step (``t = 0``), ``delay`` blank steps, the query (``t = delay + 1``). ``delay`` is drawn
    each episode: with probability ``long_probability`` uniformly from ``long_delays`` (both ends included), else
    from ``short_delays``; a long delay (the default) puts the cue more than ResetPPO's default window before
    the query. At the query the candidates are the cue and a distractor
    drawn uniformly from the other cues; naming the cue gives reward 1, the distractor 0, and either ends the
    episode (``info["is_success"]`` says which). The valid wait gives reward 0 and the episode goes on (the wait
    shown at the next step is drawn anew).

    An invalid action (one the mask excludes) gives reward ``invalid_reward`` and changes nothing else: the same
    observation and mask come back and the step is taken again (``info["invalid_action"]`` is ``True``); the
    ``max_invalid``-th invalid action of an episode ends it, so a return is at least
    ``max_invalid * invalid_reward``.

    Optimal return 1.0, memoryless optimum 1/2, with the last ``k`` observations :meth:`frame_stack_optimum`
    (derivations: ``docs/api/envs.md``).

    :param n_cues: Number of distinct cues (and answer actions), at least 2
    :param n_wait: Number of wait actions, one of which is valid (and shown) at each step before the query
    :param short_delays: ``(low, high)``: the range of the short delays (blank steps)
    :param long_delays: ``(low, high)``: the range of the long delays
    :param long_probability: Probability that an episode's delay is a long one, in ``[0, 1]``
    :param invalid_reward: Reward of an invalid action (the step is then taken again), at most 0
    :param max_invalid: The invalid action that ends the episode (its number in the episode), at least 1
    :param render_mode: ``None`` or ``"rgb_array"`` (the observation as a row of gray pixels)
    """

    metadata = METADATA

    def __init__(
        self,
        n_cues: int = 4,
        n_wait: int = 2,
        short_delays: tuple[int, int] = (1, 12),
        long_delays: tuple[int, int] = (130, 140),
        long_probability: float = 0.25,
        invalid_reward: float = -0.1,
        max_invalid: int = 10,
        render_mode: str | None = None,
    ) -> None:
        if n_cues < 2:
            raise ValueError(f"n_cues must be at least 2, got {n_cues}")
        if n_wait < 1:
            raise ValueError(f"n_wait must be at least 1, got {n_wait}")
        for name, (low, high) in (("short_delays", short_delays), ("long_delays", long_delays)):
            if not 0 <= low <= high:
                raise ValueError(f"{name} must be (low, high) with 0 <= low <= high, got {(low, high)}")
        if not 0.0 <= long_probability <= 1.0:
            raise ValueError(f"long_probability must be in [0, 1], got {long_probability}")
        check_invalid_actions(invalid_reward, max_invalid)
        self.render_mode = check_render_mode(render_mode)
        self.n_cues, self.n_wait = n_cues, n_wait
        self.short_delays, self.long_delays = (
            (int(short_delays[0]), int(short_delays[1])),
            (
                int(long_delays[0]),
                int(long_delays[1]),
            ),
        )
        self.long_probability = float(long_probability)
        self.invalid_reward = float(invalid_reward)
        self.max_invalid = int(max_invalid)
        self._invalid = 0  # invalid actions so far in the episode
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2 * n_cues + n_wait + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_cues + n_wait)
        self._cue = self._distractor = self._delay = self._t = 0
        self._wait = 0  # index of the valid wait action among the n_wait

    def delay_probabilities(self) -> dict[int, float]:
        """
        The distribution of an episode's delay.

        :return: ``{delay: probability}`` over every delay that can occur
        """
        probabilities: dict[int, float] = {}
        for (low, high), weight in (
            (self.short_delays, 1.0 - self.long_probability),
            (self.long_delays, self.long_probability),
        ):
            for delay in range(low, high + 1):
                probabilities[delay] = probabilities.get(delay, 0.0) + weight / (high - low + 1)
        return probabilities

    def frame_stack_optimum(self, k: int) -> float:
        """
        The best expected return of a policy that sees the last ``k`` observations (the query's and the ``k - 1``
        before it): it sees the cue when ``delay + 2 <= k``, and otherwise does no better than a memoryless policy.

        :param k: Observations seen, at least 1 (1: memoryless)
        :return: ``P(delay <= k - 2) + P(delay > k - 2) / 2``
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        seen = sum(p for delay, p in self.delay_probabilities().items() if delay + 2 <= k)
        return seen + (1.0 - seen) / 2

    def _is_query(self) -> bool:
        return self._t == self._delay + 1

    def _obs(self) -> np.ndarray:
        obs = np.zeros(2 * self.n_cues + self.n_wait + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        if self._is_query():
            obs[2 * self.n_cues + self.n_wait] = 1.0
            obs[self.n_cues + self.n_wait + self._cue] = 1.0
            obs[self.n_cues + self.n_wait + self._distractor] = 1.0
        else:
            obs[self.n_cues + self._wait] = 1.0
        return obs

    def action_masks(self) -> np.ndarray:
        """
        The valid actions at the current step (after the end of an episode: those of its last step), which are
        what the current observation shows (:func:`mask_from_observation`).

        :return: A bool array of shape ``(n_cues + n_wait,)``, ``True`` where the action is valid
        """
        mask = np.zeros(self.n_cues + self.n_wait, dtype=bool)
        if self._is_query():
            mask[[self._cue, self._distractor]] = True
        else:
            mask[self.n_cues + self._wait] = True
        return mask

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        self._cue = int(rng.integers(self.n_cues))
        self._distractor = (self._cue + 1 + int(rng.integers(self.n_cues - 1))) % self.n_cues
        low, high = self.long_delays if rng.random() < self.long_probability else self.short_delays
        self._delay = int(rng.integers(low, high + 1))
        self._t = self._invalid = 0
        self._wait = int(rng.integers(self.n_wait))
        return self._obs(), {"delay": self._delay}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        chosen = int(action)
        if not 0 <= chosen < self.n_cues + self.n_wait:
            raise ValueError(f"action must be in [0, {self.n_cues + self.n_wait}), got {action}")
        if not self.action_masks()[chosen]:
            self._invalid += 1
            ended = self._invalid >= self.max_invalid
            return (
                self._obs(),
                self.invalid_reward,
                ended,
                False,
                {"invalid_action": True, "is_success": False, "delay": self._delay},
            )
        if self._is_query():
            correct = chosen == self._cue
            info = {"invalid_action": False, "is_success": correct, "delay": self._delay}
            return self._obs(), float(correct), True, False, info
        self._t += 1
        self._wait = int(self.np_random.integers(self.n_wait))
        return self._obs(), 0.0, False, False, {"invalid_action": False, "delay": self._delay}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return row_image(self._obs())
