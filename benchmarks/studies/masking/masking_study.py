"""
The masking study (``benchmarks/studies/masking/PROTOCOL.md``): MaskableResetPPO (memory and masks) against ResetPPO
without masks and sb3-contrib's MaskablePPO (masks, no memory) on MaskedCueRecall-v0.

Each run trains :data:`TOTAL_STEPS` env steps with one torch thread, copies the policy's parameters before
``learn()`` and after every :data:`SNAPSHOT_EVERY`-th update (inside ``learn()``, with the ``learn()`` CPU and wall
seconds so far), and evaluates every copy after ``learn()`` returns (:data:`EVAL_EPISODES` deterministic episodes,
the masked evaluation that keeps the recurrent state, on a fresh env seeded ``10_000 + seed``), so the recorded
``learn()`` seconds hold no evaluation. One JSON file per run, ``benchmarks/results/masking/<arm>/seed_<k>.json``,
with the run's SB3 training log beside it (``seed_<k>.log.txt.gz``); finished runs are skipped (resumable). Runs go
seed by seed, the three arms of a seed first, on ``--workers`` processes.

Usage: python benchmarks/studies/masking/masking_study.py [--seeds 10] [--arms ...] [--workers 2] [--out DIR]
    [--total-steps N] [--eval-episodes N]
"""

import sys
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.kit import snapshots
from benchmarks.kit.snapshots import COMMON, LSTM_KWARGS, MLP_KWARGS, N_STEPS

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]

OUT = BENCHMARKS / "results" / "masking"

ENV_ID = "MaskedCueRecall-v0"
N_ENVS = 8
# 30 rollouts of 8 x 128: CueRecall-v0's package budget (3e4) in whole rollouts
TOTAL_STEPS = 30 * N_STEPS * N_ENVS
SNAPSHOT_EVERY = 2  # updates between copies of the policy: 15 evaluations after training starts
EVAL_EPISODES = 100
EVAL_SEED_OFFSET = 10_000
# arm -> (algorithm, policy, policy_kwargs, masks in learn() and in the evaluation)
ARMS: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "maskable_reset_ppo": ("MaskableResetPPO", "MlpLstmPolicy", LSTM_KWARGS, True),
    "reset_ppo": ("ResetPPO", "MlpLstmPolicy", LSTM_KWARGS, False),
    "maskable_ppo": ("MaskablePPO", "MlpPolicy", MLP_KWARGS, True),
}


def result_path(out: Path, arm: str, seed: int) -> Path:
    """Where a run's record goes."""
    return out / arm / f"seed_{seed}.json"


def jobs_to_do(out: Path, arms: list[str], seeds: list[int], **settings: Any) -> list[dict[str, Any]]:
    """
    The runs without a record yet, seed by seed (each seed's arms together).

    :param out: The results folder
    :param arms: Arms to run
    :param seeds: Seeds to run
    :param settings: ``total_steps``, ``snapshot_every``, ``eval_episodes`` (default: the protocol's)
    :return: One job per run to do
    """
    snapshots.check_names("arms", arms, ARMS)
    return [
        {"arm": arm, "seed": seed, "path": result_path(out, arm, seed), **settings}
        for seed in seeds
        for arm in arms
        if not result_path(out, arm, seed).exists()
    ]


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one run (:mod:`snapshots`); write and return its record (and its training log)."""
    import torch as th
    from stable_baselines3.common.env_util import make_vec_env

    import sb3_reset_ppo.envs  # noqa: F401  (registers MaskedCueRecall-v0)

    th.set_num_threads(1)
    arm, seed = job["arm"], int(job["seed"])
    total, every, episodes = snapshots.budget(job, TOTAL_STEPS, SNAPSHOT_EVERY, EVAL_EPISODES)
    algorithm, policy, policy_kwargs, masking = ARMS[arm]

    code = snapshots.code()
    model = snapshots.make_model(algorithm, policy, policy_kwargs, make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed), seed)
    training = snapshots.train(model, total, every, use_masking=algorithm != "ResetPPO")
    head = {
        "arm": arm, "seed": seed, "algorithm": algorithm, "policy": policy, "policy_kwargs": policy_kwargs,
        "masking": masking, "settings": COMMON, "env": ENV_ID, "n_envs": N_ENVS, "total_steps": total,
        "snapshot_every": every, "eval_episodes": episodes, "eval_seed": EVAL_SEED_OFFSET + seed,
    }  # fmt: skip

    def evaluate() -> dict[str, Any]:  # on a fresh env
        return snapshots.evaluate(model, make_vec_env(ENV_ID, n_envs=1, seed=EVAL_SEED_OFFSET + seed), episodes, masking)

    return snapshots.record_run(job, head, model, training, evaluate, code, episodes=False)


def summary(record: dict[str, Any]) -> str:
    """One line on a finished run."""
    if "failed" in record:
        return f"{record['arm']:>18} seed {record['seed']}: FAILED\n{record['failed']}"
    from sb3_reset_ppo.envs.masked_cue_recall import normalised_score

    finals = [normalised_score(sum(e["returns"]) / len(e["returns"])) for e in record["evaluations"][-3:]]
    return (
        f"{record['arm']:>18} seed {record['seed']}: learn() {record['learn_cpu_seconds']:.0f} CPU s "
        f"({record['learn_wall_seconds']:.0f} wall s), last three evaluations {' '.join(f'{f:.3f}' for f in finals)}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = snapshots.parser(__doc__, ARMS, OUT, workers=2)
    parser.add_argument("--total-steps", type=int, default=TOTAL_STEPS, help="protocol: the default (tests: fewer)")
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES, help="protocol: the default")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.seeds < 1 or args.total_steps < 1 or args.eval_episodes < 1:
        parser.error("--workers, --seeds, --total-steps and --eval-episodes must be at least 1")
    command = "python benchmarks/studies/masking/masking_study.py " + " ".join(sys.argv[1:] if argv is None else argv)
    jobs = jobs_to_do(
        args.out, args.arms, list(range(args.seeds)), total_steps=args.total_steps, eval_episodes=args.eval_episodes,
        command=command.strip(),
    )  # fmt: skip
    work = partial(snapshots.safe_run, run)  # a failed run: its error in <arm>/seed_<k>.failed.txt, returned
    snapshots.execute(jobs, args.workers, work, summary, note=f"; reproduce with: {command.strip()}")


if __name__ == "__main__":
    main()
