"""MaskableResetPPO's attention policies: ResetPPO's (:mod:`sb3_reset_ppo.reset_ppo.trxl_policies`) with
sb3-contrib's maskable action distributions."""

import torch as th
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_reset_ppo.common.attention import AttentionState
from sb3_reset_ppo.maskable.policies import ActionMaskingPolicy
from sb3_reset_ppo.reset_ppo import trxl_policies

__all__ = ["MaskableAttentionPolicy", "MaskableCnnTrXLPolicy", "MaskableMlpTrXLPolicy", "MaskableMultiInputTrXLPolicy"]


class MaskableAttentionPolicy(ActionMaskingPolicy, trxl_policies.TrXLActorCriticPolicy):
    """
    Invalid-action masks for an attention policy of ResetPPO (listed before its class). In training, each slot's mask
    is applied to its distribution by the window evaluation (``slot_heads``), as for the recurrent policies.
    """

    def _latents(
        self, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, RNNStates]:
        return self.step_latents(obs, lstm_states, episode_starts)

    def _actor_latent(
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> tuple[th.Tensor, AttentionState]:
        pi_features, _ = self._features(obs)
        latent_pi, state = self.trxl_actor.step(pi_features, lstm_states, episode_starts)
        return self.mlp_extractor.forward_actor(latent_pi), state


class MaskableMlpTrXLPolicy(MaskableAttentionPolicy, trxl_policies.MlpTrXLPolicy):
    """ResetPPO's ``MlpTrXLPolicy`` (attention memory) with invalid-action masking."""


class MaskableCnnTrXLPolicy(MaskableAttentionPolicy, trxl_policies.CnnTrXLPolicy):
    """ResetPPO's ``CnnTrXLPolicy`` (attention memory) with invalid-action masking."""


class MaskableMultiInputTrXLPolicy(MaskableAttentionPolicy, trxl_policies.MultiInputTrXLPolicy):
    """ResetPPO's ``MultiInputTrXLPolicy`` (attention memory) with invalid-action masking."""
