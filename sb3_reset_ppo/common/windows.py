"""
Where a rollout's windows are, what each slot holds and their statistics (:func:`window_weights`), from the episode
starts; indices and parameters named as the settings (``n_steps``, ...) are as ``docs/design.md``, "Notation", says.
"""

from collections.abc import Iterator

import numpy as np
import torch as th

# Re-exported (noqa): the benchmarks and user code import these from this module
from sb3_reset_ppo.common.epochs import plan_epoch, uniform_normaliser  # noqa: F401
from sb3_reset_ppo.common.layout import ResetLayout, is_episode_start, plan_reset_steps, slot_resets  # noqa: F401
from sb3_reset_ppo.common.settings import (  # noqa: F401
    DEFAULT_BOUNDARY,
    DEFAULT_WEIGHTING,
    DEFAULT_WINDOW_COVERAGE,
    DEFAULT_WINDOW_STRIDE,
    Boundary,
    Coverage,
    Weighting,
    WindowSettings,
    effective_stride,
    every_window,
    resolve_window_size,
)

_CHUNK_WINDOWS = 1 << 16  # number of windows handled at once when scanning a whole rollout (bounds temporary memory)


def window_starts(
    n_steps: int, n_envs: int, window_size: int, device: th.device | str = "cpu", *, window_coverage: Coverage
) -> th.Tensor:
    """Flat (env-major) index of the first real step of every window of a rollout: int64 ``(n_envs * n_window_starts,)``."""
    first, _ = every_window(n_steps, window_size, window_coverage)
    starts = th.as_tensor(first, device=device)
    env_offsets = th.arange(n_envs, device=device) * n_steps
    # (n_envs, windows_per_env) -> (n_envs * windows_per_env,)
    return (env_offsets[:, None] + starts[None, :]).reshape(-1)


def window_lengths(
    n_steps: int, n_envs: int, window_size: int, device: th.device | str = "cpu", *, window_coverage: Coverage
) -> th.Tensor:
    """Real slots of every window of :func:`window_starts` (``window_size`` inside the rollout): int64, the same shape."""
    _, lengths = every_window(n_steps, window_size, window_coverage)
    # (windows_per_env,) -> (n_envs * windows_per_env,)
    return th.as_tensor(lengths, device=device).repeat(n_envs)


def slot_indices(starts: th.Tensor, window_size: int, lengths: th.Tensor | None = None) -> th.Tensor:
    """
    Flat index of the step held by every slot of the given windows.

    :param starts: Flat index of the first step of each window, shape ``(B,)``
    :param lengths: Real slots of each window, shape ``(B,)``, padding repeating the last real step; ``None``: all real
    :return: int64 tensor of shape ``(B, W)``
    """
    offsets = th.arange(window_size, device=starts.device)[None, :]
    if lengths is not None:
        # (1, W) and (B, 1) -> (B, W): padding slots repeat the last real step
        offsets = th.minimum(offsets, lengths[:, None] - 1)
    return starts[:, None] + offsets


def real_slots(lengths: th.Tensor, window_size: int) -> th.Tensor:
    """Which slots of windows of ``lengths`` ``(B,)`` real slots hold a real step, bool ``(B, W)`` (the rest is padding)."""
    return th.arange(window_size, device=lengths.device)[None, :] < lengths[:, None]


def kept_slots(resets: th.Tensor, boundary: Boundary, real: th.Tensor | None = None) -> th.Tensor:
    """
    Which slots are trained: every real slot in reset mode, in mask mode those before their window's first reset.

    :param resets: Reset flags, shape ``(B, W)`` (see :func:`slot_resets`)
    :param real: Which slots hold a real step, shape ``(B, W)`` (see :func:`real_slots`); ``None``: all
    :return: bool tensor of shape ``(B, W)``
    """
    kept = th.ones_like(resets) if boundary == "reset" else th.cumsum(resets, dim=1) == 0
    return kept if real is None else kept & real


def slot_weights(kept: th.Tensor, step_counts: th.Tensor, weighting: Weighting) -> th.Tensor:
    """
    Weight of every slot in the loss.

    :param kept: Kept flags, shape ``(B, W)``
    :param step_counts: Windows in which each slot's step is kept, shape ``(B, W)`` (see :func:`kept_counts`)
    :param weighting: ``"uniform"`` and ``"kept_mean"`` (weight = kept) or ``"importance"`` (weight = kept / count)
    :return: float32 tensor of shape ``(B, W)``
    """
    weights = kept.float()
    if weighting == "importance":
        weights = weights / step_counts.clamp(min=1)  # a kept step's count is >= 1
    return weights


def _window_chunks(
    episode_starts: th.Tensor, window_size: int, window_coverage: Coverage
) -> Iterator[tuple[th.Tensor, th.Tensor, th.Tensor]]:
    """All windows of a rollout of ``(n_envs, n_steps)`` flags, a bounded number at a time: ``(slots, resets, real)``."""
    n_envs, n_steps = episode_starts.shape
    # (n_envs, n_steps) -> (n_envs * n_steps,): env-major flat layout
    flat_starts = episode_starts.reshape(-1)
    device = episode_starts.device
    starts = window_starts(n_steps, n_envs, window_size, device=device, window_coverage=window_coverage)
    lengths = window_lengths(n_steps, n_envs, window_size, device=device, window_coverage=window_coverage)
    for chunk, chunk_lengths in zip(th.split(starts, _CHUNK_WINDOWS), th.split(lengths, _CHUNK_WINDOWS), strict=True):
        slots = slot_indices(chunk, window_size, chunk_lengths)
        real = real_slots(chunk_lengths, window_size)
        yield slots, slot_resets(flat_starts[slots]) & real, real


