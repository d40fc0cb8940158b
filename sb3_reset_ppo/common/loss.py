"""The PPO loss over weighted window slots: one pure function."""

from typing import NamedTuple

import torch as th

from sb3_reset_ppo.common.settings import Weighting


class WindowLoss(NamedTuple):
    """
    The loss to minimise and its logged parts (0-d tensors; no host synchronisation). The parts are means over the
    minibatch's real slots (SB3's per-minibatch means); ``loss`` combines them as optimised, which differs only where
    uniform weighting divides by the rollout's normaliser and that is not the minibatch's real slots (an epoch that
    holds fewer slots than expected, :func:`~sb3_reset_ppo.common.windows.uniform_normaliser`).
    """

    loss: th.Tensor
    policy_loss: th.Tensor
    value_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl: th.Tensor
    clip_fraction: th.Tensor


# Guards divisions by a sum of weights that can be zero (a minibatch with no kept slot)
_TINY = 1e-12


def window_ppo_loss(
    log_prob: th.Tensor,
    old_log_prob: th.Tensor,
    advantages: th.Tensor,
    values: th.Tensor,
    old_values: th.Tensor,
    returns: th.Tensor,
    entropy: th.Tensor | None,
    kept: th.Tensor,
    weights: th.Tensor,
    weighting: Weighting,
    clip_range: float,
    clip_range_vf: float | None,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool = True,
    n_real_slots: int | None = None,
    uniform_normaliser: float | None = None,
) -> WindowLoss:
    """
    PPO's clipped loss over the slots of ``B`` windows of ``W`` slots (every tensor argument ``(B, W)``).

    Per-slot terms (clipped surrogate, value loss with optional ``clip_range_vf``, entropy) are combined
    as ``sum(w * term) / n`` for ``"uniform"`` weighting (``n`` the ``uniform_normaliser``, the same for every
    minibatch of a rollout; without it the number of real slots, ``B * W`` unless windows are clipped) and
    ``sum(w * term) / sum(w)`` for ``"importance"`` and ``"kept_mean"``. Advantages are normalised with the slot
    weights' statistics:
    weighted mean ``sum(w * a) / sum(w)`` and unbiased weighted variance
    ``sum(w * (a - mean)^2) / (sum(w) - sum(w^2) / sum(w))`` (for weights of 0 and 1: the mean and unbiased
    variance over kept slots, as ``torch.std``), so that the weighted mean of the normalised advantages is 0;
    with fewer than two kept slots advantages are left as they are (as SB3 does for a single sample).
    Dropped slots contribute exactly nothing, even where their terms are not finite.
    ``approx_kl`` and ``clip_fraction`` are plain means over kept slots.

    :param log_prob: Log-probabilities under the current policy
    :param old_log_prob: Log-probabilities recorded in the rollout
    :param advantages: Advantages (GAE)
    :param values: Values under the current policy
    :param old_values: Values recorded in the rollout
    :param returns: Returns (value targets)
    :param entropy: Entropies, or ``None`` to use ``-log_prob`` as in SB3
    :param kept: Whether each slot is trained
    :param weights: Slot weights (zero where not kept)
    :param weighting: ``"uniform"``, ``"importance"`` or ``"kept_mean"``
    :param clip_range: PPO clip range
    :param clip_range_vf: Value clip range, ``None`` for no value clipping
    :param ent_coef: Entropy coefficient
    :param vf_coef: Value coefficient
    :param normalize_advantage: Normalise advantages with the slot weights' statistics
    :param n_real_slots: Real slots of the minibatch when some are padding of clipped windows (``kept`` and
        ``weights`` 0 there); ``None``: all ``B * W``
    :param uniform_normaliser: The divisor of ``"uniform"`` weighting
        (:func:`~sb3_reset_ppo.common.windows.uniform_normaliser`: ``batch_size``, or an epoch's expected real slots
        when fewer); ``None``: the real slots of this minibatch
    :return: The loss and its parts
    """
    kept_f = kept.float()
    n_kept = kept_f.sum()
    if normalize_advantage:
        total = weights.sum().clamp(min=_TINY)
        mean = (weights * advantages).sum() / total
        # Unbiased weighted variance (reliability weights)
        denominator = (total - (weights**2).sum() / total).clamp(min=_TINY)
        variance = (weights * (advantages - mean) ** 2).sum() / denominator
        # As SB3: a single sample is not normalised (selected on the device: no host read)
        advantages = th.where(n_kept > 1, (advantages - mean) / (variance.sqrt() + 1e-8), advantages)

    # Dropped slots enter as ratio 1 and zero terms: nothing they hold (an overflowing ratio) reaches the loss
    # or the gradient
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
    # "uniform": the rollout's normaliser, else this minibatch's real slots; the other weightings: the sum of the
    # weights, guarded where no slot is kept (every term is then 0: the loss is 0, not 0 / 0)
    slots = n_real if uniform_normaliser is None else uniform_normaliser
    normaliser: th.Tensor | float = slots if weighting == "uniform" else weights.sum().clamp(min=_TINY)

    # The three terms combined at once, sum(w * term) / normaliser each: 3 x (B, W) -> (3, B, W) -> (3,)
    terms = th.stack([policy_term, value_term, entropy_term])
    combined = (weights * th.where(kept, terms, th.zeros_like(terms))).sum(dim=(1, 2)) / normaliser
    policy_loss, value_loss, entropy_loss = combined.unbind()
    with th.no_grad():
        # Means over kept slots of the two statistics: 2 x (B, W) -> (2, B, W) -> (2,)
        statistics = th.stack([(ratio - 1) - log_ratio, (th.abs(ratio - 1) > clip_range).float()])
        approx_kl, clip_fraction = ((statistics * kept_f).sum(dim=(1, 2)) / n_kept.clamp(min=1.0)).unbind()
        # Logged as SB3 logs a minibatch's losses, means over its own real slots: the same as the optimised terms
        # unless uniform weighting divides by a normaliser other than the minibatch's real slots
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
