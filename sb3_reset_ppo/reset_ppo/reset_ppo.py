import io
import math
import pathlib
from collections.abc import Iterable
from copy import deepcopy
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, PyTorchObs, Schedule
from stable_baselines3.common.utils import FloatSchedule, explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from sb3_reset_ppo.common.attention_buffers import AttentionWindowRolloutBuffer, DictAttentionWindowRolloutBuffer
from sb3_reset_ppo.common.buffers import DictWindowRolloutBuffer, WindowRolloutBuffer
from sb3_reset_ppo.common.checkpoints import check_checkpoint, check_memory_kind, checkpoint_algorithm, legacy_settings
from sb3_reset_ppo.common.epochs import epoch_slot_range, minibatch_slots
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.loss import LossSettings, SlotTargets, WindowLoss, window_ppo_loss
from sb3_reset_ppo.common.memory import burned_in_memory
from sb3_reset_ppo.common.recurrent import actor_critic_features, memory_state_names, recurrent_layer_type
from sb3_reset_ppo.common.settings import (
    DEFAULT_BOUNDARY,
    DEFAULT_WEIGHTING,
    DEFAULT_WINDOW_COVERAGE,
    DEFAULT_WINDOW_SIZE,
    DEFAULT_WINDOW_STRIDE,
    WindowSettings,
    check_non_negative_int,
    check_positive_int,
)
from sb3_reset_ppo.common.spaces import check_action_space, check_observation_space
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples
from sb3_reset_ppo.common.unroll import check_supported_rnn
from sb3_reset_ppo.common.utils import ThreadCountWarning, machine_load, relative_distance, thread_advice, warn_user
from sb3_reset_ppo.reset_ppo import policies, trxl_policies
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

SelfResetPPO = TypeVar("SelfResetPPO", bound="ResetPPO")


class NonFiniteTrainingError(FloatingPointError):
    """A loss term or the gradient of a minibatch was NaN or infinite; the optimizer was not stepped."""


def _check_consecutive_windows(value: object) -> None:
    if value != "auto":
        check_positive_int("consecutive_windows", value, "; or 'auto'")


def _prefer_foreach(optimizer: th.optim.Optimizer) -> None:
    """
    Step all parameters with torch's ``_foreach`` kernels (the same arithmetic, no Python loop) where the optimizer
    leaves ``foreach`` at ``None``, which torch resolves to them on CUDA only; other settings are left as they are.
    """
    for group in optimizer.param_groups:
        if "foreach" in group and group["foreach"] is None and not group.get("fused") and not group.get("differentiable"):
            group["foreach"] = True


