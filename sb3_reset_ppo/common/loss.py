"""The PPO loss over weighted window slots: one pure function."""

from typing import NamedTuple

import torch as th

from sb3_reset_ppo.common.settings import Weighting
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.utils import TINY


class WindowLoss(NamedTuple):
    """The loss to minimise and its logged parts (means over the minibatch's real slots, as SB3 logs them), 0-d tensors."""

    loss: th.Tensor
    policy_loss: th.Tensor
    value_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl: th.Tensor
    clip_fraction: th.Tensor


class SlotTargets(NamedTuple):
    """What the rollout recorded for every slot of a minibatch, and the slots' kept flags and weights, each ``(B, W)``."""

    old_log_prob: th.Tensor  # log-probabilities recorded in the rollout
    advantages: th.Tensor  # advantages (GAE)
    old_values: th.Tensor  # values recorded in the rollout
    returns: th.Tensor  # returns (value targets)
    kept: th.Tensor  # whether each slot is trained
    weights: th.Tensor  # slot weights, zero where not kept
    n_real_slots: int | None = None  # real slots where some are padding (kept and weights 0 there); None: B * W
    loss_normaliser: float | None = None  # the divisor of "uniform" weighting; None: the real slots of the minibatch

    @classmethod
    def of(cls, samples: WindowRolloutBufferSamples) -> "SlotTargets":
        """The targets of a minibatch of windows."""
        return cls(*(getattr(samples, field) for field in cls._fields))


class LossSettings(NamedTuple):
    """The model's PPO settings for one update, as the loss uses them."""

    weighting: Weighting  # "uniform", "importance" or "kept_mean"
    clip_range: float  # PPO clip range
    clip_range_vf: float | None  # value clip range, None for no value clipping
    ent_coef: float  # entropy coefficient
    vf_coef: float  # value coefficient
    normalize_advantage: bool = True  # normalise advantages with the slot weights' statistics


def window_ppo_loss(
    log_prob: th.Tensor, values: th.Tensor, entropy: th.Tensor | None, targets: SlotTargets, settings: LossSettings
) -> WindowLoss:
    """
    PPO's clipped loss over the slots of ``B`` windows of ``W`` slots (every tensor ``(B, W)``): per-slot terms combined
    as ``sum(w * term) / n``, ``n`` the rollout's normaliser under ``"uniform"`` weighting, else the sum of the weights;
    dropped slots contribute exactly nothing (``docs/design.md``, "Weights and loss").

    :param log_prob: Log-probabilities under the current policy
    :param values: Values under the current policy
    :param entropy: Entropies, or ``None`` to use ``-log_prob`` as in SB3
    :param targets: The minibatch's recorded values, kept flags and weights
    """
    old_log_prob, advantages, old_values, returns, kept, weights, n_real_slots, uniform_normaliser = targets
    weighting, clip_range, clip_range_vf, ent_coef, vf_coef, normalize_advantage = settings
    kept_f = kept.float()
    n_kept = kept_f.sum()
    if normalize_advantage:
        total = weights.sum().clamp(min=TINY)
        mean = (weights * advantages).sum() / total
        # Unbiased weighted variance (reliability weights)
        denominator = (total - (weights**2).sum() / total).clamp(min=TINY)
        variance = (weights * (advantages - mean) ** 2).sum() / denominator
        # As SB3: a single sample is not normalised (selected on the device: no host read)
        advantages = th.where(n_kept > 1, (advantages - mean) / (variance.sqrt() + 1e-8), advantages)

    # Dropped slots enter as ratio 1 and zero terms: nothing they hold (an overflowing ratio) reaches the gradient
    log_ratio = th.where(kept, log_prob - old_log_prob, th.zeros_like(log_prob))
    ratio = th.exp(log_ratio)
    policy_term = -th.min(advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range))

    if clip_range_vf is None:
        values_pred = values
    else:
        values_pred = old_values + th.clamp(values - old_values, -clip_range_vf, clip_range_vf)
    value_term = (returns - values_pred) ** 2

    # Approximate entropy when there is no closed form, as SB3 does
    entropy_term = log_prob if entropy is None else -entropy

    # Real slots of the minibatch (a number, not a tensor: no copy to the device per minibatch)
    n_real: float = weights.numel() if n_real_slots is None else n_real_slots
    # "uniform": the rollout's normaliser (or the real slots); else the sum of the weights, guarded where none is kept
    slots = n_real if uniform_normaliser is None else uniform_normaliser
    normaliser: th.Tensor | float = slots if weighting == "uniform" else weights.sum().clamp(min=TINY)

    # The three terms combined at once, sum(w * term) / normaliser each: 3 x (B, W) -> (3, B, W) -> (3,)
    terms = th.stack([policy_term, value_term, entropy_term])
    combined = (weights * th.where(kept, terms, th.zeros_like(terms))).sum(dim=(1, 2)) / normaliser
    policy_loss, value_loss, entropy_loss = combined.unbind()
    with th.no_grad():
        # Means over kept slots of the two statistics: 2 x (B, W) -> (2, B, W) -> (2,)
        statistics = th.stack([(ratio - 1) - log_ratio, (th.abs(ratio - 1) > clip_range).float()])
        approx_kl, clip_fraction = ((statistics * kept_f).sum(dim=(1, 2)) / n_kept.clamp(min=1.0)).unbind()
        # Logged as SB3 logs a minibatch's losses: means over its own real slots
        logged = combined * (slots / n_real if weighting == "uniform" else 1.0)
    logged_policy, logged_value, logged_entropy = logged.unbind()
    return WindowLoss(
        loss=policy_loss + ent_coef * entropy_loss + vf_coef * value_loss,
        policy_loss=logged_policy,
        value_loss=logged_value,
        entropy_loss=logged_entropy,
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )
