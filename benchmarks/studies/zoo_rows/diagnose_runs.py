"""
ResetPPO's full runs of one zoo row with some of its own settings changed (not runs of the study), trained and
evaluated as the study trains and evaluates them (:func:`zoo_rows_study.train_and_evaluate`), with what the
deterministic policy does in those evaluation episodes: the energy of its actions, how often they saturate, the gSDE
standard deviation at the states it visits, and its final ``log_std``.

On MountainCarContinuousNoVel-v0 an episode's return is ``100 - 0.1 * sum(a^2)`` when it reaches the goal (the env
clips nothing: the agent's actions are clipped to [-1, 1] before the step), so a score gap between runs of equal
episode length is a gap in action energy; :func:`stored_energy` reads it from the study's stored returns, for
RecurrentPPO's runs too, whose models are not stored.

Each run trains in a subprocess of its own, one at a time; finished runs (variant, seed) already in the JSON file are
skipped, so the script resumes.

On a discrete action space (CartPoleNoVel-v1) a run records its evaluation episodes only, and a variant is compared
on score with both of the study's arms.

Usage: python benchmarks/studies/zoo_rows/diagnose_runs.py [--env MountainCarContinuousNoVel-v0]
[--variants default inside] [--seeds 0 1 2 3 4] [--json FILE] (default: ``diagnosis_<env>.json`` beside this file,
:data:`JSONS`)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.studies.zoo_rows import zoo_rows_study as study

# Variant -> ResetPPO settings changed from the zoo entry, as the zoo's --hyperparams reads them
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "inside": ["window_coverage:'inside'"],
    "ordered": ["consecutive_windows:8"],
}
# The env whose returns are read as action energy (stored_energy): MountainCarContinuous's reward
ENERGY_ENV = "MountainCarContinuousNoVel-v0"
GOAL_REWARD = 100.0  # MountainCarContinuous: reward at the goal
ENERGY_COST = 0.1  # and the cost per unit of a^2 at every step
TIME_LIMIT = 999  # its episodes' step limit: an episode this long did not reach the goal
JSON = study.HERE / "diagnosis_mcar.json"
# Each env's runs file (--json's default)
JSONS = {
    "MountainCarContinuousNoVel-v0": JSON,
    "CartPoleNoVel-v1": study.HERE / "diagnosis_cartpole.json",
    "PendulumNoVel-v1": study.HERE / "diagnosis_pendulum.json",
}


def stored_energy(returns: list[float], lengths: list[int]) -> dict[str, float]:
    """
    The action energy of MountainCarContinuous episodes from their returns: ``sum(a^2) = (100 - return) / 0.1`` for an
    episode that reached the goal (shorter than the time limit).

    :return: the share of episodes that reached the goal, and over those: mean length, mean ``sum(a^2)`` per episode
        and mean ``a^2`` per step
    """
    returns_array, lengths_array = np.asarray(returns, dtype=float), np.asarray(lengths)
    reached = lengths_array < TIME_LIMIT
    energy = (GOAL_REWARD - returns_array[reached]) / ENERGY_COST
    return {
        "reached_goal": float(reached.mean()),
        "mean_length": float(lengths_array[reached].mean()) if reached.any() else float("nan"),
        "mean_episode_energy": float(energy.mean()) if reached.any() else float("nan"),
        "mean_step_energy": float((energy / lengths_array[reached]).mean()) if reached.any() else float("nan"),
    }


def action_statistics(model: Any, eval_env: Any, n_episodes: int = study.EVAL_EPISODES) -> dict[str, Any]:
    """
    Evaluate ``model`` as the study does (deterministic, ``n_episodes`` episodes) and record, at every step, the mean
    action before clipping and the standard deviation of the policy's action distribution there (gSDE's is
    state-dependent). A discrete action space has no such statistics: its episodes' returns and lengths only.

    :return: the episodes' returns and lengths and the steps; for a continuous (Box) action space, over all steps:
        mean ``a^2`` of the clipped actions, the share of steps with ``|a| >= 1`` after clipping, mean ``|mean action|``
        before clipping and mean standard deviation; and the policy's ``exp(log_std)`` (mean over its entries)
    """
    import torch as th
    from gymnasium import spaces
    from stable_baselines3.common.evaluation import evaluate_policy

    if not isinstance(model.action_space, spaces.Box):
        returns, lengths = evaluate_policy(
            model, eval_env, n_eval_episodes=n_episodes, deterministic=True, return_episode_rewards=True
        )
        return {
            "episode_returns": [float(value) for value in returns],  # type: ignore[union-attr]
            "episode_lengths": [int(value) for value in lengths],  # type: ignore[union-attr]
            "steps": int(sum(lengths)),  # type: ignore[arg-type]
        }

    means: list[np.ndarray] = []
    stds: list[np.ndarray] = []
    policy = model.policy
    distribution_of = policy._get_action_dist_from_latent

    def recorded(latent_pi: th.Tensor) -> Any:
        distribution = distribution_of(latent_pi)
        normal = distribution.distribution  # gSDE's and the diagonal Gaussian's torch Normal
        means.append(normal.mean.detach().cpu().numpy().reshape(-1))
        stds.append(normal.stddev.detach().cpu().numpy().reshape(-1))
        return distribution

    policy._get_action_dist_from_latent = recorded
    try:
        episodes = evaluate_policy(
            model, eval_env, n_eval_episodes=n_episodes, deterministic=True, return_episode_rewards=True
        )
    finally:
        del policy._get_action_dist_from_latent  # the class's method again
    returns, lengths = episodes
    mean_actions = np.concatenate(means)
    low, high = float(model.action_space.low[0]), float(model.action_space.high[0])
    actions = np.clip(mean_actions, low, high)
    return {
        "episode_returns": [float(value) for value in returns],  # type: ignore[union-attr]
        "episode_lengths": [int(value) for value in lengths],  # type: ignore[union-attr]
        "steps": int(mean_actions.size),
        "mean_action_squared": float(np.mean(actions**2)),
        "saturated_share": float(np.mean(np.abs(actions) >= high)),
        "mean_abs_mean_action": float(np.mean(np.abs(mean_actions))),
        "mean_action_std": float(np.mean(np.concatenate(stds))),
        "exp_log_std": float(th.exp(policy.log_std.detach()).mean()),
    }


def run_one(env: str, seed: int, variant: str, folder: Path, timesteps: int | None = None) -> dict[str, Any]:
    """One run in this process: trained and evaluated by the study's code, then its evaluation measured again."""
    result = study.train_and_evaluate("reset_ppo", env, seed, folder, timesteps, VARIANTS[variant])
    model, eval_env = study.trained_model("reset_ppo", env, seed, folder)
    statistics = action_statistics(model, eval_env)
    # The same 50 episodes as the study's evaluation (same model, env seed and deterministic actions)
    statistics["same_episodes"] = statistics.pop("episode_returns") == result["episode_returns"]
    del statistics["episode_lengths"]
    return {"env": env, "seed": seed, "variant": variant, "hyperparams": VARIANTS[variant], **result, **statistics}


