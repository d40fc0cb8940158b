"""
Window rollout buffers for attention memory: each step's block inputs stored once, and the rows of a minibatch reading
them by index (``docs/design.md``, "Attention memory").
"""

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates

from sb3_reset_ppo.common.attention import attention_mask
from sb3_reset_ppo.common.buffers import DictWindowRolloutBuffer, WindowRolloutBuffer, WindowSampler
from sb3_reset_ppo.common.settings import WindowSettings
from sb3_reset_ppo.common.type_aliases import AttentionRows, WindowRolloutBufferSamples
from sb3_reset_ppo.common.utils import relative_distance


class AttentionWindowSampler(WindowSampler):
    """
    The window sampler with the stored block inputs of the rollout on the device: each row's ``K`` memory positions
    are gathered by index (:class:`~sb3_reset_ppo.common.type_aliases.AttentionRows`).

    :param buffer: The full attention window buffer
    """

    def __init__(self, buffer: "_AttentionBufferMixin") -> None:
        super().__init__(buffer)  # type: ignore[arg-type]  # a window buffer, through the mixin's subclasses
        self.memory_length = buffer.memory_shape[0]
        # (E, K + T, L, D) -> (E * (K + T), L, D): env-major stored sequences
        self.block_inputs = {
            suffix: th.as_tensor(inputs.reshape(-1, *inputs.shape[2:]), device=self.device)
            for suffix, inputs in buffer.block_inputs.items()
        }
        # The block inputs recorded during the rollout; `block_inputs` may be refreshed
        self.recorded_block_inputs = dict(self.block_inputs)
        # (T, E) -> (E, T) -> (E * T,): env-major as the flat steps
        self.counts = th.as_tensor(buffer.memory_counts.swapaxes(0, 1).reshape(-1), device=self.device)

    def _refresh_memory(self, policy: RecurrentActorCriticPolicy, n_steps: int) -> th.Tensor:
        """
        Recompute every step's block inputs with the policy's current parameters, without gradient, one chunk of
        ``window_size`` steps of every env at a time: each chunk a row whose memory is the refreshed steps before it
        (the memory entering the rollout stays as recorded).

        :param policy: The attention policy (in evaluation mode: ``refresh_memory`` sets it)
        :param n_steps: Steps per env
        :return: ``||refreshed - recorded|| / ||recorded||`` over every step's block inputs, actor and critic
        """
        attention: Any = policy
        memory_length, n_envs = self.memory_length, self.n_envs
        chunk = self.settings.window_size
        # (L, D): one step's block inputs
        step_shape = self.recorded_block_inputs["pi"].shape[1:]
        # (E * T,) -> (E, T)
        episode_starts = self.data["episode_starts"].reshape(n_envs, n_steps)
        counts = self.counts.reshape(n_envs, n_steps)
        with th.no_grad():
            features = dict(zip(("pi", "vf"), attention._features(self.observations), strict=True))
            transformers = {"pi": attention.trxl_actor, "vf": attention.trxl_critic}
            for suffix in self.block_inputs:
                # (E * (K + T), L, D) -> (E, K + T, L, D)
                refreshed = self.recorded_block_inputs[suffix].reshape(n_envs, memory_length + n_steps, *step_shape).clone()
                # (E * T, F) -> (E, T, F)
                step_features = features[suffix].reshape(n_envs, n_steps, -1)
                for first in range(0, n_steps, chunk):
                    last = min(first + chunk, n_steps)
                    allowed = attention_mask(episode_starts[:, first:last], counts[:, first], memory_length)
                    # The memory of steps first - K .. first - 1 (positions first .. first + K - 1), refreshed already
                    memory = refreshed[:, first : first + memory_length]
                    _, inputs = transformers[suffix](step_features[:, first:last], memory, allowed)
                    refreshed[:, memory_length + first : memory_length + last] = inputs
                # (E, K + T, L, D) -> (E * (K + T), L, D)
                self.block_inputs[suffix] = refreshed.reshape(-1, *step_shape)
        # The last step's inputs are never read (nor recorded): left out of the distance
        read = th.ones(n_envs, memory_length + n_steps, dtype=th.bool, device=self.device)
        read[:, -1] = False
        # (E, K + T) -> (E * (K + T),)
        read = read.reshape(-1)
        return relative_distance(
            (self.block_inputs[suffix][read] for suffix in self.block_inputs),
            (self.recorded_block_inputs[suffix][read] for suffix in self.block_inputs),
        )

    def samples(
        self, starts: np.ndarray, lengths: np.ndarray, window_firsts: np.ndarray, normaliser: float
    ) -> WindowRolloutBufferSamples:
        samples = super().samples(starts, lengths, window_firsts, normaliser)
        env, step = np.divmod(starts, self.n_steps)
        # (B,) and (K,) -> (B, K): the stored positions of steps t - K .. t - 1 (position K + s holds step s)
        positions = (env * (self.memory_length + self.n_steps) + step)[:, None] + np.arange(self.memory_length)
        index = self._to_device(positions)
        rows = AttentionRows(
            memory_pi=self.block_inputs["pi"][index],
            memory_vf=self.block_inputs["vf"][index] if "vf" in self.block_inputs else None,
            counts=self.counts[self._to_device(starts)],
        )
        return samples._replace(attention=rows)


