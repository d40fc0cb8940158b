"""
The studies' own tasks, registered with gymnasium on import under the ids their stored runs name.

- ``MaskedCueRecallFair-v0``: a masked memory task whose masks show only what the observation shows, with delays
  longer than the default window on a quarter of the episodes and a memoryless optimum of 1/2
  (:class:`~benchmarks.envs.fair_masked_cue_recall.FairMaskedCueRecallEnv`).
- ``LeducMatch-v0``: a match of OpenSpiel's Leduc poker against an opponent of unknown style, observed per step,
  with masks (``open-spiel``; :mod:`benchmarks.envs.leduc_match`).

Both are the fair masking study's (``benchmarks/studies/masking_fair/``).
"""

import gymnasium as gym


def check_invalid_actions(invalid_reward: float, max_invalid: int) -> None:
    """Raise a ``ValueError`` unless ``invalid_reward`` is at most 0 and ``max_invalid`` at least 1."""
    if invalid_reward > 0:
        raise ValueError(f"invalid_reward must be at most 0, got {invalid_reward}")
    if max_invalid < 1:
        raise ValueError(f"max_invalid must be at least 1, got {max_invalid}")


# Longer limits: episodes of up to 142 valid steps; 8 hands of at most 4 decisions each, and invalid attempts
_TASKS = {
    "MaskedCueRecallFair-v0": ("benchmarks.envs.fair_masked_cue_recall:FairMaskedCueRecallEnv", 600),
    "LeducMatch-v0": ("benchmarks.envs.leduc_match:LeducMatchEnv", 200),
}
for _env_id, (_entry_point, _limit) in _TASKS.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, max_episode_steps=_limit)
