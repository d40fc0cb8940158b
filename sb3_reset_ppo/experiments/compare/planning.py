"""What a comparison will train, checked before anything is written (:func:`prepare`), and its settings (:func:`start`)."""

import difflib
import hashlib
import importlib
import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from sb3_reset_ppo.common.utils import PACKAGED_CONF
from sb3_reset_ppo.experiments import runner
from sb3_reset_ppo.experiments.compare.settings import PROG, CompareSettings, Variant, env_folder
from sb3_reset_ppo.experiments.runner import RunSpec

SETTINGS_FILE = "compare.json"
# Recorded files that lack a setting were written when it had this value
SETTING_DEFAULTS: dict[str, Any] = {"num_threads": 1}
# The file written for an env the package's file lacks, in the comparison's folder
WRITTEN_CONF = "conf.yml"
# What the command imports, and the extra that installs it: to train (the RL Zoo; its CLI imports requests without
# requiring it), to report, on a Ray cluster
TRAIN_MODULES = {"rl_zoo3": "compare", "optuna": "compare", "requests": "compare"}
REPORT_MODULES = {"rliable": "compare", "scipy": "compare", "matplotlib": "compare"}
CLUSTER_MODULES = {"ray": "cluster"}


def check_requirements(report_only: bool, address: str | None) -> None:
    """
    Check that what the command will import is installed (only the report's with ``report_only``; Ray with ``address``).

    :raises ValueError: naming the missing modules and the extras that install them
    """
    modules = {**REPORT_MODULES, **({} if report_only else TRAIN_MODULES), **(CLUSTER_MODULES if address else {})}
    missing = {name: extra for name, extra in modules.items() if importlib.util.find_spec(name) is None}
    if missing:
        extras = ",".join(sorted(set(missing.values())))
        raise ValueError(
            f"{PROG} needs {', '.join(sorted(missing))}, which cannot be imported here: in "
            f'the clone of sb3-reset-ppo, pip install -e ".[{extras}]"'
        )


def _closest(name: str, known: Sequence[str]) -> str | None:
    """The known name closest to ``name``, as the RL Zoo's ``train`` suggests one (None: none is close)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return close[0] if close else None


def check_env(env_id: str, gym_packages: Sequence[str]) -> None:
    """
    Check that ``env_id`` is registered once the zoo's trainer's imports and ``gym_packages`` are imported.

    :raises ValueError: a module of ``gym_packages`` cannot be imported, or ``env_id`` is not registered
    """
    import gymnasium as gym
    import rl_zoo3.import_envs  # noqa: F401  (the envs the zoo's trainer registers)

    import sb3_reset_ppo.envs  # noqa: F401  (the memory tasks)

    for name in gym_packages:
        try:
            importlib.import_module(name)
        except Exception as error:  # an import that fails here fails in every run
            raise ValueError(
                f"--gym-packages {name} cannot be imported here ({type(error).__name__}: {error}): install it (on every "
                "machine of a cluster)"
            ) from error
    if env_id in gym.registry:
        return
    close = _closest(env_id, list(gym.registry))
    hint = f"did you mean {close}?" if close else "no registered id is close to it"
    raise ValueError(
        f"--env {env_id} is not a registered env id: {hint} (an env of your own needs --gym-packages with the module "
        "that registers it)"
    )


def check_algos(arms: Sequence[Variant]) -> None:
    """:raises ValueError: an arm's algorithm the RL Zoo does not know (naming the closest known one)"""
    from sb3_reset_ppo.zoo import register

    register()
    from rl_zoo3.utils import ALGOS

    unknown = sorted({arm.algo for arm in arms if arm.algo not in ALGOS})
    if unknown:
        close = {name: _closest(name, list(ALGOS)) for name in unknown}
        hints = "".join(f" (did you mean {match} for {name}?)" for name, match in close.items() if match)
        raise ValueError(f"unknown algorithms {unknown}{hints}: the RL Zoo's are {sorted(ALGOS)}")


