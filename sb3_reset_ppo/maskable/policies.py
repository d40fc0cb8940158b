"""Policies of MaskableResetPPO: ResetPPO's recurrent policies with sb3-contrib's maskable action distributions (the
attention ones are in :mod:`sb3_reset_ppo.maskable.trxl_policies`)."""

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableDistribution, make_masked_proba_distribution
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule

from sb3_reset_ppo.common.categorical import masked_categorical_sample
from sb3_reset_ppo.common.masking import builds_from_action_net, maskable_categorical
from sb3_reset_ppo.common.recurrent import recurrent_latents
from sb3_reset_ppo.common.spaces import check_action_masks
from sb3_reset_ppo.common.type_aliases import Memory, NumpyObs
from sb3_reset_ppo.reset_ppo import policies as reset_ppo_policies

__all__ = [
    "ActionMaskingPolicy",
    "MaskableCnnGruPolicy",
    "MaskableCnnLstmPolicy",
    "MaskableMlpGruPolicy",
    "MaskableMlpLstmPolicy",
    "MaskableMultiInputGruPolicy",
    "MaskableMultiInputLstmPolicy",
    "MaskableRecurrentPolicy",
]

MASKABLE_ACTION_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)

# Masks as they reach a policy: an array or tensor of shape (n_envs, mask_dims) (or flat), or None for no masking
MaybeMasks = th.Tensor | np.ndarray | None


def check_maskable_action_space(action_space: spaces.Space) -> None:
    """Raise a ``ValueError`` naming the space unless invalid-action masking supports it (as ``MaskablePPO``)."""
    if not isinstance(action_space, MASKABLE_ACTION_SPACES):
        raise ValueError(
            f"action space {action_space} is not supported by invalid-action masking: use Discrete, MultiDiscrete or "
            "MultiBinary actions (as sb3-contrib's MaskablePPO), or ResetPPO for continuous (Box) actions"
        )


