"""
The attention defaults study (``benchmarks/studies/attention_defaults/PROTOCOL.md``): ResetPPO's ``MlpTrXLPolicy`` at
the package's attention defaults (the base) and with one attention argument changed at a time, on tasks the attention
study does not use, 5 seeds each.

Each run trains through the RL Zoo (:func:`sb3_reset_ppo.experiments.runner.run_one`: a subprocess, one torch thread,
20 evaluations of 20 deterministic episodes over the budget, their seconds logged so that ``learn()``'s seconds hold
none; the training log kept) into ``<out>/<setting>/<task>/seed<k>/``, with the base hyperparameter file
(``attention_defaults.yml``) and the setting's ``policy_kwargs`` on the command line; a finished run writes
``run.json`` (with the commit it trained with) and is skipped next time, a failed one ``failed.json``, a run cut short
nothing (it trains again). When the runs end, the study's folder is stored as its tables (``rundata.pack``).

Usage: python benchmarks/studies/attention_defaults/attention_defaults_study.py [--tasks ...] [--settings ...]
       [--seeds 5] [--workers 2] [--minutes M] [--retry-failed] [--forecast] [--steps N --out DIR --allow-dirty]
       (--steps: a smoke test)
"""

from pathlib import Path
from typing import Any

from torch import nn

from benchmarks.kit import run_grid, rundata, study_runner
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent
OUT = rundata.RESULTS / "attention_defaults"
# The base hyperparameters: one entry per task, the attention arguments at the base values (FACTORS)
CONF = HERE / "attention_defaults.yml"
TASKS = ("CueRecall-v0", "PopgymRepeatFirstEasy-v0")
# Each factor, an argument of MlpTrXLPolicy: its base value (the package's default at the protocol's commit) and the
# values tried instead, one factor at a time (PROTOCOL.md, Settings)
FACTORS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "memory_length": (32, (16, 64)),
    "n_trxl_layers": (2, (1, 3)),
    "n_attention_heads": (4, (1,)),
    "trxl_dim": (64, (32, 128)),
    "positional_encoding": ("sinusoidal", ("none", "learned")),
    "gated": (False, (True,)),
}
BASE = "base"


def setting_name(factor: str, value: Any) -> str:
    """The name (and folder) of the setting that changes ``factor`` to ``value``: ``"n_trxl_layers_1"``."""
    return f"{factor}_{str(value).lower()}"


# setting -> (factor, value) that it changes; the base changes none
SETTINGS: dict[str, tuple[str, Any] | None] = {
    BASE: None,
    **{setting_name(factor, value): (factor, value) for factor, (_, values) in FACTORS.items() for value in values},
}
SEEDS = 5
# Deterministic episodes per evaluation (20 evaluations a run): 10 on RepeatFirst, whose episodes each average 51
# answers and whose evaluations, one attention step at a time, would otherwise cost a third of the study (PROTOCOL.md)
EVAL_EPISODES = {"CueRecall-v0": 20, "PopgymRepeatFirstEasy-v0": 10}
# ResetPPO's window: its defaults at the protocol's commit (what users get), named so that a later change of the
# package's defaults does not change the runs
WINDOW = ["window_size:'batch'", "window_coverage:'full'"]


def policy_kwargs(setting: str, task: str) -> dict[str, Any]:
    """
    The ``policy_kwargs`` of a setting on a task: the base file's entry with the setting's factor changed.

    :param setting: A setting of :data:`SETTINGS`
    :param task: A task of :data:`TASKS`
    """
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {list(SETTINGS)}, got {setting!r}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    kwargs = dict(eval(run_grid.read_conf(CONF)[task]["policy_kwargs"], {"nn": nn}))
    change = SETTINGS[setting]
    if change is not None:
        kwargs[change[0]] = change[1]
    return kwargs


def hyperparams(setting: str, task: str) -> list[str]:
    """
    The settings a run adds on the command line: the window, and the setting's ``policy_kwargs`` in full (the zoo's
    ``--hyperparams`` replaces the file's whole entry for a key), written as a Python literal the zoo evaluates.
    """
    kwargs = ", ".join(f"{key}={value!r}" for key, value in policy_kwargs(setting, task).items())
    return [*WINDOW, f"policy_kwargs:dict({kwargs})"]


def spec(setting: str, task: str, seed: int, out: Path, steps: int | None = None) -> runner.RunSpec:
    """
    One run of the study.

    :param setting: A setting of :data:`SETTINGS`
    :param task: A task of :data:`TASKS`
    :param seed: The training seed
    :param out: The study's folder
    :param steps: Env steps instead of the task's budget (a smoke test)
    :return: The run, into ``out/<setting>/<task>/seed<seed>``
    """
    settings = hyperparams(setting, task)  # checks the setting and the task
    factor, value = SETTINGS[setting] or (None, None)
    return runner.RunSpec(
        algo="reset_ppo", env=task, seed=seed, run_dir=out / setting / task / f"seed{seed}", conf_file=CONF,
        hyperparams=settings, eval_episodes=EVAL_EPISODES[task], steps=steps, keep_log=True, label=setting,
        extra={"study": "attention_defaults", "setting": setting, "factor": factor, "value": value, "task": task},
    )  # fmt: skip


def jobs(tasks: list[str], settings: list[str], seeds: int, out: Path, steps: int | None = None) -> list[dict[str, Any]]:
    """
    Every run of the study, in the protocol's order (seed, task, setting: the settings of a task and seed train one
    after another, on the same machine at about the same load), as the kit's job dicts (``variant`` is the setting)
    with their ``spec``.
    """
    return study_runner.jobs(spec, tasks, settings, seeds, out, steps)


def main(argv: list[str] | None = None) -> None:
    script = "benchmarks/studies/attention_defaults/attention_defaults_study.py"
    width = max(len(setting) for setting in SETTINGS)
    study_runner.main(argv, __doc__, script, spec, TASKS, "settings", list(SETTINGS), OUT, SEEDS, width)


if __name__ == "__main__":
    main()
