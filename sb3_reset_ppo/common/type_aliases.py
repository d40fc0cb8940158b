"""Sample types yielded by the window rollout buffers."""

from typing import NamedTuple

import torch as th
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs


class WindowRolloutBufferSamples(NamedTuple):
    """
    A minibatch of ``B`` windows of ``W`` slots each. Every field has leading shape ``(B, W)``
    (``observations`` is a dict of such tensors for ``Dict`` observation spaces).

    ``lstm_states`` holds the memory recorded during the rollout for the step of every slot, each tensor
    of shape ``(B, W, n_layers, hidden_size)``: slot 0 starts from it, reset slots restart from it.
    """

    observations: PyTorchObs
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