LOGGED = ("train/entropy_loss", "train/std", "train/clip_fraction", "train/approx_kl", "rollout/ep_rew_mean")


def final_training(log: str, last: int = 5) -> dict[str, float]:
    """
    The means of :data:`LOGGED` over the last ``last`` updates in a run's training log (SB3's logger tables); a key
    the policy does not log (``train/std`` of a categorical policy) is left out.
    """
    from sb3_reset_ppo.experiments.training_log import parse_tables

    tables = [table for table in parse_tables(log) if "train/approx_kl" in table][-last:]
    return {
        f"last{last}_{key.split('/')[1]}": float(np.mean([table[key] for table in tables]))
        for key in LOGGED
        if tables and all(key in table for table in tables)
    }


def stored_runs(env: str, seeds: list[int], path: Path = study.OUT) -> list[dict[str, Any]]:
    """
    The study's stored runs of ``env`` on ``seeds`` (both arms): score, parameters hash, energy from returns and the
    last updates' logged terms.
    """
    return [
        {
            "algo": record["algo"],
            "seed": record["seed"],
            "score": record["score"],
            "parameters_sha256": record["parameters_sha256"],
            **(stored_energy(record["episode_returns"], record["episode_lengths"]) if env == ENERGY_ENV else {}),
            **final_training(record["log"]),
        }
        for record in study.read_records(path)
        if record["env"] == env and record["seed"] in seeds and record["status"] == "ok"
    ]


def compare(arm: dict[int, float], base: dict[int, float], reps: int = 10_000) -> dict[str, Any]:
    """
    Two sets of per-seed values on the seeds both hold: their means, the difference of means with a 95% percentile
    bootstrap interval (seeds resampled within each set) and the two-sided Mann-Whitney p.
    """
    from sb3_reset_ppo.experiments import stats

    seeds = sorted(set(arm) & set(base))
    x, y = np.array([arm[seed] for seed in seeds]), np.array([base[seed] for seed in seeds])
    generator = np.random.default_rng(0)
    # (reps, n) each: seeds drawn with replacement
    differences = generator.choice(x, (reps, len(x))).mean(axis=1) - generator.choice(y, (reps, len(y))).mean(axis=1)
    p_value, method = stats.mann_whitney(x, y)
    return {
        "seeds": seeds,
        "arm_mean": float(x.mean()),
        "base_mean": float(y.mean()),
        "difference": float(x.mean() - y.mean()),
        "difference_interval": [float(v) for v in np.percentile(differences, [2.5, 97.5])],
        "mann_whitney_p": p_value,
        "method": method,
    }


