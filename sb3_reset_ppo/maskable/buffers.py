"""Window rollout buffers that also store the invalid-action mask of every step (``MaskableResetPPO``)."""

from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_reset_ppo.common.attention_buffers import AttentionWindowRolloutBuffer, DictAttentionWindowRolloutBuffer
from sb3_reset_ppo.common.buffers import DictWindowRolloutBuffer, WindowRolloutBuffer, _WindowBufferMixin
from sb3_reset_ppo.common.spaces import mask_dims

__all__ = [
    "MaskableAttentionWindowRolloutBuffer",
    "MaskableDictAttentionWindowRolloutBuffer",
    "MaskableDictWindowRolloutBuffer",
    "MaskableWindowRolloutBuffer",
    "mask_dims",
]


class _MaskBufferMixin(_WindowBufferMixin):
    """Stores ``action_masks`` with every step, so that minibatches hold each slot's mask (before the window buffer)."""

    action_space: spaces.Space
    buffer_size: int
    n_envs: int
    pos: int

    def reset(self) -> None:
        super().reset()
        self.mask_dims = mask_dims(self.action_space)
        # Every action valid unless a mask is given (as sb3-contrib's MaskableRolloutBuffer)
        self.action_masks = np.ones((self.buffer_size, self.n_envs, self.mask_dims), dtype=np.float32)
        # Whether this rollout stored masks (learn(use_masking=False) stores none: training is then unmasked)
        self.masks_stored = False

    def add(self, *args: Any, action_masks: np.ndarray | None = None, **kwargs: Any) -> None:
        """Add a step (``WindowRolloutBuffer.add``) with its ``action_masks`` ``(n_envs, mask_dims)`` (``None``: all valid)."""
        if action_masks is not None:
            # (n_envs, ...) -> (n_envs, mask_dims)
            self.action_masks[self.pos] = np.asarray(action_masks, dtype=np.float32).reshape((self.n_envs, self.mask_dims))
            self.masks_stored = True
        super().add(*args, **kwargs)

    def _sampled_arrays(self) -> dict[str, np.ndarray]:
        arrays = super()._sampled_arrays()
        if self.masks_stored:
            arrays["action_masks"] = self.action_masks
        return arrays


class MaskableWindowRolloutBuffer(_MaskBufferMixin, WindowRolloutBuffer):  # type: ignore[misc]  # get yields windows
    """:class:`~sb3_reset_ppo.WindowRolloutBuffer` that stores each step's action masks (parameters are its)."""


class MaskableDictWindowRolloutBuffer(_MaskBufferMixin, DictWindowRolloutBuffer):  # type: ignore[misc]  # get yields windows
    """:class:`~sb3_reset_ppo.DictWindowRolloutBuffer` that stores each step's action masks (parameters are its)."""


class MaskableAttentionWindowRolloutBuffer(_MaskBufferMixin, AttentionWindowRolloutBuffer):  # type: ignore[misc]  # add takes memory
    """
    :class:`~sb3_reset_ppo.common.attention_buffers.AttentionWindowRolloutBuffer` that stores each step's action masks
    (parameters are its).
    """


class MaskableDictAttentionWindowRolloutBuffer(_MaskBufferMixin, DictAttentionWindowRolloutBuffer):  # type: ignore[misc]  # add takes memory
    """:class:`MaskableAttentionWindowRolloutBuffer` for ``Dict`` observation spaces (parameters are its)."""
