"""
RL Zoo integration: ``python -m sb3_reset_ppo.zoo train --algo reset_ppo --env CartPoleNoVel-v1 ...``.

Registers ``reset_ppo`` (:class:`~sb3_reset_ppo.ResetPPO`) in ``rl_zoo3.ALGOS`` next to ``ppo_lstm``, its
Optuna sampler for ``-optimize``, and the memory tasks of :mod:`sb3_reset_ppo.envs`, then runs the zoo's
own command line (``train``, ``enjoy``, ``plot_train``, ...). For ``--algo reset_ppo`` the hyperparameter
file shipped with the package (``reset_ppo.yml``, ResetPPO's defaults for ``window_stride`` and the rest) is
the default ``--conf-file``. ``enjoy`` without a display (see :func:`no_display_reason`) runs as with
``--no-render`` and says so: a window nobody can see would only pace the steps at the env's ``render_fps``.
"""

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import optuna
from rl_zoo3 import hyperparams_opt
from rl_zoo3.utils import ALGOS

import sb3_reset_ppo.envs  # noqa: F401  (registers the memory tasks)
from sb3_reset_ppo import ResetPPO

ALGO_NAME = "reset_ppo"
DEFAULT_CONF_FILE = Path(__file__).with_name("reset_ppo.yml")
# Window lengths the sampler tries: three fixed lengths and the default, min(batch_size, n_steps)
WINDOW_SIZES: tuple[int | str, ...] = (8, 16, 32, "batch")


def _with_window_size(hyperparams: dict[str, Any], window_size: int | str) -> dict[str, Any]:
    """
    Add ``window_size`` to ppo_lstm's parameters (an int at most ``n_steps``, or ``"batch"``; ``batch_size`` counts
    transitions in both) and
    ResetPPO's default ``window_stride`` (one pass over the data per epoch), which overrides a config's: a trial
    then costs no more than the same ppo_lstm trial.
    """
    n_steps = int(hyperparams.get("n_steps", 128))
    hyperparams["window_size"] = window_size if isinstance(window_size, str) else min(int(window_size), n_steps)
    hyperparams["window_stride"] = None
    return hyperparams


def sample_reset_ppo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    Optuna sampler for ResetPPO: the zoo's ``ppo_lstm`` search space plus ``window_size``.

    ``batch_size`` and ``n_epochs`` mean what they mean for ``ppo_lstm`` (transitions per minibatch, passes
    over the data), and the default ``window_stride`` trains each step once per epoch, so a trial costs
    about what the same ``ppo_lstm`` trial costs.

    :param trial: The Optuna trial
    :param n_actions: Number of actions (unused, as for ppo_lstm)
    :param n_envs: Number of envs
    :param additional_args: Extra arguments from the zoo
    :return: Hyperparameters for ``ResetPPO``
    """
    window_size = cast(int | str, trial.suggest_categorical("window_size", list(WINDOW_SIZES)))
    hyperparams = hyperparams_opt.sample_ppo_lstm_params(trial, n_actions, n_envs, additional_args)
    return _with_window_size(hyperparams, window_size)


def convert_reset_ppo_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """Convert the raw parameters of a finished trial (as the zoo stores them) to ``ResetPPO`` arguments."""
    params = dict(sampled_params)
    window_size = params.pop("window_size", "batch")
    return _with_window_size(hyperparams_opt.convert_onpolicy_params(params), window_size)


def register() -> None:
    """Make ``reset_ppo`` known to the RL Zoo (idempotent)."""
    ALGOS[ALGO_NAME] = ResetPPO
    hyperparams_opt.HYPERPARAMS_SAMPLER[ALGO_NAME] = sample_reset_ppo_params
    hyperparams_opt.HYPERPARAMS_CONVERTER[ALGO_NAME] = convert_reset_ppo_params


def _with_default_conf_file(argv: list[str]) -> list[str]:
    """Add the package's hyperparameter file to a ``train --algo reset_ppo`` command that names none."""
    if not argv or argv[0] != "train":
        return argv
    algo = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--algo"), None)
    algo = algo or next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--algo=")), "ppo")
    names_conf = any(arg in ("-conf", "--conf-file") or arg.startswith("--conf-file=") for arg in argv)
    if algo == ALGO_NAME and not names_conf:
        return [*argv, "--conf-file", str(DEFAULT_CONF_FILE)]
    return argv


