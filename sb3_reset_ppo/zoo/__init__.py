"""
RL Zoo integration: ``python -m sb3_reset_ppo.zoo train --algo reset_ppo ...`` runs the zoo's command line with
``reset_ppo`` and ``maskable_reset_ppo`` registered, their sampler and hyperparameters (``docs/guide/rl_zoo.md``);
``TRXL_CONF_FILE`` is the packaged config of attention memory.
"""

import importlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar, cast

import numpy as np
import optuna
from rl_zoo3 import hyperparams_opt
from rl_zoo3.callbacks import TrialEvalCallback
from rl_zoo3.utils import ALGOS
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.vec_env import VecEnv

import sb3_reset_ppo.envs  # noqa: F401  (registers the memory tasks)
from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.maskable_evaluation import MaskableEvalCallback
from sb3_reset_ppo.common.type_aliases import Memory
from sb3_reset_ppo.common.utils import PACKAGED_CONF as DEFAULT_CONF_FILE
from sb3_reset_ppo.common.utils import swapped_names
from sb3_reset_ppo.experiments.runner import EVALUATION_SECONDS

# The packaged config of attention memory (MlpTrXLPolicy): a --conf-file to name (the zoo keys a config by env id)
TRXL_CONF_FILE = DEFAULT_CONF_FILE.with_name("reset_ppo_trxl.yml")
ALGO_NAME = "reset_ppo"
MASKABLE_ALGO_NAME = "maskable_reset_ppo"
# Both take the same hyperparameters: one sampler, one converter, one default --conf-file
ALGO_NAMES = (ALGO_NAME, MASKABLE_ALGO_NAME)
# Window lengths the sampler tries: three fixed lengths and the default, min(batch_size, n_steps)
WINDOW_SIZES: tuple[int | str, ...] = (8, 16, 32, "batch")
# The variable by which a driver (benchmarks/kit/tune.py) names a zoo process's trials (owned_trials)
TRIAL_OWNER_VARIABLE = "SB3_RESET_PPO_TRIAL_OWNER"
TRIAL_OWNER_ATTR = "sb3_reset_ppo_owner"
# Where the zoo's names that masked_evaluation and masked_enjoy replace stop being the zoo's own
_TO_UPDATE = (
    "the RL Zoo has changed, and sb3_reset_ppo.zoo's masked evaluation (masked_evaluation, masked_enjoy) must follow it"
)
_TIMING_TO_UPDATE = "the RL Zoo has changed, and sb3_reset_ppo.zoo's timed_evaluation must follow it"


def _with_window_size(hyperparams: dict[str, Any], window_size: int | str) -> dict[str, Any]:
    """Add ``window_size`` and ResetPPO's default ``window_stride`` to ppo_lstm's parameters (a trial costs the same)."""
    n_steps = int(hyperparams.get("n_steps", 128))
    hyperparams["window_size"] = window_size if isinstance(window_size, str) else min(int(window_size), n_steps)
    hyperparams["window_stride"] = None
    return hyperparams


def sample_reset_ppo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """Optuna sampler for ResetPPO (the zoo's sampler arguments): the zoo's ``ppo_lstm`` search space plus ``window_size``."""
    window_size = cast(int | str, trial.suggest_categorical("window_size", list(WINDOW_SIZES)))
    hyperparams = hyperparams_opt.sample_ppo_lstm_params(trial, n_actions, n_envs, additional_args)
    return _with_window_size(hyperparams, window_size)


def convert_reset_ppo_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """Convert the raw parameters of a finished trial (as the zoo stores them) to ``ResetPPO`` arguments."""
    params = dict(sampled_params)
    window_size = params.pop("window_size", "batch")
    return _with_window_size(hyperparams_opt.convert_onpolicy_params(params), window_size)


def register() -> None:
    """Make ``reset_ppo`` and ``maskable_reset_ppo`` known to the RL Zoo (idempotent)."""
    ALGOS[ALGO_NAME] = ResetPPO
    ALGOS[MASKABLE_ALGO_NAME] = MaskableResetPPO
    for name in ALGO_NAMES:
        hyperparams_opt.HYPERPARAMS_SAMPLER[name] = sample_reset_ppo_params
        hyperparams_opt.HYPERPARAMS_CONVERTER[name] = convert_reset_ppo_params


class MaskableTrialEvalCallback(TrialEvalCallback, MaskableEvalCallback):
    """The zoo's ``TrialEvalCallback`` evaluating as :class:`~.maskable_evaluation.MaskableEvalCallback` (masks, memory)."""


class _EnjoyMaskableResetPPO(MaskableResetPPO):
    """``MaskableResetPPO`` whose ``predict`` takes the masks of ``enjoy``'s env when given none (see :func:`masked_enjoy`)."""

    enjoy_env: ClassVar[VecEnv | None] = None  # the env that enjoy created (set by masked_enjoy)

    def predict(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Memory]:
        # enjoy passes no action_masks (positionally or by name)
        if kwargs.get("action_masks") is None and len(args) < 5 and self.enjoy_env is not None:
            kwargs["action_masks"] = get_action_masks(self.enjoy_env)  # (n_envs, mask size)
        return super().predict(*args, **kwargs)


