"""
Drop-in learning study: a RecurrentPPO setup with only the class name changed, and ``window_stride``.

For each env the settings are those of ``benchmarks/kit/ppo_lstm.yml`` (sb3-contrib's RecurrentPPO as the RL
Zoo tunes it; the same file the benchmark grid uses). Variants, same arguments otherwise:

- ``recurrent_ppo``: sb3-contrib's ``RecurrentPPO``;
- ``reset``: ``ResetPPO`` with its defaults (``window_stride = window_size``: one pass over the data per epoch);
- ``reset_stride1``: ``ResetPPO`` with ``window_stride=1`` (every window every epoch);
- ``reset_equal_time``: ``ResetPPO`` with its defaults, trained for as many env steps as fit in the CPU time
  ``reset_stride1`` took with the same seed (``steps * cpu(stride1) / cpu(reset)``, rounded to whole
  rollouts; run after both).

Each run is one process with one torch thread; time is the process's CPU time in ``learn()`` (robust to
other processes on the machine, unlike wall time), also reported as wall time. Endpoints per run: the mean
return of a deterministic evaluation after training (``--eval-episodes`` episodes on fresh seeds), the mean
training return over the last 10% of rollouts, and over all rollouts (area under the learning curve).
Resumable: finished runs in the results file are skipped.

Usage: python benchmarks/speed/bench_stride.py [--envs ...] [--seeds 5] [--workers 2] [--out benchmarks/results/stride.jsonl]
"""

import argparse
import json
import multiprocessing as mp
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SETTINGS_FILE = HERE.parent / "kit" / "ppo_lstm.yml"
ENVS = ["CueRecall-v0", "EarlyChoice-v0", "CartPoleNoVel-v1"]
VARIANTS = ["recurrent_ppo", "reset", "reset_stride1", "reset_equal_time"]
EVAL_EPISODES = {"CartPoleNoVel-v1": 30}


def zoo_settings(env_id: str) -> dict[str, Any]:
    """The env's entry of ``ppo_lstm.yml`` as constructor arguments (``lin_x`` schedules, ``policy_kwargs``)."""
    from rl_zoo3.utils import linear_schedule
    from torch import nn

    hyperparams = dict(yaml.safe_load(SETTINGS_FILE.read_text())[env_id])
    settings = {
        "n_timesteps": int(float(hyperparams.pop("n_timesteps"))),
        "normalize": bool(hyperparams.pop("normalize", False)),
        "n_envs": int(hyperparams.pop("n_envs", 1)),
        "policy": hyperparams.pop("policy"),
    }
    for key in ("learning_rate", "clip_range"):
        value = hyperparams.get(key)
        if isinstance(value, str) and value.startswith("lin_"):
            hyperparams[key] = linear_schedule(float(value[len("lin_") :]))
    if isinstance(hyperparams.get("policy_kwargs"), str):
        # As the RL Zoo does with its own (trusted) files
        hyperparams["policy_kwargs"] = eval(hyperparams["policy_kwargs"], {"nn": nn, "dict": dict})
    settings["kwargs"] = hyperparams
    return settings


