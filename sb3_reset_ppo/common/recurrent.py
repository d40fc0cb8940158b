"""What the window code reads of a recurrent policy: its layer type and memory, its critic variant and its features."""

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypeAlias

import torch as th
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import nn

#: The recurrent layers the unroll supports: sb3-contrib's LSTM and the GRU of the GRU policies
RecurrentLayer: TypeAlias = nn.LSTM | nn.GRU
RecurrentLayerType = Literal["lstm", "gru"]


def recurrent_layer_type(rnn: nn.Module) -> RecurrentLayerType:
    """``"lstm"`` or ``"gru"``: the kind of a policy's recurrent layer."""
    if isinstance(rnn, nn.LSTM):
        return "lstm"
    if isinstance(rnn, nn.GRU):
        return "gru"
    raise TypeError(f"the policy's recurrent layer must be an nn.LSTM or an nn.GRU, got {type(rnn).__name__}")


CriticKind = Literal["separate", "shared", "none"]


class CriticVariant(NamedTuple):
    """
    Which of sb3-contrib's three critics a recurrent policy has, and the layer that turns its features into its latent:

    - ``"separate"`` (``enable_critic_lstm=True``, the default): its own recurrent layer ``rnn`` and memory.
    - ``"shared"`` (``shared_lstm=True``): the actor's recurrent output and memory, detached.
    - ``"none"`` (neither): a linear layer on the features, ``linear``; its memory is unused.
    """

    kind: CriticKind  #: "separate", "shared" or "none"
    rnn: RecurrentLayer | None  #: the critic's own LSTM or GRU ("separate"), else None
    linear: nn.Module | None  #: the critic's layer on the features ("none"), else None

    def latent(
        self,
        latent_pi: th.Tensor,
        states_pi: tuple[th.Tensor, ...],
        run_rnn: Callable[[RecurrentLayer], tuple[th.Tensor, tuple[th.Tensor, ...]]],
        run_linear: Callable[[nn.Module], th.Tensor],
    ) -> tuple[th.Tensor, tuple[th.Tensor, ...]]:
        """
        The critic's latent and memory, as its kind computes them.

        :param latent_pi: The actor's recurrent output
        :param states_pi: The actor's memory after the steps
        :param run_rnn: Runs the critic's features through its recurrent layer: its output and memory
        :param run_linear: Runs the critic's features through its linear layer: its output
        """
        if self.rnn is not None:
            return run_rnn(self.rnn)
        if self.linear is not None:
            return run_linear(self.linear), states_pi
        return latent_pi.detach(), tuple(state.detach() for state in states_pi)


def critic_variant(policy: RecurrentActorCriticPolicy) -> CriticVariant:
    """
    The critic of a recurrent policy (:class:`CriticVariant`): the one place the cases of ``enable_critic_lstm`` and
    ``shared_lstm`` are told apart.
    """
    rnn: RecurrentLayer | None = policy.lstm_critic
    if rnn is not None:
        return CriticVariant("separate", rnn, None)
    if policy.shared_lstm:
        return CriticVariant("shared", None, None)
    # sb3-contrib builds this layer whenever the critic has no recurrent layer and does not share the actor's
    assert policy.critic is not None
    return CriticVariant("none", None, policy.critic)


def memory_state_names(layer_type: RecurrentLayerType) -> tuple[str, ...]:
    """The tensors of a layer's memory, in its state tuple's order: ``("hidden", "cell")`` (LSTM) or ``("hidden",)`` (GRU)."""
    return ("hidden", "cell") if layer_type == "lstm" else ("hidden",)


def actor_critic_features(policy: RecurrentActorCriticPolicy, observations: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
    """The actor's and the critic's features of some observations (the same tensor twice with a shared extractor)."""
    features = policy.extract_features(observations)
    return features if isinstance(features, tuple) else (features, features)


def recurrent_latents(
    policy: RecurrentActorCriticPolicy, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
) -> tuple[th.Tensor, th.Tensor, RNNStates]:
    """
    Latents of actor and critic and the memory after the steps: sb3-contrib's ``forward`` without the heads.

    :param obs: Observations, sequences one after the other
    :param lstm_states: The memory of actor and critic entering the sequences
    :param episode_starts: Whether each step starts an episode (the memory is reset there)
    """
    pi_features, vf_features = actor_critic_features(policy, obs)
    # Typed by sb3-contrib for an LSTM's (hidden, cell); a GRU policy's takes (hidden,)
    process: Any = policy._process_sequence
    latent_pi, states_pi = process(pi_features, lstm_states.pi, episode_starts, policy.lstm_actor)
    latent_vf, states_vf = critic_variant(policy).latent(
        latent_pi,
        states_pi,
        run_rnn=lambda rnn: process(vf_features, lstm_states.vf, episode_starts, rnn),
        run_linear=lambda linear: linear(vf_features),
    )
    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    return latent_pi, latent_vf, RNNStates(states_pi, states_vf)
