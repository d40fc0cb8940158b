"""
Categorical distributions without their objects: log-probabilities, entropies and samples with the operations of
torch's ``Categorical`` and of sb3-contrib's ``MaskableCategorical`` (so the same values, gradients and draws), without
building the objects or validating their arguments at every step and minibatch. ``logits`` are unnormalised
log-probabilities ``(N, n_actions)``, ``actions`` integer indices ``(N,)``, ``masks`` valid actions ``(N, n_actions)``.
"""

import torch as th
from torch.nn import functional as F

# sb3-contrib's MaskableCategorical: the logit a masked action gets
MASKED_LOGIT = -1e8


def log_pmf(logits: th.Tensor) -> th.Tensor:
    """The normalised logits of ``Categorical(logits=logits)`` (its ``logits`` attribute), ``(N, n_actions)``."""
    return logits - logits.logsumexp(dim=-1, keepdim=True)


def masked_log_pmf(logits: th.Tensor, valid: th.Tensor) -> th.Tensor:
    """
    The normalised logits of ``MaskableCategorical(logits=logits, masks=valid)``: normalised, the masked ones set to
    :data:`MASKED_LOGIT`, normalised again (``valid``: bool masks).
    """
    masked = th.where(valid, log_pmf(logits), th.tensor(MASKED_LOGIT, dtype=logits.dtype, device=logits.device))
    return log_pmf(masked)


def log_prob_of(log_pmf: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """``Categorical.log_prob``: each action's entry of the normalised logits ``log_pmf``, ``(N,)``."""
    # (N,) -> (N, 1) -> gathered -> (N,)
    return log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_log_prob_entropy(logits: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """Log-probabilities and entropies ``(N,)`` of categorical distributions, as ``torch.distributions.Categorical``'s."""
    normalised = log_pmf(logits)
    # Before the entropy: autograd then sums the gradients of the normalised logits in the distribution's order
    log_prob = log_prob_of(normalised, actions)
    # Categorical.entropy: the logits clamped to the dtype's smallest, times the probabilities
    p_log_p = th.clamp(normalised, min=th.finfo(normalised.dtype).min) * F.softmax(normalised, dim=-1)
    return log_prob, -p_log_p.sum(-1)


def masked_categorical_log_prob_entropy(
    logits: th.Tensor, actions: th.Tensor, masks: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """
    Log-probabilities and entropies ``(N,)`` of masked categorical distributions (``masks`` bool, or 0 and 1), as
    sb3-contrib's ``MaskableCategorical`` computes them (``tests/common/test_masking.py`` compares them with it).
    """
    valid = masks.to(th.bool).reshape(logits.shape)
    normalised = masked_log_pmf(logits, valid)
    # Before the entropy, as in categorical_log_prob_entropy
    log_prob = log_prob_of(normalised, actions)
    # MaskableCategorical.entropy: the logits (not clamped) times the probabilities, 0 for masked actions
    p_log_p = th.where(valid, normalised * F.softmax(normalised, dim=-1), th.tensor(0.0, device=logits.device))
    return log_prob, -p_log_p.sum(-1)


def masked_categorical_sample(logits: th.Tensor, masks: th.Tensor, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor]:
    """
    Actions drawn from masked categorical distributions and their log-probabilities, as sb3-contrib's
    ``MaskableCategoricalDistribution`` draws them (``get_actions`` then ``log_prob``): the same actions from the same
    torch generator state.

    :param deterministic: The most probable valid action instead of a draw
    :return: Actions ``(N,)`` (int64) and their log-probabilities ``(N,)``
    """
    normalised = masked_log_pmf(logits, masks.reshape(logits.shape))
    probs = F.softmax(normalised, dim=-1)
    # The distribution's mode, or Categorical.sample: one draw per row with replacement, (N, 1) -> (N,)
    actions = th.argmax(probs, dim=1) if deterministic else th.multinomial(probs, 1, True).reshape(-1)
    return actions, log_prob_of(normalised, actions)