@contextmanager
def masked_evaluation() -> Iterator[None]:
    """
    Within the block, the zoo's evaluations during ``train`` use the env's action masks and keep the memory
    (``rl_zoo3.exp_manager``'s ``EvalCallback`` and ``TrialEvalCallback`` are swapped for the maskable ones).

    :raises RuntimeError: If the zoo no longer builds its callbacks by those names
    """
    import rl_zoo3.exp_manager as zoo_exp_manager

    swaps = {
        (zoo_exp_manager, "EvalCallback"): (EvalCallback, MaskableEvalCallback),
        (zoo_exp_manager, "TrialEvalCallback"): (TrialEvalCallback, MaskableTrialEvalCallback),
    }
    with swapped_names(swaps, _TO_UPDATE):
        yield


@contextmanager
def masked_enjoy() -> Iterator[None]:
    """
    Within the block, ``enjoy --algo maskable_reset_ppo`` predicts with the masks of the env ``create_test_env`` made.

    :raises RuntimeError: If the zoo's ``enjoy`` no longer creates its env by that name
    """
    import rl_zoo3.enjoy as zoo_enjoy
    from rl_zoo3.utils import create_test_env

    def create_and_keep_test_env(*args: Any, **kwargs: Any) -> VecEnv:
        env = create_test_env(*args, **kwargs)
        _EnjoyMaskableResetPPO.enjoy_env = env
        return env

    algo = ALGOS.get(MASKABLE_ALGO_NAME, MaskableResetPPO)
    ALGOS[MASKABLE_ALGO_NAME] = _EnjoyMaskableResetPPO
    try:
        with swapped_names({(zoo_enjoy, "create_test_env"): (create_test_env, create_and_keep_test_env)}, _TO_UPDATE):
            yield
    finally:
        ALGOS[MASKABLE_ALGO_NAME] = algo
        _EnjoyMaskableResetPPO.enjoy_env = None


def timed(callback_class: type[EvalCallback]) -> type[EvalCallback]:
    """A subclass of ``callback_class`` (an ``EvalCallback``) that logs the seconds its evaluations took so far."""

    class TimedEvalCallback(callback_class):  # type: ignore[valid-type,misc]
        evaluation_seconds = 0.0

        def _on_step(self) -> bool:
            # EvalCallback evaluates on the calls that its eval_freq divides (n_calls is counted before _on_step)
            if not (self.eval_freq > 0 and self.n_calls % self.eval_freq == 0):
                return super()._on_step()
            start = time.perf_counter()
            keep_training = super()._on_step()
            self.evaluation_seconds += time.perf_counter() - start
            self.logger.record(EVALUATION_SECONDS, self.evaluation_seconds)
            return keep_training

    TimedEvalCallback.__qualname__ = TimedEvalCallback.__name__ = f"Timed{callback_class.__name__}"
    return TimedEvalCallback


@contextmanager
def timed_evaluation() -> Iterator[None]:
    """
    Within the block, the zoo's evaluations during ``train`` log their seconds (:func:`timed`).

    :raises RuntimeError: If the zoo no longer builds its callback as ``rl_zoo3.exp_manager.EvalCallback``
    """
    import rl_zoo3.exp_manager as zoo_exp_manager

    current = getattr(zoo_exp_manager, "EvalCallback", None)
    if not (isinstance(current, type) and issubclass(current, EvalCallback)):
        raise RuntimeError(
            f"rl_zoo3.exp_manager.EvalCallback is no longer an EvalCallback (found {current!r}): {_TIMING_TO_UPDATE}"
        )
    with swapped_names({(zoo_exp_manager, "EvalCallback"): (current, timed(current))}, _TIMING_TO_UPDATE):
        yield


def _algo(argv: list[str]) -> str:
    """The ``--algo`` of a zoo command (``--algo x`` or ``--algo=x``; the zoo's default ``ppo`` if none)."""
    algo = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--algo"), None)
    return algo or next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--algo=")), "ppo")


def _with_default_conf_file(argv: list[str]) -> list[str]:
    """Add the package's hyperparameter file to a ``train --algo reset_ppo`` (or maskable_reset_ppo) command naming none."""
    if not argv or argv[0] != "train":
        return argv
    names_conf = any(arg in ("-conf", "--conf-file") or arg.startswith("--conf-file=") for arg in argv)
    if _algo(argv) in ALGO_NAMES and not names_conf:
        return [*argv, "--conf-file", str(DEFAULT_CONF_FILE)]
    return argv


# The zoo's scripts that set torch's thread count (their --num-threads; the zoo's default, -1, leaves torch's)
THREADED_SCRIPTS = ("train", "enjoy")
DEFAULT_NUM_THREADS = 1


