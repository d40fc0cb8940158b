"""
Invalid masks and action spaces: an error that names the env, the step and the expected shape.

All-False masks (or an all-False piece of a MultiDiscrete or MultiBinary mask) used to sample an invalid action without a
word, masks of the wrong length to fail with torch's ``RuntimeError: shape '[1, 5]' is invalid``, and ``MultiBinary([2,
2])`` actions with SB3's bare ``AssertionError``: each is now a ``ValueError``, wherever the masks enter (collection in
``learn()``, ``predict``, the masked ``evaluate_policy``) and when the model is built.
"""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.maskable_evaluation import evaluate_policy
from sb3_reset_ppo.common.spaces import check_action_masks

TINY: dict[str, Any] = dict(n_steps=8, batch_size=8, n_epochs=1, seed=0, policy_kwargs=dict(lstm_hidden_size=8, net_arch=[8]))

# A mask with no valid action (of one sub-action), the sub-action it names, and the space
ALL_FALSE = {
    "discrete": (spaces.Discrete(3), [False, False, False], "allows no action ("),
    "multidiscrete-piece": (spaces.MultiDiscrete([2, 3]), [True, False, False, False, False], "sub-action 1 (entries 2:5)"),
    "multibinary-piece": (spaces.MultiBinary(2), [True, True, False, False], "sub-action 1 (entries 2:4)"),
}


class ScheduledMaskEnv(RandomEpisodeEnv):
    """
    ``RandomEpisodeEnv`` (episodes of 1 to 4 steps) whose ``action_masks()`` allow every action until the env has
    taken ``bad_after`` steps (over all its episodes), and return ``bad_mask`` from then on.

    :param action_space: The action space
    :param bad_mask: The mask returned from step ``bad_after`` on; ``None``: every action, always
    :param bad_after: Steps taken before ``bad_mask`` is returned
    """

    def __init__(self, action_space: spaces.Space, bad_mask: list[bool] | None = None, bad_after: int = 0) -> None:
        super().__init__(action_space=action_space, max_length=4)
        self.bad_mask = bad_mask
        self.bad_after = bad_after
        self.steps = 0

    def action_masks(self) -> np.ndarray:
        if self.bad_mask is not None and self.steps >= self.bad_after:
            return np.asarray(self.bad_mask)
        n = {"Discrete": 3, "MultiDiscrete": 5, "MultiBinary": 4}[type(self.action_space).__name__]
        return np.ones(n, dtype=bool)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        return super().step(action)


def _vec_env(action_space: spaces.Space, bad_mask: list[bool] | None, bad_after: int) -> DummyVecEnv:
    """Two envs: env 0's masks are always valid, env 1's are ``bad_mask`` from its step ``bad_after`` on."""
    return DummyVecEnv([lambda: ScheduledMaskEnv(action_space), lambda: ScheduledMaskEnv(action_space, bad_mask, bad_after)])


