"""
ResetPPO's and RecurrentPPO's first update on the same rollout, with the zoo's ppo_lstm hyperparameters of one row.

The protocol asks, where ResetPPO ends behind RecurrentPPO on a row, to find out why before changing a default: this
script compares the two updates where they can be compared exactly. Both start from the same policy parameters and
collect the same rollout (checked), then each runs its own ``train()``; the script records, per epoch, the
minibatches, the rows the recurrent layer is unrolled on (sb3-contrib's sequences, ResetPPO's windows) and how many
of them start from the memory recorded mid-episode in the rollout (a truncation of backpropagation through time
whose starting memory goes stale as the epochs change the policy), the gradient norm before clipping and the loss
terms; then the cosine between the two first gradients (same parameters, same data: they differ only by where each
truncates) and each against the gradient without any mid-rollout truncation (RecurrentPPO with its sequence split
at index 0), and how far each update moves the policy.

Usage: python benchmarks/studies/zoo_rows/diagnose.py [--env CartPoleNoVel-v1] [--seeds 0 1 2] [--pretrain STEPS]
[--variant KEY=VALUE ...] [--json FILE]
"""

import argparse
import ast
import copy
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel envs)
import torch as th
import yaml
from rl_zoo3.utils import linear_schedule
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from benchmarks.studies.zoo_rows import zoo_rows_study as study
from sb3_reset_ppo import ResetPPO

Model = TypeVar("Model", bound=RecurrentPPO)


def zoo_hyperparameters(env_id: str) -> dict[str, Any]:
    """The zoo's ppo_lstm entry for ``env_id`` (rl_zoo3's own file), as the zoo's command line reads it."""
    entry = dict(yaml.safe_load(study.conf_file("ppo_lstm").read_text())[env_id])
    for key in ("learning_rate", "clip_range"):
        if isinstance(entry.get(key), str) and entry[key].startswith("lin_"):
            entry[key] = linear_schedule(float(entry[key][len("lin_") :]))
    if isinstance(entry.get("policy_kwargs"), str):
        entry["policy_kwargs"] = eval(entry["policy_kwargs"], {"nn": th.nn, "dict": dict})  # the zoo evals it too
    return entry


def build(algo: type[Model], env_id: str, seed: int, **extra: Any) -> tuple[Model, int]:
    """
    A model of ``algo`` with the zoo's hyperparameters (and ``extra``) on the zoo's (normalised) envs; and the zoo's
    budget.
    """
    hyper = {**zoo_hyperparameters(env_id), **extra}
    budget, n_envs, policy = int(hyper.pop("n_timesteps")), hyper.pop("n_envs"), hyper.pop("policy")
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if hyper.pop("normalize", False):
        env = VecNormalize(env, gamma=hyper["gamma"])  # the zoo passes the algorithm's gamma to VecNormalize
    return algo(policy, env, seed=seed, device="cpu", **hyper), budget


@contextmanager
def recorded_gradients(record: list[dict[str, Any]]) -> Iterator[None]:
    """While open, every ``clip_grad_norm_`` call appends the norm before clipping and the flat gradient to ``record``."""
    original = th.nn.utils.clip_grad_norm_

    def clip(parameters: Any, max_norm: float, *args: Any, **kwargs: Any) -> th.Tensor:
        parameters = list(parameters)
        flat = th.cat([p.grad.detach().reshape(-1) for p in parameters if p.grad is not None])  # (n_parameters,)
        norm = original(parameters, max_norm, *args, **kwargs)
        record.append({"norm": float(norm), "gradient": flat.clone()})
        return norm

    th.nn.utils.clip_grad_norm_ = clip
    try:
        yield
    finally:
        th.nn.utils.clip_grad_norm_ = original


