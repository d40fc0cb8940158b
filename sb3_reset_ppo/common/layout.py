"""The reset rule (which slot resets the memory) and where the slots and reset steps sit in one fused call."""

from typing import NamedTuple, TypeVar

import numpy as np
import torch as th

# SB3's episode-start flags are 0.0 or 1.0; a step starts an episode where its flag is above this
EPISODE_START_THRESHOLD = 0.5
# The flags of a rollout, on the device (torch) or on the host (numpy): the reset rule is the same code for both
Flags = TypeVar("Flags", th.Tensor, np.ndarray)


def is_episode_start(episode_starts: Flags) -> Flags:
    """Which steps start an episode: SB3's float flags 0.0 and 1.0 read halfway between them (bool, same shape and kind)."""
    return episode_starts > EPISODE_START_THRESHOLD


def slot_resets(episode_starts: Flags) -> Flags:
    """Bool reset flag of every slot of ``(B, W)`` flags: slot ``i >= 1`` resets where its step starts an episode, 0 never."""
    resets = is_episode_start(episode_starts)
    resets[:, 0] = False
    return resets


class ResetLayout(NamedTuple):
    """
    Where the slots of ``B`` windows sit in one time-major LSTM input of ``row_length`` steps per window.

    A *reset step* before every reset slot brings the memory to zero, so window ``b``'s slot ``i`` sits at step
    ``i + (resets of window b up to slot i)``, position ``step * B + b``; padding slots sit at their last real slot's.
    """

    slot_positions: th.Tensor  # (B * W,) position of every slot in the (row_length * B) input
    reset_steps: th.Tensor  # (row_length, B, 1) float: 1.0 at the reset steps, else 0.0
    row_length: int  # the longest row: real slots + resets of one window
    input_slots: th.Tensor | None = None  # (n_real,) the real slots, written into the input; None: every slot


def plan_reset_steps(episode_starts: np.ndarray, lengths: np.ndarray | None = None) -> ResetLayout:
    """
    Lay out ``B`` windows for one fused LSTM call with a reset step before every reset slot.

    :param episode_starts: Episode-start flags of the slots, shape ``(B, W)`` (see :func:`slot_resets`)
    :param lengths: Real slots of each window, shape ``(B,)``, the rest padding; ``None``: every slot is real
    :return: The layout (CPU tensors)
    """
    n_windows, window_size = episode_starts.shape
    resets = slot_resets(episode_starts)
    real = None
    if lengths is not None:
        # (1, W) and (B, 1) -> (B, W)
        real = np.arange(window_size)[None, :] < lengths[:, None]
        resets &= real
    # (B, W): step of every slot within its window's row
    step = np.arange(window_size)[None, :] + np.cumsum(resets, axis=1)
    window = np.arange(n_windows)[:, None]
    if real is None:
        row_length = window_size + int(resets.sum(axis=1).max(initial=0))
    else:
        assert lengths is not None
        # Padding slots at the step of their window's last real slot
        step = np.where(real, step, step[np.arange(n_windows), lengths - 1][:, None])
        row_length = int(step.max(initial=-1)) + 1
    reset_steps = np.zeros((row_length, n_windows, 1), dtype=np.float32)
    reset_windows, reset_slots = np.nonzero(resets)
    reset_steps[step[reset_windows, reset_slots] - 1, reset_windows, 0] = 1.0
    return ResetLayout(
        # (B, W) -> (B * W,)
        slot_positions=th.as_tensor((step * n_windows + window).reshape(-1)),
        reset_steps=th.as_tensor(reset_steps),
        row_length=row_length,
        # (B, W) -> (B * W,) -> indices of the real slots
        input_slots=None if real is None else th.as_tensor(np.flatnonzero(real.reshape(-1))),
    )