def no_display_reason(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """
    Why a window (gymnasium's ``render_mode="human"``, drawn by pygame) cannot be seen, if it cannot.

    :param environ: The environment variables (default: ``os.environ``)
    :param platform: ``sys.platform`` (the default) or another value of it
    :return: ``None`` where a window can be shown: on macOS and Windows, or elsewhere (Linux, BSD) with
        ``DISPLAY`` or ``WAYLAND_DISPLAY`` set; else the reason, e.g. ``"DISPLAY and WAYLAND_DISPLAY are unset"``.
        SDL's ``dummy`` and ``offscreen`` video drivers (``SDL_VIDEODRIVER``) show nothing anywhere.
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    driver = environ.get("SDL_VIDEODRIVER", "")
    if driver.lower() in ("dummy", "offscreen"):
        return f"SDL_VIDEODRIVER={driver} shows no window"
    if platform.startswith(("win32", "cygwin", "darwin")) or environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return "DISPLAY and WAYLAND_DISPLAY are unset"


def _without_render_if_no_display(
    argv: list[str], environ: Mapping[str, str] | None = None, platform: str | None = None
) -> list[str]:
    """
    Add ``--no-render`` to an ``enjoy`` command that would render where nothing can be seen, and say so on stderr.

    Rendering there shows nothing but still paces every step at the env's ``render_fps`` (the zoo's 1,000 steps
    of ``CueRecall-v0``, at 4 frames per second, take over 4 minutes); without it the episodes run at full speed
    and their returns are printed as usual.

    :param argv: The arguments after the program name, e.g. ``["enjoy", "--algo", "reset_ppo", ...]``
    :param environ: The environment variables (default: ``os.environ``)
    :param platform: ``sys.platform`` (the default) or another value of it
    :return: ``argv``, with ``--no-render`` added where needed
    """
    # argparse takes any unambiguous prefix of --no-render ("--no-" and longer)
    no_render = any(arg.startswith("--no-") and "--no-render".startswith(arg) for arg in argv)
    if not argv or argv[0] != "enjoy" or no_render or "-h" in argv or "--help" in argv:
        return argv
    reason = no_display_reason(environ, platform)
    if reason is None:
        return argv
    print(
        f"sb3_reset_ppo.zoo enjoy: no display ({reason}): running without rendering, as with --no-render, "
        "instead of pacing the steps at the env's render_fps for a window nobody sees",
        file=sys.stderr,
    )
    return [*argv, "--no-render"]


# rl_zoo3.cli.main's scripts (tests/test_zoo.py checks each is known to it)
SCRIPTS = ("train", "enjoy", "plot_train", "plot_from_file", "all_plots")
USAGE = f"""usage: python -m sb3_reset_ppo.zoo {{{",".join(SCRIPTS)}}} [options]

The RL Zoo's command line with reset_ppo (ResetPPO) registered next to ppo_lstm. Each script takes the
zoo's own options; see them with, e.g., `python -m sb3_reset_ppo.zoo train --help`. Examples:

  python -m sb3_reset_ppo.zoo train --algo reset_ppo --env CueRecall-v0
  python -m sb3_reset_ppo.zoo enjoy --algo reset_ppo --env CueRecall-v0 -f logs/
"""


def main(argv: list[str] | None = None) -> None:
    """
    Run the RL Zoo's command line with ``reset_ppo`` registered.

    :param argv: Arguments after the program name (default: ``sys.argv[1:]``), e.g. ``["train", "--algo", ...]``
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    if arguments[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0)
    if arguments[0] not in SCRIPTS:
        print(USAGE, file=sys.stderr)
        raise SystemExit(f"error: unknown script {arguments[0]!r}; choose one of {', '.join(SCRIPTS)}")
    register()
    from rl_zoo3.cli import main as zoo_main

    arguments = _without_render_if_no_display(_with_default_conf_file(arguments))
    # The zoo's scripts name themselves after sys.argv[0] in their usage (argparse's default prog), which
    # `python -m` sets to this package's __main__.py
    sys.argv = [f"python -m sb3_reset_ppo.zoo {arguments[0]}", *arguments]
    zoo_main()
