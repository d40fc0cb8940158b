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
    """
    The steps before each window that burn in its memory (``burn_in`` of them, fewer at the rollout start).

    - ``steps``: row in the minibatch's distinct observations of each step from ``max(0, t - burn_in)`` to the window's
      first step ``t``, ``(B, burn_in + 1)`` (clamped to the rollout)
    - ``episode_starts``: their episode-start flags, ``(B, burn_in + 1)``
    - ``lengths``: burn-in steps of each window, ``t - max(0, t - burn_in)``, ``(B,)``
    - ``memory``: the stored memory entering each row's first step, each tensor ``(B, n_layers, hidden_size)``
    - ``layout``: the rows laid out for the fused LSTM call, with a reset step before every episode start
    - ``slot_steps``: how many of the distinct steps (first in order) are held by slots; the rest, by burn-in rows only
    """

    steps: th.Tensor
    episode_starts: th.Tensor
    lengths: th.Tensor
    memory: RNNStates
    layout: ResetLayout
    slot_steps: int = -1


class WindowRolloutBufferSamples(NamedTuple):
    """
    A minibatch of ``B`` rows (windows, or pieces a minibatch edge cut) of ``W`` slots, shorter rows padded.

    - ``observations``: the observations of the minibatch's ``U`` *distinct* steps, leading shape ``(U,)``
      (a dict of such tensors for ``Dict`` spaces); ``slot_steps`` (``(B, W)``) says which row each slot holds.
    - ``actions``, ``old_values``, ``old_log_prob``, ``advantages``, ``returns``, ``episode_starts``,
      ``resets``, ``kept``, ``weights``: one entry per slot, leading shape ``(B, W)``.
    - ``lstm_states``: the memory recorded during the rollout entering each window's slot 0, each tensor
      ``(B, n_layers, hidden_size)``.
    - ``layout``: where each slot sits in the fused LSTM input, with one reset step before every reset.
    - ``window_starts``: flat (env-major) rollout index of each window's first step, ``(B,)``.
    - ``burn_in``: with ``burn_in > 0``, the steps that burn in each window's first memory, else ``None``.
    - ``n_real_slots``: with clipped windows, the number of real slots (the others are padding, which no loss term or
      statistic sees); ``None``: every slot is real (``B * W``).
    - ``loss_normaliser``: the loss's divisor under ``"uniform"`` weighting (``epochs.uniform_normaliser``).
    - ``action_masks``: with invalid-action masking (``MaskableResetPPO``), the mask stored with each slot's step,
      ``(B, W, mask_dims)`` (1.0: valid); else ``None``.
    - ``attention``: with attention memory, what each row reads of the stored memory (``lstm_states`` is then empty);
      else ``None``.
    """

    observations: PyTorchObs
    slot_steps: th.Tensor
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    lstm_states: RNNStates
    episode_starts: th.Tensor
    resets: th.Tensor
    kept: th.Tensor
    weights: th.Tensor
    layout: ResetLayout
    window_starts: th.Tensor
    burn_in: BurnIn | None = None
    n_real_slots: int | None = None
    loss_normaliser: float | None = None
    action_masks: th.Tensor | None = None
    attention: "AttentionRows | None" = None


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
