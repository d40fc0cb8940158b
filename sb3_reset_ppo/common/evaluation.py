"""The window evaluation of a policy: values, log-probabilities and entropies of every slot of a minibatch."""

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import CategoricalDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_reset_ppo.common.categorical import categorical_log_prob_entropy, masked_categorical_log_prob_entropy
from sb3_reset_ppo.common.masking import maskable_categorical, masked_distribution
from sb3_reset_ppo.common.memory import burned_in_memory
from sb3_reset_ppo.common.recurrent import RecurrentLayer, actor_critic_features, critic_variant
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.unroll import row_inputs, unroll_rnn


def _step_features(policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor]:
    """
    Actor and critic features of a minibatch's distinct steps, ``(U, F)`` each: with gradient for the steps that
    slots hold, without for the steps that only burn-in rows hold (they come last; see ``BurnIn.slot_steps``).
    """
    observations = samples.observations
    split = -1 if samples.burn_in is None else samples.burn_in.slot_steps
    n_steps = next(iter(observations.values())).shape[0] if isinstance(observations, dict) else observations.shape[0]
    if split < 0 or split >= n_steps:
        return actor_critic_features(policy, observations)

    def part(piece: slice) -> PyTorchObs:
        if isinstance(observations, dict):
            return {key: value[piece] for key, value in observations.items()}
        return observations[piece]

    trained = actor_critic_features(policy, part(slice(0, split)))
    with th.no_grad():
        burn_only = actor_critic_features(policy, part(slice(split, None)))
    # (slot steps, F) and (burn-in-only steps, F) -> (U, F)
    pi_features = th.cat([trained[0], burn_only[0]])
    vf_features = pi_features if trained[1] is trained[0] else th.cat([trained[1], burn_only[1]])
    return pi_features, vf_features


def _plain_categorical(policy: ActorCriticPolicy) -> bool:
    """Whether the policy's action distribution is SB3's own categorical over ``action_net``'s logits (not a maskable one)."""
    return (
        type(policy.action_dist) is CategoricalDistribution
        and type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
    )


def evaluate_windows(
    policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of every slot of a minibatch of windows: ``evaluate_actions`` over
    windows, with the memory given by :func:`unroll_rnn`.

    :param samples: A minibatch of windows (with ``action_masks``: each slot's mask is applied to the distribution)
    :return: values, log-probabilities and entropies (``None`` without a closed form), each ``(B, W)``
    """
    # (B, W) -> (B * W,)
    slot_steps = samples.slot_steps.reshape(-1)
    pi_features, vf_features = _step_features(policy, samples)
    memory_not_start = 1.0 - samples.episode_starts[:, 0]
    critic = critic_variant(policy)
    # The memory entering each window's slot 0: stored, or burned in over the steps before the window
    pi_memory, vf_memory = samples.lstm_states.pi, samples.lstm_states.vf
    if samples.burn_in is not None:
        pi_memory = burned_in_memory(policy.lstm_actor, pi_features, samples.burn_in, samples.burn_in.memory.pi)
        if critic.rnn is not None:
            vf_memory = burned_in_memory(critic.rnn, vf_features, samples.burn_in, samples.burn_in.memory.vf)

    # (U, F) -> (B * W, F): every slot's features, laid out once where actor and critic share them
    pi_slot_features = pi_features[slot_steps]
    pi_inputs = row_inputs(pi_slot_features, samples.layout)
    latent_pi = unroll_rnn(policy.lstm_actor, pi_slot_features, pi_memory, memory_not_start, samples.layout, pi_inputs)

    def run_critic_rnn(rnn: RecurrentLayer) -> tuple[th.Tensor, tuple[th.Tensor, ...]]:
        if vf_features is pi_features:
            vf_slot_features, vf_inputs = pi_slot_features, pi_inputs
        else:
            vf_slot_features = vf_features[slot_steps]
            vf_inputs = row_inputs(vf_slot_features, samples.layout)
        return unroll_rnn(rnn, vf_slot_features, vf_memory, memory_not_start, samples.layout, vf_inputs), ()

    # The memory after the windows is not needed here
    latent_vf, _ = critic.latent(latent_pi, (), run_critic_rnn, lambda linear: linear(vf_features)[slot_steps])

    return slot_heads(policy, latent_pi, latent_vf, samples)


def slot_heads(
    policy: ActorCriticPolicy, latent_pi: th.Tensor, latent_vf: th.Tensor, samples: WindowRolloutBufferSamples
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of every slot from the memory's outputs, as ``evaluate_actions`` does.

    :param latent_pi: The actor's memory output of every slot, ``(B * W, hidden)``
    :param latent_vf: The critic's, ``(B * W, hidden)``
    :param samples: The minibatch (its actions, and its action masks for a maskable policy)
    :return: values, log-probabilities and entropies (``None`` without a closed form), each ``(B, W)``
    """
    n_windows, window_size = samples.slot_steps.shape
    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    # (B, W, action_dim) -> (B * W, action_dim)
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(policy.action_space, spaces.Discrete):
        # (B * W, 1) float -> (B * W,) long
        actions = actions.long().flatten()
    entropy: th.Tensor | None
    if samples.action_masks is None and _plain_categorical(policy):
        log_prob, entropy = categorical_log_prob_entropy(policy.action_net(latent_pi), actions)
    elif maskable_categorical(policy):
        # MaskableResetPPO's categorical, with the same operations as its distribution objects, without them
        logits = policy.action_net(latent_pi)
        if samples.action_masks is None:
            log_prob, entropy = categorical_log_prob_entropy(logits, actions)
        else:
            # (B, W, n_actions) -> (B * W, n_actions)
            masks = samples.action_masks.reshape(n_windows * window_size, -1)
            log_prob, entropy = masked_categorical_log_prob_entropy(logits, actions, masks)
    else:
        if samples.action_masks is None:
            distribution = policy._get_action_dist_from_latent(latent_pi)
        else:
            # (B, W, mask_dims) -> (B * W, mask_dims): the mask stored with each slot's step
            masks = samples.action_masks.reshape(n_windows * window_size, -1)
            distribution = masked_distribution(policy, latent_pi, masks)
        log_prob = distribution.log_prob(actions)
        entropy = distribution.entropy()
    values = policy.value_net(latent_vf)
    # (B * W,) or (B * W, 1) -> (B, W)
    shape = (n_windows, window_size)
    return values.reshape(shape), log_prob.reshape(shape), None if entropy is None else entropy.reshape(shape)