def _assert_names(error: pytest.ExceptionInfo[ValueError], *parts: str) -> None:
    message = str(error.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize("case", sorted(ALL_FALSE))
def test_all_false_mask_in_learn_names_env_and_rollout_step(case: str) -> None:
    space, bad_mask, what = ALL_FALSE[case]
    model = MaskableResetPPO("MlpLstmPolicy", _vec_env(space, bad_mask, bad_after=3), **TINY)
    with pytest.raises(ValueError, match="env 1's mask allows no action") as error:
        model.learn(16)
    _assert_names(error, what, "rollout step 3 ", "num_timesteps: 6")
    # The masks' shape was right: the message does not send the user to check it
    assert "expected shape" not in str(error.value)
    # Refused before the step: env 1 took 3 steps, all with valid masks
    assert model.num_timesteps == 6


def test_wrong_length_mask_in_learn_names_env_and_rollout_step() -> None:
    # Every env's mask is too long: torch's "shape '[2, 3]' is invalid for input of size 10" before
    env = DummyVecEnv([lambda: ScheduledMaskEnv(spaces.Discrete(3), [True] * 5)] * 2)
    model = MaskableResetPPO("MlpLstmPolicy", env, **TINY)
    with pytest.raises(ValueError, match=r"got shape \(2, 5\).*expected shape \(2, 3\)") as error:
        model.learn(16)
    _assert_names(error, "env 0's mask has shape (5,)", "rollout step 0 ", "num_timesteps: 0", "Discrete(3)")
    # One env's mask is too long from its step 2 on: numpy's "all input arrays must have the same shape" before
    model = MaskableResetPPO("MlpLstmPolicy", _vec_env(spaces.Discrete(3), [True] * 5, bad_after=2), **TINY)
    with pytest.raises(ValueError, match=r"env 1's mask has shape \(5,\) where env 0's has \(3,\)") as error:
        model.learn(16)
    _assert_names(error, "rollout step 2 ", "num_timesteps: 4", "expected shape (2, 3)")


@pytest.mark.parametrize("case", sorted(ALL_FALSE))
def test_all_false_mask_in_predict_names_env_and_num_timesteps(case: str) -> None:
    space, bad_mask, what = ALL_FALSE[case]
    model = MaskableResetPPO("MlpLstmPolicy", _vec_env(space, None, 0), **TINY)
    model.num_timesteps = 40
    obs = np.zeros((3, 3), dtype=np.float32)
    masks = np.ones((3, len(bad_mask)), dtype=bool)
    masks[2] = bad_mask
    for deterministic in (True, False):
        with pytest.raises(ValueError, match="env 2's mask allows no action") as error:
            model.predict(obs, None, None, deterministic, action_masks=masks)
        _assert_names(error, what, "predict()", "num_timesteps: 40")
        assert "expected shape" not in str(error.value)  # the shape was right
    # One observation and its mask
    with pytest.raises(ValueError, match="env 0's mask allows no action"):
        model.predict(obs[0], None, None, True, action_masks=np.asarray(bad_mask))
    # The policy's own predict names itself
    with pytest.raises(ValueError, match=r"action_masks at policy\.predict\(\): env 2's mask allows no action"):
        model.policy.predict(obs, None, None, True, action_masks=masks)


def test_wrong_length_mask_in_predict_names_env_and_expected_shape() -> None:
    model = MaskableResetPPO("MlpLstmPolicy", _vec_env(spaces.Discrete(3), None, 0), **TINY)
    obs = np.zeros((2, 3), dtype=np.float32)
    # torch's "shape '[1, 3]' is invalid for input of size 5" before
    with pytest.raises(ValueError, match=r"got shape \(5,\).*expected shape \(1, 3\) or \(3,\)") as error:
        model.predict(obs[0], action_masks=np.ones(5, dtype=bool))
    _assert_names(error, "env 0's mask is cut or extended", "predict() (the model's num_timesteps: 0)")
    with pytest.raises(ValueError, match=r"got shape \(2, 5\).*expected shape \(2, 3\) or \(6,\) flat") as error:
        model.predict(obs, action_masks=np.ones((2, 5), dtype=bool))
    _assert_names(error, "env 0's mask has shape (5,)")
    # The transposed masks of 3 envs have the right size but not the right shape (sb3-contrib reshapes them silently)
    with pytest.raises(ValueError, match=r"got shape \(3, 3\).*expected shape \(2, 3\)") as error:
        model.predict(obs, action_masks=np.ones((3, 3), dtype=bool))
    _assert_names(error, "more masks than envs (env 2 does not exist)")
    with pytest.raises(ValueError, match=r"masks of 1 env\(s\) for 2: env 1 has none"):
        model.predict(obs, action_masks=np.ones((1, 3), dtype=bool))


@pytest.mark.parametrize("model_class", [MaskableResetPPO, MaskablePPO])
@pytest.mark.parametrize("case", sorted(ALL_FALSE))
def test_all_false_mask_in_evaluate_policy_names_env_and_evaluation_step(case: str, model_class: type) -> None:
    space, bad_mask, what = ALL_FALSE[case]
    policy = "MlpLstmPolicy" if model_class is MaskableResetPPO else "MlpPolicy"
    model = model_class(policy, _vec_env(space, None, 0), **{**TINY, "policy_kwargs": dict(net_arch=[8])})
    with pytest.raises(ValueError, match="env 1's mask allows no action") as error:
        evaluate_policy(model, _vec_env(space, bad_mask, bad_after=2), n_eval_episodes=6, warn=False)
    _assert_names(error, what, "evaluation step 2 ")
    assert "expected shape" not in str(error.value)  # the shape was right


def test_wrong_length_mask_in_evaluate_policy_names_env_and_evaluation_step() -> None:
    model = MaskableResetPPO("MlpLstmPolicy", _vec_env(spaces.Discrete(3), None, 0), **TINY)
    # numpy's "all input arrays must have the same shape" (sb3-contrib's get_action_masks) before
    with pytest.raises(ValueError, match=r"env 1's mask has shape \(5,\) where env 0's has \(3,\)") as error:
        evaluate_policy(model, _vec_env(spaces.Discrete(3), [True] * 5, bad_after=2), n_eval_episodes=6, warn=False)
    _assert_names(error, "evaluation step 2 ", "expected shape (2, 3)")
    # torch's "shape '[2, 3]' is invalid for input of size 10" before
    env = DummyVecEnv([lambda: ScheduledMaskEnv(spaces.Discrete(3), [True] * 5)] * 2)
    with pytest.raises(ValueError, match=r"got shape \(2, 5\).*expected shape \(2, 3\)") as error:
        evaluate_policy(model, env, n_eval_episodes=2, warn=False)
    _assert_names(error, "evaluation step 0 ", "env 0's mask has shape (5,)")


@pytest.mark.parametrize("model_class", [ResetPPO, MaskableResetPPO])
@pytest.mark.parametrize(
    ("space", "flat"),
    [
        (spaces.MultiBinary([2, 2]), "MultiBinary(4)"),
        (spaces.MultiBinary([3]), "MultiBinary(3)"),
        (spaces.MultiDiscrete(np.array([[2, 3], [2, 3]])), "MultiDiscrete([2, 3, 2, 3])"),
    ],
    ids=["multibinary-2x2", "multibinary-list", "multidiscrete-2d"],
)
def test_multidimensional_action_spaces_are_refused_at_construction(model_class: type, space: spaces.Space, flat: str) -> None:
    # SB3's "AssertionError: Multi-dimensional MultiBinary((2, 2)) action space is not supported" (MultiDiscrete:
    # torch's TypeError) before, as sb3-contrib's RecurrentPPO and MaskablePPO still do
    env = DummyVecEnv([lambda: ScheduledMaskEnv(spaces.Discrete(3))])
    env.action_space = space
    with pytest.raises(ValueError, match="action_space must be") as error:
        model_class("MlpLstmPolicy", env, **TINY)
    _assert_names(error, repr(space), flat)


@pytest.mark.parametrize("case", sorted(ALL_FALSE))
def test_check_action_masks_accepts_sb3_contribs_layouts(case: str) -> None:
    space, bad_mask, _ = ALL_FALSE[case]
    rng = np.random.default_rng(0)
    dims = len(bad_mask)
    masks = rng.random((4, dims)) < 0.7
    masks[:, [0, -1]] = True  # a valid action in every piece
    expected = masks.copy()
    for layout in (masks, masks.reshape(-1), list(masks), masks.astype(np.float32), th.as_tensor(masks)):
        checked = check_action_masks(layout, space, 4, "a test")
        assert checked.dtype == bool
        np.testing.assert_array_equal(checked, expected)
    # One env: its mask alone, or as a row
    np.testing.assert_array_equal(check_action_masks(masks[0], space, 1, "a test"), expected[:1])
    np.testing.assert_array_equal(check_action_masks(list(masks[0]), space, 1, "a test"), expected[:1])
    # Any env with an all-False piece is named: the first one
    masks[[1, 3]] = bad_mask
    with pytest.raises(ValueError, match="action_masks at a test: env 1's mask allows no action"):
        check_action_masks(masks, space, 4, "a test")


def test_the_masked_evaluation_has_one_name_and_a_deprecated_alias() -> None:
    import sb3_reset_ppo.maskable
    from sb3_reset_ppo.common import maskable_evaluation

    for name in ("evaluate_policy", "MaskableEvalCallback"):
        assert name not in sb3_reset_ppo.maskable.__all__
        with pytest.warns(DeprecationWarning, match=rf"use sb3_reset_ppo\.common\.maskable_evaluation\.{name}"):
            alias = getattr(sb3_reset_ppo.maskable, name)
        assert alias is getattr(maskable_evaluation, name)
    with pytest.raises(AttributeError):
        sb3_reset_ppo.maskable.no_such_name  # noqa: B018