def run(job: dict[str, Any]) -> dict[str, Any]:
    import time

    import numpy as np
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)
    import torch as th
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    import sb3_reset_ppo.envs  # noqa: F401  (registers the memory tasks)
    from benchmarks.speed.bench_train import Curve
    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(job.get("threads", 1))
    settings = zoo_settings(job["env"])
    kwargs: dict[str, Any] = dict(settings["kwargs"])
    env = make_vec_env(job["env"], n_envs=settings["n_envs"], seed=job["seed"])
    if settings["normalize"]:
        env = VecNormalize(env, gamma=kwargs.get("gamma", 0.99))
    if job["variant"] == "reset_stride1":
        kwargs["window_stride"] = 1
    algo = RecurrentPPO if job["variant"] == "recurrent_ppo" else ResetPPO
    model = algo(settings["policy"], env, seed=job["seed"], **kwargs)
    curve = Curve()
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(job["timesteps"], callback=curve)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

    eval_env = make_vec_env(job["env"], n_envs=1, seed=10_000 + job["seed"])
    if isinstance(env, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
    episodes = EVAL_EPISODES.get(job["env"], 100)
    episode_returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True
    )
    returns = [point[2] for point in curve.points]
    last = returns[-max(1, len(returns) // 10) :]
    return {
        **job,
        "eval_return": float(np.mean(episode_returns)),
        "eval_episodes": episodes,
        "last10_return": float(np.mean(last)),
        "mean_return_over_training": float(np.mean(returns)),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "curve": curve.points,
    }


def _jobs(
    envs: list[str], variants: list[str], seeds: int, done: list[dict[str, Any]], scale: float = 1.0
) -> list[dict[str, Any]]:
    """The runs still to do; ``reset_equal_time`` only once both runs it is timed against are done."""
    finished = {(r["env"], r["variant"], r["seed"]): r for r in done}
    jobs = []
    for seed in range(seeds):
        for env_id in envs:
            settings = zoo_settings(env_id)
            for variant in variants:
                if (env_id, variant, seed) in finished:
                    continue
                rollout = settings["n_envs"] * settings["kwargs"].get("n_steps", 128)
                timesteps = max(1, round(settings["n_timesteps"] * scale / rollout)) * rollout
                if variant == "reset_equal_time":
                    stride1 = finished.get((env_id, "reset_stride1", seed))
                    default = finished.get((env_id, "reset", seed))
                    if stride1 is None or default is None:
                        continue
                    factor = stride1["cpu_seconds"] / default["cpu_seconds"]
                    timesteps = max(1, round(default["timesteps"] * factor / rollout)) * rollout
                jobs.append({"env": env_id, "variant": variant, "seed": seed, "timesteps": timesteps})
    return jobs


def summary(done: list[dict[str, Any]], envs: list[str]) -> str:
    """Markdown table: per env and variant, mean +- std over seeds of every endpoint, and the times."""
    lines = [
        "| env | variant | seeds | env steps | evaluation return | last 10% of training | over training "
        "| CPU s per run | wall s per run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(values: list[float], digits: int) -> str:
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.{digits}f} +- {spread:.{digits}f}"

    for env_id in envs:
        digits = 0 if env_id == "CartPoleNoVel-v1" else 3
        for variant in VARIANTS:
            rows = [r for r in done if r["env"] == env_id and r["variant"] == variant]
            if not rows:
                continue
            steps = statistics.median(r["timesteps"] for r in rows)
            lines.append(
                f"| {env_id} | {variant} | {len(rows)} | {steps:,.0f} | {cell([r['eval_return'] for r in rows], digits)} "
                f"| {cell([r['last10_return'] for r in rows], digits)} "
                f"| {cell([r['mean_return_over_training'] for r in rows], digits)} "
                f"| {statistics.median(r['cpu_seconds'] for r in rows):.0f} "
                f"| {statistics.median(r['wall_seconds'] for r in rows):.0f} |"
            )
    return "\n".join(lines)


COMPARISONS = (("reset", "recurrent_ppo"), ("reset", "reset_stride1"), ("reset_equal_time", "reset_stride1"))
ENDPOINTS = ("eval_return", "last10_return", "mean_return_over_training")


def comparisons(done: list[dict[str, Any]], envs: list[str]) -> str:
    """Markdown table: per env, differences of means between variants with Welch's t-test p-values."""
    from scipy.stats import ttest_ind

    lines = [
        "| env | comparison | evaluation return: difference (p) | last 10%: difference (p) | over training: difference (p) |",
        "|---|---|---|---|---|",
    ]
    for env_id in envs:
        for a, b in COMPARISONS:
            rows = {v: [r for r in done if r["env"] == env_id and r["variant"] == v] for v in (a, b)}
            if min(len(rows[a]), len(rows[b])) < 2:
                continue
            cells = []
            for key in ENDPOINTS:
                x, y = [r[key] for r in rows[a]], [r[key] for r in rows[b]]
                p = ttest_ind(x, y, equal_var=False).pvalue
                cells.append(f"{statistics.mean(x) - statistics.mean(y):+.3g} ({'n/a' if p != p else f'{p:.2f}'})")
            lines.append(f"| {env_id} | {a} - {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "stride.jsonl")
    parser.add_argument("--summary-only", action="store_true", help="print the table of the finished runs")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every env's step budget (smoke tests)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: bench_threads.py)")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    # Two rounds: the equal-time runs need the times of the first
    for _ in range(2 if not args.summary_only else 0):
        jobs = [{**job, "threads": args.threads} for job in _jobs(args.envs, args.variants, args.seeds, done, args.scale)]
        with mp.get_context("spawn").Pool(args.workers, maxtasksperchild=1) as pool:
            for result in pool.imap_unordered(run, jobs):
                with args.out.open("a") as out:
                    out.write(json.dumps(result) + "\n")
                done.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "curve"}), flush=True)
    print(f"\n{summary(done, args.envs)}\n\n{comparisons(done, args.envs)}")


if __name__ == "__main__":
    main()
