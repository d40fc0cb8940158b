"""Reset-and-continue: the one unroll used by actor and critic, and the window evaluation of a policy."""

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import nn


def unroll_lstm(
    lstm: nn.LSTM,
    features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    episode_starts: th.Tensor,
    resets: th.Tensor | None,
) -> th.Tensor:
    """
    Run an LSTM over ``B`` windows of ``W`` slots with reset-and-continue.

    Slot 0 starts from the memory recorded for its step. Entering slot ``i >= 1``, the memory is the
    recorded memory of the slot's step where ``resets[:, i]`` is set (reset mode), else the memory carried
    from slot ``i - 1`` through the graph. Then SB3's rule applies at every slot: the memory is multiplied by
    ``1 - episode_starts``. Recorded memory comes from the buffer, so backpropagation stops at a reset.

    :param lstm: The LSTM (``batch_first=False``, as in sb3-contrib's policies)
    :param features: Inputs, shape ``(B, W, input_size)``
    :param memory: Recorded ``(hidden, cell)`` entering the step of every slot, each ``(B, W, n_layers, hidden)``
    :param episode_starts: SB3's episode-start flags of the slots' steps, shape ``(B, W)``
    :param resets: Reset flags, shape ``(B, W)``; ``None`` carries the memory across boundaries (mask mode)
    :return: LSTM outputs of every slot, shape ``(B, W, hidden)``
    """
    n_windows, window_size = episode_starts.shape
    recorded_hidden, recorded_cell = memory
    # (B, W, n_layers, hidden) -> (W, n_layers, B, hidden): slot-major, in nn.LSTM's state layout
    recorded_hidden = recorded_hidden.permute(1, 2, 0, 3)
    recorded_cell = recorded_cell.permute(1, 2, 0, 3)
    # (B, W) -> (W, 1, B, 1): broadcasts over layers and hidden units
    not_start = (1.0 - episode_starts).T.reshape(window_size, 1, n_windows, 1)
    reset_flags = None if resets is None else resets.T.reshape(window_size, 1, n_windows, 1)
    # (B, W, input_size) -> (W, B, input_size)
    inputs = features.transpose(0, 1)

    hidden, cell = recorded_hidden[0], recorded_cell[0]
    outputs = []
    for slot in range(window_size):
        if slot > 0 and reset_flags is not None:
            hidden = th.where(reset_flags[slot], recorded_hidden[slot], hidden)
            cell = th.where(reset_flags[slot], recorded_cell[slot], cell)
        hidden, cell = hidden * not_start[slot], cell * not_start[slot]
        # (B, input_size) -> (1, B, input_size): a sequence of length one
        output, (hidden, cell) = lstm(inputs[slot].unsqueeze(0), (hidden, cell))
        outputs.append(output[0])
    # W x (B, hidden) -> (B, W, hidden)
    return th.stack(outputs, dim=1)


def _flatten_slots(tensor: th.Tensor) -> th.Tensor:
    # (B, W, *shape) -> (B * W, *shape)
    return tensor.reshape(-1, *tensor.shape[2:])


def evaluate_windows(
    policy: RecurrentActorCriticPolicy,
    observations: PyTorchObs,
    actions: th.Tensor,
    lstm_states: RNNStates,
    episode_starts: th.Tensor,
    resets: th.Tensor | None,
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of the actions of every slot of ``B`` windows.

    The window counterpart of ``RecurrentActorCriticPolicy.evaluate_actions``: the same networks, critic
    variants (separate, shared or no critic LSTM) and feature extractors, with the memory given by
    :func:`unroll_lstm`.

    :param policy: The recurrent policy
    :param observations: Observations, leading shape ``(B, W)`` (a dict of such tensors for Dict spaces)
    :param actions: Actions as stored in the rollout buffer, shape ``(B, W, action_dim)``
    :param lstm_states: Recorded memory of every slot, each tensor ``(B, W, n_layers, hidden)``
    :param episode_starts: Episode-start flags, shape ``(B, W)``
    :param resets: Reset flags ``(B, W)`` in reset mode, ``None`` in mask mode
    :return: values, log-probabilities and entropies (``None`` when the distribution has no closed form),
        each of shape ``(B, W)``
    """
    n_windows, window_size = episode_starts.shape
    if isinstance(observations, dict):
        flat_obs: PyTorchObs = {key: _flatten_slots(value) for key, value in observations.items()}
    else:
        flat_obs = _flatten_slots(observations)
    features = policy.extract_features(flat_obs)
    if isinstance(features, tuple):
        pi_features, vf_features = features
    else:
        pi_features = vf_features = features

    def unroll(lstm: nn.LSTM, flat_features: th.Tensor, memory: tuple[th.Tensor, ...]) -> th.Tensor:
        # (B * W, features_dim) -> (B, W, features_dim)
        windows = flat_features.reshape(n_windows, window_size, -1)
        # (B, W, hidden) -> (B * W, hidden)
        return _flatten_slots(unroll_lstm(lstm, windows, memory, episode_starts, resets))

    latent_pi = unroll(policy.lstm_actor, pi_features, lstm_states.pi)
    if policy.lstm_critic is not None:
        latent_vf = unroll(policy.lstm_critic, vf_features, lstm_states.vf)
    elif policy.shared_lstm:
        latent_vf = latent_pi.detach()
    else:
        assert policy.critic is not None
        latent_vf = policy.critic(vf_features)

    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    distribution = policy._get_action_dist_from_latent(latent_pi)

    flat_actions = _flatten_slots(actions)
    if isinstance(policy.action_space, spaces.Discrete):
        # (B * W, 1) float -> (B * W,) long
        flat_actions = flat_actions.long().flatten()
    log_prob = distribution.log_prob(flat_actions)
    entropy = distribution.entropy()
    values = policy.value_net(latent_vf)
    # (B * W,) or (B * W, 1) -> (B, W)
    shape = (n_windows, window_size)
    return (
        values.reshape(shape),
        log_prob.reshape(shape),
        None if entropy is None else entropy.reshape(shape),
    )
