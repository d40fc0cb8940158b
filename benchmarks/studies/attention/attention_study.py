"""
The attention study (``benchmarks/studies/attention/PROTOCOL.md``): ResetPPO with attention memory (Transformer-XL),
LSTM and GRU at the same window and budget, and RecurrentPPO as the peer, on five tasks, 10 seeds each.

Each run trains through the RL Zoo (:func:`sb3_reset_ppo.experiments.runner.run_one`: a subprocess, one torch thread,
20 evaluations of 20 deterministic episodes over the budget, their seconds logged so that ``learn()``'s seconds hold
none; the training log kept) into ``<out>/<arm>/<task>/seed<k>/``; a finished run writes ``run.json`` (with the
commit it trained with) and is skipped next time, a failed one ``failed.json``, a run cut short nothing (it trains
again). When the runs end, the study's folder is stored as its tables (``rundata.pack``), as the other studies'.

Usage: python benchmarks/studies/attention/attention_study.py [--tasks ...] [--arms ...] [--seeds 10] [--workers 2]
       [--minutes M] [--retry-failed] [--forecast] [--steps N --out DIR --allow-dirty]  (--steps: a smoke test)
"""

from pathlib import Path
from typing import Any

from benchmarks.kit import rundata, study_runner
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent
OUT = rundata.RESULTS / "attention"
# The hyperparameters: RecurrentPPO's and the LSTM and GRU arms' file, and the attention arm's (the same entries with
# the memory cell replaced)
CONF = HERE / "attention.yml"
TRXL_CONF = HERE / "attention_trxl.yml"
TASKS = (
    "ProofOfMemory-v0",
    "CueRecallLong-v0",
    "PopgymRepeatPreviousMedium-v0",
    "PopgymAutoencodeEasy-v0",
    "CartPoleNoVel-v1",
)
# ResetPPO's window, the same for its three arms (PROTOCOL.md, Arms), named so that a change of the package's defaults
# does not change the runs
WINDOW = ["window_size:16", "window_coverage:'full'"]
# arm -> the zoo's algorithm, its hyperparameter file, the settings it adds on the command line
ARMS: dict[str, tuple[str, Path, list[str]]] = {
    "trxl": ("reset_ppo", TRXL_CONF, WINDOW),
    "lstm": ("reset_ppo", CONF, WINDOW),
    "gru": ("reset_ppo", CONF, [*WINDOW, "policy:'MlpGruPolicy'"]),
    "rppo": ("ppo_lstm", CONF, []),
}
SEEDS = 10
EVAL_EPISODES = 20
# The module that registers the study's own tasks in the trainer's process
GYM_PACKAGES = ["benchmarks.envs"]


def spec(arm: str, task: str, seed: int, out: Path, steps: int | None = None) -> runner.RunSpec:
    """
    One run of the study.

    :param arm: An arm of :data:`ARMS`
    :param task: A task of :data:`TASKS`
    :param seed: The training seed
    :param out: The study's folder
    :param steps: Env steps instead of the task's budget (a smoke test)
    :return: The run, into ``out/<arm>/<task>/seed<seed>``
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    algo, conf, settings = ARMS[arm]
    return runner.RunSpec(
        algo=algo, env=task, seed=seed, run_dir=out / arm / task / f"seed{seed}", conf_file=conf,
        hyperparams=list(settings), eval_episodes=EVAL_EPISODES, steps=steps, gym_packages=GYM_PACKAGES, keep_log=True,
        label=arm, extra={"study": "attention", "arm": arm, "task": task},
    )  # fmt: skip


def jobs(tasks: list[str], arms: list[str], seeds: int, out: Path, steps: int | None = None) -> list[dict[str, Any]]:
    """
    Every run of the study, in the protocol's order (seed, task, arm: the arms of a task and seed train side by side),
    as the kit's job dicts (``variant`` is the arm) with their ``spec``.
    """
    return study_runner.jobs(spec, tasks, arms, seeds, out, steps)


def main(argv: list[str] | None = None) -> None:
    script = "benchmarks/studies/attention/attention_study.py"
    study_runner.main(argv, __doc__, script, spec, TASKS, "arms", list(ARMS), OUT, SEEDS)


if __name__ == "__main__":
    main()
