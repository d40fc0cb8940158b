"""
Attention memory as an exported step carries it (:class:`AttentionMemory`), and one step of the transformer in
operators that ONNX exporters convert: :meth:`TransformerXL.step <sb3_reset_ppo.common.attention.TransformerXL.step>`
with the reset-and-continue mask of a single slot written without the cumulative maximum that
:func:`~sb3_reset_ppo.common.attention.attention_mask` takes over a window (ONNX has none).
"""

from dataclasses import dataclass
from typing import Any, ClassVar

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from sb3_reset_ppo.common.attention import TransformerXL
from sb3_reset_ppo.common.layout import is_episode_start
from sb3_reset_ppo.export.memory import Memory
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

# torch's dynamo exporter writes attention's Split with opset 18's num_outputs and does not convert it down
DYNAMO_ATTENTION_OPSET = 18


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
        self, features: th.Tensor, state: list[th.Tensor], episode_start: th.Tensor | None
    ) -> tuple[th.Tensor, list[th.Tensor]]:
        """
        :param features: ``(B, F)``
        :param state: ``memory``, the block inputs of the ``K`` steps before the step, ``(K, B, L, D)``, and
            ``n_valid``, how many of them belong to the step's episode, ``(1, B)``, int or float (kept in the output)
        :param episode_start: SB3's episode-start flags ``(B,)``, or ``None`` where the caller zeroes ``n_valid`` at an
            episode start
        :return: The transformer's output ``(B, D)``, and the memory and count entering the next step
        """
        memory, n_valid = state
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
        return outputs[:, 0], [new_memory, new_count]


@dataclass(frozen=True)
class AttentionMemory(Memory):
    """
    A transformer's memory as ``predict`` holds it: ``memory`` ``(K, batch, L, D)`` and ``n_valid`` ``(1, batch)``
    (int64); flat, each env's ``(K, L, D)`` positions row-major, then its count.
    """

    policy_class: ClassVar[type[ActorCriticPolicy]] = TrXLActorCriticPolicy
    cells: ClassVar[tuple[str, ...]] = ("TrXL",)

    @classmethod
    def of(cls, policy: TrXLActorCriticPolicy) -> "AttentionMemory":
        memory_length, n_layers, dim = policy.memory_shape
        return cls("TrXL", n_layers, dim, memory_length)

    @property
    def names(self) -> list[str]:
        return ["memory", "n_valid"]

    @property
    def shapes(self) -> list[tuple[int | str, ...]]:
        return [(self.memory_length, "batch", self.n_layers, self.hidden_size), (1, "batch")]

    @property
    def positions(self) -> int:
        """Width of the flat memory's positions: ``memory_length * n_layers * hidden_size``."""
        return self.memory_length * self.n_layers * self.hidden_size

    @property
    def size(self) -> int:
        return self.positions + 1

    @property
    def dtypes(self) -> dict[str, th.dtype]:
        return {"n_valid": th.int64}

    def split(self, flat: th.Tensor) -> list[th.Tensor]:
        # (batch, K * L * D) -> (batch, K, L, D) -> (K, batch, L, D)
        memory = flat[:, : self.positions].reshape(-1, self.memory_length, self.n_layers, self.hidden_size).transpose(0, 1)
        # (batch, 1) -> (1, batch)
        return [memory, flat[:, self.positions :].transpose(0, 1)]

    def join(self, memory: list[th.Tensor]) -> th.Tensor:
        positions, count = memory
        # (K, batch, L, D) -> (batch, K, L, D) -> (batch, K * L * D); (1, batch) -> (batch, 1)
        return th.cat([positions.transpose(0, 1).reshape(positions.shape[1], -1), count.transpose(0, 1)], dim=1)

    def step(self, policy: TrXLActorCriticPolicy, elementary: bool) -> nn.Module:
        # The episode-start rule is the attention mask's: the memory is kept, its positions masked
        return AttentionMemoryStep(policy.trxl_actor)

    def elementary(self, cell_ops: str, fused_cells: tuple[str, ...], exporter: str, opset: int) -> bool:
        if cell_ops == "fused":
            raise ValueError(
                "cell_ops='fused' needs an LSTM or GRU (ONNX's operators): attention memory is always written as "
                "elementary operators; use cell_ops='auto' or 'elementary'"
            )
        if exporter == "dynamo" and opset < DYNAMO_ATTENTION_OPSET:
            raise ValueError(
                f"exporter='dynamo' with attention memory needs opset >= {DYNAMO_ATTENTION_OPSET}, got {opset}: torch's "
                "dynamo exporter writes the attention's Split with an opset 18 attribute and cannot convert it to an "
                f"earlier opset; use exporter='torchscript' (any opset) or opset={DYNAMO_ATTENTION_OPSET}"
            )
        return True

    def metadata(self, flat: bool) -> dict[str, Any]:
        if not flat:
            return {
                "memory_length": self.memory_length,
                "shape": {"memory": ["memory_length", "batch", "n_layers", "hidden_size"], "n_valid": [1, "batch"]},
                "layout": "predict's state: memory the block inputs of the last memory_length steps (oldest first), "
                "n_valid (int64) how many of the last of them belong to the episode",
                "reset": "n_valid read as 0 where episode_start > 0.5 (the memory is kept and masked)",
            }
        return {
            "memory_length": self.memory_length,
            "shape": ["batch", self.size],
            "layout": (
                f"per env: the memory positions (memory_length, n_layers, hidden_size) = ({self.memory_length}, "
                f"{self.n_layers}, {self.hidden_size}) row-major, oldest first, then n_valid (a float)"
            ),
            "reset": "zeros at an episode start (n_valid 0: no position is attended to)",
        }
