"""
The remainder check of issue 47 (benchmarks/studies/remainder/PROTOCOL.md): ResetPPO with the epoch's remainder left out
against the short minibatch of commit c85b79c2, on two non-dividing settings, 10 seeds each.

Run (resumable; two runs at a time; the "short" arm from a git worktree of c85b79c2)::

    git worktree add /tmp/remainder-short c85b79c2
    git worktree add /tmp/remainder-left-out 1a790422
    python benchmarks/studies/remainder/remainder_check.py run \\
        --short-tree /tmp/remainder-short --left-out-tree /tmp/remainder-left-out
    python benchmarks/studies/remainder/remainder_check.py report

Each run is one JSON file (and its log) under benchmarks/results/remainder/<arm>/<task>/seed<N>.json.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]
RUNS = BENCHMARKS / "results" / "remainder"
ARMS = ("left_out", "short")
SEEDS = range(10)
COMMON: dict[str, Any] = {
    "learning_rate": 2e-3,
    "gamma": 0.9,
    "ent_coef": 0.01,
    "n_steps": 100,
    "policy_kwargs": {"lstm_hidden_size": 32, "net_arch": [32]},
}
TASKS: dict[str, dict[str, Any]] = {
    "CueRecall-v0": {"n_envs": 8, "batch_size": 64, "budget": 30_000, "kwargs": COMMON},
    "EarlyChoice-v0": {"n_envs": 2, "batch_size": 48, "budget": 20_000, "kwargs": {**COMMON, "gamma": 0.95}},
    # Amendment 1: the review's example, ResetPPO's defaults otherwise
    "CartPole-v1": {"n_envs": 1, "batch_size": 64, "budget": 30_000, "kwargs": {"n_steps": 200}, "eval_episodes": 10},
}
N_EVALUATIONS = 10
EVAL_EPISODES = 50


def train_one(task: str, seed: int, out: pathlib.Path) -> None:
    """One run, in this process: the arm is whichever sb3_reset_ppo is first on the path."""
    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    import sb3_reset_ppo
    import sb3_reset_ppo.envs
    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(1)
    config = TASKS[task]
    settings = dict(config["kwargs"])
    env = make_vec_env(task, n_envs=config["n_envs"], seed=seed)
    eval_env = make_vec_env(task, n_envs=1, seed=1000 + seed)
    model = ResetPPO("MlpLstmPolicy", env, batch_size=config["batch_size"], seed=seed, **settings)
    every = config["budget"] // N_EVALUATIONS
    record: dict[str, Any] = {
        "task": task,
        "seed": seed,
        "settings": {**settings, "n_envs": config["n_envs"], "batch_size": config["batch_size"]},
        "package": str(pathlib.Path(sb3_reset_ppo.__file__).parent),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=pathlib.Path(sb3_reset_ppo.__file__).parent, capture_output=True, text=True
        ).stdout.strip(),
        "diff": subprocess.run(
            ["git", "diff", "HEAD", "--", "sb3_reset_ppo"],
            cwd=pathlib.Path(sb3_reset_ppo.__file__).parent.parent,
            capture_output=True,
            text=True,
        ).stdout,
        "command": sys.argv,
        "evaluations": [],
    }

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = every
            self.eval_cpu = 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += every
                start = time.process_time()
                returns, _ = evaluate_policy(
                    model,
                    eval_env,
                    n_eval_episodes=config.get("eval_episodes", EVAL_EPISODES),
                    deterministic=True,
                    return_episode_rewards=True,
                )
                self.eval_cpu += time.process_time() - start
                record["evaluations"].append(
                    {
                        "timesteps": self.num_timesteps,
                        "mean_return": float(np.mean(returns)),
                        "learn_cpu": time.process_time() - begin - self.eval_cpu,
                    }
                )
            return True

    begin = time.process_time()
    model.learn(config["budget"], callback=Evaluate())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))


def _command(arm: str, task: str, seed: int, trees: dict[str, pathlib.Path]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(trees[arm]))
    out = RUNS / arm / task / f"seed{seed}.json"
    return [sys.executable, __file__, "one", task, str(seed), str(out)], env


def run(trees: dict[str, pathlib.Path]) -> None:
    jobs = [
        (arm, task, seed)
        for seed in SEEDS
        for task in TASKS
        for arm in ARMS
        if not (RUNS / arm / task / f"seed{seed}.json").exists()
    ]

    def launch(job: tuple[str, str, int]) -> None:
        arm, task, seed = job
        command, env = _command(arm, task, seed, trees)
        log = RUNS / arm / task / f"seed{seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as handle:
            code = subprocess.call(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        print(f"{arm} {task} seed {seed}: {'done' if code == 0 else f'FAILED ({code})'}", flush=True)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(launch, jobs))


def report() -> str:
    from sb3_reset_ppo.experiments.stats import aggregate, holm, mann_whitney, probability_triple

    lines = [
        "| task | arm | runs | final IQM (95% CI) | curve mean IQM (95% CI) | learn() CPU s (median) |",
        "|---|---|---|---|---|---|",
    ]
    p_values, names, probabilities = [], [], []
    for task in TASKS:
        final: dict[str, np.ndarray] = {}
        curve: dict[str, np.ndarray] = {}
        cpu: dict[str, float] = {}
        for arm in ARMS:
            records = [json.loads(path.read_text()) for path in sorted((RUNS / arm / task).glob("seed*.json"))]
            final[arm] = np.array([[np.mean([e["mean_return"] for e in r["evaluations"][-3:]])] for r in records])
            curve[arm] = np.array([[np.mean([e["mean_return"] for e in r["evaluations"]])] for r in records])
            cpu[arm] = float(np.median([r["evaluations"][-1]["learn_cpu"] for r in records]))
        if min(len(scores) for scores in final.values()) == 0:
            continue
        point, interval, poi, poi_ci = aggregate(final, baseline="short")
        curve_point, curve_interval, _, _ = aggregate(curve)
        for arm in ARMS:
            lines.append(
                f"| {task} | {arm} | {len(final[arm])} | {point[arm][0]:.3f} ({interval[arm][0, 0]:.3f} to "
                f"{interval[arm][1, 0]:.3f}) | {curve_point[arm][0]:.3f} ({curve_interval[arm][0, 0]:.3f} to "
                f"{curve_interval[arm][1, 0]:.3f}) | {cpu[arm]:.1f} |"
            )
        p, method = mann_whitney(final["left_out"][:, 0], final["short"][:, 0])
        p_values.append(p)
        names.append(f"{task} ({method})")
        probability, low, high = probability_triple(poi, poi_ci, "left_out,short")
        probabilities.append(f"{probability:.2f} ({low:.2f} to {high:.2f})")
    lines.append("")
    lines.append("| task | P(left out > short), final | Mann-Whitney p | Holm p |")
    lines.append("|---|---|---|---|")
    for name, text, p, adjusted in zip(names, probabilities, p_values, holm(p_values), strict=True):
        lines.append(f"| {name} | {text} | {p:.3f} | {adjusted:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="train every missing run, two at a time")
    run_parser.add_argument("--short-tree", type=pathlib.Path, required=True, help="a git worktree of c85b79c2")
    run_parser.add_argument("--left-out-tree", type=pathlib.Path, required=True, help="a git worktree of 1a790422")
    one = commands.add_parser("one", help="one run in this process (used by run)")
    one.add_argument("task", choices=sorted(TASKS))
    one.add_argument("seed", type=int)
    one.add_argument("out", type=pathlib.Path)
    commands.add_parser("report", help="print the report of the finished runs")
    args = parser.parse_args()
    if args.command == "run":
        run({"short": args.short_tree, "left_out": args.left_out_tree})
    elif args.command == "one":
        train_one(args.task, args.seed, args.out)
    else:
        print(report())


if __name__ == "__main__":
    main()
