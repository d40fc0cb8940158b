"""
Checks made before the fair masking study's counted runs (``PROTOCOL.md`` discloses them; none is a counted run).

- ``--check leduc``: is a memoryless masked policy measurably worse on LeducMatch-v0? The exact per-match bounds
  (OpenSpiel's best response: without memory of earlier hands, and knowing the opponent's style), then
  ``MaskablePPO`` (``MlpPolicy``, no memory) and ``MaskableResetPPO`` trained with the study's settings for
  ``--total-steps`` on seed ``--seed`` (not a study seed) and each evaluated on ``--episodes`` deterministic matches,
  the mean per match with a 95% normal interval and the mean per style.
- ``--check timing``: one short run of every task and arm (``--total-steps``), to size the study's budget: the
  ``learn()`` CPU seconds per 1,000 env steps and the CPU seconds of the whole run (evaluations included).

Writes ``benchmarks/results/masking_fair/checks/<check>.json`` and prints it.

Usage: python benchmarks/studies/masking_fair/masking_fair_check.py --check leduc [--total-steps 204800]
"""

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def _study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("masking_fair_study", HERE / "masking_fair_study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mean_interval(values: list[float]) -> list[float]:
    """``[mean, low, high]``: the mean with a 95% normal interval (1.96 standard errors)."""
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        raise ValueError(f"values must hold at least 2 numbers, got {array.size}")
    half = 1.96 * array.std(ddof=1) / np.sqrt(array.size)
    return [float(array.mean()), float(array.mean() - half), float(array.mean() + half)]


def check_leduc(total_steps: int, seed: int, episodes: int) -> dict[str, Any]:
    """Train the memoryless and the memory arm on LeducMatch-v0 and compare them with the exact bounds."""
    import torch as th

    from benchmarks.envs.leduc_match import LeducMatchEnv, hand_values

    th.set_num_threads(1)
    study = _study()
    hands = LeducMatchEnv().n_hands
    bounds = {name: value * hands for name, value in hand_values().items()}
    result: dict[str, Any] = {"check": "leduc", "total_steps": total_steps, "seed": seed, "episodes": episodes}
    result["bounds_per_match"] = bounds
    for arm in ("maskable_ppo", "maskable_reset_ppo"):
        env = study.make_env("LeducMatch-v0", arm, study.N_ENVS, seed)
        model = study.make_model(arm, env, seed)
        model.verbose = 0
        cpu0 = time.process_time()
        model.learn(total_steps, use_masking=True)
        cpu = time.process_time() - cpu0
        evaluation = study.evaluate(model, "LeducMatch-v0", arm, seed, episodes)
        returns = evaluation["returns"]
        by_style = {
            style: float(np.mean([r for r, s in zip(returns, evaluation["styles"], strict=True) if s == style]))
            for style in sorted(set(evaluation["styles"]))
        }
        result[arm] = {
            "mean_interval": mean_interval(returns), "by_style": by_style, "learn_cpu_seconds": cpu,
            "invalid_per_episode": float(np.mean(evaluation["invalid"])),
        }  # fmt: skip
        print(arm, json.dumps(result[arm]), flush=True)
    return result


def check_timing(total_steps: int, seed: int) -> dict[str, Any]:
    """One short run of every task and arm: ``learn()`` CPU seconds per 1,000 steps and the run's CPU seconds."""
    study = _study()
    result: dict[str, Any] = {"check": "timing", "total_steps": total_steps, "seed": seed, "runs": []}
    with tempfile.TemporaryDirectory() as folder:
        for task in study.TASKS:
            _, every, episodes = study.TASKS[task]
            for arm in [arm for arm in study.ARMS if study.runs_on(task, arm)]:
                cpu0 = time.process_time()
                path = study.result_path(Path(folder), task, arm, seed)
                job = {"task": task, "arm": arm, "seed": seed, "path": str(path), "total_steps": total_steps}
                record = study.run({**job, "snapshot_every": every, "eval_episodes": episodes})
                row = {
                    "task": task, "arm": arm, "steps": record["num_timesteps"],
                    "learn_cpu_per_1000_steps": 1000 * record["learn_cpu_seconds"] / record["num_timesteps"],
                    "run_cpu_seconds": time.process_time() - cpu0, "evaluations": len(record["evaluations"]),
                }  # fmt: skip
                result["runs"].append(row)
                print(json.dumps(row), flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", choices=["leduc", "timing"], required=True)
    parser.add_argument("--total-steps", type=int, default=None, help="leduc: 204800; timing: 20480")
    parser.add_argument("--seed", type=int, default=1000, help="not a study seed (those are 0..9)")
    parser.add_argument("--episodes", type=int, default=2000, help="leduc: evaluation matches per arm")
    parser.add_argument("--out", type=Path, default=_study().OUT / "checks")
    args = parser.parse_args(argv)
    if args.check == "leduc":
        result = check_leduc(args.total_steps or 204_800, args.seed, args.episodes)
    else:
        result = check_timing(args.total_steps or 20_480, args.seed)
    command = "python benchmarks/studies/masking_fair/masking_fair_check.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    result["command"] = command.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.check}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