def rows_of_recurrent(model: RecurrentPPO, split: int | None, minibatches: list[list[dict[str, Any]]]) -> None:
    """
    Wrap sb3-contrib's buffer sampling: each epoch's minibatches, each its rows (sequences: start step, length,
    whether the start is a mid-episode step after the rollout's first) and the flat (env-major) rollout indices of its
    first and last slot; ``split`` fixes its random split index (None: drawn).
    """
    buffer: Any = model.rollout_buffer  # sb3-contrib's or the package's buffer, its sampling wrapped
    n_steps = buffer.buffer_size
    get_samples, get = buffer._get_samples, buffer.get

    def samples(batch_inds: np.ndarray, env_change: np.ndarray) -> Any:
        starts = np.logical_or(buffer.episode_starts[batch_inds], env_change[batch_inds]).reshape(-1)
        starts[0] = True  # sb3-contrib starts a sequence at every minibatch's first index
        edges = np.flatnonzero(starts).tolist() + [len(batch_inds)]
        rows = [
            {
                "start": int(batch_inds[a] % n_steps),
                "length": b - a,
                "truncated": bool(batch_inds[a] % n_steps != 0 and buffer.episode_starts[batch_inds[a]] == 0),
            }
            for a, b in itertools.pairwise(edges)
        ]
        minibatches[-1].append({"rows": rows, "first": int(batch_inds[0]), "last": int(batch_inds[-1])})
        return get_samples(batch_inds, env_change)

    def epoch(batch_size: int | None = None) -> Any:
        minibatches.append([])
        if split is None:
            yield from get(batch_size)
            return
        # sb3-contrib draws its split index from numpy's global generator: fixed here, nothing drawn
        with mock.patch.object(np.random, "randint", return_value=split):
            yield from get(batch_size)

    buffer._get_samples = samples
    buffer.get = epoch


def rows_of_reset(model: ResetPPO, minibatches: list[list[dict[str, Any]]]) -> None:
    """Wrap ResetPPO's buffer sampling: each epoch's minibatches, as lists of windows (as :func:`rows_of_recurrent`)."""
    buffer: Any = model.rollout_buffer  # sb3-contrib's or the package's buffer, its sampling wrapped
    n_steps = buffer.buffer_size
    get = buffer.get

    def epoch(batch_size: int | None = None) -> Any:
        minibatches.append([])
        for samples in get(batch_size):
            lengths = samples.kept.sum(dim=1).tolist()  # real slots of each row (reset mode keeps every real slot)
            starts = samples.window_starts.tolist()
            first_starts = samples.episode_starts[:, 0].tolist()
            rows = [
                {"start": start % n_steps, "length": int(length), "truncated": start % n_steps != 0 and not first}
                for start, length, first in zip(starts, lengths, first_starts, strict=True)
                if length > 0
            ]
            last = max(start + length - 1 for start, length in zip(starts, lengths, strict=True) if length > 0)
            minibatches[-1].append({"rows": rows, "first": min(starts), "last": last})
            yield samples

    buffer.get = epoch


def collect(model: RecurrentPPO, budget: int, seed: int, done: int) -> None:
    """
    One rollout, as ``learn(budget)`` collects its first (the same actions for the same parameters and seed), with the
    schedules at ``done`` steps of the budget.
    """
    assert model.env is not None
    _, callback = model._setup_learn(budget, None)
    model._current_progress_remaining = 1.0 - done / budget
    th.manual_seed(seed)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)


def flat_parameters(model: RecurrentPPO) -> th.Tensor:
    """The policy's parameters as one vector."""
    return th.cat([p.detach().reshape(-1) for p in model.policy.parameters()])  # (n_parameters,)


def cosine(a: th.Tensor, b: th.Tensor) -> float:
    return float(th.nn.functional.cosine_similarity(a, b, dim=0))


def update(model: RecurrentPPO, minibatches: list) -> dict[str, Any]:
    """Run the model's ``train()`` on its rollout; what it did (rows, gradients, logged terms, parameter change)."""
    before = flat_parameters(model)
    gradients: list[dict[str, Any]] = []
    started = time.process_time()
    with recorded_gradients(gradients):
        model.train()
    seconds = time.process_time() - started
    logged = {key: float(value) for key, value in model.logger.name_to_value.items() if key.startswith("train/")}
    epochs = []
    total = model.n_steps * model.n_envs
    for minibatch_list in minibatches:
        flat = [row for minibatch in minibatch_list for row in minibatch["rows"]]
        # Minibatches in rollout order: each starts where the one before it ended (sb3-contrib's rotation)
        follows = [b["first"] == (a["last"] + 1) % total for a, b in itertools.pairwise(minibatch_list)]
        epochs.append(
            {
                "minibatches": len(minibatch_list),
                "in_rollout_order": float(np.mean(follows)) if follows else float("nan"),
                "slots": sum(row["length"] for row in flat),
                "rows": len(flat),
                "mean_row_length": float(np.mean([row["length"] for row in flat])),
                "truncated_rows": sum(row["truncated"] for row in flat),
            }
        )
    after = flat_parameters(model)
    return {
        "epochs": epochs,
        "optimizer_steps": len(gradients),
        "first_gradient": gradients[0]["gradient"],
        "gradient_norms": [g["norm"] for g in gradients],
        "logged": logged,
        "relative_change": float((after - before).norm() / before.norm()),
        "parameters": after,
        "start": before,
        "train_cpu_seconds": seconds,
    }


