"""Loss normalisation of the pure window loss, against formulas written out here."""

from typing import Any

import pytest
import torch as th
from helpers import loss_from_fields

from sb3_reset_ppo.common.layout import slot_resets
from sb3_reset_ppo.common.loss import WindowLoss
from sb3_reset_ppo.common.windows import kept_slots, slot_weights


def _inputs(seed: int, n_windows: int = 6, window_size: int = 5) -> dict[str, th.Tensor]:
    generator = th.Generator().manual_seed(seed)

    def randn() -> th.Tensor:
        return th.randn(n_windows, window_size, generator=generator)

    return dict(
        log_prob=randn() * 0.3 - 1,
        old_log_prob=randn() * 0.3 - 1,
        advantages=randn(),
        values=randn(),
        old_values=randn(),
        returns=randn(),
        entropy=randn().abs(),
    )


def _loss(**arguments: Any) -> WindowLoss:
    """
    ``window_ppo_loss`` with this file's usual settings (clip range 0.2, no value clipping, no entropy bonus, value
    coefficient 0.5, no advantage normalisation), any of which ``arguments`` overrides.
    """
    usual: dict[str, Any] = dict(clip_range=0.2, clip_range_vf=None, ent_coef=0.0, vf_coef=0.5, normalize_advantage=False)
    return loss_from_fields(**{**usual, **arguments})


def _terms(inputs: dict[str, th.Tensor], clip: float = 0.2) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    ratio = (inputs["log_prob"] - inputs["old_log_prob"]).exp()
    adv = inputs["advantages"]
    policy = -th.minimum(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip))
    value = (inputs["returns"] - inputs["values"]) ** 2
    return policy, value, -inputs["entropy"]


@pytest.mark.parametrize("seed", range(5))
def test_reset_mode_is_plain_mean_whatever_episode_lengths(seed: int) -> None:
    inputs = _inputs(seed)
    policy, value, entropy = _terms(inputs)
    for density in (0.0, 0.3, 0.9):
        episode_starts = (th.rand(6, 5, generator=th.Generator().manual_seed(seed + 7)) < density).float()
        kept = kept_slots(slot_resets(episode_starts), "reset")
        weights = slot_weights(kept, th.ones(6, 5), "uniform")
        out = _loss(
            **inputs,
            kept=kept,
            weights=weights,
            weighting="uniform",
            ent_coef=0.01,
        )
        th.testing.assert_close(out.policy_loss, policy.mean())
        th.testing.assert_close(out.value_loss, value.mean())
        th.testing.assert_close(out.entropy_loss, entropy.mean())
        th.testing.assert_close(out.loss, policy.mean() + 0.01 * entropy.mean() + 0.5 * value.mean())


@pytest.mark.parametrize("seed", range(5))
def test_uniform_mask_mode_averages_over_all_slots(seed: int) -> None:
    inputs = _inputs(seed)
    policy, value, entropy = _terms(inputs)
    episode_starts = (th.rand(6, 5, generator=th.Generator().manual_seed(seed)) < 0.4).float()
    kept = kept_slots(slot_resets(episode_starts), "mask")
    assert not kept.all()
    weights = slot_weights(kept, th.ones(6, 5), "uniform")
    out = _loss(
        **inputs,
        kept=kept,
        weights=weights,
        weighting="uniform",
    )
    k = kept.float()
    th.testing.assert_close(out.policy_loss, (k * policy).sum() / 30)
    th.testing.assert_close(out.value_loss, (k * value).sum() / 30)
    th.testing.assert_close(out.entropy_loss, (k * entropy).sum() / 30)


@pytest.mark.parametrize("seed", range(5))
def test_importance_weighting_divides_by_sum_of_weights(seed: int) -> None:
    inputs = _inputs(seed)
    policy, value, entropy = _terms(inputs)
    generator = th.Generator().manual_seed(seed)
    kept = th.rand(6, 5, generator=generator) < 0.7
    counts = th.randint(1, 9, (6, 5), generator=generator).float()
    weights = slot_weights(kept, counts, "importance")
    th.testing.assert_close(weights, kept.float() / counts)
    out = _loss(
        **inputs,
        kept=kept,
        weights=weights,
        weighting="importance",
    )
    th.testing.assert_close(out.policy_loss, (weights * policy).sum() / weights.sum())
    th.testing.assert_close(out.value_loss, (weights * value).sum() / weights.sum())
    th.testing.assert_close(out.entropy_loss, (weights * entropy).sum() / weights.sum())


