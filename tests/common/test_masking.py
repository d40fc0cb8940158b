"""The masking hook: the masked categorical's log-probabilities and entropies without sb3-contrib's distribution objects."""

from collections.abc import Callable
from typing import Any

import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomMaskEnv
from sb3_contrib.common.maskable.distributions import MaskableCategorical
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common import evaluation
from sb3_reset_ppo.common.categorical import masked_categorical_log_prob_entropy
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.masking import maskable_categorical
from sb3_reset_ppo.maskable import MaskableMlpLstmPolicy

TOLERANCE = {th.float32: 1e-5, th.float64: 1e-10}


@pytest.mark.parametrize("dtype", [th.float32, th.float64])
@pytest.mark.parametrize("n_actions", [2, 5])
def test_masked_categorical_log_prob_entropy_is_sb3_contribs_maskable_categorical(dtype: th.dtype, n_actions: int) -> None:
    # The same values and gradients as MaskableCategorical, large logits and single valid actions included
    generator = th.Generator().manual_seed(n_actions)
    scale = th.tensor([1.0] * 56 + [80.0] * 8, dtype=dtype)[:, None]
    logits = (th.randn(64, n_actions, generator=generator, dtype=dtype) * scale).requires_grad_(True)
    masks = th.rand(64, n_actions, generator=generator) < 0.6
    actions = th.randint(0, n_actions, (64,), generator=generator)
    # Every row allows its action (the rollout drew it from the masked distribution); a few allow it alone
    masks[th.arange(64), actions] = True
    masks[:4] = False
    masks[th.arange(4), actions[:4]] = True
    weights = th.randn(64, generator=generator, dtype=dtype)
    distribution = MaskableCategorical(logits=logits, masks=masks)
    expected = (distribution.log_prob(actions), distribution.entropy())
    (expected_grad,) = th.autograd.grad((weights * expected[0]).sum() + expected[1].sum(), logits)
    log_prob, entropy = masked_categorical_log_prob_entropy(logits, actions, masks.to(dtype))
    (grad,) = th.autograd.grad((weights * log_prob).sum() + entropy.sum(), logits)
    tolerance = TOLERANCE[dtype]
    for actual, wanted in ((log_prob, expected[0]), (entropy, expected[1]), (grad, expected_grad)):
        assert actual.dtype == dtype
        th.testing.assert_close(actual, wanted, rtol=tolerance, atol=tolerance)
    # The same operations: bit for bit
    assert th.equal(log_prob, expected[0]) and th.equal(entropy, expected[1]) and th.equal(grad, expected_grad)
    # A row with its action alone valid: log-probability 0, entropy 0
    assert bool((log_prob[:4] == 0).all()) and bool((entropy[:4] == 0).all())


def _maskable(action_space: spaces.Space) -> MaskableResetPPO:
    env = make_vec_env(RandomMaskEnv, n_envs=2, seed=0, env_kwargs=dict(action_space=action_space, obs_kind="box"))
    policy_kwargs = {"lstm_hidden_size": 8, "net_arch": [8]}
    model = MaskableResetPPO(
        "MlpLstmPolicy", env, n_steps=16, batch_size=12, n_epochs=1, window_size=6, learning_rate=0.0, seed=0,
        policy_kwargs=policy_kwargs,
    )  # fmt: skip
    model.learn(32)
    return model


def test_window_evaluation_of_a_masked_categorical_builds_no_distribution_object(monkeypatch: pytest.MonkeyPatch) -> None:
    # MaskableResetPPO's Discrete policies take the categorical fast path, with masks and without, as ResetPPO's do;
    # its values are those of the distribution objects (sb3-contrib's MaskableCategorical, torch's Categorical)
    model = _maskable(spaces.Discrete(4))
    assert maskable_categorical(model.policy)
    batches = list(model.rollout_buffer.get(model.batch_size))
    built: list[int] = []
    with monkeypatch.context() as objects:
        objects.setattr(evaluation, "maskable_categorical", lambda policy: False)
        objects.setattr(MaskableCategorical, "entropy", _counted(MaskableCategorical.entropy, built))
        with th.no_grad():
            wanted = [evaluate_windows(model.policy, samples) for samples in batches]
            wanted_unmasked = [evaluate_windows(model.policy, samples._replace(action_masks=None)) for samples in batches]
    assert len(built) == len(batches)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a distribution object was built")

    monkeypatch.setattr(th.distributions.Categorical, "__init__", refuse)
    for samples, (values, log_prob, entropy), unmasked_wanted in zip(batches, wanted, wanted_unmasked, strict=True):
        assert samples.action_masks is not None
        with th.no_grad():
            actual = evaluate_windows(model.policy, samples)
            unmasked = evaluate_windows(model.policy, samples._replace(action_masks=None))
        assert th.equal(actual[0], values) and th.equal(actual[1], log_prob)
        assert entropy is not None and actual[2] is not None and th.equal(actual[2], entropy)
        # Before any update every slot's log-prob is the rollout's, drawn from the masked distribution
        th.testing.assert_close(log_prob, samples.old_log_prob, rtol=1e-5, atol=1e-5)
        # Without masks too (use_masking=False): no distribution object, torch's Categorical's values
        assert unmasked[1].shape == log_prob.shape
        assert all(th.equal(a, b) for a, b in zip(unmasked, unmasked_wanted, strict=True) if a is not None and b is not None)
        # The masks matter: some slot's masked log-prob differs from its unmasked one
        assert not th.equal(unmasked[1], log_prob)


def _counted(method: Callable[..., th.Tensor], calls: list[int]) -> Callable[..., th.Tensor]:
    """``method``, counting its calls in ``calls``."""

    def counted(*args: Any) -> th.Tensor:
        calls.append(1)
        return method(*args)

    return counted


@pytest.mark.parametrize("action_space", [spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3)])
def test_other_maskable_action_spaces_keep_the_distribution(action_space: spaces.Space) -> None:
    # Only Discrete has the fast path (as for ResetPPO's plain categorical)
    assert not maskable_categorical(_maskable(action_space).policy)


def test_reset_ppo_policies_are_not_maskable_categoricals() -> None:
    model = ResetPPO("MlpLstmPolicy", "CartPole-v1", n_steps=16, batch_size=16, policy_kwargs={"lstm_hidden_size": 4})
    assert not maskable_categorical(model.policy)


def test_a_policy_that_builds_its_own_distribution_is_not_a_maskable_categorical() -> None:
    # The fast path computes sb3-contrib's masked categorical over action_net's logits; a subclass that builds its
    # distribution another way keeps its own
    class OwnDistribution(MaskableMlpLstmPolicy):
        def _get_action_dist_from_latent(self, latent_pi: th.Tensor, action_masks: Any = None) -> Any:
            return super()._get_action_dist_from_latent(latent_pi, action_masks)

    model = _maskable(spaces.Discrete(3))
    assert maskable_categorical(model.policy)
    model.policy.__class__ = OwnDistribution
    assert not maskable_categorical(model.policy)
