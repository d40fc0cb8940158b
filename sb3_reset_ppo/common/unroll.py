"""Reset-and-continue: the one unroll used by actor and critic, and the window evaluation of a policy."""

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.windows import WindowSegments


def unroll_lstm(
    lstm: nn.LSTM,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    segments: WindowSegments,
) -> th.Tensor:
    """
    Run an LSTM over the slots of ``B`` windows of ``W`` slots with reset-and-continue.

    Slot 0 of a window starts from the memory recorded for its step. At a slot whose step starts an episode
    (a reset), the memory is the one recorded for that step; at every other slot it is carried from the
    previous slot through the graph. SB3's rule then multiplies the memory by ``1 - episode_start``. So each
    window is a sequence of segments that run without a reset, each starting from recorded memory: they run
    as one packed sequence through the fused LSTM, and backpropagation stops at every segment start.

    :param lstm: The LSTM (``batch_first=False``, as in sb3-contrib's policies)
    :param slot_features: Inputs of every slot, shape ``(B * W, input_size)``, slots row-major over ``(B, W)``
    :param memory: Recorded ``(hidden, cell)`` entering each segment's first step, each
        ``(n_segments, n_layers, hidden)``, in ``segments.first_slots`` order
    :param memory_not_start: ``1 - episode_start`` of each segment's first step, shape ``(n_segments,)``
    :param segments: The packing plan (see :func:`~sb3_reset_ppo.common.windows.plan_segments`)
    :return: LSTM outputs of every slot, shape ``(B * W, hidden)``
    """
    # (n_segments,) -> (1, n_segments, 1): broadcasts over layers and hidden units
    not_start = memory_not_start.reshape(1, -1, 1)
    # (n_segments, n_layers, hidden) -> (n_layers, n_segments, hidden): nn.LSTM's state layout
    hidden = memory[0].transpose(0, 1) * not_start
    cell = memory[1].transpose(0, 1) * not_start
    packed = PackedSequence(slot_features[segments.packed_slots], segments.batch_sizes)
    output, _ = lstm(packed, (hidden, cell))
    return output.data[segments.slot_positions]


def evaluate_windows(
    policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of the actions of every slot of a minibatch of windows.

    The window counterpart of ``RecurrentActorCriticPolicy.evaluate_actions``: the same networks, critic
    variants (separate, shared or no critic LSTM) and features extractors, with the memory given by
    :func:`unroll_lstm`. Features are computed once per distinct step of the minibatch, then gathered
    for every slot that holds the step.

    :param policy: The recurrent policy
    :param samples: A minibatch of windows from a window rollout buffer
    :return: values, log-probabilities and entropies (``None`` when the distribution has no closed form),
        each of shape ``(B, W)``
    """
    n_windows, window_size = samples.slot_steps.shape
    # (B, W) -> (B * W,)
    slot_steps = samples.slot_steps.reshape(-1)
    features = policy.extract_features(samples.observations)
    if isinstance(features, tuple):
        pi_features, vf_features = features
    else:
        pi_features = vf_features = features
    memory_not_start = 1.0 - samples.episode_starts.reshape(-1)[samples.segments.first_slots]

    def unroll(lstm: nn.LSTM, step_features: th.Tensor, memory: tuple[th.Tensor, ...]) -> th.Tensor:
        return unroll_lstm(lstm, step_features[slot_steps], memory, memory_not_start, samples.segments)

    latent_pi = unroll(policy.lstm_actor, pi_features, samples.lstm_states.pi)
    if policy.lstm_critic is not None:
        latent_vf = unroll(policy.lstm_critic, vf_features, samples.lstm_states.vf)
    elif policy.shared_lstm:
        latent_vf = latent_pi.detach()
    else:
        assert policy.critic is not None
        latent_vf = policy.critic(vf_features)[slot_steps]

    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    distribution = policy._get_action_dist_from_latent(latent_pi)

    # (B, W, action_dim) -> (B * W, action_dim)
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(policy.action_space, spaces.Discrete):
        # (B * W, 1) float -> (B * W,) long
        actions = actions.long().flatten()
    log_prob = distribution.log_prob(actions)
    entropy = distribution.entropy()
    values = policy.value_net(latent_vf)
    # (B * W,) or (B * W, 1) -> (B, W)
    shape = (n_windows, window_size)
    return (
        values.reshape(shape),
        log_prob.reshape(shape),
        None if entropy is None else entropy.reshape(shape),
    )