def test_advantage_normalisation_kl_and_clip_fraction_use_kept_slots_only() -> None:
    inputs = _inputs(3)
    kept = th.ones(6, 5, dtype=th.bool)
    kept[:, 3:] = False
    weights = kept.float()
    out = _loss(
        **inputs,
        kept=kept,
        weights=weights,
        weighting="uniform",
        normalize_advantage=True,
    )
    adv = inputs["advantages"][kept]
    normalised = th.zeros(6, 5)
    normalised[kept] = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy, _, _ = _terms({**inputs, "advantages": normalised})
    th.testing.assert_close(out.policy_loss, (weights * policy).sum() / 30)
    log_ratio = (inputs["log_prob"] - inputs["old_log_prob"])[kept]
    th.testing.assert_close(out.approx_kl, ((log_ratio.exp() - 1) - log_ratio).mean())
    th.testing.assert_close(out.clip_fraction, ((log_ratio.exp() - 1).abs() > 0.2).float().mean())


def test_value_clipping_and_missing_entropy() -> None:
    inputs = _inputs(4)
    kept = th.ones(6, 5, dtype=th.bool)
    no_entropy: dict[str, Any] = {**inputs, "entropy": None}
    out = _loss(
        **no_entropy,
        kept=kept,
        weights=kept.float(),
        weighting="uniform",
        clip_range_vf=0.1,
    )
    clipped = inputs["old_values"] + (inputs["values"] - inputs["old_values"]).clamp(-0.1, 0.1)
    th.testing.assert_close(out.value_loss, ((inputs["returns"] - clipped) ** 2).mean())
    # No closed-form entropy: SB3's approximation -mean(-log_prob)
    th.testing.assert_close(out.entropy_loss, inputs["log_prob"].mean())


@pytest.mark.parametrize("seed", range(5))
def test_kept_mean_averages_over_kept_slots_only(seed: int) -> None:
    # sb3-contrib's convention: masked slots do not dilute the loss, whatever the episode lengths
    inputs: dict[str, Any] = _inputs(seed)
    policy, value, entropy = _terms(inputs)
    episode_starts = (th.rand(6, 5, generator=th.Generator().manual_seed(seed)) < 0.4).float()
    kept = kept_slots(slot_resets(episode_starts), "mask")
    assert not kept.all()
    weights = slot_weights(kept, th.ones(6, 5), "kept_mean")
    th.testing.assert_close(weights, kept.float())
    out = _loss(**inputs, kept=kept, weights=weights, weighting="kept_mean")
    th.testing.assert_close(out.policy_loss, policy[kept].mean())
    th.testing.assert_close(out.value_loss, value[kept].mean())
    th.testing.assert_close(out.entropy_loss, entropy[kept].mean())
    # The control: "uniform" on the same slots divides by all B * W slots
    uniform = _loss(**inputs, kept=kept, weights=weights, weighting="uniform")
    th.testing.assert_close(uniform.policy_loss, policy[kept].sum() / 30)
    assert not th.allclose(uniform.policy_loss, out.policy_loss)


