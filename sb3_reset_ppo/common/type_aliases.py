"""Sample types yielded by the window rollout buffers."""

from typing import NamedTuple

import torch as th
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_reset_ppo.common.windows import WindowSegments


class WindowRolloutBufferSamples(NamedTuple):
    """
    A minibatch of ``B`` windows of ``W`` slots each.

    - ``observations``: the observations of the minibatch's ``U`` *distinct* steps, leading shape ``(U,)``
      (a dict of such tensors for ``Dict`` spaces); ``slot_steps`` (``(B, W)``) says which row each slot holds.
      Windows of a minibatch overlap, so features are computed once per step, not once per slot.
    - ``actions``, ``old_values``, ``old_log_prob``, ``advantages``, ``returns``, ``episode_starts``,
      ``resets``, ``kept``, ``weights``: one entry per slot, leading shape ``(B, W)``.
    - ``segments``: the windows cut at every reset into segments that run without one.
    - ``lstm_states``: the memory recorded during the rollout entering each segment's first slot (slot 0 and
      every reset slot), each tensor ``(n_segments, n_layers, hidden_size)`` in ``segments.first_slots``
      order: the memory that slot 0 starts from and that a reset restores.
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
    segments: WindowSegments