def with_default_threads(argv: list[str]) -> list[str]:
    """
    Add ``--num-threads 1`` to a ``train`` or ``enjoy`` command (``argv`` after the program name) that gives none
    (``docs/guide/install.md``, "Threads").
    """
    if not argv or argv[0] not in THREADED_SCRIPTS or "-h" in argv or "--help" in argv:
        return argv
    # argparse takes any unambiguous prefix of --num-threads ("--nu" and longer), with a value or "=value"
    gives = any(arg.startswith("--nu") and "--num-threads".startswith(arg.split("=", 1)[0]) for arg in argv)
    return argv if gives else [*argv, "--num-threads", str(DEFAULT_NUM_THREADS)]


def no_display_reason(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """
    Why a window (gymnasium's ``render_mode="human"``, drawn by pygame) cannot be seen, if it cannot.

    :param environ: The environment variables (default: ``os.environ``)
    :param platform: ``sys.platform`` (the default) or another value of it
    :return: ``None`` where a window can be shown (macOS, Windows, or ``DISPLAY`` or ``WAYLAND_DISPLAY`` set, and no
        ``dummy`` or ``offscreen`` ``SDL_VIDEODRIVER``); else the reason, e.g. ``"DISPLAY and WAYLAND_DISPLAY are unset"``
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
    """Add ``--no-render`` to an ``enjoy`` command that would render where nothing can be seen (:func:`no_display_reason`)."""
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


@contextmanager
def owned_trials(owner: str) -> Iterator[None]:
    """
    Within the block, every Optuna trial the zoo's ``train -optimize`` starts records ``owner`` (:data:`TRIAL_OWNER_ATTR`).

    :param owner: The value recorded (unique per zoo process)
    :raises RuntimeError: If the zoo no longer runs its trials through ``ExperimentManager.objective``
    """
    from rl_zoo3.exp_manager import ExperimentManager

    objective = ExperimentManager.objective

    def owned_objective(self: ExperimentManager, trial: optuna.Trial) -> float:
        trial.set_user_attr(TRIAL_OWNER_ATTR, owner)
        return objective(self, trial)

    swaps = {(ExperimentManager, "objective"): (objective, owned_objective)}
    with swapped_names(swaps, "the RL Zoo has changed, and sb3_reset_ppo.zoo.owned_trials must follow it"):
        yield


# rl_zoo3.cli.main's scripts, each with the module that defines it (tests/zoo/test_zoo.py checks both against
# rl_zoo3.cli). main imports that module only: rl_zoo3.cli imports all three, and rl_zoo3.plots (pandas, scipy,
# seaborn, statsmodels, rliable) costs train and enjoy over a CPU second of every process's start
SCRIPT_MODULES = {
    "train": "rl_zoo3.train",
    "enjoy": "rl_zoo3.enjoy",
    "plot_train": "rl_zoo3.plots",
    "plot_from_file": "rl_zoo3.plots",
    "all_plots": "rl_zoo3.plots",
}
SCRIPTS = tuple(SCRIPT_MODULES)
USAGE = f"""usage: python -m sb3_reset_ppo.zoo {{{",".join(SCRIPTS)}}} [options]

The RL Zoo's command line with reset_ppo (ResetPPO) and maskable_reset_ppo (MaskableResetPPO, evaluated and
enjoyed with the env's action masks) registered next to ppo_lstm. Each script takes the zoo's own options;
see them with, e.g., `python -m sb3_reset_ppo.zoo train --help`. train and enjoy run with one torch thread
(several stall beside any other busy process) unless you give --num-threads N (-1: torch's default). Examples:

  python -m sb3_reset_ppo.zoo train --algo reset_ppo --env CueRecall-v0
  python -m sb3_reset_ppo.zoo enjoy --algo reset_ppo --env CueRecall-v0 -f logs/
  python -m sb3_reset_ppo.zoo train --algo maskable_reset_ppo --env MaskedCueRecall-v0
"""


def main(argv: list[str] | None = None) -> None:
    """
    Run the RL Zoo's command line on ``argv`` (default: ``sys.argv[1:]``) with ``reset_ppo`` and ``maskable_reset_ppo``
    (masked: :func:`masked_evaluation`).
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
    arguments = with_default_threads(_without_render_if_no_display(_with_default_conf_file(arguments)))
    # The zoo's scripts name themselves after sys.argv[0] (argparse's default prog), which `python -m` sets to
    # __main__.py; rl_zoo3.cli.main removes the script's name from sys.argv before calling it
    sys.argv = [f"python -m sb3_reset_ppo.zoo {arguments[0]}", *arguments[1:]]
    masks = {"train": masked_evaluation, "enjoy": masked_enjoy}.get(arguments[0])
    with ExitStack() as stack:
        if masks is not None and _algo(arguments) == MASKABLE_ALGO_NAME:
            stack.enter_context(masks())
        if arguments[0] == "train":
            stack.enter_context(timed_evaluation())
            if os.environ.get(TRIAL_OWNER_VARIABLE):
                stack.enter_context(owned_trials(os.environ[TRIAL_OWNER_VARIABLE]))
        # The zoo's function for the script, found when called (a test may replace it)
        getattr(importlib.import_module(SCRIPT_MODULES[arguments[0]]), arguments[0])()
