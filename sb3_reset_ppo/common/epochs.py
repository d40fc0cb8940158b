"""
Epoch planning (:func:`plan_epoch`) and the loss normaliser (:func:`uniform_normaliser`): ``docs/design.md``, "Epochs".
Parameters named as the window settings (``n_steps``, ``n_envs``, ``settings``, ...) mean what its "Notation" says.
"""

from typing import NamedTuple

import numpy as np

from sb3_reset_ppo.common.settings import (
    Coverage,
    WindowSettings,
    clip_windows,
    effective_stride,
    every_window,
    first_window_start,
    n_window_starts,
)


class EpochWindows(NamedTuple):
    """The windows of one epoch (see :func:`epoch_window_starts`), each array of shape ``(n_windows,)``, env-major."""

    starts: np.ndarray  # flat (env-major) index of each window's first real step
    position: np.ndarray  # position of each window among its env's windows of the epoch
    lengths: np.ndarray  # real slots of each window (window_size unless clipped)


def epoch_window_starts(
    n_steps: int,
    n_envs: int,
    window_size: int,
    window_stride: int,
    generator: np.random.Generator,
    window_coverage: Coverage,
) -> EpochWindows:
    """The windows of one epoch, env-major: per env a random phase ``p`` in ``[0, k)``, windows starting at ``p + j * k``."""
    stride = effective_stride(n_steps, window_size, window_stride, window_coverage)
    n_starts = n_window_starts(n_steps, window_size, window_coverage)
    offset = first_window_start(window_size, window_coverage)
    phase = generator.integers(stride, size=(n_envs, 1)) if stride > 1 else np.zeros((n_envs, 1), dtype=np.int64)
    # The first start p + j * k at or after the first start; the same for every env of the same phase
    first = phase + stride * -((phase - offset) // stride)
    # (n_envs, most windows per env): start of each candidate window within its env
    starts = first + stride * np.arange(-(-n_starts // stride))[None, :]
    valid = starts < offset + n_starts
    position = np.broadcast_to(np.arange(starts.shape[1])[None, :], starts.shape)
    clipped, lengths = clip_windows(starts, n_steps, window_size)
    flat = clipped + n_steps * np.arange(n_envs)[:, None]
    return EpochWindows(starts=flat[valid], position=position[valid], lengths=lengths[valid])


def window_units(windows: EpochWindows, window_size: int) -> np.ndarray:
    """
    Group an epoch's windows into units: each window alone, or an env's clipped first and last windows together.

    :param windows: The epoch's windows (env-major, in order within each env)
    :return: Unit of every window, shape ``(n_windows,)``: ``0 .. n_units - 1``, ascending in env-major order
    """
    n_windows = windows.starts.shape[0]
    if n_windows == 0:
        return np.zeros(0, dtype=np.int64)
    clipped = windows.lengths < window_size
    # The last window of each env: the next window belongs to another env (position restarts at 0)
    is_last = np.append(windows.position[1:] == 0, True)
    is_first = windows.position == 0
    # A window whose unit is its env's first window: its env's clipped last window, when the first is clipped too
    first_index = np.maximum.accumulate(np.where(is_first, np.arange(n_windows), 0))
    merge = (
        is_last & ~is_first & clipped & clipped[first_index] & (windows.lengths + windows.lengths[first_index] <= window_size)
    )
    new_unit = ~merge
    unit = np.cumsum(new_unit) - 1
    unit[merge] = unit[first_index[merge]]
    return unit


def expected_epoch_slots(n_steps: int, n_envs: int, settings: WindowSettings) -> float:
    """Expected real slots (transitions) of one epoch, over the phases: all windows' real slots over the stride."""
    size = settings.window_size
    steps_in_windows = n_steps if settings.window_coverage == "full" else n_steps - size + 1
    return n_envs * steps_in_windows * size / settings.stride(n_steps)


def uniform_normaliser(n_steps: int, n_envs: int, settings: WindowSettings, batch_size: int | None) -> float:
    """The divisor of every minibatch's loss under ``weighting="uniform"``: ``min(batch_size, expected epoch slots)``."""
    slots = expected_epoch_slots(n_steps, n_envs, settings)
    full = minibatch_slots(batch_size, settings.window_size)
    return slots if full is None else min(float(full), slots)


def minibatch_cuts(n_slots: int, batch_size: int | None, generator: np.random.Generator) -> tuple[int, int, int]:
    """
    How an epoch of ``n_slots`` real slots is cut into full minibatches, read cyclically from a uniform offset.

    :param n_slots: Real slots of the epoch (at least 1)
    :param batch_size: Minibatch size in transitions; ``None`` or more than ``n_slots``: one minibatch of all
    :return: ``(n_minibatches, size, offset)``
    """
    if batch_size is None or batch_size >= n_slots:
        return 1, n_slots, 0
    n_minibatches, remainder = divmod(n_slots, int(batch_size))
    return n_minibatches, int(batch_size), int(generator.integers(n_slots)) if remainder else 0


class EpochPlan(NamedTuple):
    """One epoch's minibatches as *rows* (windows, or pieces of a window a minibatch edge cut), each array ``(n_rows,)``."""

    starts: np.ndarray  # flat (env-major) index of each row's first step
    lengths: np.ndarray  # real steps of each row (1 .. W)
    offsets: np.ndarray  # slot of the row's first step in its window (0 unless the window was cut before it)
    window_firsts: np.ndarray  # flat index of the first real step of the row's window
    minibatch_edges: np.ndarray  # (n_minibatches + 1,): minibatch m is rows minibatch_edges[m] .. [m + 1] - 1

    @property
    def n_minibatches(self) -> int:
        """Number of minibatches of the epoch."""
        return self.minibatch_edges.shape[0] - 1


def plan_epoch(
    n_steps: int,
    n_envs: int,
    settings: WindowSettings,
    batch_size: int | None,
    consecutive_windows: int,
    generator: np.random.Generator,
) -> EpochPlan:
    """
    Plan one epoch: its windows in units, ordered and cut into full minibatches (``docs/design.md``, "Epochs").

    :param batch_size: Transitions (real slots) per minibatch; ``None``: the whole epoch
    :param consecutive_windows: Units per run of one env in the epoch's order (:func:`window_order`)
    :param generator: Source of the phases, the order and the offset
    """
    size = settings.window_size
    epoch = epoch_window_starts(n_steps, n_envs, size, settings.window_stride, generator, settings.window_coverage)
    units = window_units(epoch, size)
    # Index of the first window of every unit (units are numbered in the order of their first windows)
    unit_first = np.unique(units, return_index=True)[1]
    unit_order = window_order(epoch.starts[unit_first] // n_steps, epoch.position[unit_first], consecutive_windows, generator)
    # Rank of every unit in the epoch's order; windows sorted by their unit's rank (a unit's windows in order)
    unit_rank = np.empty(unit_first.shape[0], dtype=np.int64)
    unit_rank[unit_order] = np.arange(unit_first.shape[0])
    sequence = np.argsort(unit_rank[units], kind="stable")
    lengths = epoch.lengths[sequence]
    # Where each window of the sequence begins and ends, in the epoch's sequence of real slots
    window_end = np.cumsum(lengths)
    window_begin = window_end - lengths
    n_slots = int(window_end[-1])
    n_minibatches, minibatch_size, offset = minibatch_cuts(n_slots, minibatch_slots(batch_size, size), generator)
    # Rows: the pieces between consecutive window or minibatch edges (the sequence read cyclically from the offset)
    edges = (offset + minibatch_size * np.arange(n_minibatches + 1)) % n_slots
    row_begin = np.union1d(window_begin, edges)
    row_end = np.append(row_begin[1:], n_slots)
    # Each row's place in the cyclic reading, its minibatch; rows past the last minibatch are the left-out remainder
    place = (row_begin - offset) % n_slots
    minibatch = place // minibatch_size
    trained = np.flatnonzero(minibatch < n_minibatches)
    rows = trained[np.argsort(place[trained], kind="stable")]
    window = np.searchsorted(window_end, row_begin[rows], side="right")
    offsets = row_begin[rows] - window_begin[window]
    window_firsts = epoch.starts[sequence][window]
    return EpochPlan(
        starts=window_firsts + offsets,
        lengths=(row_end - row_begin)[rows],
        offsets=offsets,
        window_firsts=window_firsts,
        minibatch_edges=np.searchsorted(minibatch[rows], np.arange(n_minibatches + 1)),
    )


def minibatch_slots(batch_size: int | None, window_size: int) -> int | None:
    """Real slots of a full minibatch: ``batch_size``, at least ``window_size``; ``None`` (the whole epoch) stays ``None``."""
    return None if batch_size is None else max(int(batch_size), window_size)


def epoch_slot_range(n_steps: int, n_envs: int, settings: WindowSettings) -> tuple[int, int]:
    """``(fewest, most)`` real slots an epoch can hold over the phases (equal when the number does not depend on them)."""
    stride = settings.stride(n_steps)
    _, lengths = every_window(n_steps, settings.window_size, settings.window_coverage)
    # Real slots of one env's epoch for every phase p: the windows starting at p, p + k, ...
    per_phase = np.bincount(np.arange(lengths.shape[0]) % stride, weights=lengths, minlength=stride)
    return n_envs * int(per_phase.min()), n_envs * int(per_phase.max())


def window_order(
    env_of: np.ndarray, position: np.ndarray, consecutive_windows: int, generator: np.random.Generator
) -> np.ndarray:
    """
    Order of one epoch's windows: runs of ``consecutive_windows`` windows of one env, in random order.

    :param env_of: Env of every window of the epoch, shape ``(n_windows,)``
    :param position: Position of every window among its env's windows of the epoch, shape ``(n_windows,)``
    :return: Permutation of ``range(n_windows)``
    """
    n_windows = env_of.shape[0]
    if n_windows == 0:
        return np.zeros(0, dtype=np.int64)
    n_envs = int(env_of.max()) + 1
    phase = generator.integers(consecutive_windows, size=n_envs)
    # Run of each window within its env; a run id per (env, run)
    run = (position + phase[env_of]) // consecutive_windows
    runs_per_env = int(position.max()) // consecutive_windows + 2
    run_rank = generator.permutation(n_envs * runs_per_env)[env_of * runs_per_env + run]
    return np.lexsort((position, run_rank))