class ActionMaskingPolicy(ActorCriticPolicy):
    """
    Invalid-action masks for every way a policy of ResetPPO with memory is asked for actions: the parts that
    :class:`MaskableRecurrentPolicy` and :class:`~sb3_reset_ppo.maskable.trxl_policies.MaskableAttentionPolicy` share.
    A maskable policy class lists it (by one of those two) before the ResetPPO policy it masks; ``MaskableResetPPO``
    takes subclasses of it only.
    """

    action_dist: Any
    # The masks of the current ``predict`` call, for ``get_distribution`` (the memory policies' ``predict`` and
    # ``_predict`` do not pass them)
    _predict_action_masks: MaybeMasks = None
    # Where they come from, for the error of an invalid mask
    _predict_masks_at: str = "policy.predict()"

    def _build(self, lr_schedule: Schedule) -> None:
        check_maskable_action_space(self.action_space)
        super()._build(lr_schedule)
        # Used without masks, for results bitwise the unmasked policy's (the maskable one normalises twice, which rounds)
        self.unmasked_action_dist = self.action_dist
        self.masked_action_dist = make_masked_proba_distribution(self.action_space)
        if isinstance(self.action_space, spaces.MultiBinary):
            # Two logits per binary action (sb3-contrib's MaskableBernoulliDistribution), as MaskablePPO's policy
            self.action_net = self.masked_action_dist.proba_distribution_net(latent_dim=self.mlp_extractor.latent_dim_pi)
            if self.ortho_init:
                self.action_net.apply(lambda module: self.init_weights(module, gain=0.01))
            self.unmasked_action_dist = self.masked_action_dist
        # The optimizer is built again over every parameter by the memory policy's constructor
        self.action_dist = self.masked_action_dist

    @builds_from_action_net
    def _get_action_dist_from_latent(self, latent_pi: th.Tensor, action_masks: MaybeMasks = None) -> Distribution:
        """
        The action distribution of the actor's latent: the unmasked policy's, or the maskable one with the masks applied.

        :param latent_pi: The actor's latent, ``(n, latent_dim)``
        :param action_masks: Which actions are valid, ``(n, mask_dims)``; ``None``: all (the unmasked distribution)
        """
        logits = self.action_net(latent_pi)
        if action_masks is None:
            if isinstance(self.unmasked_action_dist, MaskableDistribution):
                return self.unmasked_action_dist.proba_distribution(action_logits=logits)
            return self.unmasked_action_dist.proba_distribution(logits)
        distribution = self.masked_action_dist.proba_distribution(action_logits=logits)
        distribution.apply_masking(action_masks)
        return distribution

    def _latents(
        self, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, RNNStates]:
        """The latents of actor and critic (after ``net_arch``) and the memory after the steps (each memory's own)."""
        raise NotImplementedError

    def _actor_latent(
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> tuple[th.Tensor, tuple[th.Tensor, ...]]:
        """The actor's latent (after ``net_arch``) and its memory after the steps (the memory's own)."""
        raise NotImplementedError

    def get_distribution(  # type: ignore[override]  # sb3-contrib's recurrent signature, with the masks
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor, action_masks: MaybeMasks = None
    ) -> tuple[Distribution, Any]:  # the memory as the policy holds it: an LSTM's (hidden, cell), an AttentionState
        """
        The actor's masked action distribution and its new memory (sb3-contrib's ``get_distribution`` with masks). The
        memory policies' ``_predict`` calls it without masks: those of the current ``predict`` call apply then.

        :param lstm_states: The actor's memory
        :param action_masks: Which actions are valid, ``(n_envs, mask_dims)``; ``None``: those given to ``predict``
        :return: The distribution and the actor's new memory
        """
        latent_pi, states = self._actor_latent(obs, lstm_states, episode_starts)
        return self._get_action_dist_from_latent(latent_pi, self._masks_for_predict(obs, action_masks)), states

    def forward(  # type: ignore[override]  # as sb3-contrib's recurrent policies, with the masks
        self,
        obs: PyTorchObs,
        lstm_states: RNNStates,
        episode_starts: th.Tensor,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates]:
        """
        Forward pass in actor and critic (sb3-contrib's arguments), with the actions drawn from the masked distribution.

        :param action_masks: Which actions are valid, ``(n_envs, mask_dims)``; ``None``: all
        :return: action, value and log probability of the action, and the new memory
        """
        latent_pi, latent_vf, states = self._latents(obs, lstm_states, episode_starts)
        values = self.value_net(latent_vf)
        if action_masks is not None and maskable_categorical(self):
            # sb3-contrib's masked categorical with its operations, without its two Categorical objects
            valid = th.as_tensor(action_masks, dtype=th.bool, device=latent_pi.device)
            actions, log_prob = masked_categorical_sample(self.action_net(latent_pi), valid, deterministic)
        else:
            distribution = self._get_action_dist_from_latent(latent_pi, action_masks)
            actions = distribution.get_actions(deterministic=deterministic)
            log_prob = distribution.log_prob(actions)
        # (n_envs * ..., ) -> (n_envs, *action shape); a Discrete space's shape is ()
        actions = actions.reshape((-1, *(self.action_space.shape or ())))
        return actions, values, log_prob, states

    def _masks_for_predict(self, observation: PyTorchObs, action_masks: MaybeMasks) -> MaybeMasks:
        """``get_distribution``'s masks: the given ones, else those of the current ``predict`` call, checked."""
        masks = self._predict_action_masks if action_masks is None else action_masks
        if masks is None:
            return None
        # (n_envs, mask_dims) booleans, or a ValueError naming the env: n_envs is the observations' count
        n_envs = next(iter(observation.values())).shape[0] if isinstance(observation, dict) else observation.shape[0]
        return check_action_masks(masks, self.action_space, n_envs, self._predict_masks_at)

    def predict(
        self,
        observation: NumpyObs,
        state: Memory = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
        masks_at: str = "policy.predict()",
    ) -> tuple[np.ndarray, Memory]:
        """
        Get the policy action from an observation and the memory, with only the actions that ``action_masks`` allows
        (as ``MaskableActorCriticPolicy.predict``).

        :param state: The memory, as the unmasked policy's ``predict``; ``None``: its initial memory
        :param action_masks: Which actions are valid, ``(n_envs, mask_dims)`` or ``(mask_dims,)``; ``None``: every action
        :param masks_at: Where the call comes from, named by the error of an invalid mask
        :return: The action and the next memory
        """
        self._predict_action_masks, self._predict_masks_at = action_masks, masks_at
        try:
            return super().predict(observation, state, episode_start, deterministic)
        finally:
            self._predict_action_masks, self._predict_masks_at = None, "policy.predict()"


class MaskableRecurrentPolicy(ActionMaskingPolicy, RecurrentActorCriticPolicy):
    """Invalid-action masks for a recurrent policy of ResetPPO (LSTM, GRU; listed before its class)."""

    def _latents(
        self, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, RNNStates]:
        return recurrent_latents(self, obs, lstm_states, episode_starts)

    def _actor_latent(
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> tuple[th.Tensor, tuple[th.Tensor, ...]]:
        features = BasePolicy.extract_features(self, obs, self.pi_features_extractor)
        process: Any = self._process_sequence
        latent_pi, states = process(features, lstm_states, episode_starts, self.lstm_actor)
        return self.mlp_extractor.forward_actor(latent_pi), states

    def evaluate_actions(  # type: ignore[override]  # sb3-contrib's recurrent signature, with the masks
        self,
        obs: th.Tensor,
        actions: th.Tensor,
        lstm_states: RNNStates,
        episode_starts: th.Tensor,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """
        Values, log-probabilities and entropies of the actions under the masked distribution, over sequences.

        :param obs: Observations, sequences one after the other
        :param lstm_states: The memory entering each sequence
        :param action_masks: Which actions were valid at each step; ``None``: all
        :return: values, log-probabilities and entropies
        """
        latent_pi, latent_vf, _ = recurrent_latents(self, obs, lstm_states, episode_starts)
        distribution = self._get_action_dist_from_latent(latent_pi, action_masks)
        return self.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy()


class MaskableMlpLstmPolicy(MaskableRecurrentPolicy, reset_ppo_policies.MlpLstmPolicy):
    """ResetPPO's ``MlpLstmPolicy`` with invalid-action masking."""


class MaskableCnnLstmPolicy(MaskableRecurrentPolicy, reset_ppo_policies.CnnLstmPolicy):
    """ResetPPO's ``CnnLstmPolicy`` with invalid-action masking."""


class MaskableMultiInputLstmPolicy(MaskableRecurrentPolicy, reset_ppo_policies.MultiInputLstmPolicy):
    """ResetPPO's ``MultiInputLstmPolicy`` with invalid-action masking."""


class MaskableMlpGruPolicy(MaskableRecurrentPolicy, reset_ppo_policies.MlpGruPolicy):
    """ResetPPO's ``MlpGruPolicy`` with invalid-action masking."""


class MaskableCnnGruPolicy(MaskableRecurrentPolicy, reset_ppo_policies.CnnGruPolicy):
    """ResetPPO's ``CnnGruPolicy`` with invalid-action masking."""


class MaskableMultiInputGruPolicy(MaskableRecurrentPolicy, reset_ppo_policies.MultiInputGruPolicy):
    """ResetPPO's ``MultiInputGruPolicy`` with invalid-action masking."""
