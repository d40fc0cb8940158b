"""What a comparison is: its arms and settings (:class:`CompareSettings`), and the checks of the options alone."""

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sb3_reset_ppo.experiments import runner

PROG = "python -m sb3_reset_ppo.compare"
DEFAULT_ALGOS = ["reset_ppo", "ppo_lstm"]
# The arm the others are compared with when --baseline is not given and it is one of the arms
DEFAULT_BASELINE = "ppo_lstm"

# Gymnasium's env id grammar ([namespace/]name[-v<version>], gymnasium.envs.registration.ENV_ID_RE)
_ENV_ID = re.compile(r"(?:(?P<namespace>[\w:-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?")
# An arm's name names its runs' folder
_ARM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Variant:
    """
    One arm of a comparison.

    :param name: Its name in the report and its runs' folder
    :param algo: The zoo algorithm (``reset_ppo``, ``ppo_lstm``, ...)
    :param hyperparams: Its own settings on top of the shared ones, in the zoo's ``key:value`` form
    """

    name: str
    algo: str
    hyperparams: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """
    One comparison's settings, as the command line gives them (``python -m sb3_reset_ppo.compare --help``), with
    the defaults that depend on other options filled in; :func:`check` validates them.

    :param env: The env id (``--env``)
    :param arms: The arms compared (:func:`parse_variants`)
    :param baseline: The arm the others are compared with
    :param seeds: Seeds ``0..seeds-1`` train for each arm
    :param timesteps: Env steps per run (None: the hyperparameter file's ``n_timesteps``)
    :param conf_file: The zoo hyperparameter file every arm trains with (None: the package's, or one written for the env)
    :param hyperparams: Settings for every arm, in the zoo's ``key:value`` form
    :param gym_packages: Modules to import first, e.g. the one that registers ``env``
    :param policy: The policy of the file written for an env the package's file lacks
    :param n_envs: The ``n_envs`` of the file written for an env the package's file lacks
    :param eval_episodes: Deterministic episodes per evaluation
    :param evaluations: Evaluations over each run
    :param final_evaluations: The final return is the mean of this many last evaluations
    :param num_threads: Torch threads per run (-1: torch's default)
    :param workers: Local runs at a time
    :param address: A Ray cluster's address (None: local worker processes)
    :param out: The comparison's folder, absolute
    :param reps: Bootstrap resamples
    :param report_only: Train nothing and report the runs finished so far
    :param retry_failed: Train again the runs that failed with an error
    """

    env: str
    arms: tuple[Variant, ...]
    baseline: str
    seeds: int
    timesteps: int | None
    conf_file: str | None
    hyperparams: tuple[str, ...]
    gym_packages: tuple[str, ...]
    policy: str
    n_envs: int
    eval_episodes: int
    evaluations: int
    final_evaluations: int
    num_threads: int
    workers: int
    address: str | None
    out: Path
    reps: int
    report_only: bool
    retry_failed: bool


def parse_variants(algos: Sequence[str], variants: Sequence[Sequence[str]] | None) -> list[Variant]:
    """
    The arms: each of ``algos`` with its own name, then each ``--variant NAME ALGO [KEY:VALUE ...]``.

    :param algos: Zoo algorithms compared with the file's settings (``--algos``)
    :param variants: Each ``--variant``'s values
    :raises ValueError: a ``--variant`` without an algorithm, a setting not ``KEY:VALUE`` or setting the budget
        (``n_timesteps``: ``--timesteps`` sets it for every arm), a name that is not a plain folder name, or two
        arms with one name
    """
    arms = [Variant(algo, algo) for algo in algos]
    for values in variants or []:
        if len(values) < 2:
            raise ValueError(f"--variant needs NAME ALGO [KEY:VALUE ...], got {' '.join(values)!r}")
        name, algo, *settings = values
        bad = [setting for setting in settings if ":" not in setting]
        if bad:
            raise ValueError(f"--variant {name}: settings must be KEY:VALUE (the zoo's --hyperparams form), got {bad}")
        check_hyperparams(settings, f"--variant {name}")
        arms.append(Variant(name, algo, list(settings)))
    names = [arm.name for arm in arms]
    unsafe = [name for name in names if not _ARM_NAME.fullmatch(name)]
    if unsafe:
        raise ValueError(f"arm names must be letters, digits, '_', '.' and '-' (they name folders), got {unsafe}")
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"each arm needs its own name; {duplicated} appear more than once in --algos/--variant")
    if len(arms) < 2:
        raise ValueError(f"a comparison needs at least two arms (--algos and --variant), got {names}")
    return arms


