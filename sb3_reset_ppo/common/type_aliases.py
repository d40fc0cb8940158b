"""Sample types yielded by the window rollout buffers, and the types of ``predict``'s observation and memory."""

from typing import NamedTuple

import numpy as np
import torch as th
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_reset_ppo.common.layout import ResetLayout

# predict()'s observation (as SB3's) and memory: a tuple of (n_layers, n_envs, hidden_size) arrays, or None for zeros
NumpyObs = np.ndarray | dict[str, np.ndarray]
Memory = tuple[np.ndarray, ...] | None


class BurnIn(NamedTuple):
    """The steps before each window that burn in its memory (``burn_in`` of them, fewer at the rollout start)."""

    steps: th.Tensor  #: (B, burn_in + 1) row of each step from max(0, t - burn_in) to the window's first step t
    episode_starts: th.Tensor  #: (B, burn_in + 1) their episode-start flags
    lengths: th.Tensor  #: (B,) burn-in steps of each window, t - max(0, t - burn_in)
    memory: RNNStates  #: the stored memory entering each row's first step, each (B, n_layers, hidden_size)
    layout: ResetLayout  #: the rows laid out for the fused call, a reset step before every episode start
    slot_steps: int = -1  #: how many of the distinct steps (first in order) slots hold; the rest only burn-in rows


class WindowRolloutBufferSamples(NamedTuple):
    """A minibatch of ``B`` rows (windows, or pieces a minibatch edge cut) of ``W`` slots; per-slot fields are ``(B, W)``."""

    observations: PyTorchObs  #: the minibatch's U distinct steps' observations, (U, ...) (a dict for Dict spaces)
    slot_steps: th.Tensor  #: (B, W) the distinct step each slot holds
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    lstm_states: RNNStates  #: the recorded memory entering each row's slot 0, each (B, n_layers, hidden_size)
    episode_starts: th.Tensor
    resets: th.Tensor
    kept: th.Tensor
    weights: th.Tensor
    layout: ResetLayout  #: where each slot sits in the fused call, a reset step before every reset
    window_starts: th.Tensor  #: (B,) flat (env-major) index of each row's first step
    burn_in: BurnIn | None = None  #: with burn_in > 0, the steps that burn in each row's first memory
    n_real_slots: int | None = None  #: with clipped windows, the real slots (the rest is padding); None: B * W
    loss_normaliser: float | None = None  #: the loss's divisor under "uniform" weighting (epochs.uniform_normaliser)
    action_masks: th.Tensor | None = None  #: (B, W, mask_dims) each slot's stored action mask (MaskableResetPPO), 1: valid
    attention: "AttentionRows | None" = None  #: with attention memory, what each row reads of it (lstm_states empty)


class AttentionRows(NamedTuple):
    """
    What the rows of a minibatch read of the stored attention memory (``docs/design.md``, "Attention memory").

    - ``memory_pi``: the actor's stored block inputs of the ``K`` steps before each row's first step, ``(B, K, L, D)``
    - ``memory_vf``: the critic's, where it has a transformer of its own, else ``None``
    - ``counts``: the memory positions of the first step's episode entering each row (before SB3's rule), ``(B,)``
    """

    memory_pi: th.Tensor
    memory_vf: th.Tensor | None
    counts: th.Tensor
