"""
Head-to-head of the boundary modes on one memory task, with a plot.

Trains ResetPPO with ``boundary="reset"`` (uniform and importance weighting) and ``boundary="mask"`` on
EarlyChoice-v0 (most of the return is earned at the first steps of each episode: the steps masking
under-weights) for a few seeds, and plots the mean training return over timesteps.

Usage: python examples/compare_modes.py [--total-timesteps 30000] [--seeds 2] [--output compare_modes.png]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers EarlyChoice-v0)
from sb3_reset_ppo import ResetPPO

MODES = [("reset", "uniform"), ("reset", "importance"), ("mask", "uniform")]


class Curve(BaseCallback):
    """Mean return of the last 100 training episodes at the end of each rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.points: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.model.ep_info_buffer:
            self.points.append((self.num_timesteps, float(np.mean([i["r"] for i in self.model.ep_info_buffer]))))


def train(boundary: str, weighting: str, seed: int, total_timesteps: int, env_id: str) -> list[tuple[int, float]]:
    # Small and fast settings for a quick look (not RecurrentPPO's defaults); the window settings are the package's,
    # only the boundary and the weighting differ between the modes
    model = ResetPPO(
        "MlpLstmPolicy",
        make_vec_env(env_id, n_envs=8, seed=seed),
        n_steps=64,
        batch_size=32,
        n_epochs=4,
        learning_rate=1e-3,
        gamma=0.95,
        ent_coef=0.01,
        boundary=boundary,
        weighting=weighting,
        policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]),
        seed=seed,
    )
    curve = Curve()
    model.learn(total_timesteps, callback=curve)
    return curve.points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="EarlyChoice-v0", help="registered env id")
    parser.add_argument("--total-timesteps", type=int, default=30_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=2, help="runs per mode (seeds 0, 1, ...)")
    parser.add_argument("--output", type=Path, default=Path("compare_modes.png"), help="figure to write")
    args = parser.parse_args()
    th.set_num_threads(1)  # one thread: the fastest for small recurrent networks (benchmarks/speed/bench_threads.py)

    figure, ax = plt.subplots(figsize=(6, 4))
    for boundary, weighting in MODES:
        curves = [train(boundary, weighting, seed, args.total_timesteps, args.env) for seed in range(args.seeds)]
        length = min(len(c) for c in curves)
        if length == 0:
            print(f"{boundary}/{weighting}: no finished episode")
            continue
        steps = [t for t, _ in curves[0][:length]]
        returns = np.array([[r for _, r in c[:length]] for c in curves])
        ax.plot(steps, returns.mean(axis=0), label=f"{boundary}, {weighting}")
        print(f"{boundary}/{weighting}: final mean training return {returns[:, -1].mean():.3f} over {args.seeds} seeds")
    ax.set_xlabel("timesteps")
    ax.set_ylabel("mean training return (last 100 episodes)")
    ax.set_title(f"{args.env}: boundary modes ({args.seeds} seeds)")
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
