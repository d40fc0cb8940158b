"""
The window settings, validated once into one typed :class:`WindowSettings`, and the int validators of the model.
Parameters named as the settings (``n_steps``, ``window_size``, ...) mean what ``docs/design.md``, "Notation", says.
"""

from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

BOUNDARIES = ("reset", "mask")
WEIGHTINGS = ("uniform", "importance", "kept_mean")
COVERAGES = ("full", "inside")
# Window lengths derived from the other arguments: "batch" = min(batch_size, n_steps), "rollout" = n_steps
DERIVED_WINDOW_SIZES = ("batch", "rollout")
Boundary = Literal["reset", "mask"]
Weighting = Literal["uniform", "importance", "kept_mean"]
Coverage = Literal["full", "inside"]


def _check_int(name: str, value: object, minimum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {what}, got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be {what}, got {value!r}")


def check_positive_int(name: str, value: object, alternatives: str = "") -> None:
    """
    Raise a ``TypeError`` / ``ValueError`` naming the parameter ``name`` unless ``value`` is a positive int.

    :param alternatives: The other values the parameter takes, appended to the message (e.g. ``"; or 'auto'"``)
    """
    try:
        _check_int(name, value, 1, "a positive int")
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error}{alternatives}") from None


def check_non_negative_int(name: str, value: object) -> None:
    """Raise a ``TypeError`` / ``ValueError`` naming the parameter ``name`` unless ``value`` is an int ``>= 0``."""
    _check_int(name, value, 0, "a non-negative int")


# The defaults of the window settings, in one place: ResetPPO's arguments, WindowSettings and window_weights use them
DEFAULT_WINDOW_SIZE = "batch"
DEFAULT_BOUNDARY: Boundary = "reset"
DEFAULT_WEIGHTING: Weighting = "uniform"
DEFAULT_WINDOW_STRIDE: int | None = None
DEFAULT_WINDOW_COVERAGE: Coverage = "full"


@dataclass(frozen=True)
class WindowSettings:
    """The window settings, validated once (:meth:`validated`, with ResetPPO's defaults), typed and resolved."""

    window_size: int  #: steps per window (resolved: an int)
    boundary: Boundary  #: ``"reset"`` or ``"mask"``
    weighting: Weighting  #: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
    window_stride: int  #: steps between the starts of the windows of an epoch (resolved: ``None`` is ``window_size``)
    window_coverage: Coverage  #: ``"full"`` or ``"inside"``

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
        The settings checked (an error names the parameter, its value and what is allowed), typed and resolved.

        :param window_size: Steps per window: a positive int at most ``n_steps``, or ``"batch"`` / ``"rollout"``
        :param boundary: ``"reset"`` or ``"mask"``
        :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
        :param window_stride: A positive int, or ``None`` for ``window_size``
        :param window_coverage: ``"full"`` or ``"inside"``
        :param n_steps: Rollout length per env, when known (``window_size`` may not exceed it)
        :param batch_size: Minibatch size in transitions (for ``window_size="batch"``), or ``None``
        """
        # The rollout and minibatch sizes first: a window_size derived from them cannot be checked otherwise
        if n_steps is not None:
            check_positive_int("n_steps", n_steps)
        if batch_size is not None:
            check_positive_int("batch_size", batch_size, " (transitions per minibatch); or None (the whole epoch)")
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
            check_positive_int("window_stride", window_stride, "; or None (window_size)")
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
        """Raise a ``ValueError`` unless the windows fit in rollouts of ``n_steps`` per env (``window_size <= n_steps``)."""
        if self.window_size > n_steps:
            raise ValueError(
                f"window_size must be at most n_steps={n_steps} (a window never leaves the rollout), got {self.window_size}"
            )

    def stride(self, n_steps: int) -> int:
        """The stride an epoch uses with rollouts of ``n_steps`` per env (:func:`effective_stride`)."""
        return effective_stride(n_steps, self.window_size, self.window_stride, self.window_coverage)


def check_window_size_setting(window_size: object) -> None:
    """Validate a model's ``window_size`` argument: a positive int or one of :data:`DERIVED_WINDOW_SIZES`."""
    if isinstance(window_size, str):
        if window_size not in DERIVED_WINDOW_SIZES:
            raise ValueError(
                f"window_size must be a positive int or one of {DERIVED_WINDOW_SIZES} (derived from batch_size and "
                f"n_steps), got {window_size!r}"
            )
        return
    check_positive_int("window_size", window_size, f"; or one of {DERIVED_WINDOW_SIZES}")


def resolve_window_size(window_size: int | str, n_steps: int, batch_size: int | None) -> int:
    """The window length as an int: ``"batch"`` is ``min(batch_size, n_steps)``, ``"rollout"`` is ``n_steps``."""
    check_window_size_setting(window_size)
    if window_size == "rollout":
        return n_steps
    if window_size == "batch":
        return n_steps if batch_size is None else max(1, min(int(batch_size), n_steps))
    return int(window_size)


def resolve_window_stride(window_stride: int | None, window_size: int) -> int:
    """The stride as an int: ``None`` means ``window_size`` (an epoch is one pass over the data)."""
    return window_size if window_stride is None else int(window_stride)


def n_window_starts(n_steps: int, window_size: int, window_coverage: Coverage) -> int:
    """Number of window starts per env: ``T - W + 1`` for ``"inside"``, ``T + W - 1`` for ``"full"`` (``-(W-1) .. T-1``)."""
    return n_steps + window_size - 1 if window_coverage == "full" else n_steps - window_size + 1


def first_window_start(window_size: int, window_coverage: Coverage) -> int:
    """The first (virtual) window start of an env: ``-(W - 1)`` for ``"full"``, 0 for ``"inside"``."""
    return 1 - window_size if window_coverage == "full" else 0


def effective_stride(n_steps: int, window_size: int, window_stride: int, window_coverage: Coverage) -> int:
    """
    The stride ``k`` an epoch uses: ``window_stride``, capped at :func:`n_window_starts` (at least one window per env);
    every window start is drawn with probability ``1 / k`` per epoch.
    """
    return max(1, min(window_stride, n_window_starts(n_steps, window_size, window_coverage)))


def clip_windows(starts: np.ndarray, n_steps: int, window_size: int) -> tuple[np.ndarray, np.ndarray]:
    """
    Clip (virtual) window starts of one env, any shape, each in ``[-(W-1), n_steps - 1]``, to the rollout: the first
    step of each clipped window within its env and its real slots (``1 .. W``), shaped as ``starts``.
    """
    first = np.maximum(starts, 0)
    return first, np.minimum(starts + window_size, n_steps) - first


def every_window(n_steps: int, window_size: int, window_coverage: Coverage) -> tuple[np.ndarray, np.ndarray]:
    """Every window of one env, one at every start, clipped to the rollout (:func:`clip_windows`): ``(n_window_starts,)``."""
    virtual = np.arange(n_window_starts(n_steps, window_size, window_coverage))
    return clip_windows(virtual + first_window_start(window_size, window_coverage), n_steps, window_size)