def check_out(out: Path) -> None:
    """:raises ValueError: ``out`` is a file, or the nearest existing folder on its path is not writable"""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: give a folder for the comparison")
    existing = next(folder for folder in (out, *out.parents) if folder.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: {existing} is not a folder you can write to")


def resolve_conf(settings: CompareSettings) -> tuple[Path, str]:
    """
    The hyperparameter file every arm trains with and its text: ``--conf-file``, else the package's if it has the env,
    else :data:`WRITTEN_CONF` in ``--out`` (written by :func:`start`).

    :raises ValueError: the file is missing, not the zoo's YAML form or has no entry for the env, or no budget is known
    """
    env = settings.env
    if settings.conf_file is not None:
        path = Path(settings.conf_file).resolve()
        if not path.is_file():
            raise ValueError(f"--conf-file {settings.conf_file} is not a file")
        text = path.read_text()
    else:
        path, text = PACKAGED_CONF, PACKAGED_CONF.read_text()
        if env not in (yaml.safe_load(text) or {}):
            if settings.timesteps is None:
                raise ValueError(
                    f"env {env!r} has no settings in the package's file: give --timesteps (and --policy, "
                    "--n-envs), or a --conf-file with an entry for it"
                )
            path = settings.out / WRITTEN_CONF
            entry = {"policy": settings.policy, "n_envs": settings.n_envs, "n_timesteps": settings.timesteps}
            text = yaml.safe_dump({env: entry})
    try:
        entries = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"--conf-file {path} is not valid YAML: {error}") from error
    if not isinstance(entries, dict) or env not in entries or not isinstance(entries[env], dict):
        raise ValueError(f"--conf-file {path} has no entry for env {env!r} (a YAML mapping of env ids to settings)")
    if settings.timesteps is None and "n_timesteps" not in entries[env]:
        raise ValueError(f"--conf-file {path}'s entry for {env!r} has no n_timesteps: give --timesteps")
    return path, text


def plan(settings: CompareSettings, conf: Path) -> list[RunSpec]:
    """Every (arm, seed) run trained with ``conf``, the arms of a seed next to each other (they train side by side)."""
    return [
        RunSpec(
            algo=arm.algo, env=settings.env, seed=seed,
            run_dir=settings.out / "runs" / arm.name / env_folder(settings.env) / f"seed{seed}",
            conf_file=conf, hyperparams=[*settings.hyperparams, *arm.hyperparams],
            eval_episodes=settings.eval_episodes, evaluations=settings.evaluations, steps=settings.timesteps,
            gym_packages=list(settings.gym_packages), keep_log=True, label=arm.name, num_threads=settings.num_threads,
        )
        for seed in range(settings.seeds)
        for arm in settings.arms
    ]  # fmt: skip


def record(settings: CompareSettings, conf: Path, text: str) -> dict[str, Any]:
    """The settings that make two commands the same comparison (with the hyperparameter file ``conf`` and its ``text``)."""
    return {
        "env": settings.env, "arms": [asdict(arm) for arm in settings.arms], "baseline": settings.baseline,
        "seeds": settings.seeds, "timesteps": settings.timesteps, "conf_file": str(conf),
        "conf_sha256": hashlib.sha256(text.encode()).hexdigest(), "hyperparams": list(settings.hyperparams),
        "gym_packages": list(settings.gym_packages), "eval_episodes": settings.eval_episodes,
        "evaluations": settings.evaluations, "final_evaluations": settings.final_evaluations,
        "num_threads": settings.num_threads,
    }  # fmt: skip


def check_settings(out: Path, recorded: dict[str, Any]) -> None:
    """
    Record the comparison's settings (:func:`record`) in ``out``'s :data:`SETTINGS_FILE`, or check a resumed one's.

    :raises ValueError: ``out`` holds a comparison with other settings (other than ``seeds``)
    """
    path = out / SETTINGS_FILE
    if path.exists():
        before = {**SETTING_DEFAULTS, **json.loads(path.read_text())}
        recorded = {**SETTING_DEFAULTS, **recorded}
        changed = sorted(
            key for key in recorded.keys() | before.keys() if before.get(key) != recorded.get(key) and key != "seeds"
        )
        if changed:
            raise ValueError(
                f"--out {out} holds a comparison with other settings ({', '.join(changed)}): give another --out, or the "
                "same settings to resume it (only --seeds may change: the report takes seeds 0 to N-1)"
            )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorded, indent=2))


@dataclass(frozen=True)
class Plan:
    """A checked comparison, not started yet: its hyperparameter file, runs (:func:`plan`) and settings (:func:`record`)."""

    conf: Path
    conf_text: str
    runs: list[RunSpec]
    record: dict[str, Any]


def prepare(settings: CompareSettings) -> Plan:
    """
    Check everything a comparison needs (extras, env, algorithms, folders, hyperparameter file), writing nothing.

    :raises ValueError: naming what is missing or wrong
    :raises FileExistsError: a run's folder exists and is not a run's (:func:`runner.check_run_dir`)
    """
    check_requirements(settings.report_only, settings.address)
    if not settings.report_only:
        check_env(settings.env, settings.gym_packages)
        check_algos(settings.arms)
    check_out(settings.out)
    conf, text = resolve_conf(settings)
    runs = plan(settings, conf)
    if not settings.report_only:
        for spec in runs:
            runner.check_run_dir(spec.run_dir)
    return Plan(conf, text, runs, record(settings, conf, text))


def start(out: Path, prepared: Plan) -> None:
    """Record the settings in ``out`` (:func:`check_settings`) and write the hyperparameter file generated for the env."""
    check_settings(out, prepared.record)
    if prepared.conf == out / WRITTEN_CONF:
        prepared.conf.write_text(prepared.conf_text)