def default_baseline(arms: Sequence[Variant]) -> str:
    """The arm compared with when none is given: :data:`DEFAULT_BASELINE` if it is one, else the last."""
    names = [arm.name for arm in arms]
    return DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[-1]


def default_workers(num_threads: int) -> int:
    """Local runs at a time when none is given: the cores over ``num_threads``, so one core per torch thread."""
    return max((os.cpu_count() or 1) // max(num_threads, 1), 1)


def check_hyperparams(settings: Sequence[str], option: str) -> None:
    """
    :param settings: Settings in the zoo's ``key:value`` form
    :param option: The option that gave them, for the message
    :raises ValueError: a setting gives ``n_timesteps``: the evaluations are spread over ``--timesteps``, which
        sets every arm's budget
    """
    budget_settings = [setting for setting in settings if setting.split(":", 1)[0].strip() == "n_timesteps"]
    if budget_settings:
        raise ValueError(f"{option}: give the budget with --timesteps (the same for every arm), not {budget_settings}")


def check_env_id(env_id: str) -> str:
    """
    An env id as gymnasium writes them, ``[namespace/]name[-v<version>]``, that names one folder (:func:`env_folder`).

    :param env_id: The ``--env`` value
    :return: ``env_id``
    :raises TypeError: ``env_id`` is not a str
    :raises ValueError: ``env_id`` is empty, has a path separator other than the namespace's one ``/``, or a name of
        dots only (``.``, ``..``: the report's folder would be the current folder or its parent)
    """
    if not isinstance(env_id, str):
        raise TypeError(f"--env must be a str, got {type(env_id).__name__}")
    match = _ENV_ID.fullmatch(env_id)
    if match is None or not match["name"].strip("."):
        raise ValueError(
            f"--env {env_id!r} is not an env id: expected [namespace/]name[-v<version>] (letters, digits, '_', "
            "':', '-' and '.' in the name, not only dots; at most one '/', after the namespace)"
        )
    return env_id


def env_folder(env_id: str) -> str:
    """The folder name of an env id (a namespace's ``/`` becomes ``-``, as the zoo's hub names do)."""
    return env_id.replace("/", "-")


def _option(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def check(settings: CompareSettings) -> CompareSettings:
    """
    Check the options on their own, before anything is imported, read or written.

    :param settings: The comparison's settings
    :return: ``settings``
    :raises TypeError: a count is not an int, or ``env`` is not a str
    :raises ValueError: naming the option, its value and what it may be
    """
    check_hyperparams(settings.hyperparams, "--hyperparams")
    runner.check_num_threads(settings.num_threads, "--num-threads")
    counts = ["seeds", "n_envs", "eval_episodes", "evaluations", "final_evaluations", "workers", "reps"]
    if settings.timesteps is not None:  # None: the hyperparameter file's n_timesteps
        counts.append("timesteps")
    for name in counts:
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{_option(name)} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{_option(name)} must be at least 1, got {value}")
    if settings.final_evaluations > settings.evaluations:
        raise ValueError(
            f"--final-evaluations ({settings.final_evaluations}) must be at most --evaluations ({settings.evaluations})"
        )
    names = [arm.name for arm in settings.arms]
    if settings.baseline not in names:
        raise ValueError(f"--baseline {settings.baseline!r} is not one of the arms {names}")
    check_env_id(settings.env)
    return settings
