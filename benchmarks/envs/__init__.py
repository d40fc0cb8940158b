"""
The studies' own tasks, registered with gymnasium on import under the ids their stored runs name.

- ``MaskedCueRecallFair-v0``: a masked memory task whose masks show only what the observation shows, with delays
  longer than the default window on a quarter of the episodes and a memoryless optimum of 1/2
  (:class:`~benchmarks.envs.fair_masked_cue_recall.FairMaskedCueRecallEnv`).
- ``LeducMatch-v0``: a match of OpenSpiel's Leduc poker against an opponent of unknown style, observed per step,
  with masks (``open-spiel``; :mod:`benchmarks.envs.leduc_match`).

Both are the fair masking study's (``benchmarks/studies/masking_fair/``). The attention study's
(``benchmarks/studies/attention/``):

- ``ProofOfMemory-v0``: the proof-of-memory task of CleanRL's ``ppo_trxl`` (its ``ProofofMemory-v0``), cut at 16
  steps as there (:class:`~benchmarks.envs.proof_of_memory.ProofOfMemoryEnv`).
- ``PopgymRepeatPreviousMedium-v0``: POPGym's ``RepeatPreviousMedium`` (name the suit of the card shown 31 steps
  before the current one, its k = 32), made as the package makes its ``Popgym<Task>-v0`` tasks (``popgym``;
  :func:`sb3_reset_ppo.envs.popgym_tasks.make_popgym`).
"""

from typing import Any

import gymnasium as gym


def check_invalid_actions(invalid_reward: float, max_invalid: int) -> None:
    """Raise a ``ValueError`` unless ``invalid_reward`` is at most 0 and ``max_invalid`` at least 1."""
    if invalid_reward > 0:
        raise ValueError(f"invalid_reward must be at most 0, got {invalid_reward}")
    if max_invalid < 1:
        raise ValueError(f"max_invalid must be at least 1, got {max_invalid}")


# Env id -> entry point, its keyword arguments and its step limit. The masking tasks' longer limits: episodes of up to
# 142 valid steps; 8 hands of at most 4 decisions each, and invalid attempts. ProofOfMemory-v0: the reference's 16.
# POPGym's tasks end themselves (no limit).
_TASKS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    "MaskedCueRecallFair-v0": ("benchmarks.envs.fair_masked_cue_recall:FairMaskedCueRecallEnv", {}, 600),
    "LeducMatch-v0": ("benchmarks.envs.leduc_match:LeducMatchEnv", {}, 200),
    "ProofOfMemory-v0": ("benchmarks.envs.proof_of_memory:ProofOfMemoryEnv", {}, 16),
    "PopgymRepeatPreviousMedium-v0": (
        "sb3_reset_ppo.envs.popgym_tasks:make_popgym", {"task": "RepeatPreviousMedium"}, None,
    ),
}  # fmt: skip
for _env_id, (_entry_point, _kwargs, _limit) in _TASKS.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, kwargs=_kwargs, max_episode_steps=_limit)