def rollout_difference(a: RecurrentPPO, b: RecurrentPPO) -> float:
    """The largest absolute difference between the two rollouts (observations, actions, rewards, log-probs, values)."""
    keys = ("observations", "actions", "rewards", "log_probs", "values", "advantages", "episode_starts")
    return max(float(np.max(np.abs(getattr(a.rollout_buffer, k) - getattr(b.rollout_buffer, k)))) for k in keys)


def diagnose(env_id: str, seed: int, pretrain: int = 0, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    Both updates on one rollout of ``env_id`` (seed ``seed``), and RecurrentPPO's without its split: from the initial
    parameters, or (``pretrain`` > 0) from ResetPPO's after ``pretrain`` steps, with its VecNormalize statistics.

    :param variant: ResetPPO settings of one more arm, ``reset_ppo_variant`` (``{"consecutive_windows": 8}``)
    """
    recurrent, budget = build(RecurrentPPO, env_id, seed)
    exact, _ = build(RecurrentPPO, env_id, seed)
    reset, _ = build(ResetPPO, env_id, seed)
    inside, _ = build(ResetPPO, env_id, seed, window_coverage="inside")
    models = {"ppo_lstm": recurrent, "ppo_lstm_unsplit": exact, "reset_ppo": reset, "reset_ppo_inside": inside}
    if variant:
        models["reset_ppo_variant"] = build(ResetPPO, env_id, seed, **variant)[0]
    start = recurrent
    if pretrain > 0:
        start, _ = build(ResetPPO, env_id, seed)
        start.learn(pretrain)
    # Taken before any collection: collecting updates the normalisation statistics
    parameters = copy.deepcopy(start.policy.state_dict())
    statistics = copy.deepcopy((start.env.obs_rms, start.env.ret_rms)) if isinstance(start.env, VecNormalize) else None
    for model in models.values():
        model.policy.load_state_dict(parameters)
        if isinstance(model.env, VecNormalize) and statistics is not None:
            model.env.obs_rms, model.env.ret_rms = copy.deepcopy(statistics)
        collect(model, budget, seed, pretrain)
    difference = max(rollout_difference(recurrent, other) for other in models.values())
    rows: dict[str, list] = {name: [] for name in models}
    rows_of_recurrent(recurrent, None, rows["ppo_lstm"])
    rows_of_recurrent(exact, 0, rows["ppo_lstm_unsplit"])
    for name, model in models.items():
        if isinstance(model, ResetPPO):
            rows_of_reset(model, rows[name])
    np.random.seed(seed)  # noqa: NPY002  (sb3-contrib's split index)
    results = {name: update(model, rows[name]) for name, model in models.items()}
    windows: Any = reset.rollout_buffer  # the package's window buffer: its window settings, resolved
    resets = [name for name in models if name.startswith("reset_ppo")]
    pairs = [(a, b) for a in (*resets, "ppo_lstm") for b in ("ppo_lstm", "ppo_lstm_unsplit") if a != b]
    summary: dict[str, Any] = {
        "env": env_id,
        "seed": seed,
        "pretrain": pretrain,
        "variant": variant or {},
        "settings": {
            "n_envs": recurrent.n_envs,
            "n_steps": recurrent.n_steps,
            "batch_size": recurrent.batch_size,
            "n_epochs": recurrent.n_epochs,
            "reset_window_size": windows.window_size,
            "reset_window_stride": windows.window_stride,
            "reset_window_coverage": windows.window_coverage,
        },
        "rollout_max_difference": difference,
        "first_gradient_cosine": {
            f"{a} vs {b}": cosine(results[a]["first_gradient"], results[b]["first_gradient"]) for a, b in pairs
        },
        "update_distance": {f"{a} vs {b}": distance(results[a], results[b]) for a, b in pairs},
        "arms": {},
    }
    for name, result in results.items():
        epochs = result["epochs"]
        summary["arms"][name] = {
            "optimizer_steps": result["optimizer_steps"],
            "minibatches_per_epoch": sorted({e["minibatches"] for e in epochs}),
            "minibatches_in_rollout_order": float(np.mean([e["in_rollout_order"] for e in epochs])),
            "slots_per_epoch": sorted({e["slots"] for e in epochs}),
            "rows_per_epoch": float(np.mean([e["rows"] for e in epochs])),
            "mean_row_length": float(np.mean([e["mean_row_length"] for e in epochs])),
            "truncated_rows_per_epoch": float(np.mean([e["truncated_rows"] for e in epochs])),
            "first_gradient_norm": result["gradient_norms"][0],
            "median_gradient_norm": float(np.median(result["gradient_norms"])),
            "relative_parameter_change": result["relative_change"],
            "logged": result["logged"],
            "train_cpu_seconds": result["train_cpu_seconds"],
        }
    return summary


def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How far apart two updates from the same parameters end, relative to how far ``a`` moved."""
    moved = (a["parameters"] - a["start"]).norm()
    return float((a["parameters"] - b["parameters"]).norm() / moved) if moved > 0 else float("nan")


def text(summary: dict[str, Any]) -> list[str]:
    """The findings of one seed as lines."""
    s = summary["settings"]
    out = [
        f"{summary['env']} seed {summary['seed']}, after {summary['pretrain']} steps of ResetPPO: n_envs {s['n_envs']}, "
        f"n_steps {s['n_steps']}, batch_size {s['batch_size']}, n_epochs {s['n_epochs']}; ResetPPO's windows "
        f"{s['reset_window_size']} steps, stride {s['reset_window_stride']}, coverage {s['reset_window_coverage']}"
        + (f"; reset_ppo_variant: {summary['variant']}" if summary["variant"] else ""),
        f"  the same rollout for every arm: largest difference {summary['rollout_max_difference']:.3g}",
        "  arm               optimizer steps  minibatches/epoch  in rollout order  slots/epoch  rows/epoch  mean row  "
        "truncated rows/epoch  |g| first  |g| median  param change  approx_kl  clip_frac  value_loss",
    ]
    for name, arm in summary["arms"].items():
        logged = {key.removeprefix("train/"): value for key, value in arm["logged"].items()}
        out.append(
            f"  {name:16s}  {arm['optimizer_steps']:15d}  {arm['minibatches_per_epoch']!s:17s}  "
            f"{arm['minibatches_in_rollout_order']:16.2f}  {arm['slots_per_epoch']!s:11s}  {arm['rows_per_epoch']:10.1f}  "
            f"{arm['mean_row_length']:8.1f}  {arm['truncated_rows_per_epoch']:20.1f}  {arm['first_gradient_norm']:9.3f}  "
            f"{arm['median_gradient_norm']:10.3f}  {arm['relative_parameter_change']:12.4f}  "
            f"{logged.get('approx_kl', float('nan')):9.4f}  {logged.get('clip_fraction', float('nan')):9.3f}  "
            f"{logged.get('value_loss', float('nan')):10.4f}"
        )
    out.append("  pair                                 first gradients: 1 - cosine  updates' distance |a - b| / |a - start|")
    for pair, value in summary["first_gradient_cosine"].items():
        out.append(f"  {pair:35s}  {1 - value:28.1e}  {summary['update_distance'][pair]:40.3f}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPoleNoVel-v1", choices=list(study.PUBLISHED))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--pretrain", type=int, default=0, help="compare the update after this many steps of ResetPPO")
    parser.add_argument("--json", type=Path, default=None, help="write the findings to this file")
    parser.add_argument(
        "--variant",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="one more ResetPPO arm with these settings, values as Python literals (consecutive_windows=8)",
    )
    args = parser.parse_args(argv)
    variant = {key: ast.literal_eval(value) for key, value in (item.split("=", 1) for item in args.variant)}
    th.set_num_threads(1)
    summaries = []
    for seed in args.seeds:
        summary = diagnose(args.env, seed, args.pretrain, variant)
        print("\n".join(text(summary)), flush=True)
        summaries.append(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summaries, indent=1) + "\n")


if __name__ == "__main__":
    main()
