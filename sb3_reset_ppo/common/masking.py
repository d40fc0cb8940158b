"""The masking hook: how the window evaluation applies each slot's action mask to a maskable policy's distribution."""

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeGuard, TypeVar

import torch as th
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from stable_baselines3.common.distributions import CategoricalDistribution, Distribution
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


# The attribute that marks the ``_get_action_dist_from_latent`` building sb3-contrib's masked distribution over
# ``action_net``'s logits (``ActionMaskingPolicy``'s): a marker, not an import, since the maskable policies import
# the modules that import this one
_FROM_ACTION_NET = "_masked_distribution_from_action_net"

Method = TypeVar("Method", bound=Callable[..., Any])


def builds_from_action_net(method: Method) -> Method:
    """Marks ``method`` as a ``_get_action_dist_from_latent`` that builds the masked distribution over ``action_net``."""
    setattr(method, _FROM_ACTION_NET, True)
    return method


@functools.cache
def _builds_distributions_from_action_net(policy_class: type[ActorCriticPolicy]) -> bool:
    """Whether the class builds its distributions as ``MaskableResetPPO``'s recurrent policies do (not its own way)."""
    return getattr(policy_class._get_action_dist_from_latent, _FROM_ACTION_NET, False)


def maskable_categorical(policy: ActorCriticPolicy) -> bool:
    """
    Whether the policy is a ``MaskableResetPPO`` policy over a ``Discrete`` action space: its distribution
    sb3-contrib's ``MaskableCategorical`` over ``action_net``'s logits with masks, SB3's categorical without.
    """
    return (
        type(getattr(policy, "masked_action_dist", None)) is MaskableCategoricalDistribution
        and type(getattr(policy, "unmasked_action_dist", None)) is CategoricalDistribution
        and _builds_distributions_from_action_net(type(policy))
    )
