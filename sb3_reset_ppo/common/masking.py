"""The masking hook: how the window evaluation applies each slot's action mask to a maskable policy's distribution."""

from typing import Protocol, TypeGuard

import torch as th
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy


class MaskablePolicy(Protocol):
    """A recurrent policy whose action distribution takes each step's action masks (``MaskableResetPPO``'s)."""

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor, action_masks: th.Tensor | None = None) -> Distribution:
        """The action distribution of the actor's latent, with the masks applied."""
        ...


def _is_maskable(policy: ActorCriticPolicy) -> TypeGuard[MaskablePolicy]:
    """Whether ``policy`` is a maskable one: it holds sb3-contrib's maskable distribution (as the export tells)."""
    return hasattr(policy, "masked_action_dist")


def masked_distribution(policy: ActorCriticPolicy, latent_pi: th.Tensor, masks: th.Tensor) -> Distribution:
    """The action distribution of a maskable policy with each slot's mask, ``masks`` ``(B * W, mask_dims)``."""
    if not _is_maskable(policy):
        raise TypeError(
            f"the minibatch holds action masks, but the policy {type(policy).__name__} takes none: action masks need a "
            "MaskableResetPPO policy"
        )
    return policy._get_action_dist_from_latent(latent_pi, masks)
