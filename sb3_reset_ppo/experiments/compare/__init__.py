"""
``python -m sb3_reset_ppo.compare``: ResetPPO against RecurrentPPO (or any zoo algorithms) on your task, with
intervals; one ``CompareSettings`` passes from ``cli`` through ``planning``, ``training``, ``analysis`` and ``reporting``.
"""

from sb3_reset_ppo.experiments.compare.analysis import NothingToCompare, analyse, equal_time, load
from sb3_reset_ppo.experiments.compare.cli import main, parser, settings_from_args
from sb3_reset_ppo.experiments.compare.planning import (
    PACKAGED_CONF,
    SETTINGS_FILE,
    check_algos,
    check_env,
    check_settings,
    plan,
    resolve_conf,
)
from sb3_reset_ppo.experiments.compare.reporting import markdown, report, verdict
from sb3_reset_ppo.experiments.compare.settings import (
    CompareSettings,
    Variant,
    check,
    check_env_id,
    check_hyperparams,
    env_folder,
    parse_variants,
)

__all__ = [
    "PACKAGED_CONF", "SETTINGS_FILE", "CompareSettings", "NothingToCompare", "Variant", "analyse", "check", "check_algos",
    "check_env", "check_env_id", "check_hyperparams", "check_settings", "env_folder", "equal_time", "load", "main",
    "markdown", "parse_variants", "parser", "plan", "report", "resolve_conf", "settings_from_args", "verdict",
]  # fmt: skip