class _AttentionBufferMixin:
    """
    Storage of attention memory for both window buffers (placed before them): per env, the ``K + T`` positions of
    block inputs (the memory entering the rollout, then each step's), and the count entering every step.
    """

    buffer_size: int
    n_envs: int
    pos: int
    memory_shape: tuple[int, int, int]
    critic_memory: bool
    block_inputs: dict[str, np.ndarray]
    memory_counts: np.ndarray

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        *,
        memory_shape: tuple[int, int, int],
        critic_memory: bool,
        window_settings: WindowSettings,
        consecutive_windows: int = 1,
        seed: int | None = None,
    ) -> None:
        # Before the base's constructor, whose reset allocates the storage
        self.memory_shape, self.critic_memory = memory_shape, critic_memory
        # No recurrent memory: sb3-contrib's memory arrays are allocated empty (zero layers and units)
        super().__init__(  # type: ignore[call-arg]
            buffer_size,
            observation_space,
            action_space,
            (buffer_size, 0, n_envs, 0),
            device,
            gae_lambda,
            gamma,
            n_envs,
            window_settings=window_settings,
            consecutive_windows=consecutive_windows,
            seed=seed,
            recurrent_layer_type="gru",
        )
        self.state_names: tuple[str, ...] = ()

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        memory_length, n_layers, dim = self.memory_shape
        suffixes = ("pi", "vf") if self.critic_memory else ("pi",)
        self.block_inputs = {
            suffix: np.zeros((self.n_envs, memory_length + self.buffer_size, n_layers, dim), dtype=np.float32)
            for suffix in suffixes
        }
        self.memory_counts = np.zeros((self.buffer_size, self.n_envs), dtype=np.int64)

    def add(self, *args: Any, lstm_states: RNNStates, **kwargs: Any) -> None:
        """
        Add one step (SB3's ``add``) and record its memory: ``lstm_states`` is the memory entering the step, actor and
        critic, each ``(memory (K, E, L, D), count (1, E))``. Its newest position is the previous step's block inputs;
        at the rollout's first step, all ``K`` positions are stored (the memory entering the rollout).
        """
        memory_length = self.memory_shape[0]
        for suffix, state in zip(("pi", "vf"), lstm_states, strict=True):
            if len(state) != 2:
                raise ValueError(
                    f"this buffer stores attention memory (memory, count), got a state tuple of {len(state)} tensors"
                )
            if suffix not in self.block_inputs:
                continue
            memory = state[0].detach().cpu().numpy()
            if self.pos == 0:
                # (K, E, L, D) -> (E, K, L, D)
                self.block_inputs[suffix][:, :memory_length] = memory.swapaxes(0, 1)
            else:
                self.block_inputs[suffix][:, memory_length + self.pos - 1] = memory[-1]
        # (1, E) -> (E,)
        self.memory_counts[self.pos] = lstm_states.pi[1].detach().cpu().numpy()[0]
        # SB3's add: the base below sb3-contrib's recurrent buffer, which would store LSTM memory
        if isinstance(self, RecurrentDictRolloutBuffer):
            super(RecurrentDictRolloutBuffer, self).add(*args, **kwargs)
        else:
            assert isinstance(self, RecurrentRolloutBuffer)
            super(RecurrentRolloutBuffer, self).add(*args, **kwargs)


class AttentionWindowRolloutBuffer(_AttentionBufferMixin, WindowRolloutBuffer):  # type: ignore[misc]  # add takes memory
    """
    :class:`~sb3_reset_ppo.common.buffers.WindowRolloutBuffer` for attention memory: stores each step's block inputs
    once, and each minibatch's rows read their memory positions by index (``samples.attention``).

    :param buffer_size: Steps per env (``n_steps``)
    :param observation_space: Observation space
    :param action_space: Action space
    :param device: PyTorch device
    :param gae_lambda: GAE lambda
    :param gamma: Discount factor
    :param n_envs: Number of parallel environments
    :param memory_shape: ``(memory_length, n_layers, dim)`` of the transformer
    :param critic_memory: Whether the critic has a transformer of its own (its block inputs are stored too)
    :param window_settings: The window settings
    :param consecutive_windows: Consecutive windows of one env kept together in the shuffled order
    :param seed: Seed of the generator that orders the windows
    """

    sampler_class = AttentionWindowSampler


class DictAttentionWindowRolloutBuffer(_AttentionBufferMixin, DictWindowRolloutBuffer):  # type: ignore[misc]  # add takes memory
    """:class:`AttentionWindowRolloutBuffer` for ``Dict`` observation spaces; parameters are the same."""

    sampler_class = AttentionWindowSampler
