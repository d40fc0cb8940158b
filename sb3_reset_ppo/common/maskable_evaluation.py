"""Masked evaluation that keeps a recurrent policy's memory (sb3-contrib's resets it every step; docs/guide/masking.md)."""

from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import sb3_contrib.common.maskable.callbacks as upstream_callbacks
import sb3_contrib.common.maskable.evaluation as upstream_evaluation
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback as UpstreamMaskableEvalCallback
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate_policy
from stable_baselines3.common.type_aliases import PolicyPredictor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from sb3_reset_ppo.common.spaces import check_action_masks
from sb3_reset_ppo.common.type_aliases import Memory, NumpyObs
from sb3_reset_ppo.common.utils import swapped_names

__all__ = ["MaskableEvalCallback", "MaskablePredictor", "evaluate_policy"]


class MaskablePredictor(Protocol):
    """What :func:`evaluate_policy` needs of a model: ``MaskablePPO``'s ``predict`` (``MaskableResetPPO`` has it)."""

    def predict(
        self,
        observation: NumpyObs,
        state: Memory = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Memory]: ...


class _EnvMasksPredictor:
    """``model`` as SB3's ``evaluate_policy`` calls it (``predict`` without masks), given ``env``'s checked action masks."""

    def __init__(self, model: MaskablePredictor, env: VecEnv) -> None:
        self.model = model
        self.env = env
        # Calls of predict so far: the evaluation step (counted from 0) that an invalid mask's error names
        self.step = 0

    def predict(
        self, observation: NumpyObs, state: Memory = None, episode_start: np.ndarray | None = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Memory]:
        # sb3-contrib's get_action_masks(env) without its np.stack: a wrong shape then names its env
        action_masks = check_action_masks(
            self.env.env_method("action_masks"),
            self.env.action_space,
            self.env.num_envs,
            f"evaluation step {self.step} (counted from 0)",
        )
        self.step += 1
        return self.model.predict(
            observation, state=state, episode_start=episode_start, deterministic=deterministic, action_masks=action_masks
        )


def evaluate_policy(
    model: MaskablePredictor,
    env: gym.Env | VecEnv,
    n_eval_episodes: int = 10,
    deterministic: bool = True,
    render: bool = False,
    callback: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    reward_threshold: float | None = None,
    return_episode_rewards: bool = False,
    warn: bool = True,
    use_masking: bool = True,
) -> tuple[float, float] | tuple[list[float], list[int]]:
    """
    Run the policy for ``n_eval_episodes`` episodes with invalid-action masks, keeping its recurrent state.

    sb3-contrib's masked ``evaluate_policy``'s signature and return, with the state ``model.predict`` returns passed back
    at the next step; invalid masks raise a ``ValueError`` (:func:`~sb3_reset_ppo.common.spaces.check_action_masks`).

    .. note::
        Without a ``Monitor`` wrapper, rewards and episode lengths are counted as ``env.step`` returns them, after
        any wrapper that changes them; wrap the env with ``Monitor`` first to count the original ones.

    :param model: The agent to evaluate: anything with ``MaskablePPO``'s ``predict`` (any ``predict`` without masking)
    :param env: The env, or a ``VecEnv``; with ``use_masking`` it must have an ``action_masks()`` method
    :param use_masking: Whether to pass the env's action masks to ``predict``
    :return: Mean and standard deviation of the episode returns, or the episode returns and lengths (in steps)
    """
    if n_eval_episodes < 1:
        raise ValueError(f"n_eval_episodes must be at least 1, got {n_eval_episodes}")
    if use_masking and not is_masking_supported(env):
        raise ValueError(
            "use_masking=True needs an env with an action_masks() method (sb3-contrib's ActionMasker wrapper adds one), "
            f"got {env!r}"
        )
    if not isinstance(env, VecEnv):
        gym_env = env
        env = DummyVecEnv([lambda: gym_env])
    # Without masking SB3's evaluate_policy calls predict as RecurrentPPO and ResetPPO take it
    predictor: PolicyPredictor = _EnvMasksPredictor(model, env) if use_masking else model
    rewards, lengths = sb3_evaluate_policy(
        predictor, env, n_eval_episodes, deterministic, render, callback, return_episode_rewards=True, warn=warn
    )
    assert isinstance(rewards, list) and isinstance(lengths, list)
    # Python numbers (SB3 gives NumPy ones without a Monitor)
    episode_rewards, episode_lengths = [float(r) for r in rewards], [int(n) for n in lengths]
    mean_reward = float(np.mean(episode_rewards))
    std_reward = float(np.std(episode_rewards))
    # Checked here rather than by SB3's assert, which python -O removes
    if reward_threshold is not None and not mean_reward > reward_threshold:
        raise AssertionError(f"Mean reward below threshold: {mean_reward:.2f} < {reward_threshold:.2f}")
    if return_episode_rewards:
        return episode_rewards, episode_lengths
    return mean_reward, std_reward


class MaskableEvalCallback(UpstreamMaskableEvalCallback):
    """
    sb3-contrib's ``MaskableEvalCallback`` (same arguments, logged keys and saved files) evaluating with
    :func:`evaluate_policy`, which keeps recurrent memory; with ``use_masking``, ``eval_env`` must have an
    ``action_masks()`` method.
    """

    def _on_step(self) -> bool:
        # sb3-contrib's _on_step calls the module-level name evaluate_policy of its callbacks module
        swap = {(upstream_callbacks, "evaluate_policy"): (upstream_evaluation.evaluate_policy, evaluate_policy)}
        with swapped_names(swap, "sb3_reset_ppo's MaskableEvalCallback must be updated for this sb3-contrib", reentrant=True):
            return super()._on_step()
