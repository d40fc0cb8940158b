"""
Draw how much each step of a rollout weighs in training, with masking and with reset-and-continue.

Top: every window of a small buffer (window 4) in both modes; hatched slots are masked out, R marks a
memory reset. Bottom: the total weight of each step over one pass over all windows of a rollout with
window 16, from ``sb3_reset_ppo.window_weights`` (the code training uses), relative to the mean step.

Usage: python examples/weight_profile.py [--output docs/weight_profile.png]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch as th
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from sb3_reset_ppo import window_weights
from sb3_reset_ppo.common.windows import kept_slots, slot_indices, slot_resets, window_starts

EPISODE_LENGTHS = (3, 4, 5)  # episodes A, B, C of the small buffer
SMALL_WINDOW = 4


def _small_buffer() -> tuple[np.ndarray, list[str]]:
    starts, labels = [], []
    for episode, length in enumerate(EPISODE_LENGTHS):
        starts += [1.0] + [0.0] * (length - 1)
        labels += [f"{'ABC'[episode]}{k}" for k in range(length)]
    return np.array(starts, dtype=np.float32), labels


def draw_windows(ax: Axes, boundary: str) -> None:
    """Every window of the small buffer as a row of slots."""
    episode_starts, labels = _small_buffer()
    n_steps = len(labels)
    colors = {"A": "#8ecae6", "B": "#ffb703", "C": "#90be6d"}
    starts = window_starts(n_steps, 1, SMALL_WINDOW, window_coverage="inside")
    slots = slot_indices(starts, SMALL_WINDOW)
    resets = slot_resets(th.as_tensor(episode_starts)[slots])
    kept = kept_slots(resets, boundary)  # type: ignore[arg-type]
    for row, window in enumerate(slots.tolist()):
        for slot, step in enumerate(window):
            is_kept = bool(kept[row, slot])
            ax.add_patch(
                Rectangle(
                    (step, -row),
                    0.95,
                    0.9,
                    facecolor=colors[labels[step][0]] if is_kept else "white",
                    edgecolor="black",
                    hatch=None if is_kept else "///",
                    linewidth=0.6,
                )
            )
            ax.text(step + 0.47, -row + 0.45, labels[step], ha="center", va="center", fontsize=7)
            if boundary == "reset" and bool(resets[row, slot]):
                # Inside the slot's top-left corner, with the slot's left edge in red: the memory resets here
                ax.plot([step, step], [-row, -row + 0.9], color="crimson", linewidth=2)
                ax.text(step + 0.07, -row + 0.86, "R", fontsize=6, color="crimson", fontweight="bold", ha="left", va="top")
    # Every window inside the rollout, every epoch: the seed's picture
    counts = window_weights(episode_starts, SMALL_WINDOW, boundary, window_stride=1, window_coverage="inside")
    for step in range(n_steps):
        ax.text(step + 0.47, -len(slots) + 0.35, f"{counts[step]:g}", ha="center", fontsize=7)
    ax.text(-0.3, -len(slots) + 0.35, "count", ha="right", fontsize=7)
    ax.set_xlim(-1.5, n_steps)
    ax.set_ylim(-len(slots) - 0.2, 1)
    ax.set_title(f'boundary="{boundary}": every window of a {n_steps}-step buffer, window {SMALL_WINDOW}', fontsize=9)
    ax.axis("off")


def rollout_episode_starts(n_steps: int) -> np.ndarray:
    """Episode starts of a rollout that begins mid-episode and ends shortly after an episode began."""
    episode_starts = np.zeros(n_steps, dtype=np.float32)
    episode_starts[[s for s in (25, 48, 75, 104, 131, 183, 210, n_steps - 10) if s < n_steps]] = 1
    return episode_starts


def draw_profile(ax: Axes, n_steps: int = 256, window_size: int = 16) -> None:
    """Per-step weight over a rollout for mask, reset and reset with importance weighting."""
    episode_starts = rollout_episode_starts(n_steps)
    for boundary, weighting, style in [
        ("mask", "uniform", dict(color="tab:red", linewidth=1.2)),
        ("reset", "uniform", dict(color="tab:blue", linewidth=1.8)),
        ("reset", "importance", dict(color="tab:green", linewidth=1.2, linestyle="--")),
    ]:
        weights = window_weights(episode_starts, window_size, boundary, weighting, window_stride=1, window_coverage="inside")
        ax.plot(weights / weights.mean(), label=f"{boundary}, {weighting}", **style)  # type: ignore[arg-type]
    for step in np.flatnonzero(episode_starts):
        ax.axvline(float(step), color="gray", linewidth=0.5, linestyle=":")
    ax.set_xlabel("step of the rollout (dotted: episode start)")
    ax.set_ylabel("weight / mean weight")
    ax.set_title(
        f"Expected weight of each step per epoch, relative to the mean (window {window_size}; the same for every stride)",
        fontsize=9,
    )
    ax.set_ylim(0, 1.75)
    ax.legend(fontsize=8, loc="upper center", ncol=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("docs/weight_profile.png"), help="figure to write")
    args = parser.parse_args()
    figure = plt.figure(figsize=(11, 8))
    grid = figure.add_gridspec(2, 2, height_ratios=[1.3, 1])
    draw_windows(figure.add_subplot(grid[0, 0]), "mask")
    draw_windows(figure.add_subplot(grid[0, 1]), "reset")
    draw_profile(figure.add_subplot(grid[1, :]))
    figure.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
