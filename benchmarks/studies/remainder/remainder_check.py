"""
The remainder check of issue 47 (benchmarks/studies/remainder/PROTOCOL.md): ResetPPO with the epoch's remainder left out
against the short minibatch of commit c85b79c2, on two non-dividing settings, 10 seeds each.

Run (resumable; two runs at a time; the "short" arm from a git worktree of c85b79c2)::

    git worktree add /tmp/remainder-short c85b79c2
    git worktree add /tmp/remainder-left-out 1a790422
    python benchmarks/studies/remainder/remainder_check.py run \\
        --short-tree /tmp/remainder-short --left-out-tree /tmp/remainder-left-out
    python benchmarks/studies/remainder/remainder_check.py report --out benchmarks/studies/remainder/RESULTS.md \\
        --json benchmarks/results/remainder_summary.json

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
    "learning_rate": 2e-3, "gamma": 0.9, "ent_coef": 0.01, "n_steps": 100,
    "policy_kwargs": {"lstm_hidden_size": 32, "net_arch": [32]},
}  # fmt: skip
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

    import sb3_reset_ppo.envs  # registers the tasks (and binds sb3_reset_ppo)
    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(1)
    config = TASKS[task]
    settings = dict(config["kwargs"])
    env = make_vec_env(task, n_envs=config["n_envs"], seed=seed)
    eval_env = make_vec_env(task, n_envs=1, seed=1000 + seed)
    model = ResetPPO("MlpLstmPolicy", env, batch_size=config["batch_size"], seed=seed, **settings)
    every = config["budget"] // N_EVALUATIONS
    package = pathlib.Path(sb3_reset_ppo.__file__).parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=package.parent, capture_output=True, text=True).stdout

    record: dict[str, Any] = {
        "task": task, "seed": seed,
        "settings": {**settings, "n_envs": config["n_envs"], "batch_size": config["batch_size"]},
        "package": str(package), "commit": git("rev-parse", "HEAD").strip(),
        "diff": git("diff", "HEAD", "--", "sb3_reset_ppo"), "command": sys.argv, "evaluations": [],
    }  # fmt: skip

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = every
            self.eval_cpu = 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += every
                start = time.process_time()
                episodes = config.get("eval_episodes", EVAL_EPISODES)
                returns, _ = evaluate_policy(model, eval_env, episodes, deterministic=True, return_episode_rewards=True)
                self.eval_cpu += time.process_time() - start
                learn_cpu = time.process_time() - begin - self.eval_cpu
                mean = float(np.mean(returns))
                record["evaluations"].append({"timesteps": self.num_timesteps, "mean_return": mean, "learn_cpu": learn_cpu})
            return True

    begin = time.process_time()
    model.learn(config["budget"], callback=Evaluate())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))


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
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(trees[arm]))
        command = [sys.executable, __file__, "one", task, str(seed), str(RUNS / arm / task / f"seed{seed}.json")]
        log = RUNS / arm / task / f"seed{seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as handle:
            code = subprocess.call(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        print(f"{arm} {task} seed {seed}: {'done' if code == 0 else f'FAILED ({code})'}", flush=True)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(launch, jobs))


def report() -> tuple[str, dict[str, Any]]:
    """The tables of the finished runs (Markdown) and their estimates (a summary: per task, each arm's IQMs and P)."""
    from benchmarks.kit import rundata  # benchmarks/kit/rundata.py
    from benchmarks.kit.report import estimate_text  # benchmarks/kit/report.py
    from sb3_reset_ppo.experiments.stats import aggregate, holm, interval_triple, mann_whitney, probability_triple

    rundata.ensure_all()  # the stored runs' folders, unpacked from their tables where needed

    lines = [
        "| task | arm | runs | final IQM (95% CI) | curve mean IQM (95% CI) | learn() CPU s (median) |",
        "|---|---|---|---|---|---|",
    ]
    p_values, names, probabilities = [], [], []
    summary: dict[str, Any] = {"tasks": {}}
    for task in TASKS:
        final: dict[str, np.ndarray] = {}
        curve: dict[str, np.ndarray] = {}
        cpu: dict[str, float] = {}
        for arm in ARMS:
            records = [json.loads(path.read_text()) for path in sorted((RUNS / arm / task).glob("seed*.json"))]
            # (runs,) -> (runs, 1 task): rliable's score layout
            final[arm] = np.array([[np.mean([e["mean_return"] for e in r["evaluations"][-3:]])] for r in records])
            curve[arm] = np.array([[np.mean([e["mean_return"] for e in r["evaluations"]])] for r in records])
            cpu[arm] = float(np.median([r["evaluations"][-1]["learn_cpu"] for r in records])) if records else 0.0
        if min(len(scores) for scores in final.values()) == 0:
            continue
        point, interval, poi, poi_ci = aggregate(final, baseline="short")
        curve_point, curve_interval, _, _ = aggregate(curve)
        entry: dict[str, Any] = {}
        for arm in ARMS:
            final_iqm = interval_triple(point[arm][0], *interval[arm][:, 0])
            curve_iqm = interval_triple(curve_point[arm][0], *curve_interval[arm][:, 0])
            lines.append(
                f"| {task} | {arm.replace('_', ' ')} | {len(final[arm])} | {estimate_text(final_iqm)} | "
                f"{estimate_text(curve_iqm)} | {cpu[arm]:.1f} |"
            )
            entry[arm] = {
                "runs": len(final[arm]),
                "final_iqm": final_iqm,
                "curve_iqm": curve_iqm,
                "learn_cpu_median": cpu[arm],
            }
        p, method = mann_whitney(final["left_out"][:, 0], final["short"][:, 0])
        p_values.append(p)
        names.append(f"{task} ({method})")
        triple = probability_triple(poi, poi_ci, "left_out,short")
        probabilities.append(estimate_text(triple, digits=2))
        summary["tasks"][task] = {**entry, "probability_left_out_better": triple, "mann_whitney_p": p}
    lines.append("")
    lines.append(f"| task | P(left out > short), final | Mann-Whitney p | Holm p ({len(p_values)} tasks) |")
    lines.append("|---|---|---|---|")
    adjusted = holm(p_values)
    for name, text, p, p_holm in zip(names, probabilities, p_values, adjusted, strict=True):
        lines.append(f"| {name} | {text} | {p:.3f} | {p_holm:.3f} |")
    for task, p_holm in zip(summary["tasks"], adjusted, strict=True):
        summary["tasks"][task]["holm_p"] = p_holm
    return "\n".join(lines), summary


def page(tables: str, notes: pathlib.Path) -> str:
    """The study's results page: its title, the tables, then the notes (settings, how to rerun, how the runs went)."""
    text = f"# Does leaving an epoch's remainder out cost learning? (issue 47)\n\n## Results\n\n{tables}\n"
    return text + (f"\n{notes.read_text()}" if notes.exists() else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="train every missing run, two at a time")
    run_parser.add_argument("--short-tree", type=pathlib.Path, required=True, help="a git worktree of c85b79c2")
    run_parser.add_argument("--left-out-tree", type=pathlib.Path, required=True, help="a git worktree of 1a790422")
    one = commands.add_parser("one", help="one run in this process (used by run)")
    one.add_argument("task", choices=sorted(TASKS))
    one.add_argument("seed", type=int)
    one.add_argument("out", type=pathlib.Path)
    report_parser = commands.add_parser("report", help="the report of the finished runs (printed, or written with --out)")
    report_parser.add_argument("--out", type=pathlib.Path, default=None, help="write the results page here")
    report_parser.add_argument("--json", type=pathlib.Path, default=None, help="write the estimates here")
    report_parser.add_argument("--notes", type=pathlib.Path, default=HERE / "NOTES.md", help="appended to the page")
    args = parser.parse_args(argv)
    if args.command == "run":
        run({"short": args.short_tree, "left_out": args.left_out_tree})
    elif args.command == "one":
        train_one(args.task, args.seed, args.out)
    else:
        tables, summary = report()
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
        if args.out:
            args.out.write_text(page(tables, args.notes))
        else:
            print(tables)


if __name__ == "__main__":
    main()
