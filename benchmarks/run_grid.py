"""
Benchmark grid: variants x envs x seeds, each run trained and evaluated by the RL Zoo.

Variants: ``reset`` (reset_ppo, boundary reset, uniform weighting), ``reset_importance`` (reset,
importance), ``mask`` (reset_ppo, boundary mask, uniform: the masking baseline, losses averaged over all
``B * W`` slots), ``mask_kept`` (boundary mask, losses averaged over kept slots as sb3-contrib does) and
``ppo_lstm`` (sb3-contrib's RecurrentPPO). Runs go to ``<out>/<variant>/<env>/seed<k>/`` (the zoo's own log folder
inside, with ``evaluations.npz``); a finished run writes ``run.json`` and is skipped next time, so the grid
is resumable. Runs execute in parallel worker processes, at most one per core, one torch thread each.

With ``--study fresh_memory``: the fresh-memory study of ``benchmarks/PROTOCOL_fresh_memory.md`` (variants
``fm_*``, config ``benchmarks/fresh_memory.yml``, training logs kept as ``log.txt.gz``), into
``benchmarks/results/fresh_memory``.

Usage: python benchmarks/run_grid.py [--study grid|fresh_memory] [--envs ...] [--variants ...] [--seeds 5] [--workers 2]
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RESET_PPO_CONF = HERE.parent / "sb3_reset_ppo" / "zoo" / "reset_ppo.yml"
PPO_LSTM_CONF = HERE / "ppo_lstm.yml"
FRESH_MEMORY_CONF = HERE / "fresh_memory.yml"

VARIANTS: dict[str, dict[str, Any]] = {
    "reset": {"algo": "reset_ppo", "hyperparams": ["boundary:'reset'", "weighting:'uniform'"]},
    "reset_importance": {"algo": "reset_ppo", "hyperparams": ["boundary:'reset'", "weighting:'importance'"]},
    "mask": {"algo": "reset_ppo", "hyperparams": ["boundary:'mask'", "weighting:'uniform'"]},
    # The masking rule with sb3-contrib's loss scale (mean over kept slots): separates the rule from the scale
    "mask_kept": {"algo": "reset_ppo", "hyperparams": ["boundary:'mask'", "weighting:'kept_mean'"]},
    "ppo_lstm": {"algo": "ppo_lstm", "hyperparams": []},
}
# The fresh-memory study (benchmarks/PROTOCOL_fresh_memory.md): its own config, each variant with the config's
# n_epochs (10) and with 30 ("_e30", where stale memory should matter most)
_FRESH_MEMORY = {
    "fm_off": [],
    "fm_refresh": ["memory_refresh:1"],
    "fm_burn8": ["burn_in:8"],
    "fm_burn16": ["burn_in:16"],
    "fm_refresh_burn8": ["memory_refresh:1", "burn_in:8"],
}
for _name, _hyperparams in _FRESH_MEMORY.items():
    for _suffix, _epochs in (("", []), ("_e30", ["n_epochs:30"])):
        VARIANTS[_name + _suffix] = {"algo": "reset_ppo", "hyperparams": _hyperparams + _epochs, "conf": FRESH_MEMORY_CONF}
FRESH_MEMORY_VARIANTS = [name for name in VARIANTS if name.startswith("fm_")]
# The GRU study (benchmarks/PROTOCOL_gru.md): the fresh-memory config with the GRU policy; its LSTM arm is the
# fresh-memory study's fm_off
VARIANTS["gru"] = {"algo": "reset_ppo", "hyperparams": ["policy:'MlpGruPolicy'"], "conf": FRESH_MEMORY_CONF}
GRU_VARIANTS = ["gru"]
GRU_ENVS = ["CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "CartPoleNoVel-v1", "PopgymRepeatPreviousEasy-v0"]
FRESH_MEMORY_ENVS = [
    "CueRecall-v0",
    "CueRecallLong-v0",
    "EarlyChoice-v0",
    "CartPoleNoVel-v1",
    "PopgymRepeatPreviousEasy-v0",
    "PopgymAutoencodeEasy-v0",
]
# Envs that fit a 2-core machine; LunarLanderNoVel-v3 and CarRacing-v3 are configured in reset_ppo.yml
# but need more compute (and Box2D).
DEFAULT_ENVS = [
    "CueRecall-v0",
    "CueRecallLong-v0",
    "EarlyChoice-v0",
    "CartPoleNoVel-v1",
    "PendulumNoVel-v1",
    "MountainCarContinuousNoVel-v0",
]
EVALUATIONS_PER_RUN = 20


def conf_file(variant: str) -> Path:
    """The hyperparameter file a variant trains with."""
    spec = VARIANTS[variant]
    return spec.get("conf", RESET_PPO_CONF if spec["algo"] == "reset_ppo" else PPO_LSTM_CONF)


def n_timesteps(env_id: str, conf: Path = RESET_PPO_CONF) -> int:
    return int(float(yaml.safe_load(conf.read_text())[env_id]["n_timesteps"]))


def command(variant: str, env_id: str, seed: int, run_dir: Path, eval_episodes: int) -> list[str]:
    spec = VARIANTS[variant]
    conf = conf_file(variant)
    args = [
        sys.executable, "-m", "sb3_reset_ppo.zoo", "train",
        "--algo", spec["algo"], "--env", env_id, "--seed", str(seed), "-f", str(run_dir),
        "--conf-file", str(conf), "--num-threads", "1", "--vec-env", "dummy",
        "--eval-freq", str(max(n_timesteps(env_id, conf) // EVALUATIONS_PER_RUN, 1)),
        "--eval-episodes", str(eval_episodes), "--n-eval-envs", "1",
        # The fresh-memory study keeps its training logs (train/ and rollout/ keys of every update)
        "--log-interval", "1" if "conf" in spec else "-1",
    ]  # fmt: skip
    if spec["hyperparams"]:
        args += ["--hyperparams", *spec["hyperparams"]]
    return args


def code_version() -> dict[str, Any]:
    """The commit the run trained with, and whether the package's code differed from it (uncommitted changes)."""

    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else ""

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--", "sb3_reset_ppo"))}


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    run_dir: Path = job["run_dir"]
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished earlier attempt
    run_dir.mkdir(parents=True)
    args = command(job["variant"], job["env"], job["seed"], run_dir, job["eval_episodes"])
    start = time.perf_counter()
    with open(run_dir / "log.txt", "w") as log:
        code = subprocess.call(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    result = {
        "variant": job["variant"], "env": job["env"], "seed": job["seed"], "returncode": code,
        "seconds": time.perf_counter() - start, "command": " ".join(args), **code_version(),
    }  # fmt: skip
    if code == 0:
        if "conf" in VARIANTS[job["variant"]]:
            # Keep the training log, compressed (the uncompressed log is git-ignored)
            with open(run_dir / "log.txt", "rb") as raw, gzip.open(run_dir / "log.txt.gz", "wb") as packed:
                shutil.copyfileobj(raw, packed)
        (run_dir / "run.json").write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", choices=["grid", "fresh_memory", "gru"], default="grid",
                        help="default envs and variants: the published grid, the fresh-memory or the GRU study")  # fmt: skip
    parser.add_argument("--envs", nargs="+", default=None)
    parser.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/<study>")
    args = parser.parse_args()
    studies = {
        "grid": (DEFAULT_ENVS, [v for v in VARIANTS if "conf" not in VARIANTS[v]]),
        "fresh_memory": (FRESH_MEMORY_ENVS, FRESH_MEMORY_VARIANTS),
        "gru": (GRU_ENVS, GRU_VARIANTS),
    }
    args.envs = args.envs or studies[args.study][0]
    args.variants = args.variants or studies[args.study][1]
    args.out = args.out or HERE / "results" / args.study
    print("command: python " + " ".join(sys.argv), flush=True)
    jobs = [
        {"variant": variant, "env": env_id, "seed": seed, "run_dir": args.out / variant / env_id / f"seed{seed}",
         "eval_episodes": args.eval_episodes}
        for seed in range(args.seeds)
        for env_id in args.envs
        for variant in args.variants
    ]  # fmt: skip
    todo = [job for job in jobs if not (job["run_dir"] / "run.json").exists()]
    print(
        f"{len(jobs) - len(todo)} of {len(jobs)} runs already done; {len(todo)} to run on {args.workers} workers", flush=True
    )
    with ThreadPoolExecutor(max_workers=max(1, min(args.workers, os.cpu_count() or 1))) as pool:
        # In the order runs finish (a slow run does not hold back the report of the others)
        for future in as_completed([pool.submit(run_one, job) for job in todo]):
            result = future.result()
            status = "ok" if result["returncode"] == 0 else f"FAILED ({result['returncode']})"
            print(
                f"{result['variant']:>16} {result['env']:<30} seed {result['seed']}: {status} in {result['seconds']:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