def kept_counts(episode_starts: th.Tensor, window_size: int, boundary: Boundary, window_coverage: Coverage) -> th.Tensor:
    """
    For every step of ``(n_envs, n_steps)`` flags, the windows (one at every start) in which it is kept: float32,
    ``(n_envs * n_steps,)`` env-major.
    """
    counts = th.zeros(episode_starts.numel(), device=episode_starts.device)
    for slots, resets, real in _window_chunks(episode_starts, window_size, window_coverage):
        kept = kept_slots(resets, boundary, real)
        counts.index_add_(0, slots.reshape(-1), kept.reshape(-1).float())
    return counts


class RolloutWindowStats:
    """
    Per-step counts and expected weights of one rollout of ``(n_envs, n_steps)`` flags over one epoch, computed by a
    scan over all its windows.
    """

    def __init__(self, episode_starts: th.Tensor, settings: WindowSettings) -> None:
        n_steps = episode_starts.shape[1]
        window_size, coverage = settings.window_size, settings.window_coverage
        self.counts = kept_counts(episode_starts, window_size, settings.boundary, coverage)
        # Expected sum of slot weights per step over one epoch, shape (n_envs * n_steps,)
        self.step_weights = th.zeros_like(self.counts)
        self.n_windows = 0
        self.n_real_slots = 0
        self.n_kept_slots = 0.0
        self.n_windows_with_reset = 0
        for slots, resets, real in _window_chunks(episode_starts, window_size, coverage):
            kept = kept_slots(resets, settings.boundary, real)
            weights = slot_weights(kept, self.counts[slots], settings.weighting)
            self.step_weights.index_add_(0, slots.reshape(-1), weights.reshape(-1))
            self.n_windows += slots.shape[0]
            self.n_real_slots += int(real.sum())
            self.n_kept_slots += float(kept.sum())
            self.n_windows_with_reset += int(resets.any(dim=1).sum())
        self.step_weights /= settings.stride(n_steps)
        self.window_size = window_size

    def diagnostics(self, episode_starts: th.Tensor) -> dict[str, float]:
        """
        The ``train/`` window diagnostics (see the design document, ``docs/design.md``).

        :param episode_starts: The same flags the stats were built from, shape ``(n_envs, n_steps)``
        :return: Logger key to value; ``train/episode_start_weight`` only where the rollout holds an episode start
        """
        stats = {
            "train/kept_slot_fraction": self.n_kept_slots / self.n_real_slots,
            "train/untrained_step_fraction": float((self.step_weights == 0).float().mean()),
            "train/windows_with_reset": self.n_windows_with_reset / self.n_windows,
        }
        # (n_envs, n_steps) -> (n_envs * n_steps,)
        is_start = is_episode_start(episode_starts.reshape(-1))
        mean_weight = float(self.step_weights.mean())
        if bool(is_start.any()) and mean_weight > 0:
            stats["train/episode_start_weight"] = float(self.step_weights[is_start].mean()) / mean_weight
        return stats


def window_weights(
    episode_starts: np.ndarray,
    window_size: int,
    boundary: str = DEFAULT_BOUNDARY,
    weighting: str = DEFAULT_WEIGHTING,
    window_stride: int | None = DEFAULT_WINDOW_STRIDE,
    window_coverage: str = DEFAULT_WINDOW_COVERAGE,
) -> np.ndarray:
    """
    Expected total slot weight each step of a rollout receives in one epoch: 1 with ResetPPO's defaults in reset mode
    (``docs/design.md``, "Expected weights").

    :param episode_starts: SB3's episode-start flags, shape ``(n_steps,)`` or ``(n_steps, n_envs)``
    :param window_size: Steps per window, an int (``ResetPPO.window_length``)
    :param boundary: ``"reset"`` (reset-and-continue) or ``"mask"`` (drop slots after an episode end)
    :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
    :param window_stride: Steps between the starts of the windows of an epoch; ``None``: ``window_size``
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: float array of the same shape as ``episode_starts``
    """
    if isinstance(window_size, str):
        raise TypeError(
            f"window_size must be an int here, got {window_size!r} (a model's resolved length is ResetPPO.window_length)"
        )
    array = np.asarray(episode_starts)
    if array.ndim not in (1, 2) or array.shape[0] == 0:
        raise ValueError(
            f"episode_starts must have shape (n_steps,) or (n_steps, n_envs) with n_steps >= 1, got shape {array.shape}"
        )
    settings = WindowSettings.validated(window_size, boundary, weighting, window_stride, window_coverage, array.shape[0])
    # (n_steps,) or (n_steps, n_envs) -> (n_envs, n_steps)
    per_env = array.reshape(array.shape[0], -1).T
    flags = th.as_tensor(np.ascontiguousarray(per_env, dtype=np.float32))
    stats = RolloutWindowStats(flags, settings)
    # (n_envs * n_steps,) -> (n_envs, n_steps) -> (n_steps, n_envs) -> input shape
    return stats.step_weights.reshape(per_env.shape).T.reshape(array.shape).numpy().astype(np.float64)
