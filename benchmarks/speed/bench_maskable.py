"""
Speed of ``learn()`` with invalid-action masks: MaskableResetPPO against ResetPPO, side by side in one process.

Issue 43 asks that ``learn()`` of ``MaskableResetPPO`` stay within 1.15x of ``ResetPPO``'s on the same task, issue 61
within 1.1x (``--bound``). Per task
and hidden size (``--hidden``, default 64 and 256: ``policy_kwargs=dict(lstm_hidden_size=H)``, ``MlpLstmPolicy``,
8 envs, RecurrentPPO's defaults otherwise: ``n_steps=128``, ``batch_size=128``, ``n_epochs=10``), four models get
the same arguments and learn ``--learn-steps`` env steps (default: 2 rollouts) from a fresh model, ``--repeats``
times, interleaved so that all see the same machine load:

- ``recurrent_ppo``: sb3-contrib's ``RecurrentPPO`` (no masks), for context;
- ``reset``: ``ResetPPO`` (no masks);
- ``maskable_off``: ``MaskableResetPPO`` with ``learn(..., use_masking=False)`` (trains as ``ResetPPO``);
- ``maskable``: ``MaskableResetPPO`` with ``learn(..., use_masking=True)``: the env's masks collected at every step,
  stored, and applied in every window.

Tasks:

- ``masked``: ``MaskedCueRecall-v0``, the masked memory task. The models without masks take invalid actions,
  which end episodes, so their episodes are shorter and more numerous than the masked model's (the ``episodes``
  column): the same task, not the same trajectories.
- ``all_valid``: ``CueRecall-v0`` with sb3-contrib's ``ActionMasker`` giving an all-true mask at every step. A mask
  that allows every action leaves the distribution unchanged, so the ResetPPO models (same seed) take the same
  actions and play the same episodes: the difference is the cost of masking alone (collecting, storing and
  applying the masks).

The figures are medians over the repeats of the process's CPU seconds (one torch thread: the wall time on an idle
machine, and unlike wall time not inflated by other processes on shared cores; wall seconds are in the JSON): of
``learn()``, what a user waits for, and of one ``train()`` call; ``ratio`` is ``maskable``'s over ``reset``'s.
Writes ``<out>.json`` and ``<out>.txt`` (what it prints, the exact command first).

Usage: python benchmarks/speed/bench_maskable.py [--tasks masked all_valid] [--hidden 64 256] [--repeats 7]
       [--learn-steps N] [--out benchmarks/results/bench_maskable]
"""

import argparse
import functools
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecall-v0 and MaskedCueRecall-v0)
from benchmarks.speed import bench_train
from sb3_reset_ppo import MaskableResetPPO, ResetPPO

ROOT = Path(__file__).resolve().parents[2]
TASKS: dict[str, str] = {"masked": "MaskedCueRecall-v0", "all_valid": "CueRecall-v0"}
VARIANTS = ("recurrent_ppo", "reset", "maskable_off", "maskable")
LABELS = {
    "recurrent_ppo": "RecurrentPPO",
    "reset": "ResetPPO",
    "maskable_off": "MaskableResetPPO use_masking=False",
    "maskable": "MaskableResetPPO",
}
# The default bound on maskable's learn() over reset's (issue 43's; ``--bound`` sets another)
BOUND = 1.15


def all_valid(env: Any) -> np.ndarray:
    """An ``ActionMasker`` mask function: every action valid."""
    return np.ones(env.action_space.n, dtype=bool)


def make_env(task: str, n_envs: int, seed: int) -> VecEnv:
    """The task's vectorised env (``make_vec_env``: each env in a ``Monitor``), seeded."""
    wrapper = functools.partial(ActionMasker, action_mask_fn=all_valid) if task == "all_valid" else None
    return make_vec_env(TASKS[task], n_envs=n_envs, seed=seed, wrapper_class=wrapper)


def make_model(variant: str, task: str, hidden: int, args: argparse.Namespace) -> RecurrentPPO:
    """The same arguments for every variant: only the class differs."""
    env = make_env(task, args.n_envs, args.seed)
    kwargs: dict[str, Any] = dict(
        n_steps=args.n_steps, n_epochs=args.n_epochs, seed=args.seed, policy_kwargs=dict(lstm_hidden_size=hidden), device="cpu"
    )
    classes: dict[str, type[RecurrentPPO]] = {"recurrent_ppo": RecurrentPPO, "reset": ResetPPO}
    return classes.get(variant, MaskableResetPPO)("MlpLstmPolicy", env, **kwargs)


