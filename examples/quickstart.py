"""
Quick start: ResetPPO as a drop-in for RecurrentPPO.

Trains on the CueRecall memory task, evaluates with SB3's ``evaluate_policy``, saves, loads, and runs
one episode by hand, carrying the recurrent memory between ``predict`` calls (an LSTM's ``(hidden, cell)``, a
GRU's ``(hidden,)``: ``--policy MlpGruPolicy``).

Usage: python examples/quickstart.py [--total-timesteps 20000] [--policy MlpLstmPolicy]
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecall-v0)
from sb3_reset_ppo import ResetPPO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=20_000, help="env steps to train")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the envs")
    parser.add_argument("--policy", default="MlpLstmPolicy", choices=["MlpLstmPolicy", "MlpGruPolicy"], help="memory cell")
    args = parser.parse_args()
    th.set_num_threads(1)  # one thread: the fastest for small recurrent networks (benchmarks/speed/bench_threads.py)

    env = make_vec_env("CueRecall-v0", n_envs=8, seed=args.seed)
    # Every RecurrentPPO argument works. Not its defaults here, so that the task is learned in 20,000 steps: a small
    # network, short rollouts, few epochs, a higher learning rate and a short horizon. ResetPPO's own settings
    # (window_size, boundary, weighting, ...) stay at their defaults: windows of min(batch_size, n_steps) = 32 steps
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
    )
    model.learn(args.total_timesteps)
    mean_return, std_return = evaluate_policy(model, env, n_eval_episodes=100)
    print(f"evaluation: {mean_return:.3f} +- {std_return:.3f} (random policy 0.25, optimal 1.0)")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "reset_ppo_cue_recall.zip"
        model.save(path)
        model = ResetPPO.load(path, env=env)

    # Predict by hand: the memory goes back in at every step, episode_start resets it
    single = make_vec_env("CueRecall-v0", n_envs=1, seed=args.seed + 1)
    obs = single.reset()
    state, episode_start, total, done = None, np.ones((1,), dtype=bool), 0.0, False
    while not done:
        assert isinstance(obs, np.ndarray)
        action, state = model.predict(obs, state=state, episode_start=episode_start, deterministic=True)
        obs, reward, dones, _ = single.step(action)
        episode_start = dones
        total += float(reward[0])
        done = bool(dones[0])
    assert state is not None
    print(f"one episode after save/load: return {total:.1f} (memory: {len(state)} array(s) of shape {state[0].shape})")


if __name__ == "__main__":
    main()
