"""
The B*W-average artefact: with masking, logged losses shrink with episode length; with reset they do not.

For several fixed episode lengths, collects one rollout of CueRecall with that episode length and runs one
``train()`` at learning rate 0 (so every variant logs the losses of the same initial policy) for three
variants: ``boundary="reset"``, ``boundary="mask"`` with losses averaged over all ``B * W`` slots (the
masking baseline, ``weighting="uniform"``), and ``boundary="mask"`` averaged over kept slots only
(``weighting="kept_mean"``, sb3-contrib's convention). It prints and plots the logged
``train/entropy_loss`` and ``train/value_loss`` against the episode length.

The entropy term shows the artefact cleanly: the initial policy is close to uniform over 4 actions, so every
slot's entropy is about log(4) = 1.39 whatever the episode length. Averaged over kept slots (reset, and mask
with ``kept_mean``) the logged ``entropy_loss`` stays at -1.39 for every length; averaged over all ``B * W``
slots (mask, ``uniform``) it is -1.39 times the kept fraction of slots, which shrinks as episodes get
shorter. The value loss (whose per-slot size does depend on the episode length, through the returns) shows
the same factor: masked ``uniform`` / masked ``kept_mean`` equals the kept fraction.

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

VARIANTS = {"reset": ("reset", "uniform"), "mask (B*W mean)": ("mask", "uniform"), "mask (kept mean)": ("mask", "kept_mean")}
KEYS = ("entropy_loss", "value_loss", "kept_slot_fraction")


def logged_losses(episode_length: int, boundary: str, weighting: str, seed: int) -> dict[str, float]:
    """One rollout of 4 envs x 128 steps, one train() at learning rate 0: the logged losses."""
    delay = episode_length - 2
    env = make_vec_env(CueRecallEnv, n_envs=4, seed=seed, env_kwargs=dict(min_delay=delay, max_delay=delay))
    model = ResetPPO(
        "MlpLstmPolicy",
        env,
        learning_rate=0.0,
        n_steps=128,
        n_epochs=1,
        # The masking baseline's epochs (the seed's trainer): every window of 16 steps inside the rollout, so that the
        # kept fraction of slots, and with it the artefact, shows at every episode length
        window_size=16,
        window_stride=1,
        window_coverage="inside",
        boundary=boundary,
        weighting=weighting,
        seed=seed,
        policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]),
    )
    model.set_logger(configure(None, []))
    model.learn(4 * 128)
    values = model.logger.name_to_value
    return {key: float(values[f"train/{key}"]) for key in KEYS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[3, 4, 6, 8, 12, 16, 24, 32], help="episode lengths")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs and the initial policy")
    parser.add_argument("--output", type=Path, default=Path("loss_scale.png"), help="figure to write")
    args = parser.parse_args()
    th.set_num_threads(1)  # one thread: the fastest for small recurrent networks (benchmarks/speed/bench_threads.py)
    if min(args.lengths) < 2:
        raise ValueError(f"episode lengths must be at least 2, got {args.lengths}")

    results = {
        name: [logged_losses(length, boundary, weighting, args.seed) for length in args.lengths]
        for name, (boundary, weighting) in VARIANTS.items()
    }
    print(
        "| episode length | kept fraction (mask) | entropy_loss reset | mask (B*W mean) | mask (kept mean) "
        "| value_loss mask (B*W mean) / mask (kept mean) |"
    )
    print("|---|---|---|---|---|---|")
    for i, length in enumerate(args.lengths):
        reset, masked, kept = (results[name][i] for name in VARIANTS)
        print(
            f"| {length} | {masked['kept_slot_fraction']:.3f} | {reset['entropy_loss']:.3f} | {masked['entropy_loss']:.3f} "
            f"| {kept['entropy_loss']:.3f} | {masked['value_loss'] / kept['value_loss']:.3f} |"
        )

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (name, rows), style in zip(results.items(), ("s-", "o-", "^--"), strict=True):
        axes[0].plot(args.lengths, [r["entropy_loss"] for r in rows], style, label=name)
    ratio = [
        m["value_loss"] / k["value_loss"] for m, k in zip(results["mask (B*W mean)"], results["mask (kept mean)"], strict=True)
    ]
    axes[1].plot(args.lengths, ratio, "o-", label="value_loss: mask (B*W mean) / mask (kept mean)")
    axes[1].plot(
        args.lengths, [r["kept_slot_fraction"] for r in results["mask (B*W mean)"]], "k--", label="kept slot fraction"
    )
    axes[0].set_ylabel("train/entropy_loss (learning rate 0)")
    axes[1].set_ylabel("ratio")
    axes[0].set_title("entropy term per slot is the same for every length", fontsize=10)
    axes[1].set_title("the B*W mean scales the masked losses by the kept fraction", fontsize=10)
    for ax in axes:
        ax.set_xlabel("episode length (steps)")
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
