"""What a comparison is: its arms and settings (:class:`CompareSettings`), and the checks of the options alone."""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sb3_reset_ppo.experiments import runner

PROG = "python -m sb3_reset_ppo.compare"
# Gymnasium's env id grammar ([namespace/]name[-v<version>], gymnasium.envs.registration.ENV_ID_RE)
_ENV_ID = re.compile(r"(?:(?P<namespace>[\w:-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?")
# An arm's name names its runs' folder
_ARM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Variant:
    """One arm of a comparison."""

    name: str  #: its name in the report and its runs' folder
    algo: str  #: the zoo algorithm (reset_ppo, ppo_lstm, ...)
    hyperparams: list[str] = field(default_factory=list)  #: its own settings on top of the shared ones, as key:value


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """One comparison's settings: a field per option of ``python -m sb3_reset_ppo.compare`` (see its ``--help``)."""

    env: str
    arms: tuple[Variant, ...]  #: the arms compared (--algos and --variant: parse_variants)
    baseline: str
    seeds: int
    timesteps: int | None  #: env steps per run (None: the hyperparameter file's n_timesteps)
    conf_file: str | None  #: the file every arm trains with (None: the package's, or one written for the env)
    hyperparams: tuple[str, ...]
    gym_packages: tuple[str, ...]
    policy: str
    n_envs: int
    eval_episodes: int
    evaluations: int
    final_evaluations: int
    num_threads: int
    workers: int
    address: str | None  #: a Ray cluster's address (None: local worker processes)
    out: Path  #: the comparison's folder, absolute
    reps: int
    report_only: bool
    retry_failed: bool


def parse_variants(algos: Sequence[str], variants: Sequence[Sequence[str]] | None) -> list[Variant]:
    """
    The arms: each of ``algos`` (``--algos``) under its own name, then each of ``variants`` (``--variant``).

    :raises ValueError: a ``--variant`` that is not ``NAME ALGO [KEY:VALUE ...]``, two arms of one name, or fewer than two arms
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


def check_hyperparams(settings: Sequence[str], option: str) -> None:
    """
    :param settings: Settings in the zoo's ``key:value`` form, given by ``option``
    :raises ValueError: a setting gives ``n_timesteps``, which only ``--timesteps`` sets (the same for every arm)
    """
    budget_settings = [setting for setting in settings if setting.split(":", 1)[0].strip() == "n_timesteps"]
    if budget_settings:
        raise ValueError(f"{option}: give the budget with --timesteps (the same for every arm), not {budget_settings}")


def check_env_id(env_id: str) -> str:
    """
    :param env_id: The ``--env`` value
    :return: ``env_id``, an id as gymnasium writes them (``[namespace/]name[-v<version>]``) that names one folder
    :raises TypeError: ``env_id`` is not a str
    :raises ValueError: ``env_id`` does not name one folder
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


def check(settings: CompareSettings) -> CompareSettings:
    """
    Check the options on their own, before anything is imported, read or written.

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
        value, option = getattr(settings, name), f"--{name.replace('_', '-')}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{option} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{option} must be at least 1, got {value}")
    if settings.final_evaluations > settings.evaluations:
        raise ValueError(
            f"--final-evaluations ({settings.final_evaluations}) must be at most --evaluations ({settings.evaluations})"
        )
    names = [arm.name for arm in settings.arms]
    if settings.baseline not in names:
        raise ValueError(f"--baseline {settings.baseline!r} is not one of the arms {names}")
    check_env_id(settings.env)
    return settings