def timed_learn(variant: str, model: RecurrentPPO, steps: int) -> dict[str, Any]:
    """One ``learn()`` from a fresh model (:func:`bench_train.timed_learn`'s figures), and the episodes played."""
    masking = {"use_masking": variant == "maskable"} if isinstance(model, MaskableResetPPO) else {}
    figures = bench_train.timed_learn(model, steps, **masking)
    assert model.env is not None
    return {**figures, "episodes": sum(len(rewards) for rewards in model.env.env_method("get_episode_rewards"))}


def bench_setting(task: str, hidden: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every variant on one task and hidden size, ``args.repeats`` interleaved times; medians and ratios."""
    learn_steps = args.learn_steps or 2 * args.n_steps * args.n_envs
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in args.variants}
    for _ in range(args.repeats):
        for variant in args.variants:
            runs[variant].append(timed_learn(variant, make_model(variant, task, hidden, args), learn_steps))
    result: dict[str, Any] = {"task": task, "env_id": TASKS[task], "lstm_hidden_size": hidden, "learn_steps": learn_steps}
    for variant in args.variants:
        medians = {key: statistics.median(run[key] for run in runs[variant]) for key in runs[variant][0]}
        result[variant] = {**medians, "runs": runs[variant]}
    for variant in args.variants:
        for baseline in ("reset", "recurrent_ppo"):
            if variant != baseline and baseline in result:
                for key in ("learn", "train"):
                    result[variant][f"{key}_over_{baseline}"] = result[variant][f"{key}_cpu"] / result[baseline][f"{key}_cpu"]
    return result


def table(results: list[dict[str, Any]], variants: list[str]) -> list[str]:
    """The markdown tables: learn() seconds and ratios, then train() seconds and episodes."""
    header = "| task | hidden |" + "".join(f" {LABELS[v]} learn() s |" for v in variants)
    header += " maskable / ResetPPO | use_masking=False / ResetPPO | maskable / RecurrentPPO |"
    lines = [header, "|" + "---|" * header.count(" |")]
    for r in results:
        row = f"| {r['task']} | {r['lstm_hidden_size']} |" + "".join(f" {r[v]['learn_cpu']:.2f} |" for v in variants)
        for variant, baseline in (("maskable", "reset"), ("maskable_off", "reset"), ("maskable", "recurrent_ppo")):
            ratio = r.get(variant, {}).get(f"learn_over_{baseline}")
            row += f" {ratio:.3f} |" if ratio is not None else " - |"
        lines.append(row)
    lines.append("")
    header = "| task | hidden |" + "".join(f" {LABELS[v]} train() s |" for v in variants)
    header += "".join(f" {LABELS[v]} episodes |" for v in variants)
    lines += [header, "|" + "---|" * header.count(" |")]
    for r in results:
        row = f"| {r['task']} | {r['lstm_hidden_size']} |" + "".join(f" {r[v]['train_cpu']:.2f} |" for v in variants)
        row += "".join(f" {r[v]['episodes']:.0f} |" for v in variants)
        lines.append(row)
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--hidden", nargs="+", type=int, default=[64, 256], help="LSTM hidden sizes (default: %(default)s)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--learn-steps", type=int, default=None, help="env steps per learn() (default: 2 rollouts)")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bound", type=float, default=BOUND, help="bound on maskable / ResetPPO learn() (default: %(default)s)"
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_maskable"),
                        help="writes OUT.json and OUT.txt (default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("repeats", "n_envs", "n_steps", "n_epochs", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if "maskable" in args.variants and "reset" not in args.variants:
        parser.error("--variants: the ratio needs 'reset' beside 'maskable'")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark; print and write the results."""
    args = parse_args(argv)
    th.set_num_threads(args.threads)
    printout = bench_train.Printout("bench_maskable.py", sys.argv[1:] if argv is None else argv)
    say = printout.say
    say(
        f"settings: MlpLstmPolicy n_envs={args.n_envs} n_steps={args.n_steps} n_epochs={args.n_epochs} batch_size=128 "
        f"threads={args.threads} repeats={args.repeats} seed={args.seed} torch={th.__version__} machine={platform.machine()}"
    )
    results = []
    for task in args.tasks:
        for hidden in args.hidden:
            result = bench_setting(task, hidden, args)
            results.append(result)
            say(json.dumps({k: v for k, v in result.items() if k not in VARIANTS}))
    say("")
    for line in table(results, args.variants):
        say(line)
    ratios = [r["maskable"]["learn_over_reset"] for r in results if "maskable" in r]
    if ratios:
        say("")
        verdict = "within" if max(ratios) <= args.bound else "OVER"
        say(f"maskable / ResetPPO learn(): at most {max(ratios):.3f} (bound {args.bound}): {verdict}")
    printout.write(args.out, {"settings": vars(args), "bound": args.bound, "results": results})
    return results


if __name__ == "__main__":
    main()