class ResetPPO(RecurrentPPO):
    """
    Recurrent PPO trained on fixed-length windows of the rollout that start at a random phase each epoch, with
    reset-and-continue at episode boundaries inside a window (``docs/algorithm.md``). A drop-in for sb3-contrib's
    ``RecurrentPPO``: same policies, arguments and logged keys.

    :param policy: The policy model to use: an LSTM, GRU or attention (``MlpTrXLPolicy``, ...) policy name, or a
        ``RecurrentActorCriticPolicy`` (with ``nn.LSTM`` or ``nn.GRU`` layers) or ``TrXLActorCriticPolicy`` subclass
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, it can be a function of the current progress remaining (from 1 to 0)
    :param n_steps: The number of steps to run for each environment per update
    :param batch_size: Minibatch size in transitions, as in ``RecurrentPPO`` (``None``: the whole epoch)
    :param n_epochs: Number of epochs; with the default ``window_stride`` an epoch is one pass over the data
    :param gamma: Discount factor
    :param gae_lambda: Factor for trade-off of bias vs variance for Generalized Advantage Estimator
    :param clip_range: Clipping parameter, it can be a function of the current progress remaining (from 1 to 0).
    :param clip_range_vf: Clipping parameter for the value function, it can be a function of the current progress
        remaining (from 1 to 0); ``None`` (default): no clipping of the value function.
    :param normalize_advantage: Whether to normalize or not the advantage (over the weighted slots)
    :param ent_coef: Entropy coefficient for the loss calculation
    :param vf_coef: Value function coefficient for the loss calculation
    :param max_grad_norm: The maximum value for the gradient clipping
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE)
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE
    :param target_kl: Limit the KL divergence between updates; by default there is no limit
    :param stats_window_size: Number of episodes the rollout logging averages success rate, length and reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: the verbosity level: 0 no output, 1 info, 2 debug
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run.
    :param window_size: Steps per training window (at most ``n_steps``), ``"batch"`` for ``min(batch_size, n_steps)``
        or ``"rollout"`` for ``n_steps``
    :param boundary: ``"reset"`` to reset the memory at an episode start inside a window and train on, or ``"mask"``
        to drop every slot after a window's first episode end
    :param weighting: How slots weigh in the loss: ``"uniform"``, ``"kept_mean"`` (sb3-contrib's) or ``"importance"``
    :param window_stride: Steps between the starts of an epoch's windows (``None``: ``window_size``)
    :param window_coverage: ``"full"`` for every window that meets the rollout, clipped to it, or ``"inside"``
    :param consecutive_windows: Consecutive windows of one env kept together in the shuffled order (or ``"auto"``)
    :param memory_refresh: Recompute the stored memory with the current parameters every this many epochs (0: never)
    :param burn_in: Steps run without gradient before each window to give its first memory (0: the stored memory)
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLstmPolicy": policies.MlpLstmPolicy,
        "CnnLstmPolicy": policies.CnnLstmPolicy,
        "MultiInputLstmPolicy": policies.MultiInputLstmPolicy,
        "MlpGruPolicy": policies.MlpGruPolicy,
        "CnnGruPolicy": policies.CnnGruPolicy,
        "MultiInputGruPolicy": policies.MultiInputGruPolicy,
        "MlpTrXLPolicy": trxl_policies.MlpTrXLPolicy,
        "CnnTrXLPolicy": trxl_policies.CnnTrXLPolicy,
        "MultiInputTrXLPolicy": trxl_policies.MultiInputTrXLPolicy,
    }
    rollout_buffer: WindowRolloutBuffer | DictWindowRolloutBuffer
    policy: RecurrentActorCriticPolicy
    window_buffer_class: ClassVar[type[WindowRolloutBuffer]] = WindowRolloutBuffer
    dict_window_buffer_class: ClassVar[type[DictWindowRolloutBuffer]] = DictWindowRolloutBuffer
    attention_buffer_class: ClassVar[type[AttentionWindowRolloutBuffer]] = AttentionWindowRolloutBuffer
    dict_attention_buffer_class: ClassVar[type[DictAttentionWindowRolloutBuffer]] = DictAttentionWindowRolloutBuffer
    # The memory after the last collected step (sb3-contrib declares it None until _setup_model sets it)
    _last_lstm_states: RNNStates  # type: ignore[assignment]

    def __init__(
        self,
        policy: str | type[RecurrentActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 128,
        batch_size: int | None = 128,
        n_epochs: int = 10,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule = 0.2,
        clip_range_vf: float | Schedule | None = None,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        window_size: int | str = DEFAULT_WINDOW_SIZE,
        boundary: str = DEFAULT_BOUNDARY,
        weighting: str = DEFAULT_WEIGHTING,
        window_stride: int | None = DEFAULT_WINDOW_STRIDE,
        window_coverage: str = DEFAULT_WINDOW_COVERAGE,
        consecutive_windows: int | str = "auto",
        memory_refresh: int = 0,
        burn_in: int = 0,
        _init_setup_model: bool = True,
    ):
        if isinstance(policy, type) and not issubclass(policy, (RecurrentActorCriticPolicy, TrXLActorCriticPolicy)):
            raise ValueError(
                f"policy must be a RecurrentActorCriticPolicy subclass (LSTM, GRU), a TrXLActorCriticPolicy subclass "
                f"(attention) or one of {sorted(self.policy_aliases)}, got {policy.__name__}"
            )
        if isinstance(policy, str) and policy not in self.policy_aliases:
            raise ValueError(
                f"policy {policy!r} is unknown to ResetPPO, a recurrent algorithm: use one of "
                f"{sorted(self.policy_aliases)} (or a RecurrentActorCriticPolicy or TrXLActorCriticPolicy subclass)"
            )
        self.window_size = window_size
        self.boundary = boundary
        self.weighting = weighting
        self.window_stride = window_stride
        self.window_coverage = window_coverage
        # Validated with the window settings: consecutive_windows, memory_refresh and burn_in shape each epoch's windows
        self.consecutive_windows, self.memory_refresh, self.burn_in = consecutive_windows, memory_refresh, burn_in
        # Before the env is built and before SB3's own checks, so that an error names the window argument
        self._validate_window_arguments(n_steps, batch_size)
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            batch_size=batch_size,
            n_epochs=n_epochs,
            gamma=gamma,
            gae_lambda=gae_lambda,
            clip_range=clip_range,
            clip_range_vf=clip_range_vf,
            normalize_advantage=normalize_advantage,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            target_kl=target_kl,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        if _init_setup_model:
            self._setup_model()

    def _check_settings(self) -> None:
        if not (
            isinstance(self.policy_class, type)
            and issubclass(self.policy_class, (RecurrentActorCriticPolicy, TrXLActorCriticPolicy))
        ):
            raise ValueError(
                f"policy must be a RecurrentActorCriticPolicy subclass (LSTM, GRU) or a TrXLActorCriticPolicy subclass "
                f"(attention), got {self.policy_class!r}"
            )
        check_action_space(self.action_space)
        if issubclass(self.policy_class, RecurrentActorCriticPolicy):  # the attention policies' extractors differ
            alias = next((name for name, cls in self.policy_aliases.items() if cls is self.policy_class), None)
            check_observation_space(self.observation_space, self.policy_class, self.policy_kwargs, alias)
        # load() sets the saved arguments after __init__: they are validated here if they differ from __init__'s
        self._validate_window_arguments(self.n_steps, self.batch_size)
        if isinstance(self.clip_range_vf, (float, int)) and self.clip_range_vf <= 0:
            raise ValueError(f"clip_range_vf must be positive or None (no value clipping), got {self.clip_range_vf!r}")

    def _validate_window_arguments(self, n_steps: int, batch_size: int | None) -> None:
        """Validate the window arguments into one :class:`WindowSettings` (and the others), once per set of values."""
        arguments = (self.window_size, self.boundary, self.weighting, self.window_stride, self.window_coverage)
        others = (self.consecutive_windows, self.memory_refresh, self.burn_in)
        key = (*arguments, n_steps, batch_size, *others)
        if getattr(self, "_validated_arguments", None) == key:
            return
        self._window_settings = WindowSettings.validated(*arguments, n_steps, batch_size)
        _check_consecutive_windows(self.consecutive_windows)
        check_non_negative_int("memory_refresh", self.memory_refresh)
        check_non_negative_int("burn_in", self.burn_in)
        self._validated_arguments = key

    @property
    def window_settings(self) -> WindowSettings:
        """The model's window settings, validated when the model was set up (``window_size`` and the stride resolved)."""
        return self._window_settings

    @property
    def window_length(self) -> int:
        """The window length in steps: ``window_size``, with ``"batch"`` and ``"rollout"`` resolved (see ``window_size``)."""
        return self._window_settings.window_size

    def _excluded_save_params(self) -> list[str]:
        # Rebuilt from the saved arguments by _setup_model; whether this process was told about its threads
        return [*super()._excluded_save_params(), "_window_settings", "_validated_arguments", "_warned_about_threads"]

    def _warn_about_threads(self) -> None:
        """Warn once per model when ``learn()`` runs with more torch threads than is fastest (``thread_advice``)."""
        if getattr(self, "_warned_about_threads", False):
            return
        convolutional = any(isinstance(module, th.nn.Conv2d) for module in self.policy.modules())
        attention = self._attention_policy()
        width = self.policy.lstm_actor.hidden_size if attention is None else attention.trxl_dim
        advice = thread_advice(
            type(self).__name__, th.get_num_threads(), width, self.device.type, convolutional, machine_load()
        )
        if advice is not None:
            self._warned_about_threads = True
            warn_user(advice, ThreadCountWarning)

    def _attention_policy(self) -> TrXLActorCriticPolicy | None:
        """The policy, where it has attention memory; else ``None`` (an LSTM or GRU policy)."""
        policy: Any = self.policy
        return policy if isinstance(policy, TrXLActorCriticPolicy) else None

    def _setup_model(self) -> None:
        self._check_settings()
        if issubclass(self.policy_class, TrXLActorCriticPolicy):
            self._setup_attention_model()
        else:
            self._setup_recurrent_model()
        # A loaded checkpoint continues the window generator where the saved model left it
        state = getattr(self, "_window_generator_state", None)
        if state is not None:
            self.rollout_buffer.generator.bit_generator.state = state
        self._warn_about_batch_size()

    def _setup_recurrent_model(self) -> None:
        """``_setup_model`` for an LSTM or GRU policy: ``RecurrentPPO``'s, with the window buffer."""
        super()._setup_model()
        check_supported_rnn(self.policy.lstm_actor)
        layer_type = recurrent_layer_type(self.policy.lstm_actor)
        if layer_type == "gru":
            # sb3-contrib sets up an LSTM's (hidden, cell) memory; a GRU's is (hidden,)
            self._last_lstm_states = RNNStates(self._last_lstm_states.pi[:1], self._last_lstm_states.vf[:1])
        buffer_cls: type[WindowRolloutBuffer | DictWindowRolloutBuffer] = (
            self.dict_window_buffer_class if isinstance(self.observation_space, spaces.Dict) else self.window_buffer_class
        )
        self.rollout_buffer = buffer_cls(
            self.n_steps,
            self.observation_space,
            self.action_space,
            self.rollout_buffer.hidden_state_shape,
            self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
            window_settings=self._window_settings,
            consecutive_windows=self._resolved_consecutive_windows(),
            seed=self.seed,
            burn_in=self.burn_in,
            recurrent_layer_type=layer_type,
        )

    def _setup_attention_model(self) -> None:
        """``_setup_model`` for an attention policy: ``RecurrentPPO``'s, with attention memory and its buffer."""
        if self.burn_in:
            raise ValueError(
                f"burn_in={self.burn_in!r} is not implemented for attention memory ({self.policy_class.__name__}) yet: "
                "use burn_in=0, or memory_refresh (docs/design.md, 'Attention memory', says how it will apply)"
            )
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        policy = self.policy_class(
            self.observation_space, self.action_space, self.lr_schedule, use_sde=self.use_sde, **self.policy_kwargs
        )
        assert isinstance(policy, TrXLActorCriticPolicy)
        policy = policy.to(self.device)
        # ResetPPO's policy is typed as sb3-contrib's recurrent one; the attention paths read it by _attention_policy
        self.policy = policy  # type: ignore[assignment]
        self._last_lstm_states = policy.initial_state(self.n_envs)
        dict_observations = isinstance(self.observation_space, spaces.Dict)
        buffer_cls: type[AttentionWindowRolloutBuffer | DictAttentionWindowRolloutBuffer] = (
            self.dict_attention_buffer_class if dict_observations else self.attention_buffer_class
        )
        self.rollout_buffer = buffer_cls(
            self.n_steps,
            self.observation_space,
            self.action_space,
            self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
            memory_shape=policy.memory_shape,
            critic_memory=policy.trxl_critic is not None,
            window_settings=self._window_settings,
            consecutive_windows=self._resolved_consecutive_windows(),
            seed=self.seed,
        )
        self.clip_range = FloatSchedule(self.clip_range)
        if self.clip_range_vf is not None:
            self.clip_range_vf = FloatSchedule(self.clip_range_vf)

    def _warn_about_batch_size(self) -> None:
        """Warn, as SB3's PPO does, when ``batch_size`` does not fit the epochs (``docs/guide/parameters.md``)."""
        if self.batch_size is None:
            return
        settings, length = self._window_settings, self.window_length
        full = minibatch_slots(self.batch_size, length)
        assert full is not None
        fewest, most = epoch_slot_range(self.n_steps, self.n_envs, settings)
        described = (
            f"n_envs={self.n_envs}, n_steps={self.n_steps}, window_size={length}, window_stride={settings.window_stride}, "
            f"window_coverage={settings.window_coverage!r}"
        )
        # Every unit of the epoch's order holds window_size transitions (docs/design.md, "Epochs")
        whole_units = settings.window_coverage == "inside" or (
            settings.stride(self.n_steps) == length and self.n_steps % length == 0
        )
        cut = (
            "minibatch edges cut windows, and the later piece of a cut window starts from the memory stored for its first "
            "step (as RecurrentPPO cuts sequences at minibatch edges)"
        )
        if self.batch_size < length:
            warn_user(
                f"batch_size={self.batch_size} is smaller than window_size={length}: each minibatch holds {length} "
                f"transitions (one window's worth), more than batch_size"
            )
        elif full < most and self.batch_size % length != 0:
            warn_user(f"batch_size={self.batch_size} is not a multiple of window_size={length}: {cut}")
        elif full < most and (not whole_units or fewest != most or most % full):
            why = (
                "the windows clipped at the rollout's ends hold fewer transitions"
                if not whole_units
                else "an epoch whose transitions are not a multiple of it is cut into minibatches from a random place"
            )
            warn_user(f"batch_size={self.batch_size} is a multiple of window_size={length}, but {why}: {cut}")
        if full >= most:
            if full > most:
                warn_user(
                    f"batch_size={self.batch_size} is more than an epoch holds ({most} transitions with {described}): "
                    "every epoch is one minibatch"
                )
            return
        if fewest == most and most % full:
            warn_user(
                f"You have specified a mini-batch size of {self.batch_size}, but because an epoch holds {most} "
                f"transitions ({described}), each epoch trains {most // full} minibatch(es) of {full} transitions and "
                f"leaves {most % full} out, each transition with the same probability (every minibatch is full: a "
                "shorter one would weigh more after gradient clipping). We recommend a batch_size that is a factor of "
                "the epoch's transitions."
            )
        elif fewest != most:
            short = (
                f"; an epoch of fewer than {full} transitions is trained whole, as one minibatch whose loss is divided "
                "by the same number as every other minibatch's"
                if fewest < full
                else ""
            )
            warn_user(
                f"An epoch holds {fewest} to {most} transitions with these settings ({described}: the number of windows "
                f"depends on the epoch's phases): an epoch of at least {full} transitions that are not a multiple of "
                f"{full} leaves the remainder out, each transition with the same probability (every minibatch is full: "
                f"a shorter one would weigh more after gradient clipping){short}"
            )

    def _resolved_consecutive_windows(self) -> int:
        """``consecutive_windows``, ``"auto"`` resolved: ``ceil(window_size / window_stride)`` for images, else 1."""
        if self.consecutive_windows != "auto":
            return int(self.consecutive_windows)
        subspaces = (
            self.observation_space.spaces.values()
            if isinstance(self.observation_space, spaces.Dict)
            else [self.observation_space]
        )
        has_images = any(is_image_space(space, check_channels=False) for space in subspaces)
        settings = self._window_settings
        return -(-settings.window_size // settings.stride(self.n_steps)) if has_images else 1

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed the pseudo-random generators (python, numpy, pytorch, gym, action_space, windows); None does nothing."""
        if seed is None:
            return
        super().set_random_seed(seed)
        if isinstance(getattr(self, "rollout_buffer", None), (WindowRolloutBuffer, DictWindowRolloutBuffer)):
            self.rollout_buffer.seed(seed)

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        """
        Collect ``n_rollout_steps`` per env into the window rollout buffer: ``RecurrentPPO``'s collection (same arguments),
        with memory of any cell; False if the callback stopped the rollout.
        """
        assert isinstance(rollout_buffer, (WindowRolloutBuffer, DictWindowRolloutBuffer))
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)  # eval mode (dropout, batch norm) during collection
        n_steps = 0
        rollout_buffer.reset()
        if self.use_sde:
            self.policy.reset_noise(env.num_envs)
        callback.on_rollout_start()
        lstm_states = deepcopy(self._last_lstm_states)

        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                episode_starts = th.tensor(self._last_episode_starts, dtype=th.float32, device=self.device)
                action_tensor, values, log_probs, lstm_states, stored = self._act(env, obs_tensor, lstm_states, episode_starts)
            actions = action_tensor.cpu().numpy()
            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)
            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                # (n_envs,) -> (n_envs, 1)
                actions = actions.reshape(-1, 1)
            self._bootstrap_truncations(rewards, dones, infos, lstm_states)
            rollout_buffer.add(
                self._last_obs,
                actions,
                rewards,
                self._last_episode_starts,
                values,
                log_probs,
                lstm_states=self._last_lstm_states,
                **stored,
            )
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
            self._last_lstm_states = lstm_states

        with th.no_grad():
            # Value of the step after the rollout
            episode_starts = th.tensor(dones, dtype=th.float32, device=self.device)
            values = self.policy.predict_values(obs_as_tensor(new_obs, self.device), lstm_states.vf, episode_starts)  # type: ignore[arg-type]
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.on_rollout_end()
        return True

    def _act(
        self, env: VecEnv, obs_tensor: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates, dict[str, Any]]:
        """
        One step of the policy during collection, and what the buffer stores with it besides (here nothing).

        :param env: The training environment (``MaskableResetPPO`` reads its action masks)
        :return: ``(actions, values, log_probs, lstm_states, stored)``
        """
        actions, values, log_probs, lstm_states = self.policy(obs_tensor, lstm_states, episode_starts)
        return actions, values, log_probs, lstm_states, {}

    def _bootstrap_truncations(self, rewards: np.ndarray, dones: np.ndarray, infos: list[dict], memory: RNNStates) -> None:
        """Add ``gamma * V(terminal observation)`` to the reward of each truncated episode (SB3's timeout handling)."""
        for idx, done in enumerate(dones):
            if done and infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                terminal_obs = self.policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    # (n_layers, n_envs, H) -> (n_layers, 1, H): this env's critic memory
                    terminal_memory = tuple(state[:, idx : idx + 1].contiguous() for state in memory.vf)
                    not_start = th.tensor([False], dtype=th.float32, device=self.device)
                    terminal_value = self.policy.predict_values(terminal_obs, terminal_memory, not_start)[0]  # type: ignore[arg-type]
                rewards[idx] += self.gamma * terminal_value

    def _minibatch_loss(
        self, samples: WindowRolloutBufferSamples, clip_range: float, clip_range_vf: float | None
    ) -> WindowLoss:
        """Evaluate the policy on a minibatch of windows and return the PPO loss (see docs/design.md)."""
        attention = self._attention_policy()
        if attention is None:
            values, log_prob, entropy = evaluate_windows(self.policy, samples)
        else:
            values, log_prob, entropy = attention.evaluate_windows(samples)
        settings = LossSettings(
            self.rollout_buffer.weighting, clip_range, clip_range_vf, self.ent_coef, self.vf_coef, self.normalize_advantage
        )
        return window_ppo_loss(log_prob, values, entropy, SlotTargets.of(samples), settings)

    def train(self) -> None:
        """Update policy using the currently gathered rollout buffer: per epoch, windows at a fresh random phase."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        _prefer_foreach(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = None if self.clip_range_vf is None else self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]

        # Listed once: gradient clipping walks the modules for them otherwise, every minibatch
        parameters = list(self.policy.parameters())
        all_losses: list[WindowLoss] = []
        epoch_losses: list[WindowLoss] = []
        staleness: list[th.Tensor] = []
        burn_in_staleness: list[th.Tensor] = []
        continue_training = True
        for epoch in range(self.n_epochs):
            if self.memory_refresh and epoch > 0 and epoch % self.memory_refresh == 0:
                staleness.append(self.rollout_buffer.refresh_memory(self.policy))
            epoch_losses = []
            for minibatch, samples in enumerate(self.rollout_buffer.get(self.batch_size)):
                if self.burn_in and epoch > 0 and minibatch == 0:
                    burn_in_staleness.append(self._burn_in_staleness(samples))
                losses = self._minibatch_loss(samples, clip_range, clip_range_vf)
                # Kept for logging only: no graph held beyond this minibatch
                epoch_losses.append(losses._replace(loss=losses.loss.detach()))
                if self.target_kl is not None:
                    approx_kl = losses.approx_kl.item()
                    if approx_kl > 1.5 * self.target_kl:
                        continue_training = False
                        if self.verbose >= 1:
                            print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl:.2f}")
                        break
                self.policy.optimizer.zero_grad()
                losses.loss.backward()
                grad_norm = th.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm)
                # One host read per minibatch: no step for a non-finite loss or gradient, nor for a minibatch that
                # trains no slot (its step would move the parameters on the optimizer's momentum alone)
                if not self._check_finite(losses, grad_norm, samples.kept, epoch, minibatch):
                    epoch_losses.pop()  # nothing trained: not logged either (its means over kept slots would be zeros)
                    continue
                self.policy.optimizer.step()
            all_losses.extend(epoch_losses)
            self._n_updates += 1
            if not continue_training:
                break

        self._record_train_logs(all_losses, epoch_losses, clip_range, clip_range_vf)
        if staleness:
            self.logger.record("train/memory_staleness", th.stack(staleness).mean().item())
        if burn_in_staleness:
            self.logger.record("train/burn_in_staleness", th.stack(burn_in_staleness).mean().item())
        # The device copy of the rollout is not needed while the next rollout is collected
        self.rollout_buffer.release()

    def _burn_in_staleness(self, samples: WindowRolloutBufferSamples) -> th.Tensor:
        """``||burned-in - recorded|| / ||recorded||`` of the actor memory entering one minibatch's windows."""
        assert samples.burn_in is not None
        self.policy.set_training_mode(False)  # a measurement: no dropout, no batch-norm statistics updated
        with th.no_grad():
            pi_features, _ = actor_critic_features(self.policy, samples.observations)
            burned = burned_in_memory(self.policy.lstm_actor, pi_features, samples.burn_in, samples.burn_in.memory.pi)
            recorded = self.rollout_buffer.sampler().recorded_memory
            names = memory_state_names(self.rollout_buffer.recurrent_layer_type)
            staleness = relative_distance(burned, (recorded[f"{name}_pi"][samples.window_starts] for name in names))
        self.policy.set_training_mode(True)
        return staleness

    def _check_finite(self, losses: WindowLoss, grad_norm: th.Tensor, kept: th.Tensor, epoch: int, minibatch: int) -> bool:
        """Raise :class:`NonFiniteTrainingError` for a non-finite loss or gradient; else whether any slot is kept."""
        terms = {
            "policy_gradient_loss": losses.policy_loss,
            "value_loss": losses.value_loss,
            "entropy_loss": losses.entropy_loss,
            "gradient norm": grad_norm,
        }
        finite, any_kept = th.stack([th.isfinite(th.stack(list(terms.values()))).all(), kept.any()]).tolist()
        if finite:
            return bool(any_kept)
        values = {name: float(value) for name, value in terms.items()}
        bad = [name for name, value in values.items() if not math.isfinite(value)]
        raise NonFiniteTrainingError(
            f"non-finite {' and '.join(bad)} in update {self._n_updates + 1} (epoch {epoch + 1} of {self.n_epochs}, "
            f"minibatch {minibatch + 1}, {self.num_timesteps} timesteps); the optimizer was not stepped. "
            f"Values: {', '.join(f'{name}={value}' for name, value in values.items())}. Likely causes: NaN or infinite "
            "observations or rewards, or exploding values or gradients (unnormalised large rewards: try VecNormalize; "
            "a learning rate too high). Wrap the env in stable_baselines3.common.vec_env.VecCheckNan(env, "
            "raise_exception=True) to find the step that produced a NaN."
        )

    def _record_train_logs(
        self, all_losses: list[WindowLoss], last_epoch: list[WindowLoss], clip_range: float, clip_range_vf: float | None
    ) -> None:
        # One host transfer for the whole update: (n_minibatches, n_terms)
        means = th.stack([th.stack(losses) for losses in all_losses]).mean(dim=0).tolist() if all_losses else None
        if means is not None:
            terms = dict(zip(WindowLoss._fields, means, strict=True))
            self.logger.record("train/entropy_loss", terms["entropy_loss"])
            self.logger.record("train/policy_gradient_loss", terms["policy_loss"])
            self.logger.record("train/value_loss", terms["value_loss"])
            self.logger.record("train/clip_fraction", terms["clip_fraction"])
            # The last minibatch's loss, from its logged parts (means over its real slots, as SB3 logs it)
            last = all_losses[-1]
            self.logger.record(
                "train/loss", (last.policy_loss + self.ent_coef * last.entropy_loss + self.vf_coef * last.value_loss).item()
            )
        if last_epoch:
            # As SB3: approx_kl over the last epoch's minibatches
            self.logger.record("train/approx_kl", th.stack([losses.approx_kl for losses in last_epoch]).mean().item())
        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())
        self.logger.record("train/explained_variance", explained_var)
        for key, value in self.rollout_buffer.window_diagnostics().items():
            self.logger.record(key, value)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)

    def save(
        self,
        path: str | pathlib.Path | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """
        Save the model as SB3's ``save`` does (same arguments), with the state of the generator that orders the windows
        (a loaded model continues it).
        """
        self._window_generator_state = self.rollout_buffer.generator.bit_generator.state
        super().save(path, exclude, include)

    def set_parameters(
        self,
        load_path_or_dict: str | pathlib.Path | io.BufferedIOBase | dict[str, Any],
        exact_match: bool = True,
        device: th.device | str = "auto",
    ) -> None:
        """
        Load parameters from a checkpoint or a dict, as SB3's ``set_parameters`` (tensors only, nothing unpickled).
        Parameters of attention memory into an LSTM or GRU policy, or the reverse, are refused with a ``ValueError``
        that names both policies.

        :param load_path_or_dict: A checkpoint (a path or an open binary file) or a dict of state dicts, by attribute
        :param exact_match: Whether every parameter of the model must be set (missing ones raise)
        """
        params: Any = load_path_or_dict
        source = "parameters"
        if not isinstance(load_path_or_dict, dict):
            _, params, _ = load_from_zip_file(load_path_or_dict, device=device, load_data=False)
            source = f"a {checkpoint_algorithm(load_path_or_dict)} checkpoint"
        alias = next(
            (name for name, cls in self.policy_aliases.items() if cls is type(self.policy)), type(self.policy).__name__
        )
        check_memory_kind(self.policy.state_dict(), alias, params.get("policy", {}), source)
        super().set_parameters(params, exact_match, device)

    @classmethod
    def load(
        cls: type[SelfResetPPO],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> SelfResetPPO:
        """
        Load a checkpoint saved by ``ResetPPO`` or ``RecurrentPPO`` (SB3's ``load``, after checking the file); settings
        a ``ResetPPO`` checkpoint lacks take the values it trained with.

        Checkpoints are zip files that SB3 unpickles: load only files you trust. For an untrusted file, build
        the model yourself and call ``model.set_parameters(path)``, which reads tensors only.

        :param path: Path to the checkpoint (``.zip`` may be omitted) or an open binary file; the next arguments are SB3's
        :param kwargs: Attributes to override on load (e.g. ``window_size=8``, ``batch_size=32``)
        :return: The loaded model
        """
        check_checkpoint(path)
        # Settings the checkpoint lacks: how it trained, unless kwargs say otherwise
        kwargs = {**legacy_settings(path), **kwargs}
        return super().load(path, env, device, custom_objects, print_system_info, force_reset, **kwargs)

    def learn(
        self: SelfResetPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "ResetPPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfResetPPO:
        self._warn_about_threads()
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
