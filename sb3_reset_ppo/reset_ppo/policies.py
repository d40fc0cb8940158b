"""
Policies of ResetPPO: sb3-contrib's LSTM policies, and GRU policies built on them with each ``nn.LSTM`` replaced by an
``nn.GRU`` of the same size under the same names (a config switches cells by the policy name only).
"""

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from sb3_contrib.ppo_recurrent import policies as contrib_policies
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from sb3_reset_ppo.common.recurrent import RecurrentLayer, recurrent_latents
from sb3_reset_ppo.common.type_aliases import Memory, NumpyObs

__all__ = [
    "CnnGruPolicy",
    "CnnLstmPolicy",
    "MlpGruPolicy",
    "MlpLstmPolicy",
    "MultiInputGruPolicy",
    "MultiInputLstmPolicy",
    "RecurrentActorCriticGruPolicy",
]


class _RecurrentPolicyParts(RecurrentActorCriticPolicy):
    """What every policy here changes in sb3-contrib's: the features size as an int, and the layers' saved arguments."""

    def make_features_extractor(self) -> BaseFeaturesExtractor:
        # SB3 sizes a MultiDiscrete observation space with a numpy integer, which nn.LSTM and nn.GRU reject
        extractor = super().make_features_extractor()
        extractor._features_dim = int(extractor.features_dim)
        return extractor

    def _get_constructor_parameters(self) -> dict[str, Any]:
        # sb3-contrib's policies do not save them: Policy.load would rebuild the default sizes and fail on the weights
        data = super()._get_constructor_parameters()
        data.update(
            lstm_hidden_size=self.lstm_actor.hidden_size,
            n_lstm_layers=self.lstm_actor.num_layers,
            shared_lstm=self.shared_lstm,
            enable_critic_lstm=self.enable_critic_lstm,
            lstm_kwargs=self.lstm_kwargs,
        )
        return data

    def predict(
        self, observation: NumpyObs, state: Memory = None, episode_start: np.ndarray | None = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Memory]:
        """
        Get the policy action from an observation and the memory, as sb3-contrib's recurrent policies do.

        :param state: The memory (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each ``(n_layers, n_envs, hidden_size)``
        :return: The action and the next memory
        """
        is_gru = isinstance(self.lstm_actor, nn.GRU)
        check_predict_state(self, observation, state, 1 if is_gru else 2)
        if not is_gru:
            return super().predict(observation, state, episode_start, deterministic)
        # sb3-contrib's predict handles an (hidden, cell) pair: pass the hidden state as both, _predict reads one
        pair = None if state is None else (state[0], state[0])
        actions, new_pair = super().predict(observation, pair, episode_start, deterministic)
        assert new_pair is not None
        return actions, (new_pair[0],)


