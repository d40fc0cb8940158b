"""
The port case of the coverage study (``benchmarks/studies/coverage/PROTOCOL.md``): sb3-contrib's documented use on
CartPoleNoVel-v1 (``MlpLstmPolicy``, 8 envs, every argument at its default), RecurrentPPO against ResetPPO's arms
with the class swapped.

Each run trains 20,480 env steps with one torch thread, snapshots the policy every 2 rollouts inside ``learn()``
(a copy of its parameters) and evaluates every snapshot after ``learn()`` returns (20 deterministic episodes on a
fresh env seeded ``10_000 + seed``), so that ``learn()`` seconds hold no evaluation. One JSON file per run in
``benchmarks/results/coverage/port/<arm>/seed<k>.json``; existing files are skipped (resumable). Runs go seed by
seed, each seed's RecurrentPPO run first, on ``--workers`` processes, so that it trains beside its seed's
ResetPPO runs.

Usage: python benchmarks/studies/coverage/port_case.py [--seeds 10] [--arms ...] [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path
from typing import Any

from benchmarks.kit import snapshots
from sb3_reset_ppo.experiments import runner

BENCHMARKS = Path(__file__).resolve().parents[2]

ENV_ID = "CartPoleNoVel-v1"
N_ENVS = 8
# 20 rollouts of RecurrentPPO's default n_steps (128) on 8 envs: the 20,000 steps in whole rollouts
TOTAL_STEPS = 20 * 128 * N_ENVS
SNAPSHOT_EVERY = 2  # rollouts (updates) between snapshots: 10 evaluations per run
EVAL_EPISODES = 20
EVAL_SEED_OFFSET = 10_000
# ResetPPO's arms (None: RecurrentPPO); inside_rollout is descriptive only (not a candidate of the protocol)
ARMS: dict[str, dict[str, Any] | None] = {
    "rppo": None,
    "cv_inside16": {"window_coverage": "inside", "window_size": 16},
    "cv_full16": {"window_coverage": "full", "window_size": 16},
    "cv_full64": {"window_coverage": "full", "window_size": 64},
    "cv_batch": {"window_coverage": "full", "window_size": "batch"},
    "inside_rollout": {"window_coverage": "inside", "window_size": "rollout"},
}


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one run (:mod:`snapshots`; the copy before ``learn()`` is not evaluated); write its record."""
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)
    import torch as th
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    th.set_num_threads(1)
    arm, seed = job["arm"], job["seed"]
    settings = ARMS[arm]
    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed)
    algorithm = RecurrentPPO if settings is None else ResetPPO
    model = algorithm("MlpLstmPolicy", env, seed=seed, **(settings or {}))
    version, host = runner.code_version(), runner.machine()
    training = snapshots.train(model, TOTAL_STEPS, SNAPSHOT_EVERY, keep_log=False)
    evaluations = []
    for snapshot in training.snapshots[1:]:
        model.policy.load_state_dict(snapshot["state"])
        eval_env = make_vec_env(ENV_ID, n_envs=1, seed=EVAL_SEED_OFFSET + seed)
        returns = snapshots.evaluate(model, eval_env, EVAL_EPISODES, use_masking=False)["returns"]
        evaluations.append({"timesteps": snapshot["timesteps"], "returns": returns})
    record = {
        "arm": arm, "seed": seed, "settings": settings, "algorithm": type(model).__name__, "env": ENV_ID,
        "n_envs": N_ENVS, "total_steps": TOTAL_STEPS, "learn_seconds": training.learn_wall, "started": training.started,
        "ended": training.ended, "evaluations": evaluations, **version, "machine": host,
        "command": "python " + " ".join(sys.argv),
    }  # fmt: skip
    snapshots.write_record(job["path"], record)
    return record


def summary(record: dict[str, Any]) -> str:
    """One line on a finished run."""
    finals = [sum(e["returns"]) / len(e["returns"]) for e in record["evaluations"][-2:]]
    return (
        f"{record['arm']:>15} seed {record['seed']}: learn() {record['learn_seconds']:.0f} s, "
        f"last two evaluations {finals[0]:.0f} {finals[1]:.0f}"
    )


def main() -> None:
    parser = snapshots.parser(__doc__, ARMS, BENCHMARKS / "results" / "coverage" / "port", workers=2)
    args = parser.parse_args()
    if args.workers < 1 or args.seeds < 1:
        parser.error("--workers and --seeds must be at least 1")
    paths = {(arm, seed): args.out / arm / f"seed{seed}.json" for seed in range(args.seeds) for arm in args.arms}
    jobs = [{"arm": arm, "seed": seed, "path": path} for (arm, seed), path in paths.items() if not path.exists()]
    snapshots.execute(jobs, args.workers, run, summary)


if __name__ == "__main__":
    main()
