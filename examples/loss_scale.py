"""
The B*W-average artefact: with masking, logged losses shrink with episode length.

For several fixed episode lengths, collects the same rollout with ``boundary="mask"`` and
``boundary="reset"`` (same seed, same initial policy), runs one ``train()`` and plots the logged
``train/policy_gradient_loss`` and ``train/value_loss`` against the episode length. Masked slots still
count in the ``B * W`` average, so the masked losses scale with the kept fraction of slots; with reset,
every slot is real and the logged losses do not depend on where episodes end.

Usage: python examples/loss_scale.py [--lengths 3 4 6 8 12 16 24 32] [--output loss_scale.png]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.envs import CueRecallEnv


def logged_losses(episode_length: int, boundary: str, total_timesteps: int, seed: int) -> dict[str, float]:
    delay = episode_length - 2
    env = make_vec_env(CueRecallEnv, n_envs=4, seed=seed, env_kwargs=dict(min_delay=delay, max_delay=delay))
    model = ResetPPO(
        "MlpLstmPolicy",
        env,
        n_steps=128,
        n_epochs=1,
        window_size=16,
        boundary=boundary,
        seed=seed,
        policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]),
    )
    model.set_logger(configure(None, []))
    model.learn(total_timesteps)
    values = model.logger.name_to_value
    return {key: float(values[f"train/{key}"]) for key in ("policy_gradient_loss", "value_loss", "kept_slot_fraction")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[3, 4, 6, 8, 12, 16, 24, 32])
    parser.add_argument("--total-timesteps", type=int, default=512, help="per run (one rollout of 4 x 128 steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=Path("loss_scale.png"))
    args = parser.parse_args()
    th.set_num_threads(1)
    if min(args.lengths) < 2:
        raise ValueError(f"episode lengths must be at least 2, got {args.lengths}")

    results = {b: [logged_losses(n, b, args.total_timesteps, args.seed) for n in args.lengths] for b in ("mask", "reset")}
    print("| episode length | kept fraction (mask) | value_loss mask / reset | policy_gradient_loss mask | reset |")
    print("|---|---|---|---|---|")
    for length, mask, reset in zip(args.lengths, results["mask"], results["reset"], strict=True):
        print(
            f"| {length} | {mask['kept_slot_fraction']:.2f} | {mask['value_loss'] / reset['value_loss']:.2f} "
            f"| {mask['policy_gradient_loss']:.4f} | {reset['policy_gradient_loss']:.4f} |"
        )
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for boundary, style in (("mask", "o-"), ("reset", "s-")):
        rows = results[boundary]
        axes[0].plot(args.lengths, [r["policy_gradient_loss"] for r in rows], style, label=boundary)
        axes[1].plot(args.lengths, [r["value_loss"] for r in rows], style, label=boundary)
    ratio = [m["value_loss"] / r["value_loss"] for m, r in zip(results["mask"], results["reset"], strict=True)]
    axes[2].plot(args.lengths, ratio, "o-", label="value_loss mask / reset")
    axes[2].plot(args.lengths, [m["kept_slot_fraction"] for m in results["mask"]], "k--", label="kept slot fraction (mask)")
    titles = ("train/policy_gradient_loss", "train/value_loss", "masked loss relative to reset")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("episode length (steps)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
