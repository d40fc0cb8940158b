"""MaskableResetPPO: ResetPPO with invalid-action masking, following sb3-contrib's MaskablePPO conventions."""

from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from sb3_contrib.common.maskable.utils import is_masking_supported
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, PyTorchObs
from stable_baselines3.common.vec_env import VecEnv

from sb3_reset_ppo.common.spaces import check_action_masks
from sb3_reset_ppo.common.type_aliases import Memory, NumpyObs
from sb3_reset_ppo.maskable import policies, trxl_policies
from sb3_reset_ppo.maskable.buffers import (
    MaskableAttentionWindowRolloutBuffer,
    MaskableDictAttentionWindowRolloutBuffer,
    MaskableDictWindowRolloutBuffer,
    MaskableWindowRolloutBuffer,
)
from sb3_reset_ppo.maskable.policies import ActionMaskingPolicy, MaskableRecurrentPolicy, check_maskable_action_space
from sb3_reset_ppo.reset_ppo.reset_ppo import ResetPPO

SelfMaskableResetPPO = TypeVar("SelfMaskableResetPPO", bound="MaskableResetPPO")


class MaskableResetPPO(ResetPPO):
    """
    ResetPPO with invalid-action masking, following sb3-contrib's ``MaskablePPO``: the env's ``action_masks()`` give the
    valid actions of every step, stored with the step and applied in every window that holds it. Evaluate with
    :func:`sb3_reset_ppo.common.maskable_evaluation.evaluate_policy` (``docs/guide/masking.md``).

    :param policy: A policy name (``"MlpLstmPolicy"``, ..., ``"MultiInputTrXLPolicy"``) or a maskable policy class
    :param env: The environment to learn from (if registered in Gym, can be str), with an ``action_masks()`` method
    :param args: The other arguments of :class:`~sb3_reset_ppo.ResetPPO`, in its order (``kwargs``: by name)
    """

    # ResetPPO's policy names, each for its maskable version
    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        name: getattr(policies, f"Maskable{name}", None) or getattr(trxl_policies, f"Maskable{name}")
        for name in ResetPPO.policy_aliases
    }
    window_buffer_class = MaskableWindowRolloutBuffer
    dict_window_buffer_class = MaskableDictWindowRolloutBuffer
    attention_buffer_class = MaskableAttentionWindowRolloutBuffer
    dict_attention_buffer_class = MaskableDictAttentionWindowRolloutBuffer
    # Typed as ResetPPO types it (the attention policies are read by _attention_policy)
    policy: MaskableRecurrentPolicy
    rollout_buffer: MaskableWindowRolloutBuffer | MaskableDictWindowRolloutBuffer

    def __init__(self, policy: str | type[RecurrentActorCriticPolicy], env: GymEnv | str, *args: Any, **kwargs: Any) -> None:
        self.use_masking = True  # whether the current learn() collects masks (set by learn; collect_rollouts reads it)
        super().__init__(policy, env, *args, **kwargs)

    def _setup_model(self) -> None:
        # Before the policy is built, with errors that name the space or the policy
        check_maskable_action_space(self.action_space)
        if not (isinstance(self.policy_class, type) and issubclass(self.policy_class, ActionMaskingPolicy)):
            raise ValueError(
                "MaskableResetPPO needs a maskable recurrent policy (LSTM, GRU or attention): one of "
                f"{sorted(self.policy_aliases)} or a subclass of their classes (sb3_reset_ppo.maskable.policies), got "
                f"{self.policy_class!r}"
            )
        super()._setup_model()

    def _act(
        self, env: VecEnv, obs_tensor: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates, dict[str, Any]]:
        """One step of the policy during collection with the env's checked action masks, stored with the step."""
        if not self.use_masking:
            return super()._act(env, obs_tensor, lstm_states, episode_starts)
        # sb3-contrib's get_action_masks(env) without its np.stack: a wrong shape then names its env
        action_masks = check_action_masks(
            env.env_method("action_masks"),
            self.action_space,
            env.num_envs,
            f"rollout step {self.rollout_buffer.pos} (counted from 0; the model's num_timesteps: {self.num_timesteps})",
        )
        actions, values, log_probs, lstm_states = self.policy(
            obs_tensor, lstm_states, episode_starts, action_masks=action_masks
        )
        return actions, values, log_probs, lstm_states, {"action_masks": action_masks}

    def learn(  # type: ignore[override]  # MaskablePPO.learn's order: use_masking before progress_bar
        self: SelfMaskableResetPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "MaskableResetPPO",
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
    ) -> SelfMaskableResetPPO:
        """
        Learn as ``ResetPPO.learn`` (same arguments), with ``MaskablePPO``'s ``use_masking``.

        :param use_masking: Whether to collect the env's action masks and train with them
        :return: The trained model
        """
        if not isinstance(use_masking, bool):
            raise TypeError(f"use_masking must be a bool, got {use_masking!r}")
        if use_masking and self.env is not None and not is_masking_supported(self.env):
            raise ValueError(
                "use_masking=True but the environment does not provide action_masks(): wrap it in sb3-contrib's "
                "ActionMasker (sb3_contrib.common.wrappers.ActionMasker), or learn with use_masking=False"
            )
        self.use_masking = use_masking
        return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)

    def predict(
        self,
        observation: NumpyObs,
        state: Memory = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Memory]:
        """
        Get the policy action from an observation and the memory, with only the valid actions (``MaskablePPO``'s).

        :param state: The memory returned by the previous call (``None``: zeros)
        :param action_masks: Which actions are valid, ``(n_envs, mask_dims)`` or ``(mask_dims,)``; ``None``: every action
        :return: The action and the next memory
        """
        at = f"predict() (the model's num_timesteps: {self.num_timesteps})"
        return self.policy.predict(observation, state, episode_start, deterministic, action_masks=action_masks, masks_at=at)

    def _excluded_save_params(self) -> list[str]:
        # Set by each learn()
        return [*super()._excluded_save_params(), "use_masking"]
