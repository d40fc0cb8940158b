"""
One step of an attention-memory actor in operators that ONNX exporters convert: :meth:`TransformerXL.step
<sb3_reset_ppo.common.attention.TransformerXL.step>` with the reset-and-continue mask of a single slot written without
the cumulative maximum that :func:`~sb3_reset_ppo.common.attention.attention_mask` takes over a window (ONNX has none).
"""

import torch as th
from torch import nn

from sb3_reset_ppo.common.attention import TransformerXL
from sb3_reset_ppo.common.layout import is_episode_start


def single_slot_mask(n_valid: th.Tensor, memory_length: int) -> th.Tensor:
    """
    :func:`~sb3_reset_ppo.common.attention.attention_mask` for rows of one slot whose episode-start rule is applied
    (``n_valid`` 0 at an episode start): the slot attends to itself and to the last ``n_valid`` memory positions.

    :param n_valid: Memory positions of the slot's episode, ``(B,)``, int or float
    :param memory_length: ``K``
    :return: bool ``(B, 1, K + 1)``, True where the slot attends to the key (``K`` memory positions, then the slot)
    """
    key = th.arange(memory_length + 1, dtype=n_valid.dtype, device=n_valid.device)
    # (B,): the first key attended to; a count above K (never written by a step) reads as K
    first = memory_length - th.clamp(n_valid, max=memory_length)
    # (1, 1, K + 1) against (B, 1, 1) -> (B, 1, K + 1)
    return key[None, None, :] >= first[:, None, None]


class AttentionMemoryStep(nn.Module):
    """
    One step of ``B`` envs through a transformer, its memory in and out as ``predict`` carries it (``docs/design.md``,
    "Attention memory"): ``memory`` ``(K, B, L, D)`` and ``n_valid`` ``(1, B)``.

    :param transformer: The actor's transformer (not copied)
    """

    def __init__(self, transformer: TransformerXL) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(
        self, features: th.Tensor, memory: th.Tensor, n_valid: th.Tensor, episode_start: th.Tensor | None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """
        :param features: ``(B, F)``
        :param memory: The block inputs of the ``K`` steps before the step, ``(K, B, L, D)``
        :param n_valid: How many of them belong to the step's episode, ``(1, B)``, int or float (kept in the output)
        :param episode_start: SB3's episode-start flags ``(B,)``, or ``None`` where the caller zeroes ``n_valid`` at an
            episode start
        :return: The transformer's output ``(B, D)``, and the memory and count entering the next step
        """
        memory_length = self.transformer.memory_length
        # (1, B) -> (B,)
        count = n_valid[0]
        if episode_start is not None:
            count = th.where(is_episode_start(episode_start), th.zeros_like(count), count)
        allowed = single_slot_mask(count, memory_length)
        # (K, B, L, D) -> (B, K, L, D); (B, F) -> (B, 1, F)
        outputs, inputs = self.transformer(features[:, None], memory.transpose(0, 1), allowed)
        # Drop the oldest position, append the step's inputs: (K - 1, B, L, D) and (1, B, L, D) -> (K, B, L, D)
        new_memory = th.cat([memory[1:], inputs.transpose(0, 1)], dim=0)
        # (B,) -> (1, B)
        new_count = th.clamp(count + 1, max=memory_length)[None]
        # (B, 1, D) -> (B, D)
        return outputs[:, 0], new_memory, new_count