@pytest.mark.parametrize("seed", range(5))
def test_importance_weighting_normalises_advantages_with_weighted_statistics(seed: int) -> None:
    inputs = _inputs(seed)
    generator = th.Generator().manual_seed(seed + 11)
    kept = th.rand(6, 5, generator=generator) < 0.7
    weights = slot_weights(kept, th.randint(1, 9, (6, 5), generator=generator).float(), "importance")

    def policy_loss_at_ratio_one(advantages: th.Tensor) -> float:
        # With ratio 1 (log_prob == old_log_prob) the per-slot surrogate is -advantage
        out = _loss(
            **{**inputs, "log_prob": inputs["old_log_prob"], "advantages": advantages},
            kept=kept,
            weights=weights,
            weighting="importance",
            normalize_advantage=True,
        )
        return float(out.policy_loss)

    # The weighted mean of the normalised advantages is 0: the policy loss at ratio 1 vanishes
    assert abs(policy_loss_at_ratio_one(inputs["advantages"] + 3.0)) < 1e-6
    # Written out: weighted mean and unbiased weighted variance
    adv = inputs["advantages"]
    mean = (weights * adv).sum() / weights.sum()
    variance = (weights * (adv - mean) ** 2).sum() / (weights.sum() - (weights**2).sum() / weights.sum())
    normalised = (adv - mean) / (variance.sqrt() + 1e-8)
    policy, _, _ = _terms({**inputs, "advantages": normalised})
    out = _loss(
        **inputs,
        kept=kept,
        weights=weights,
        weighting="importance",
        normalize_advantage=True,
    )
    th.testing.assert_close(out.policy_loss, (weights * policy).sum() / weights.sum())
    # The control: unweighted statistics over kept slots give a non-zero weighted mean
    unweighted = (adv - adv[kept].mean()) / (adv[kept].std() + 1e-8)
    assert abs(float((weights * unweighted).sum() / weights.sum())) > 1e-3


@pytest.mark.parametrize("weighting", ["uniform", "importance", "kept_mean"])
def test_dropped_slots_cannot_poison_the_loss(weighting: str) -> None:
    # A dropped slot whose ratio overflows (old log-prob -1e4) gives no NaN, in the loss or in the gradient
    inputs: dict[str, Any] = _inputs(6)
    log_prob = inputs["log_prob"].clone().requires_grad_(True)
    old_log_prob = inputs["old_log_prob"].clone()
    kept = th.ones(6, 5, dtype=th.bool)
    kept[2, 3:] = False
    old_log_prob[2, 4] = -1e4
    out = _loss(
        **{**inputs, "log_prob": log_prob, "old_log_prob": old_log_prob},
        kept=kept,
        weights=kept.float(),
        weighting=weighting,
        ent_coef=0.01,
    )
    (grad,) = th.autograd.grad(out.loss, log_prob)
    assert th.isfinite(out.loss) and th.isfinite(grad).all()
    assert th.all(grad[2, 3:] == 0)


def test_a_single_kept_slot_is_not_normalised() -> None:
    # As SB3 (no normalisation of a single sample): its advantage keeps its sign and size
    inputs: dict[str, Any] = _inputs(7)
    kept = th.zeros(6, 5, dtype=th.bool)
    kept[0, 0] = True
    same_policy = {**inputs, "log_prob": inputs["old_log_prob"]}
    out = _loss(**same_policy, kept=kept, weights=kept.float(), weighting="kept_mean", normalize_advantage=True)
    th.testing.assert_close(out.policy_loss, -inputs["advantages"][0, 0])


def test_short_minibatch_is_optimised_at_the_rollouts_scale_and_logged_as_its_own_mean() -> None:
    # An epoch's short minibatch (4 real slots of a batch_size of 8) is divided by 8 in the optimised loss,
    # so each of its slots weighs what a full minibatch's does, and logged as the mean over its own 4 slots (as SB3)
    generator = th.Generator().manual_seed(0)
    shape = (1, 4)
    fields = {name: th.randn(shape, generator=generator) for name in ("log_prob", "old_log_prob", "advantages")}
    fields.update(values=th.randn(shape, generator=generator), old_values=th.zeros(shape), returns=th.ones(shape))
    kept = th.ones(shape, dtype=th.bool)
    common = dict(entropy=-fields["log_prob"], kept=kept, weights=kept.float(), weighting="uniform", clip_range=0.2,
                  clip_range_vf=None, ent_coef=0.1, vf_coef=0.5, normalize_advantage=False)  # fmt: skip
    own = loss_from_fields(**fields, **common)
    short = loss_from_fields(**fields, **common, uniform_normaliser=8.0)
    th.testing.assert_close(short.loss, own.loss / 2)
    for name in ("policy_loss", "value_loss", "entropy_loss"):
        th.testing.assert_close(getattr(short, name), getattr(own, name))
