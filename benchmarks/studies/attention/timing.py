"""
The attention study's budget sizing (``PROTOCOL.md``, Budgets): ``learn()`` CPU seconds per 1,000 env steps of each
arm on each task, from one short run in this process (one torch thread), with the study's hyperparameter files.

Not a counted run and not a speed benchmark: one run per arm and task, on whatever machine it is run on, to size the
budgets. The model is built as the zoo builds it from the study's files (the entry's settings, ``normalize`` as a
``VecNormalize``, ``lin_`` schedules, ``policy_kwargs`` evaluated with ``nn``), without the zoo's other machinery.

Usage: python benchmarks/studies/attention/timing.py [--steps 4096] [--tasks ...] [--arms ...]
"""

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.studies.attention import attention_study as study


def zoo_settings(algo: str, conf: Path, extra: list[str], task: str) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """
    The algorithm (``ResetPPO`` or ``RecurrentPPO``), policy, model keyword arguments and env settings (``n_envs``,
    ``normalize``) of a run: the zoo's algorithm ``algo``, the entry for ``task`` of the hyperparameter file ``conf`` and
    the command-line settings ``extra`` (``key:value``, the value a Python literal as the zoo's ``--hyperparams`` takes
    it).
    """
    from rl_zoo3.utils import linear_schedule
    from torch import nn

    entry = dict(yaml.safe_load(conf.read_text())[task])
    for setting in extra:
        key, _, value = setting.partition(":")
        entry[key] = eval(value)
    env = {"n_envs": int(entry.pop("n_envs", 1)), "normalize": bool(entry.pop("normalize", False))}
    entry.pop("n_timesteps")
    policy = entry.pop("policy")
    if isinstance(entry.get("policy_kwargs"), str):
        entry["policy_kwargs"] = eval(entry["policy_kwargs"], {"nn": nn})
    for key in ("learning_rate", "clip_range"):
        if isinstance(entry.get(key), str) and entry[key].startswith("lin_"):
            entry[key] = linear_schedule(float(entry[key][4:]))
    return ("ResetPPO" if algo == "reset_ppo" else "RecurrentPPO"), policy, entry, env


def settings(arm: str, task: str) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """The algorithm, policy, model keyword arguments and env settings of an arm on a task (:func:`zoo_settings`)."""
    algo, conf, extra = study.ARMS[arm]
    return zoo_settings(algo, conf, extra, task)


def time_one(arm: str, task: str, steps: int, seed: int = 0) -> dict[str, Any]:
    """``learn()`` CPU and wall seconds of one run of ``steps`` env steps (at least one rollout), and the policy's size."""
    return {"arm": arm, "task": task, **time_learn(*settings(arm, task), task, steps, seed)}


def build(algorithm: str, policy: str, kwargs: dict[str, Any], env_settings: dict[str, Any], task: str, seed: int = 0) -> Any:
    """
    The model of a run with the settings of :func:`zoo_settings` (``ResetPPO`` or ``RecurrentPPO`` on ``task``'s vec
    env, CPU, one torch thread), built as the zoo builds it, not trained.
    """
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)
    import torch as th
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import benchmarks.envs  # noqa: F401  (registers the study's tasks)
    import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallLong-v0 and the POPGym tasks)
    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(1)
    env = make_vec_env(task, n_envs=env_settings["n_envs"], seed=seed)
    if env_settings["normalize"]:
        env = VecNormalize(env, gamma=kwargs.get("gamma", 0.99))
    return (ResetPPO if algorithm == "ResetPPO" else RecurrentPPO)(policy, env, seed=seed, device="cpu", **kwargs)


def parameters(arm: str, task: str) -> int:
    """The number of parameters of an arm's policy on a task (actor and critic, the features extractor included)."""
    model = build(*settings(arm, task), task)
    model.env.close()
    return sum(parameter.numel() for parameter in model.policy.parameters())


def time_learn(
    algorithm: str, policy: str, kwargs: dict[str, Any], env_settings: dict[str, Any], task: str, steps: int, seed: int = 0
) -> dict[str, Any]:
    """
    ``learn()`` CPU and wall seconds of one run of ``steps`` env steps (at least one rollout) with the settings of
    :func:`zoo_settings`, in this process on one torch thread, and the policy's size.
    """
    model = build(algorithm, policy, kwargs, env_settings, task, seed)
    cpu, wall = time.process_time(), time.perf_counter()
    model.learn(steps)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "timesteps": int(model.num_timesteps), "learn_cpu_seconds": cpu,
        "learn_wall_seconds": wall, "cpu_per_1000_steps": 1000 * cpu / model.num_timesteps,
        "parameters": sum(parameter.numel() for parameter in model.policy.parameters()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--tasks", nargs="+", default=list(study.TASKS), choices=list(study.TASKS))
    parser.add_argument("--arms", nargs="+", default=list(study.ARMS), choices=list(study.ARMS))
    args = parser.parse_args(argv)
    budgets = {task: float(entry["n_timesteps"]) for task, entry in yaml.safe_load(study.CONF.read_text()).items()}
    print(f"# {platform.processor() or platform.machine()}, one torch thread, {args.steps} env steps per run", flush=True)
    for task in args.tasks:
        for arm in args.arms:
            row = time_one(arm, task, args.steps)
            row["budget_cpu_minutes"] = row["cpu_per_1000_steps"] * budgets[task] / 1000 / 60
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