def heads(
    policy: ActorCriticPolicy, latent_pi: th.Tensor, latent_vf: th.Tensor, deterministic: bool
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """``forward``'s heads: the actions ``(n_envs, *action shape)``, the values and the actions' log probabilities."""
    values = policy.value_net(latent_vf)
    distribution = policy._get_action_dist_from_latent(latent_pi)
    actions = distribution.get_actions(deterministic=deterministic)
    log_prob = distribution.log_prob(actions)
    # (n_envs * ..., ) -> (n_envs, *action shape); a Discrete space's shape is ()
    return actions.reshape((-1, *(policy.action_space.shape or ()))), values, log_prob


def n_observations(observation: Any, observation_space: spaces.Space) -> int:
    """The number of observations (envs) in ``predict``'s ``observation``: its first dimension where it is batched, else 1."""
    if isinstance(observation, dict) and isinstance(observation_space, spaces.Dict):
        # Keys the space lacks, or missing keys, are left to SB3's own checks
        counts = {
            key: n_observations(value, observation_space.spaces[key])
            for key, value in observation.items()
            if key in observation_space.spaces
        }
        if len(set(counts.values())) > 1:
            raise ValueError(
                f"observation's keys hold different numbers of observations (n_envs): {counts}; every key of a Dict "
                "observation must hold the same number (its first dimension, or one observation of the subspace's shape)"
            )
        return next(iter(counts.values()), 1)
    array = np.asarray(observation)
    return int(array.shape[0]) if array.ndim > len(observation_space.shape or ()) else 1


def check_predict_state(policy: RecurrentActorCriticPolicy, observation: Any, state: Any, n_states: int) -> None:
    """
    Raise a ``ValueError`` unless ``state`` is ``None`` or ``n_states`` arrays ``(n_layers, n_envs, hidden_size)``
    (2: an LSTM's ``(hidden, cell)``, 1: a GRU's ``(hidden,)``) matching the policy and the observation's batch.
    """
    n_envs = n_observations(observation, policy.observation_space)
    if state is None:
        return
    layout = "(hidden, cell)" if n_states == 2 else "(hidden,) (a GRU has no cell state)"
    expected_shape = f"({policy.lstm_actor.num_layers}, n_envs, {policy.lstm_actor.hidden_size})"
    if not isinstance(state, (tuple, list)) or len(state) != n_states:
        got = f"{type(state).__name__} of length {len(state)}" if isinstance(state, (tuple, list)) else type(state).__name__
        raise ValueError(f"state must be None or {layout}, each an array of shape {expected_shape}; got {got}")
    for index, tensor in enumerate(state):
        shape = tuple(np.shape(tensor))
        if shape != (policy.lstm_actor.num_layers, n_envs, policy.lstm_actor.hidden_size):
            raise ValueError(
                f"state[{index}] must have shape (n_layers, n_envs, hidden_size) = "
                f"({policy.lstm_actor.num_layers}, {n_envs}, {policy.lstm_actor.hidden_size}) for {n_envs} "
                f"observation(s); got shape {shape}"
            )


class MlpLstmPolicy(_RecurrentPolicyParts, contrib_policies.MlpLstmPolicy):
    """sb3-contrib's ``MlpLstmPolicy``; only its features size is made a Python int (``MultiDiscrete`` observations)."""


class CnnLstmPolicy(_RecurrentPolicyParts, contrib_policies.CnnLstmPolicy):
    """sb3-contrib's ``CnnLstmPolicy``; only its features size is made a Python int."""


class MultiInputLstmPolicy(_RecurrentPolicyParts, contrib_policies.MultiInputLstmPolicy):
    """sb3-contrib's ``MultiInputLstmPolicy``; only its features size is made a Python int (``MultiDiscrete`` keys)."""


class RecurrentActorCriticGruPolicy(_RecurrentPolicyParts):
    """sb3-contrib's ``RecurrentActorCriticPolicy`` (its arguments) with GRUs for LSTMs (``lstm_kwargs`` go to ``nn.GRU``)."""

    # sb3-contrib's constructor types them nn.LSTM: a GRU in their place is an incompatible redefinition to mypy
    lstm_actor: nn.GRU  # type: ignore[assignment]
    lstm_critic: nn.GRU | None  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        def gru_like(lstm: nn.Module) -> nn.GRU:
            assert isinstance(lstm, nn.LSTM)
            if lstm.proj_size:
                raise ValueError(f"policy_kwargs['lstm_kwargs'] sets proj_size={lstm.proj_size!r}, which a GRU does not have")
            return nn.GRU(lstm.input_size, lstm.hidden_size, num_layers=lstm.num_layers, **self.lstm_kwargs)

        self.lstm_actor = gru_like(self.lstm_actor)
        if self.lstm_critic is not None:
            self.lstm_critic = gru_like(self.lstm_critic)
        # Rebuilt as SB3 builds it (the old one held the LSTMs' parameters); torch's base Optimizer type takes no lr
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr, **self.optimizer_kwargs)  # type: ignore[call-arg]

    @staticmethod
    def _process_sequence(  # type: ignore[override]  # the memory is (hidden,), sb3-contrib's (hidden, cell)
        features: th.Tensor,
        gru_states: tuple[th.Tensor, ...],
        episode_starts: th.Tensor,
        gru: RecurrentLayer,
    ) -> tuple[th.Tensor, tuple[th.Tensor]]:
        """
        sb3-contrib's ``_process_sequence`` for a GRU: run it over the sequences of a batch with SB3's episode-start rule.

        :param features: Inputs, ``(n_seq * length, features_dim)``, sequences one after the other
        :param gru_states: ``(hidden,)`` entering the sequences, ``(n_layers, n_seq, hidden)``
        :param episode_starts: Episode-start flags of every step, ``(n_seq * length,)``
        :param gru: The GRU (typed as sb3-contrib's signature types it; an LSTM is refused)
        :return: Outputs ``(n_seq * length, hidden)`` and the state ``(hidden,)`` after the last step
        """
        if not isinstance(gru, nn.GRU):
            raise TypeError(f"a GRU policy's recurrent layers are nn.GRU, got {type(gru).__name__}")
        if len(gru_states) != 1:
            raise ValueError(
                f"a GRU policy's state is (hidden,), one array of shape (n_layers, n_envs, hidden_size); got a tuple of "
                f"{len(gru_states)} (an LSTM policy's state is (hidden, cell)). If this policy was loaded or built by "
                "sb3-contrib's RecurrentPPO, which keeps (hidden, cell) memory: GRU policies train and predict with "
                "sb3_reset_ppo.ResetPPO (load the checkpoint with ResetPPO.load)"
            )
        hidden = gru_states[0]
        n_seq = hidden.shape[1]
        # (n_seq * length, F) -> (n_seq, length, F) -> (length, n_seq, F)
        features_sequence = features.reshape((n_seq, -1, gru.input_size)).swapaxes(0, 1)
        # (n_seq * length,) -> (n_seq, length) -> (length, n_seq)
        episode_starts = episode_starts.reshape((n_seq, -1)).swapaxes(0, 1)
        if th.all(episode_starts == 0.0):
            output, hidden = gru(features_sequence, hidden)
        else:
            outputs = []
            for step_features, episode_start in zip(features_sequence, episode_starts, strict=True):
                # (n_seq,) -> (1, n_seq, 1): SB3's episode-start rule
                step_output, hidden = gru(step_features.unsqueeze(dim=0), (1.0 - episode_start).view(1, n_seq, 1) * hidden)
                outputs.append(step_output)
            output = th.cat(outputs)
        # (length, n_seq, H) -> (n_seq * length, H)
        return th.flatten(output.transpose(0, 1), start_dim=0, end_dim=1), (hidden,)

    def forward(  # type: ignore[override]  # as sb3-contrib's: the memory in and out
        self, obs: th.Tensor, lstm_states: RNNStates, episode_starts: th.Tensor, deterministic: bool = False
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates]:
        """
        Forward pass in all the networks (actor and critic), as sb3-contrib's (its arguments), with ``(hidden,)`` states.

        :param lstm_states: The memory of actor and critic, each ``(hidden,)``
        :return: action, value and log probability of the action, and the new memory
        """
        latent_pi, latent_vf, states = recurrent_latents(self, obs, lstm_states, episode_starts)
        return (*heads(self, latent_pi, latent_vf, deterministic), states)

    def _predict(  # type: ignore[override]  # sb3-contrib's recurrent signature, not SB3's _predict(obs, deterministic)
        self,
        observation: th.Tensor,
        lstm_states: tuple[th.Tensor, ...],
        episode_starts: th.Tensor,
        deterministic: bool = False,
    ) -> tuple[th.Tensor, tuple[th.Tensor, th.Tensor]]:
        # sb3-contrib's predict passes the pair built from (hidden,) (see predict); get_distribution is typed for a pair
        distribution, (hidden,) = self.get_distribution(observation, lstm_states[:1], episode_starts)  # type: ignore[arg-type]
        return distribution.get_actions(deterministic=deterministic), (hidden, hidden)


class RecurrentActorCriticCnnGruPolicy(RecurrentActorCriticGruPolicy, RecurrentActorCriticCnnPolicy):
    """:class:`RecurrentActorCriticGruPolicy` with sb3-contrib's CNN features extractor (image observations)."""


class RecurrentMultiInputActorCriticGruPolicy(RecurrentActorCriticGruPolicy, RecurrentMultiInputActorCriticPolicy):
    """:class:`RecurrentActorCriticGruPolicy` with sb3-contrib's combined extractor (``Dict`` observations)."""


MlpGruPolicy = RecurrentActorCriticGruPolicy
CnnGruPolicy = RecurrentActorCriticCnnGruPolicy
MultiInputGruPolicy = RecurrentMultiInputActorCriticGruPolicy
