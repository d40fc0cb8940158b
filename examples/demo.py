"""
Demo: train ResetPPO on the CueRecall memory task (40,000 steps on one CPU core; what ``make demo`` runs).

CueRecall-v0 shows a cue at the first step of each episode and asks for it 2 to 7 steps later: only a
policy that remembers scores above the random policy's 0.25 (the best return is 1.0). The script prints
the evaluation return of the trained policy next to a random policy's and writes a learning curve.

Usage: python examples/demo.py [--total-timesteps 40000] [--policy MlpLstmPolicy] [--output-dir demo_output]
"""

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.envs import random_policy_return  # importing the module registers CueRecall-v0

ENV_ID = "CueRecall-v0"


class LearningCurve(BaseCallback):
    """Records the mean return of the last 100 training episodes at the end of every rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.timesteps: list[int] = []
        self.returns: list[float] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.model.ep_info_buffer:
            self.timesteps.append(self.num_timesteps)
            self.returns.append(float(np.mean([info["r"] for info in self.model.ep_info_buffer])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=40_000, help="env steps to train")
    parser.add_argument("--window-size", type=int, default=None,
                        help='steps per training window (BPTT length; default: the package\'s, "batch")')  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the envs")
    parser.add_argument("--policy", default="MlpLstmPolicy", choices=["MlpLstmPolicy", "MlpGruPolicy"], help="memory cell")
    parser.add_argument("--eval-episodes", type=int, default=500, help="episodes of the final evaluation")
    parser.add_argument("--output-dir", type=Path, default=Path("demo_output"), help="where to write learning_curve.png")
    args = parser.parse_args()
    th.set_num_threads(1)  # one thread: the fastest for small recurrent networks (benchmarks/speed/bench_threads.py)

    env = make_vec_env(ENV_ID, n_envs=8, seed=args.seed)
    window = {} if args.window_size is None else {"window_size": args.window_size}
    # Not the defaults, so that the demo solves its task in 40,000 steps: a small network (32 units), short rollouts
    # and few epochs (each update is cheap), a higher learning rate and a short horizon (gamma 0.9: the cue's reward
    # comes at most 7 steps later). ResetPPO's own settings (window_size, boundary, weighting, ...) are the defaults.
    model = ResetPPO(
        args.policy,
        env,
        n_steps=64,
        batch_size=32,
        n_epochs=4,
        learning_rate=2e-3,
        gamma=0.9,
        ent_coef=0.01,
        policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]),
        seed=args.seed,
        **window,
    )
    curve = LearningCurve()
    start = time.perf_counter()
    model.learn(args.total_timesteps, callback=curve)
    elapsed = time.perf_counter() - start

    eval_env = make_vec_env(ENV_ID, n_envs=4, seed=args.seed + 1000)
    trained, trained_std = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes)
    random_return = random_policy_return(ENV_ID, args.eval_episodes, args.seed + 2000)
    print(f"trained {args.total_timesteps:,} steps in {elapsed:.0f} s (window_size={model.window_size!r}: windows of "
          f"{model.window_length} steps)")  # fmt: skip
    print(f"mean evaluation return over {args.eval_episodes} episodes (optimal 1.000):")
    print(f"  ResetPPO       {trained:.3f} +- {trained_std:.3f}")
    print(f"  random policy  {random_return:.3f}")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    figure, ax = plt.subplots(figsize=(6, 4))
    ax.plot(curve.timesteps, curve.returns, label="ResetPPO (training episodes)")
    ax.axhline(random_return, color="gray", linestyle="--", label="random policy")
    ax.axhline(1.0, color="green", linestyle=":", label="optimal")
    ax.set_xlabel("timesteps")
    ax.set_ylabel("mean return (last 100 episodes)")
    ax.set_title(f"ResetPPO on {ENV_ID}")
    ax.legend(loc="lower right")
    figure.tight_layout()
    path = args.output_dir / "learning_curve.png"
    figure.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
