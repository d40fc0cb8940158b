"""
Effect on learning of minibatches made of runs of consecutive windows (``consecutive_windows``).

Trains ResetPPO with fully shuffled windows (``consecutive_windows=1``) and with runs (the default, 16) on
the same envs and seeds, in parallel worker processes (one torch thread each), and prints the mean return
of the last 100 training episodes at the end and averaged over training (area under the learning curve).
Resumable: finished runs in the results file are skipped.

Usage: python benchmarks/speed/bench_consecutive.py [--seeds 5] [--workers 2] [--out benchmarks/results/consecutive.jsonl]
"""

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# Per env: its budget, ResetPPO's settings (n_steps 64 and 4 epochs for all) and whether to normalise
SETTINGS: dict[str, dict[str, Any]] = {
    "CueRecall-v0": dict(total_timesteps=30_000, normalize=False, kwargs=dict(
        learning_rate=2e-3, gamma=0.9, ent_coef=0.01, policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]))),
    "CartPoleNoVel-v1": dict(total_timesteps=100_000, normalize=True, kwargs=dict(
        learning_rate=1e-3, gamma=0.98, gae_lambda=0.8,
        policy_kwargs=dict(lstm_hidden_size=64, ortho_init=False, net_arch=dict(pi=[64], vf=[64])))),
    "CueRecallImage-v0": dict(total_timesteps=30_000, normalize=False, policy="CnnLstmPolicy", kwargs=dict(
        learning_rate=1e-3, gamma=0.9, ent_coef=0.01,
        policy_kwargs=dict(lstm_hidden_size=64, features_extractor_kwargs=dict(features_dim=128), net_arch=[64]))),
}  # fmt: skip


def run(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)
    import torch as th
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import sb3_reset_ppo.envs  # noqa: F401
    from benchmarks.speed.bench_train import Curve
    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(job.get("threads", 1))
    setting = SETTINGS[job["env"]]
    env = make_vec_env(job["env"], n_envs=8, seed=job["seed"])
    if setting["normalize"]:
        env = VecNormalize(env, norm_reward=True)
    model = ResetPPO(
        setting.get("policy", "MlpLstmPolicy"), env, consecutive_windows=job["consecutive_windows"], seed=job["seed"],
        # As measured for the README: every window every epoch, 64 windows of 16 per minibatch
        window_stride=1, batch_size=64 * 16, n_steps=64, n_epochs=4, **setting["kwargs"],
    )  # fmt: skip
    curve = Curve()
    start = time.perf_counter()
    model.learn(setting["total_timesteps"], callback=curve)
    returns = [point[2] for point in curve.points]
    return {
        **job,
        "final_return": returns[-1],
        "mean_return_over_training": float(np.mean(returns)),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs", nargs="+", default=["CueRecall-v0", "CartPoleNoVel-v1"], choices=list(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/consecutive.jsonl"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: bench_threads.py)")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    finished = {(r["env"], r["consecutive_windows"], r["seed"]) for r in done}
    jobs = [
        {"env": env, "consecutive_windows": cw, "seed": seed, "threads": args.threads}
        for seed in range(args.seeds)
        for env in args.envs
        for cw in (1, 16)
        if (env, cw, seed) not in finished
    ]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for result in pool.imap_unordered(run, jobs):
            with args.out.open("a") as out:
                out.write(json.dumps(result) + "\n")
            done.append(result)
            print(json.dumps(result), flush=True)
    print("\n| env | consecutive_windows | seeds | final return (mean +- std) | mean return over training | seconds per run |")
    print("|---|---|---|---|---|---|")
    for env in args.envs:
        for cw in (1, 16):
            rows = [r for r in done if r["env"] == env and r["consecutive_windows"] == cw]
            if not rows:
                continue
            final = [r["final_return"] for r in rows]
            auc = [r["mean_return_over_training"] for r in rows]
            spread = statistics.stdev(final) if len(final) > 1 else 0.0
            print(
                f"| {env} | {cw} | {len(rows)} | {statistics.mean(final):.3f} +- {spread:.3f} "
                f"| {statistics.mean(auc):.3f} | {statistics.mean(r['seconds'] for r in rows):.0f} |"
            )


if __name__ == "__main__":
    main()
