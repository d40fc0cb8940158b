"""
The window weights the design document (docs/design.md) promises, computed with explicit loops over every window:
the brute-force reference the buffer's minibatches and ``window_weights`` are checked against.
"""

import itertools

import numpy as np


def brute_force_window_starts(n_steps: int, window_size: int, window_coverage: str) -> list[int]:
    """Every window start of one env: ``0 .. T - W`` (``"inside"``) or ``-(W - 1) .. T - 1`` (``"full"``)."""
    if window_coverage == "full":
        return list(range(-(window_size - 1), n_steps))
    return list(range(n_steps - window_size + 1))


def brute_force_kept_steps(episode_starts: np.ndarray, start: int, window_size: int, boundary: str) -> list[int]:
    """
    The steps a window kept, with an explicit loop: its real steps (clipped to the rollout), in mask mode only those
    before the first episode start after its first real step. ``episode_starts``: one env's flags, ``(T,)``.
    """
    steps, alive = [], True
    real = [step for step in range(start, start + window_size) if 0 <= step < episode_starts.shape[0]]
    for slot, step in enumerate(real):
        if slot >= 1 and episode_starts[step] and boundary == "mask":
            alive = False
        if alive:
            steps.append(step)
    return steps


def brute_force_step_weights(
    episode_starts: np.ndarray,
    window_size: int,
    boundary: str,
    weighting: str,
    window_stride: int = 1,
    window_coverage: str = "inside",
) -> np.ndarray:
    """
    The design document's (docs/design.md) expected per-epoch weights with explicit loops: every phase ``p`` of the epoch's
    windows (starts ``p + j * k``, ``k = min(stride, number of starts)``) is equally likely, so the expected
    weight is the mean over phases of the weights of that phase's windows; importance weighting divides by
    the number of windows (of all, one at every start) in which the step is kept. ``"inside"``: starts ``0 .. T - W``;
    ``"full"``: starts ``-(W - 1) .. T - 1``, each window's steps clipped to ``0 .. T - 1`` (its first real step
    never resets). Input and output ``(T, E)``.
    """
    n_steps, n_envs = episode_starts.shape
    all_starts = brute_force_window_starts(n_steps, window_size, window_coverage)
    stride = min(window_stride, len(all_starts))

    def kept_steps(env: int, start: int) -> list[int]:
        return brute_force_kept_steps(episode_starts[:, env], start, window_size, boundary)

    counts = np.zeros((n_steps, n_envs))
    for env in range(n_envs):
        for start in all_starts:
            for step in kept_steps(env, start):
                counts[step, env] += 1
    totals = np.zeros((n_steps, n_envs))
    for phase in range(stride):
        for env in range(n_envs):
            for start in all_starts:
                if (start - phase) % stride != 0:
                    continue
                for step in kept_steps(env, start):
                    totals[step, env] += 1.0 if weighting != "importance" else 1.0 / counts[step, env]
    return totals / stride


def brute_force_effective_weights(
    episode_starts: np.ndarray,
    window_size: int,
    boundary: str,
    window_stride: int,
    window_coverage: str,
    batch_size: int | None,
) -> np.ndarray:
    """
    The design document's expected gradient weight per epoch of every step under uniform weighting, with explicit
    loops: for every combination of the envs' phases (equally likely), each step's kept slots, times the probability
    that a slot is trained in that epoch (an epoch of ``N`` real slots trains ``floor(N / M) * M`` of them,
    ``M = max(batch_size, W)``, each slot equally likely to be left out; all of them when ``N <= M``), divided by the
    loss normaliser ``min(M, mean N)``. Input and output ``(T, E)``.
    """
    n_steps, n_envs = episode_starts.shape
    all_starts = brute_force_window_starts(n_steps, window_size, window_coverage)
    stride = min(window_stride, len(all_starts))
    # Per env and phase: each step's kept slots and the epoch's real slots of that env
    kept = np.zeros((n_envs, stride, n_steps))
    real = np.zeros((n_envs, stride))
    for env in range(n_envs):
        for phase in range(stride):
            for start in all_starts[phase::stride]:
                real[env, phase] += min(start + window_size, n_steps) - max(start, 0)
                for step in brute_force_kept_steps(episode_starts[:, env], start, window_size, boundary):
                    kept[env, phase, step] += 1
    full = None if batch_size is None else max(batch_size, window_size)
    totals = np.zeros((n_steps, n_envs))
    slot_counts = []
    for phases in itertools.product(range(stride), repeat=n_envs):
        n_slots = sum(real[env, phase] for env, phase in enumerate(phases))
        slot_counts.append(n_slots)
        trained = 1.0 if full is None or n_slots <= full else (n_slots // full) * full / n_slots
        for env, phase in enumerate(phases):
            totals[:, env] += kept[env, phase] * trained
    mean_slots = float(np.mean(slot_counts))
    normaliser = mean_slots if full is None else min(full, mean_slots)
    return totals / stride**n_envs / normaliser
