"""
Window logic of ResetPPO: pure functions of the rollout's episode starts, with no SB3 state.

The rollout is addressed *env-major*: step ``s`` of env ``e`` has the flat index ``e * n_steps + s``
(the layout of SB3's ``swap_and_flatten``). A window is ``window_size`` consecutive steps of one
env; slot ``i`` of the window starting at step ``t`` holds step ``t + i``. The buffer, ``train()``
and the public :func:`window_weights` all use these functions, so the weights a user inspects are
the weights training applies.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple, cast

import numpy as np
import torch as th

BOUNDARIES = ("reset", "mask")
WEIGHTINGS = ("uniform", "importance", "kept_mean")
COVERAGES = ("full", "inside")
# Window lengths derived from the other arguments: "batch" = min(batch_size, n_steps), "rollout" = n_steps
DERIVED_WINDOW_SIZES = ("batch", "rollout")
Boundary = Literal["reset", "mask"]
Weighting = Literal["uniform", "importance", "kept_mean"]
Coverage = Literal["full", "inside"]

# Number of windows handled at once when scanning a whole rollout (bounds temporary memory).
_CHUNK_WINDOWS = 1 << 16


def _check_int(name: str, value: object, minimum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {what}, got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be {what}, got {value!r}")


def check_positive_int(name: str, value: object) -> None:
    """
    Raise a ``TypeError`` / ``ValueError`` naming the parameter unless ``value`` is a positive int.

    :param name: Parameter name, for the message
    :param value: The value given
    """
    _check_int(name, value, 1, "a positive int")


def check_non_negative_int(name: str, value: object) -> None:
    """
    Raise a ``TypeError`` / ``ValueError`` naming the parameter unless ``value`` is an int ``>= 0``.

    :param name: Parameter name, for the message
    :param value: The value given
    """
    _check_int(name, value, 0, "a non-negative int")


# The defaults of the window settings, in one place: ResetPPO's arguments, WindowSettings and window_weights use them
DEFAULT_WINDOW_SIZE = "batch"
DEFAULT_BOUNDARY: Boundary = "reset"
DEFAULT_WEIGHTING: Weighting = "uniform"
DEFAULT_WINDOW_STRIDE: int | None = None
DEFAULT_WINDOW_COVERAGE: Coverage = "full"


@dataclass(frozen=True)
class WindowSettings:
    """
    The window settings, validated once (:meth:`validated`, whose defaults are ResetPPO's) and typed: what the model,
    the buffer, the statistics and :func:`window_weights` work with.

    :param window_size: Steps per window (resolved: an int)
    :param boundary: ``"reset"`` or ``"mask"``
    :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
    :param window_stride: Steps between the starts of the windows of an epoch (resolved: ``None`` is ``window_size``)
    :param window_coverage: ``"full"`` or ``"inside"``
    """

    window_size: int
    boundary: Boundary
    weighting: Weighting
    window_stride: int
    window_coverage: Coverage

    @classmethod
    def validated(
        cls,
        window_size: object = DEFAULT_WINDOW_SIZE,
        boundary: object = DEFAULT_BOUNDARY,
        weighting: object = DEFAULT_WEIGHTING,
        window_stride: object = DEFAULT_WINDOW_STRIDE,
        window_coverage: object = DEFAULT_WINDOW_COVERAGE,
        n_steps: int | None = None,
        batch_size: int | None = None,
    ) -> "WindowSettings":
        """
        Check the settings, raising an error that names the parameter, its value and what is allowed, and return
        them typed, with the window length and the stride resolved.

        :param window_size: Steps per window: a positive int at most ``n_steps``, or ``"batch"`` / ``"rollout"``
            (:func:`resolve_window_size`, which needs ``n_steps``)
        :param boundary: ``"reset"`` or ``"mask"``
        :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
        :param window_stride: A positive int, or ``None`` for ``window_size``
        :param window_coverage: ``"full"`` or ``"inside"``
        :param n_steps: Rollout length per env, when known (``window_size`` may not exceed it)
        :param batch_size: Minibatch size in transitions (for ``window_size="batch"``), or ``None``
        :return: The settings
        """
        # The rollout and minibatch sizes first: a window_size derived from them cannot be checked otherwise
        if n_steps is not None:
            check_positive_int("n_steps", n_steps)
        if batch_size is not None:
            try:
                check_positive_int("batch_size", batch_size)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{error} (transitions per minibatch); or None (the whole epoch)") from None
        if window_coverage not in COVERAGES:
            raise ValueError(f"window_coverage must be one of {COVERAGES}, got {window_coverage!r}")
        check_window_size_setting(window_size)
        if isinstance(window_size, str):
            if n_steps is None:
                raise ValueError(f"window_size={window_size!r} is derived from n_steps, which was not given")
            size = resolve_window_size(window_size, n_steps, batch_size)
        else:
            size = int(cast(int, window_size))
        if window_stride is not None:
            try:
                check_positive_int("window_stride", window_stride)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{error}; or None (window_size)") from None
        if boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        settings = cls(
            window_size=size,
            boundary=cast(Boundary, boundary),
            weighting=cast(Weighting, weighting),
            window_stride=resolve_window_stride(cast(int | None, window_stride), size),
            window_coverage=cast(Coverage, window_coverage),
        )
        if n_steps is not None:
            settings.check_rollout(n_steps)
        return settings

    def check_rollout(self, n_steps: int) -> None:
        """
        Raise a ``ValueError`` unless the windows fit in rollouts of ``n_steps`` per env (``window_size <= n_steps``).

        :param n_steps: Rollout length per env
        """
        if self.window_size > n_steps:
            raise ValueError(
                f"window_size must be at most n_steps={n_steps} (a window never leaves the rollout), got {self.window_size}"
            )

    def stride(self, n_steps: int) -> int:
        """The stride an epoch uses with rollouts of ``n_steps`` per env (:func:`effective_stride`)."""
        return effective_stride(n_steps, self.window_size, self.window_stride, self.window_coverage)


def check_window_size_setting(window_size: object) -> None:
    """
    Validate a model's ``window_size`` argument: a positive int or one of :data:`DERIVED_WINDOW_SIZES`.

    :param window_size: The user's ``window_size``
    """
    if isinstance(window_size, str):
        if window_size not in DERIVED_WINDOW_SIZES:
            raise ValueError(
                f"window_size must be a positive int or one of {DERIVED_WINDOW_SIZES} (derived from batch_size and "
                f"n_steps), got {window_size!r}"
            )
        return
    try:
        check_positive_int("window_size", window_size)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error}; or one of {DERIVED_WINDOW_SIZES}") from None


def resolve_window_size(window_size: int | str, n_steps: int, batch_size: int | None) -> int:
    """
    The window length as an int.

    ``"batch"``: ``min(batch_size, n_steps)`` (``n_steps`` when ``batch_size`` is ``None``), the longest
    sequence sb3-contrib's ``RecurrentPPO`` backpropagates through with the same arguments (its minibatches
    are contiguous runs of ``batch_size`` transitions, its sequences cut at episode starts, env changes and
    minibatch edges). ``"rollout"``: ``n_steps``. An int is returned as it is.

    :param window_size: The user's ``window_size``
    :param n_steps: Rollout length per env
    :param batch_size: Minibatch size in transitions, or ``None``
    :return: Steps per window
    """
    check_window_size_setting(window_size)
    if window_size == "rollout":
        return n_steps
    if window_size == "batch":
        return n_steps if batch_size is None else max(1, min(int(batch_size), n_steps))
    return int(window_size)


def resolve_window_stride(window_stride: int | None, window_size: int) -> int:
    """
    The stride as an int: ``None`` means ``window_size`` (an epoch is one pass over the data).

    :param window_stride: The user's ``window_stride``
    :param window_size: Steps per window
    :return: Steps between the starts of the windows of an epoch
    """
    return window_size if window_stride is None else int(window_stride)


def n_window_starts(n_steps: int, window_size: int, window_coverage: Coverage) -> int:
    """
    Number of window starts per env: ``n_steps - window_size + 1`` inside the rollout (``"inside"``), or
    ``n_steps + window_size - 1`` for windows that merely meet it (``"full"``: starts ``-(W-1) .. T-1``).

    :param n_steps: Rollout length per env
    :param window_size: Steps per window
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: Window starts per env
    """
    return n_steps + window_size - 1 if window_coverage == "full" else n_steps - window_size + 1


def first_window_start(window_size: int, window_coverage: Coverage) -> int:
    """The first (virtual) window start of an env: ``-(W - 1)`` for ``"full"``, 0 for ``"inside"``."""
    return 1 - window_size if window_coverage == "full" else 0


def effective_stride(n_steps: int, window_size: int, window_stride: int, window_coverage: Coverage) -> int:
    """
    The stride an epoch uses: ``window_stride``, capped at the number of window starts (:func:`n_window_starts`).

    With a larger stride most epochs would hold no window of an env at all; the cap keeps at least one
    window per env in every epoch (``"inside"`` with ``n_steps == window_size``: the whole rollout, every epoch).

    :param n_steps: Rollout length per env
    :param window_size: Steps per window
    :param window_stride: Steps between the starts of consecutive windows of an epoch
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: The stride ``k`` an epoch uses; every window start is drawn with probability ``1 / k`` per epoch
    """
    return max(1, min(window_stride, n_window_starts(n_steps, window_size, window_coverage)))


def clip_windows(starts: np.ndarray, n_steps: int, window_size: int) -> tuple[np.ndarray, np.ndarray]:
    """
    Clip (virtual) window starts of one env to the rollout: a window starting before step 0 begins at step 0, one
    reaching past ``n_steps - 1`` ends there.

    :param starts: Window starts within their env, any shape, each in ``[-(W-1), n_steps - 1]``
    :param n_steps: Rollout length per env
    :param window_size: Steps per window ``W``
    :return: The first step of each clipped window within its env, and its number of real slots (``1 .. W``),
        both of the shape of ``starts``
    """
    first = np.maximum(starts, 0)
    return first, np.minimum(starts + window_size, n_steps) - first


def window_starts(
    n_steps: int, n_envs: int, window_size: int, device: th.device | str = "cpu", *, window_coverage: Coverage
) -> th.Tensor:
    """
    Flat (env-major) index of the first step of every window of a rollout (one at every start).

    ``"inside"``: window ``t`` of an env starts at step ``t`` for ``t = 0, 1, ..., n_steps - window_size``.
    ``"full"``: every window that meets the rollout, starts ``-(W-1) .. n_steps - 1`` clipped to the rollout
    (:func:`clip_windows`), so several windows start at the env's step 0; see :func:`window_lengths` for their
    real slots.

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param window_size: Steps per window
    :param device: Device of the returned tensor
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: int64 tensor of shape ``(n_envs * n_window_starts,)`` (see :func:`n_window_starts`)
    """
    virtual = np.arange(n_window_starts(n_steps, window_size, window_coverage)) + first_window_start(
        window_size, window_coverage
    )
    first, _ = clip_windows(virtual, n_steps, window_size)
    starts = th.as_tensor(first, device=device)
    env_offsets = th.arange(n_envs, device=device) * n_steps
    # (n_envs, windows_per_env) -> (n_envs * windows_per_env,)
    return (env_offsets[:, None] + starts[None, :]).reshape(-1)


def window_lengths(
    n_steps: int, n_envs: int, window_size: int, device: th.device | str = "cpu", *, window_coverage: Coverage
) -> th.Tensor:
    """
    Real slots of every window of :func:`window_starts` (``window_size`` for every window inside the rollout).

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param window_size: Steps per window
    :param device: Device of the returned tensor
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: int64 tensor of shape ``(n_envs * n_window_starts,)``
    """
    virtual = np.arange(n_window_starts(n_steps, window_size, window_coverage)) + first_window_start(
        window_size, window_coverage
    )
    _, lengths = clip_windows(virtual, n_steps, window_size)
    # (windows_per_env,) -> (n_envs * windows_per_env,)
    return th.as_tensor(lengths, device=device).repeat(n_envs)


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
    """
    The windows of one epoch: for each env a random phase ``p`` in ``[0, k)``, ``k`` being :func:`effective_stride`,
    and the windows starting at ``p + j * k``.

    ``"inside"``: every ``j >= 0`` with ``p + j * k <= n_steps - window_size`` (windows inside the rollout).
    ``"full"``: every ``j`` such that the window meets the rollout (``-(W-1) <= p + j * k <= n_steps - 1``),
    clipped to it (:func:`clip_windows`): with ``k = W`` every step is in exactly one window of the epoch, with
    ``k = 1`` in exactly ``W``.

    Every window start is drawn with probability exactly ``1 / k``, so the expected weight of a step over
    one epoch is its weight over all windows divided by ``k``. ``k = 1``: every window, every epoch.

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param window_size: Steps per window
    :param window_stride: Steps between the starts of consecutive windows
    :param generator: Source of the phases
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: The epoch's windows in env-major order
    """
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
    Group an epoch's windows into the units minibatches are made of: every window is a unit of its own, except
    that an env's first window, clipped at the rollout start, and its last, clipped at the rollout end, form one
    unit when their real slots add up to at most ``window_size`` (with ``k = W`` they add up to exactly ``W``
    when ``W`` divides ``n_steps``). A minibatch of ``B`` units then holds at most ``B * W`` real slots, and
    exactly that many at ``k = W``, as many transitions as a minibatch of ``B`` full windows.

    :param windows: The epoch's windows (env-major, in order within each env)
    :param window_size: Steps per window
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


def windows_per_minibatch(batch_size: int | None, window_size: int) -> int | None:
    """
    Whole windows in ``batch_size`` transitions (slots): ``batch_size // window_size``, at least one. For reports only:
    minibatches are cut from the epoch by real slots (:func:`plan_epoch`), not by windows.

    :param batch_size: Minibatch size in transitions, as in SB3 and RecurrentPPO; ``None``: all windows of an epoch
    :param window_size: Steps per window
    :return: Windows per minibatch, or ``None`` for all windows of an epoch
    """
    return None if batch_size is None else max(1, int(batch_size) // window_size)


def expected_epoch_slots(n_steps: int, n_envs: int, settings: WindowSettings) -> float:
    """
    Expected number of real slots (transitions) of one epoch: the real slots of all windows of the rollout (one at
    every start) divided by the stride an epoch uses, ``k``. ``"full"``: ``n_envs * n_steps * W / k`` (every step is
    in ``W`` windows); ``"inside"``: ``n_envs * (n_steps - W + 1) * W / k``. It is the number of every epoch when the
    number of windows held does not depend on the phases (``k = 1``, or ``"full"`` with ``k`` dividing ``W``).

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param settings: The window settings
    :return: Real slots per epoch, on average over the phases
    """
    size = settings.window_size
    steps_in_windows = n_steps if settings.window_coverage == "full" else n_steps - size + 1
    return n_envs * steps_in_windows * size / settings.stride(n_steps)


def uniform_normaliser(n_steps: int, n_envs: int, settings: WindowSettings, batch_size: int | None) -> float:
    """
    What every minibatch's loss is divided by under ``weighting="uniform"``: ``min(batch_size, expected real slots of
    an epoch)`` (:func:`expected_epoch_slots`; ``batch_size=None``: the latter; ``batch_size`` below ``window_size``
    counts as ``window_size``, :func:`minibatch_slots`), the same number for every minibatch of a rollout, so every
    trained slot enters the gradient with exactly ``weight / normaliser``. Where an epoch holds at least ``batch_size``
    slots on average, this is ``batch_size``, the real slots of every minibatch (:func:`plan_epoch`: all full), and a
    minibatch's loss is their mean. Where it holds fewer on average (``batch_size`` above the expected slots of an
    epoch, e.g. ``None``), it is that expectation: an epoch is then one minibatch, whose loss is the mean over its
    slots only when the number of slots does not depend on the epoch's phases (with inside coverage, windows of 16,
    stride 7 and ``batch_size=400``: 388.57, while some epochs hold 400 slots and more).

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param settings: The window settings
    :param batch_size: Minibatch size in transitions, or ``None`` (the whole epoch)
    :return: The normaliser
    """
    slots = expected_epoch_slots(n_steps, n_envs, settings)
    full = minibatch_slots(batch_size, settings.window_size)
    return slots if full is None else min(float(full), slots)


def minibatch_cuts(n_slots: int, batch_size: int | None, generator: np.random.Generator) -> tuple[int, int, int]:
    """
    How an epoch of ``n_slots`` real slots is cut into minibatches: ``n_minibatches`` of ``size`` slots each, the first
    starting at slot ``offset`` of the epoch's sequence, which is read cyclically. With ``batch_size`` at most
    ``n_slots``, every minibatch is full and the remainder, ``n_slots % batch_size`` slots, is left out of the epoch:
    the ``offset`` is uniform in ``[0, n_slots)``, so every slot of the sequence is left out with probability exactly
    ``remainder / n_slots``, wherever it stands, and every minibatch holds exactly ``batch_size`` slots (a shorter
    one would weigh more after gradient clipping). The generator is called only when there is a remainder.

    :param n_slots: Real slots of the epoch (at least 1)
    :param batch_size: Minibatch size in transitions; ``None`` or more than ``n_slots``: one minibatch of all
    :param generator: Source of the offset
    :return: ``(n_minibatches, size, offset)``
    """
    if batch_size is None or batch_size >= n_slots:
        return 1, n_slots, 0
    n_minibatches, remainder = divmod(n_slots, int(batch_size))
    return n_minibatches, int(batch_size), int(generator.integers(n_slots)) if remainder else 0


class EpochPlan(NamedTuple):
    """
    One epoch's minibatches, as *rows*: a row is a window, or the piece of a window that falls in one minibatch when
    a minibatch edge cuts the window (its later piece starts a row of the next minibatch, from the memory stored for
    its first step, as ``RecurrentPPO`` cuts sequences at minibatch edges). Rows are in the order they are trained;
    slots the epoch leaves out (its remainder, :func:`minibatch_cuts`) are in no row. Each array has shape
    ``(n_rows,)`` except ``minibatch_edges``.
    """

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
    Plan one epoch: its windows (:func:`epoch_window_starts`, a fresh phase per env), grouped into units
    (:func:`window_units`), ordered (:func:`window_order` over the units; a unit's windows in order), and the
    resulting sequence of real slots cut into minibatches of ``batch_size`` slots (:func:`minibatch_slots`: at least
    ``window_size``), every one full: the sequence is read cyclically from a random offset and its remainder left out
    (:func:`minibatch_cuts`). A window that a minibatch edge (or the offset) cuts becomes two rows.

    When the epoch's real slots are a multiple of ``batch_size`` and every unit holds a multiple of ``batch_size``
    slots, or ``batch_size`` is a multiple of every unit's slots (e.g. ``"full"`` coverage, stride ``W``, ``W``
    dividing ``n_steps`` and ``batch_size``), nothing is left out, no window is cut and the minibatches are runs of
    whole units of the epoch's order, with the same generator calls as before minibatches were cut by slots.

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param settings: The window settings
    :param batch_size: Transitions (real slots) per minibatch; ``None``: the whole epoch
    :param consecutive_windows: Units per run of one env in the epoch's order (:func:`window_order`)
    :param generator: Source of the phases, the order and the offset
    :return: The plan
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
    """
    Real slots (transitions) of a full minibatch: ``batch_size``, or ``window_size`` when ``batch_size`` is smaller
    (a minibatch then holds one window's worth of steps, so that windows keep their length).

    :param batch_size: Minibatch size in transitions, as in SB3 and RecurrentPPO; ``None``: the whole epoch
    :param window_size: Steps per window
    :return: Slots per full minibatch, or ``None`` for the whole epoch
    """
    return None if batch_size is None else max(int(batch_size), window_size)


def epoch_slot_range(n_steps: int, n_envs: int, settings: WindowSettings) -> tuple[int, int]:
    """
    Fewest and most real slots an epoch can hold (over the phases; equal when the number does not depend on them).

    :param n_steps: Rollout length per env
    :param n_envs: Number of envs
    :param settings: The window settings
    :return: ``(fewest, most)``
    """
    stride = settings.stride(n_steps)
    size = settings.window_size
    n_starts = n_window_starts(n_steps, size, settings.window_coverage)
    virtual = np.arange(n_starts) + first_window_start(size, settings.window_coverage)
    _, lengths = clip_windows(virtual, n_steps, size)
    # Real slots of one env's epoch for every phase p: the windows starting at p, p + k, ...
    per_phase = np.bincount(np.arange(n_starts) % stride, weights=lengths, minlength=stride)
    return n_envs * int(per_phase.min()), n_envs * int(per_phase.max())


def slot_indices(starts: th.Tensor, window_size: int, lengths: th.Tensor | None = None) -> th.Tensor:
    """
    Flat index of the step held by every slot of the given windows.

    :param starts: Flat index of the first step of each window, shape ``(B,)``
    :param window_size: Steps per window ``W``
    :param lengths: Real slots of each window, shape ``(B,)``; the padding slots after them hold the window's
        last real step (they are never trained). ``None``: every slot is real.
    :return: int64 tensor of shape ``(B, W)``
    """
    offsets = th.arange(window_size, device=starts.device)[None, :]
    if lengths is not None:
        # (1, W) and (B, 1) -> (B, W): padding slots repeat the last real step
        offsets = th.minimum(offsets, lengths[:, None] - 1)
    return starts[:, None] + offsets


def real_slots(lengths: th.Tensor, window_size: int) -> th.Tensor:
    """
    Which slots of the given windows hold a real step (the others are padding of a clipped window).

    :param lengths: Real slots of each window, shape ``(B,)``
    :param window_size: Steps per window ``W``
    :return: bool tensor of shape ``(B, W)``
    """
    return th.arange(window_size, device=lengths.device)[None, :] < lengths[:, None]


def slot_resets(episode_starts: th.Tensor) -> th.Tensor:
    """
    Reset flag of every slot: slot ``i >= 1`` resets when its step starts an episode; slot 0 never does.

    :param episode_starts: SB3's episode-start flags of the steps held by the slots, shape ``(B, W)``
    :return: bool tensor of shape ``(B, W)``
    """
    resets = episode_starts > 0.5
    resets[:, 0] = False
    return resets


def kept_slots(resets: th.Tensor, boundary: Boundary, real: th.Tensor | None = None) -> th.Tensor:
    """
    Which slots are trained.

    In reset mode every real slot is kept. In mask mode every slot from the first reset of its window on is
    dropped. Padding slots (of clipped windows) are never kept.

    :param resets: Reset flags, shape ``(B, W)`` (see :func:`slot_resets`)
    :param boundary: ``"reset"`` or ``"mask"``
    :param real: Which slots hold a real step, shape ``(B, W)`` (see :func:`real_slots`); ``None``: all
    :return: bool tensor of shape ``(B, W)``
    """
    kept = th.ones_like(resets) if boundary == "reset" else th.cumsum(resets, dim=1) == 0
    return kept if real is None else kept & real


def slot_weights(kept: th.Tensor, step_counts: th.Tensor, weighting: Weighting) -> th.Tensor:
    """
    Weight of every slot in the loss.

    :param kept: Kept flags, shape ``(B, W)``
    :param step_counts: For the step held by each slot, the number of windows in which that step is kept,
        shape ``(B, W)`` (see :func:`kept_counts`)
    :param weighting: ``"uniform"`` and ``"kept_mean"`` (weight = kept) or ``"importance"`` (weight = kept / count)
    :return: float32 tensor of shape ``(B, W)``
    """
    weights = kept.float()
    if weighting == "importance":
        # A kept step has count >= 1; clamp only guards the division for dropped slots.
        weights = weights / step_counts.clamp(min=1)
    return weights


def _window_chunks(
    episode_starts: th.Tensor, window_size: int, window_coverage: Coverage
) -> Iterator[tuple[th.Tensor, th.Tensor, th.Tensor]]:
    """
    All windows of a rollout (one at every start, see :func:`window_starts`), a bounded number at a time.

    :param episode_starts: Episode-start flags, shape ``(n_envs, n_steps)``
    :param window_size: Steps per window
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: Iterator of ``(slots, resets, real)``, each of shape ``(chunk, W)``
    """
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
    For every step, the number of windows (of all windows of the rollout, one at every start) in which it is kept.

    :param episode_starts: Episode-start flags, shape ``(n_envs, n_steps)``
    :param window_size: Steps per window
    :param boundary: ``"reset"`` or ``"mask"``
    :param window_coverage: ``"full"`` or ``"inside"``
    :return: float32 tensor of shape ``(n_envs * n_steps,)`` (env-major flat layout)
    """
    counts = th.zeros(episode_starts.numel(), device=episode_starts.device)
    for slots, resets, real in _window_chunks(episode_starts, window_size, window_coverage):
        kept = kept_slots(resets, boundary, real)
        counts.index_add_(0, slots.reshape(-1), kept.reshape(-1).float())
    return counts


class RolloutWindowStats:
    """
    Per-step counts and expected weights of one rollout, computed by a scan over all its windows.

    An epoch draws every window with probability ``1 / k`` (``k`` = :func:`effective_stride`), so the
    expected weight of a step over one epoch is its total weight over all windows divided by ``k``; the
    shares below (kept slots, windows with a reset) are the expected shares of an epoch.

    :param episode_starts: Episode-start flags, shape ``(n_envs, n_steps)``
    :param settings: The window settings
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
        :return: Mapping from logger key to value; ``train/episode_start_weight`` only when the rollout
            holds an episode start
        """
        stats = {
            "train/kept_slot_fraction": self.n_kept_slots / self.n_real_slots,
            "train/untrained_step_fraction": float((self.step_weights == 0).float().mean()),
            "train/windows_with_reset": self.n_windows_with_reset / self.n_windows,
        }
        # (n_envs, n_steps) -> (n_envs * n_steps,)
        is_start = episode_starts.reshape(-1) > 0.5
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
    Expected total slot weight each step of a rollout receives in one epoch, computed by the code ResetPPO trains with.

    This is the sum of the slot weight over every slot that holds the step, over all windows of the rollout (one at
    every start), divided by the stride an epoch uses, ``k`` (:func:`effective_stride`): an epoch draws each window
    with probability ``1 / k``. The defaults are ResetPPO's (full coverage, stride ``window_size``: every step once
    per epoch, so every step gets 1 in reset mode).

    **The normaliser.** Under ``weighting="uniform"`` training divides every minibatch's loss by one number per rollout,
    ``c = min(max(batch_size, window_size), expected real slots of an epoch)`` (:func:`uniform_normaliser`; every
    minibatch holds exactly ``max(batch_size, window_size)`` real slots and an epoch's remainder is left out, each slot
    with the same probability, :func:`plan_epoch`). A step's expected gradient weight per epoch is therefore
    ``window_weights(...) / c`` times the probability of not being left out, the same for every step when every epoch
    holds the same number of real slots; the weights are then equal for all steps exactly when these are: in reset
    mode with ``window_coverage="full"`` (``W / k`` each), with a stride that divides the window (the default) or 1.
    With another stride the share an epoch leaves out depends on its phases, and the steps' weights are close to these
    (``docs/guide/parameters.md``, "Minibatches"). With ``"importance"`` and ``"kept_mean"``
    each minibatch is divided by its own sum of slot weights (a self-normalised mean), so the gradient weights equal
    these up to the variation of that sum between minibatches.

    Closed forms (uniform; divide by ``k``): reset mode, ``"full"``: ``W``; ``"inside"``: ``min(s+1, W, T-s, T-W+1)``
    for the step at position ``s``. Mask mode, ``"full"``: ``min(j+1, W)`` for a step ``j`` steps into an episode that
    began inside the rollout (the seed's pattern), ``W`` in the episode the rollout began in; ``"inside"``: at most
    that, and 0 when the episode began in the last ``W-1`` steps. Importance weighting: ``1 / k`` for every trained
    step.

    :param episode_starts: SB3's episode-start flags (step ``s`` is the first of an episode),
        shape ``(n_steps,)`` for one env or ``(n_steps, n_envs)`` as in SB3's rollout buffer
    :param window_size: Steps per window (``1 <= window_size <= n_steps``; ``ResetPPO.window_length`` resolves
        ``"batch"`` and ``"rollout"``)
    :param boundary: ``"reset"`` (reset-and-continue) or ``"mask"`` (drop slots after an episode end)
    :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"`` (slot weights as ``"uniform"``; it
        differs in the loss's normaliser only)
    :param window_stride: Steps between the starts of the windows of an epoch; ``None``: ``window_size``
        (ResetPPO's default); 1: every window every epoch (the total over all windows)
    :param window_coverage: ``"full"`` (every window that meets the rollout, clipped to it; ResetPPO's default) or
        ``"inside"`` (windows inside the rollout); see :func:`epoch_window_starts`
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


def window_order(
    env_of: np.ndarray, position: np.ndarray, consecutive_windows: int, generator: np.random.Generator
) -> np.ndarray:
    """
    Order in which one epoch visits its windows: runs of ``consecutive_windows`` consecutive windows of one
    env, the runs in random order, cut at a random phase per env each epoch. With ``consecutive_windows=1``
    this is a uniform random permutation.

    :param env_of: Env of every window of the epoch, shape ``(n_windows,)``
    :param position: Position of every window among its env's windows of the epoch, shape ``(n_windows,)``
    :param consecutive_windows: Windows per run
    :param generator: Source of randomness
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
    # Sort by run rank, then position in the run
    return np.lexsort((position, run_rank))


class ResetLayout(NamedTuple):
    """
    Where the slots of ``B`` windows sit in one time-major LSTM input of ``row_length`` steps per window.

    Every reset gets one extra step inserted just before its slot (the *reset step*, which brings the
    memory to zero), so window ``b``'s slot ``i`` sits at step ``i + (resets of window b up to slot i)``.
    Slots are numbered row-major over ``(B, W)``; positions are ``step * B + window``. The padding slots of a
    clipped window sit at the position of its last real slot (their outputs repeat it; they are never trained
    and their inputs are not written).
    """

    slot_positions: th.Tensor  # (B * W,) position of every slot in the (row_length * B) input
    reset_steps: th.Tensor  # (row_length, B, 1) float: 1.0 at the reset steps, else 0.0
    row_length: int  # the longest row: real slots + resets of one window
    input_slots: th.Tensor | None = None  # (n_real,) the real slots, written into the input; None: every slot


def plan_reset_steps(episode_starts: np.ndarray, lengths: np.ndarray | None = None) -> ResetLayout:
    """
    Lay out ``B`` windows for one fused LSTM call with a reset step before every reset slot.

    :param episode_starts: Episode-start flags of the slots, shape ``(B, W)``; slot ``i >= 1`` resets
        where set (slot 0 starts from the recorded memory instead)
    :param lengths: Real slots of each window, shape ``(B,)``; the slots after them are padding (their flags are
        ignored, their positions repeat the last real slot's). ``None``: every slot is real.
    :return: The layout (CPU tensors)
    """
    n_windows, window_size = episode_starts.shape
    resets = episode_starts > 0.5
    resets[:, 0] = False
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