def summarise(runs: list[dict[str, Any]], stored: list[dict[str, Any]]) -> dict[str, Any]:
    """
    Each variant's runs (and the study's stored runs of both arms) as per-seed measures, each variant and the
    study's ResetPPO against the study's RecurrentPPO on score (and, on MountainCarContinuous, episode length and
    energy per step), and each variant against the study's ResetPPO.
    """
    arms: dict[str, dict[str, dict[int, float]]] = {}
    for run in runs:
        measures = {"score": run["score"]}
        if run["env"] == ENERGY_ENV:
            measures |= stored_energy(run["episode_returns"], run["episode_lengths"])
        actions = ("saturated_share", "mean_abs_mean_action", "mean_action_std", "exp_log_std")
        measures |= {key: run[key] for key in actions if key in run}
        for key, value in measures.items():
            arms.setdefault(run["variant"], {}).setdefault(key, {})[run["seed"]] = value
    for run in stored:
        for key, value in run.items():
            if key not in ("algo", "seed", "parameters_sha256"):
                arms.setdefault(f"study_{run['algo']}", {}).setdefault(key, {})[run["seed"]] = value
    base = arms.get("study_ppo_lstm", {})
    comparisons = {
        f"{name} vs study_ppo_lstm": {key: compare(values, base[key]) for key, values in measures.items() if key in base}
        for name, measures in arms.items()
        if name != "study_ppo_lstm" and base
    }
    # Each variant against the study's ResetPPO (the default settings) on the same seeds
    study_reset = arms.get("study_reset_ppo", {})
    comparisons |= {
        f"{name} vs study_reset_ppo": {
            key: compare(values, study_reset[key]) for key, values in measures.items() if key in study_reset
        }
        for name, measures in arms.items()
        if not name.startswith("study_") and name != "default" and study_reset
    }
    study_hashes = {run["seed"]: run["parameters_sha256"] for run in stored if run["algo"] == "reset_ppo"}
    reproduced = {
        run["seed"]: run["parameters_sha256"] == study_hashes.get(run["seed"]) for run in runs if run["variant"] == "default"
    }
    return {"per_seed": arms, "comparisons": comparisons, "default_reproduces_the_study": reproduced}


def write(path: Path, runs: list[dict[str, Any]], stored: list[dict[str, Any]]) -> None:
    """The runs, the study's stored runs they are compared with, and the summary, as one JSON file."""
    summary = summarise(runs, stored)
    path.write_text(json.dumps({"runs": runs, "study_runs": stored, **summary}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="MountainCarContinuousNoVel-v0", choices=list(study.PUBLISHED))
    parser.add_argument("--variants", nargs="+", default=["default", "inside"], choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="the runs' records (read, then rewritten after each run; default: the env's in JSONS)",
    )
    parser.add_argument("--timesteps", type=int, default=None, help="a shorter budget than the zoo's (a test)")
    parser.add_argument("--no-training", action="store_true", help="train nothing: summarise the runs stored so far")
    parser.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)  # a subprocess's run: its result file
    args = parser.parse_args(argv)
    args.json = JSONS[args.env] if args.json is None else args.json
    if args.one is not None:
        (seed,), (variant,) = args.seeds, args.variants
        record = run_one(args.env, seed, variant, args.one.parent, args.timesteps)
        args.one.write_text(json.dumps(record))
        return
    records: list[dict[str, Any]] = json.loads(args.json.read_text())["runs"] if args.json.exists() else []
    done = {(r["env"], r["variant"], r["seed"]) for r in records}
    stored = stored_runs(args.env, args.seeds)
    for seed in args.seeds:
        for variant in args.variants:
            if (args.env, variant, seed) in done or args.no_training:
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"diagnose_{variant}_{seed}_"))
            command = [sys.executable, str(Path(__file__).resolve()), "--env", args.env, "--seeds", str(seed)]
            command += ["--variants", variant, "--one", str(folder / "record.json")]
            command += [] if args.timesteps is None else ["--timesteps", str(args.timesteps)]
            started = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **study.provenance()}
            environ = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=environ)
            record = {**json.loads((folder / "record.json").read_text()), **started}
            shutil.rmtree(folder, ignore_errors=True)
            records.append(record)
            write(args.json, records, stored)
            actions = (
                f", mean a^2 {record['mean_action_squared']:.4f}, saturated {record['saturated_share']:.3f}"
                if "mean_action_squared" in record
                else ""
            )
            print(
                f"{time.strftime('%H:%M:%S')} {variant} seed {seed}: score {record['score']:.2f}{actions}, "
                f"learn {record['cpu_seconds']:.0f} CPU s",
                flush=True,
            )
    write(args.json, records, stored)
    for name, measures in summarise(records, stored)["comparisons"].items():
        for key, comparison in measures.items():
            low, high = comparison["difference_interval"]
            print(
                f"{name}, {key} (seeds {comparison['seeds']}): {comparison['arm_mean']:.4g} vs {comparison['base_mean']:.4g}, "
                f"difference {comparison['difference']:.4g} ({low:.4g} to {high:.4g}), Mann-Whitney p "
                f"{comparison['mann_whitney_p']:.3g}"
            )


if __name__ == "__main__":
    main()
