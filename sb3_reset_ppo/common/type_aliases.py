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

    - ``steps``: row of each step in the minibatch's distinct observations, ``(B, burn_in + 1)``: the steps from
      ``max(0, t - burn_in)`` on (clamped to the rollout), ``t`` being the window's first step
    - ``episode_starts``: their episode-start flags, ``(B, burn_in + 1)``
    - ``lengths``: burn-in steps of each window, ``t - max(0, t - burn_in)``, ``(B,)``
    - ``memory``: the stored memory entering each row's first step, each tensor ``(B, n_layers, hidden_size)``
    - ``layout``: the rows laid out for the fused LSTM call, with a reset step before every episode start
    - ``slot_steps``: the minibatch's distinct steps are ordered with the ``slot_steps`` steps that slots hold first;
      the others are held by burn-in rows only, and their features are computed without gradient
    """

    steps: th.Tensor
    episode_starts: th.Tensor
    lengths: th.Tensor
    memory: RNNStates
    layout: ResetLayout
    slot_steps: int = -1


class WindowRolloutBufferSamples(NamedTuple):
    """
    A minibatch of ``B`` rows of ``W`` slots each: windows, or the pieces of windows that a minibatch edge cut (``W``
    is the longest row of the minibatch, at most ``window_size``; shorter rows are padded).

    - ``observations``: the observations of the minibatch's ``U`` *distinct* steps, leading shape ``(U,)``
      (a dict of such tensors for ``Dict`` spaces); ``slot_steps`` (``(B, W)``) says which row each slot holds.
    - ``actions``, ``old_values``, ``old_log_prob``, ``advantages``, ``returns``, ``episode_starts``,
      ``resets``, ``kept``, ``weights``: one entry per slot, leading shape ``(B, W)``.
    - ``lstm_states``: the memory recorded during the rollout entering each window's slot 0, each tensor
      ``(B, n_layers, hidden_size)``.
    - ``layout``: where each slot sits in the fused LSTM input, with one reset step before every reset.
    - ``window_starts``: flat (env-major) rollout index of each window's first step, ``(B,)``.
    - ``burn_in``: with ``burn_in > 0``, the steps that burn in the memory of each window's slot 0 (which then
      replaces ``lstm_states``), else ``None``.
    - ``n_real_slots``: with clipped windows (``window_coverage="full"``), the number of real slots; the others are
      padding (``kept`` and ``weights`` 0, no episode start), which no loss term or statistic sees. ``None``: every
      slot is real (``B * W``). Every minibatch of an epoch holds ``batch_size`` real slots (or the whole epoch, when it
      holds fewer).
    - ``loss_normaliser``: what the loss is divided by under ``weighting="uniform"``, the same for every minibatch of
      the rollout (:func:`~sb3_reset_ppo.common.epochs.uniform_normaliser`); ``None``: the minibatch's real slots.
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
