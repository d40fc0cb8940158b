"""
The package's RL Zoo command line (``python -m sb3_reset_ppo.zoo``) with ResetPPO searched in the zoo's ``ppo_lstm``
space: the Optuna sampler of ``reset_ppo`` (and ``maskable_reset_ppo``) is the zoo's ``ppo_lstm`` sampler, nothing
added, so the window settings (``window_size``, ``window_stride``, ``window_coverage``) are not sampled and stay at
ResetPPO's defaults, or at what the config file and ``--hyperparams`` set. Everything else is the package's command
line as it is.

``tune.py optimize`` runs the trials of an arm that keeps today's window defaults (``run_grid.VARIANTS``' ``today_defaults``)
with this module (``benchmarks/studies/tuned/PROTOCOL.md``: sampling ``window_size`` would give ResetPPO a dimension
RecurrentPPO does not have).

Usage: python -m benchmarks.kit.ppo_lstm_space train --algo reset_ppo --env CartPoleNoVel-v1 -optimize ...
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import optuna
from rl_zoo3 import hyperparams_opt

import sb3_reset_ppo.zoo

_TO_UPDATE = "sb3_reset_ppo.zoo has changed how it registers its sampler, and benchmarks/kit/ppo_lstm_space.py must follow it"


def sample_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    The zoo's ``ppo_lstm`` sampler for ResetPPO: the same parameters RecurrentPPO's trials sample, none of the windows.

    :param trial: The Optuna trial
    :param n_actions: Number of actions (unused, as for ppo_lstm)
    :param n_envs: Number of envs
    :param additional_args: Extra arguments from the zoo
    :return: Hyperparameters for ``ResetPPO``
    """
    return hyperparams_opt.sample_ppo_lstm_params(trial, n_actions, n_envs, additional_args)


@contextmanager
def ppo_lstm_space() -> Iterator[None]:
    """
    Within the block, :func:`sb3_reset_ppo.zoo.register` registers :func:`sample_params` as the sampler of
    ``reset_ppo`` and ``maskable_reset_ppo`` (the package's main registers its algorithms when it starts).

    :raises RuntimeError: If the package no longer registers the sampler by the name ``sample_reset_ppo_params``
    """
    from sb3_reset_ppo.common.utils import swapped_names

    swaps = {(sb3_reset_ppo.zoo, "sample_reset_ppo_params"): (sb3_reset_ppo.zoo.sample_reset_ppo_params, sample_params)}
    with swapped_names(swaps, _TO_UPDATE):
        yield


def main(argv: list[str] | None = None) -> None:
    """
    The package's zoo command line (:func:`sb3_reset_ppo.zoo.main`) with ResetPPO sampled in ppo_lstm's space.

    :param argv: Arguments after the program name (default: ``sys.argv[1:]``), e.g. ``["train", "--algo", ...]``
    """
    with ppo_lstm_space():
        sb3_reset_ppo.zoo.main(argv)


if __name__ == "__main__":
    main()
