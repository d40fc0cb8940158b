"""Rollout buffers that yield minibatches of fixed-length windows, gathered by index."""

import itertools
from collections.abc import Generator
from typing import Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates

from sb3_reset_ppo.common.epochs import plan_epoch, uniform_normaliser
from sb3_reset_ppo.common.layout import ResetLayout, is_episode_start, plan_reset_steps, slot_resets
from sb3_reset_ppo.common.memory import rnn_step_states
from sb3_reset_ppo.common.recurrent import RecurrentLayerType, actor_critic_features, critic_variant, memory_state_names
from sb3_reset_ppo.common.settings import (
    Boundary,
    Coverage,
    Weighting,
    WindowSettings,
    check_non_negative_int,
    check_positive_int,
    effective_stride,
    n_window_starts,
)
from sb3_reset_ppo.common.type_aliases import BurnIn, WindowRolloutBufferSamples
from sb3_reset_ppo.common.utils import relative_distance
from sb3_reset_ppo.common.windows import RolloutWindowStats, kept_slots, real_slots, slot_weights


class WindowSampler:
    """
    The stored rollout as env-major flat tensors on the buffer's device, built once per rollout, and the window
    minibatches gathered from them by index; index plans are made on the host, so nothing is read back from the device.
    """

    def __init__(self, buffer: "_WindowBufferMixin") -> None:
        n_envs, n_steps, device = buffer.n_envs, buffer.buffer_size, buffer.device
        self.n_envs, self.n_steps, self.device = n_envs, n_steps, device
        self.settings = buffer.window_settings
        # The tensors of the memory: ("hidden", "cell") for an LSTM, ("hidden",) for a GRU
        self.state_names = buffer.state_names
        self.burn_in = buffer.burn_in
        self.consecutive_windows = buffer.consecutive_windows
        arrays = buffer._sampled_arrays()

        def flat_host(array: np.ndarray) -> np.ndarray:
            # (n_steps, n_envs, *shape) -> (n_envs, n_steps, *shape) -> (n_envs * n_steps, *shape)
            swapped = array.swapaxes(0, 1)
            return swapped.reshape(n_envs * n_steps, *swapped.shape[2:])

        def flat(array: np.ndarray) -> th.Tensor:
            return th.as_tensor(flat_host(array), device=device)

        def flat_memory(array: np.ndarray) -> th.Tensor:
            # (n_steps, n_layers, n_envs, hidden) -> (n_envs, n_steps, n_layers, hidden)
            #   -> (n_envs * n_steps, n_layers, hidden)
            per_env = array.transpose(2, 0, 1, 3)
            return th.as_tensor(per_env.reshape(n_envs * n_steps, *per_env.shape[2:]), device=device)

        self.data = {key: flat(value) for key, value in arrays.items()}
        self.host_episode_starts = flat_host(arrays["episode_starts"])
        self.observations: th.Tensor | dict[str, th.Tensor]
        if isinstance(buffer.observations, dict):
            self.observations = {key: flat(value) for key, value in buffer.observations.items()}
        else:
            self.observations = flat(buffer.observations)
        self.memory = {
            f"{name}_{suffix}": flat_memory(getattr(buffer, f"{name}_states_{suffix}"))
            for name in self.state_names
            for suffix in ("pi", "vf")
        }
        # The memory recorded during the rollout; `memory` may be refreshed (see `refresh_memory`)
        self.recorded_memory = dict(self.memory)
        # (n_envs * n_steps,) -> (n_envs, n_steps)
        per_env_starts = self.data["episode_starts"].reshape(n_envs, n_steps)
        self.stats = RolloutWindowStats(per_env_starts, self.settings)
        self.diagnostics = self.stats.diagnostics(per_env_starts)
        # Episode starts up to each flat step (host, inclusive): mask mode drops a row whose window reset before it
        self.host_start_count = np.cumsum(is_episode_start(self.host_episode_starts))

    def refresh_memory(self, policy: RecurrentActorCriticPolicy) -> th.Tensor:
        """
        Recompute the memory entering every step with the policy's current parameters; windows then start from it.

        :return: Staleness of the recorded memory, ``||refreshed - recorded|| / ||recorded||``, a 0-d tensor
        """
        n_steps = self.n_steps
        # As during collection: no dropout, no batch-norm statistics updated (restored afterwards)
        training = policy.training
        policy.set_training_mode(False)
        try:
            return self._refresh_memory(policy, n_steps)
        finally:
            policy.set_training_mode(training)

    def _refresh_memory(self, policy: RecurrentActorCriticPolicy, n_steps: int) -> th.Tensor:
        with th.no_grad():
            pi_features, vf_features = actor_critic_features(policy, self.observations)
            # (n_envs * n_steps,) -> (n_envs, n_steps)
            episode_starts = self.data["episode_starts"].reshape(self.n_envs, n_steps)
            # (n_envs * n_steps,) -> (n_envs, n_steps) on the host: nothing is read back from the device
            refresh_layout = self._device_layout(self.host_episode_starts.reshape(self.n_envs, n_steps))

            def refresh(rnn: th.nn.Module, step_features: th.Tensor, suffix: str) -> None:
                keys = [f"{name}_{suffix}" for name in self.state_names]
                # (n_envs * n_steps, F) -> (n_envs, n_steps, F); the memory recorded for each env's first step
                sequences = step_features.reshape(self.n_envs, n_steps, -1)
                first = tuple(self.recorded_memory[key][::n_steps] for key in keys)
                states = rnn_step_states(rnn, sequences, first, episode_starts, refresh_layout)  # type: ignore[arg-type]
                for key, state in zip(keys, states, strict=True):
                    # (n_envs, n_steps, n_layers, H) -> (n_envs * n_steps, n_layers, H)
                    self.memory[key] = state.reshape(self.n_envs * n_steps, *state.shape[2:])

            refresh(policy.lstm_actor, pi_features, "pi")
            critic = critic_variant(policy).rnn
            if critic is not None:
                refresh(critic, vf_features, "vf")
            else:
                # sb3-contrib's critic memory is the actor's when the critic has no recurrent layer of its own
                for name in self.state_names:
                    self.memory[f"{name}_vf"] = self.memory[f"{name}_pi"]
            return relative_distance(self.memory.values(), (self.recorded_memory[key] for key in self.memory))

    def _to_device(self, array: np.ndarray) -> th.Tensor:
        return th.as_tensor(array).to(self.device, non_blocking=True)

    def _device_layout(self, host_episode_starts: np.ndarray, lengths: np.ndarray | None = None) -> ResetLayout:
        """``plan_reset_steps`` of host flags ``(B, W)``, planned on the host, its tensors on the buffer's device."""
        layout = plan_reset_steps(host_episode_starts, lengths)
        return layout._replace(
            slot_positions=self._to_device(layout.slot_positions.numpy()),
            reset_steps=self._to_device(layout.reset_steps.numpy()),
            input_slots=None if layout.input_slots is None else self._to_device(layout.input_slots.numpy()),
        )

    def minibatches(
        self, batch_size: int | None, generator: np.random.Generator
    ) -> Generator[WindowRolloutBufferSamples, None, None]:
        """
        One epoch, planned by :func:`~sb3_reset_ppo.common.epochs.plan_epoch`, each minibatch gathered by index.

        :param batch_size: Transitions (real slots) per minibatch; ``None``: the whole epoch
        :param generator: Source of randomness for the phases, the order and the left-out remainder's place
        :return: Generator of minibatches (see :class:`WindowRolloutBufferSamples`)
        """
        plan = plan_epoch(self.n_steps, self.n_envs, self.settings, batch_size, self.consecutive_windows, generator)
        normaliser = uniform_normaliser(self.n_steps, self.n_envs, self.settings, batch_size)
        for first, last in itertools.pairwise(plan.minibatch_edges):
            yield self.samples(plan.starts[first:last], plan.lengths[first:last], plan.window_firsts[first:last], normaliser)

    def samples(
        self, starts: np.ndarray, lengths: np.ndarray, window_firsts: np.ndarray, normaliser: float
    ) -> WindowRolloutBufferSamples:
        """
        Gather one minibatch of rows (windows, or pieces of windows) by index.

        :param starts: Flat step index of each row's first step, ``(B,)``
        :param lengths: Real steps of each row, ``(B,)``; the row width is their maximum, shorter rows are padded
        :param window_firsts: Flat index of the first real step of each row's window, ``(B,)``
        :param normaliser: The loss's divisor under ``"uniform"`` weighting (:func:`uniform_normaliser`)
        :return: The minibatch, each per-slot field of shape ``(B, width)``
        """
        width = int(lengths.max())
        # None: every row of the minibatch is whole (as wide as the minibatch)
        host_lengths = lengths if bool((lengths < width).any()) else None
        # (B,) row starts -> (B, width) flat step index of every slot; padding slots repeat the last real step
        offsets = np.minimum(np.arange(width)[None, :], lengths[:, None] - 1)
        host_slots = starts[:, None] + offsets
        burn_rows, burn_lengths = self._burn_in_rows(starts)
        # Distinct steps, features once per step: the slots' first (with gradient), then those only burn-in rows hold
        steps, slot_steps = np.unique(host_slots.ravel(), return_inverse=True)
        n_slot_steps = steps.shape[0]
        burn_steps = np.zeros(0, dtype=np.int64)
        if burn_rows.size:
            burn_only = np.setdiff1d(burn_rows.ravel(), steps)
            # (B * (burn_in + 1),): each burn-in step's row in the distinct steps
            in_slots = np.isin(burn_rows.ravel(), steps)
            burn_steps = np.where(
                in_slots,
                np.searchsorted(steps, burn_rows.ravel()),
                n_slot_steps + np.searchsorted(burn_only, burn_rows.ravel()),
            )
            steps = np.concatenate([steps, burn_only])
        slots = self._to_device(host_slots)
        distinct = self._to_device(steps)
        if isinstance(self.observations, dict):
            observations: th.Tensor | dict[str, th.Tensor] = {k: obs[distinct] for k, obs in self.observations.items()}
        else:
            observations = self.observations[distinct]
        memory_steps = slots[:, 0]  # (B,) flat step index of each row's slot 0
        episode_starts = self.data["episode_starts"][slots]
        real = None
        if host_lengths is not None:
            real = real_slots(self._to_device(host_lengths), width)
            # Padding slots hold no episode start (they are not steps of the window)
            episode_starts = episode_starts * real
        resets = slot_resets(episode_starts)
        kept = kept_slots(resets, self.settings.boundary, real)
        if self.settings.boundary == "mask":
            # A row cut from its window keeps nothing when the window reset at or before the row's first step
            reset_before = self.host_start_count[starts] > self.host_start_count[window_firsts]
            if bool(reset_before.any()):
                kept = kept & ~self._to_device(reset_before)[:, None]
        return WindowRolloutBufferSamples(
            observations=observations,
            slot_steps=self._to_device(slot_steps.reshape(host_slots.shape)),
            actions=self.data["actions"][slots],
            old_values=self.data["old_values"][slots],
            old_log_prob=self.data["old_log_prob"][slots],
            advantages=self.data["advantages"][slots],
            returns=self.data["returns"][slots],
            lstm_states=self._memory_at(memory_steps),
            episode_starts=episode_starts,
            resets=resets,
            kept=kept,
            weights=slot_weights(kept, self.stats.counts[slots], self.settings.weighting),
            layout=self._device_layout(self.host_episode_starts[host_slots], host_lengths),
            window_starts=memory_steps,
            burn_in=None if self.burn_in == 0 else self._burn_in(burn_rows, burn_lengths, burn_steps, n_slot_steps),
            n_real_slots=None if host_lengths is None else int(host_lengths.sum()),
            loss_normaliser=normaliser,
            action_masks=self.data["action_masks"][slots] if "action_masks" in self.data else None,
        )

    def _memory_at(self, steps: th.Tensor) -> RNNStates:
        """The stored (or refreshed) memory entering the given flat steps, actor and critic, each ``(B, n_layers, H)``."""
        return RNNStates(
            tuple(self.memory[f"{name}_pi"][steps] for name in self.state_names),
            tuple(self.memory[f"{name}_vf"][steps] for name in self.state_names),
        )

    def _burn_in_rows(self, first_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """
        Flat steps of each window's burn-in row and its burn-in length (see :class:`BurnIn`).

        :param first_steps: Flat step index of each window's slot 0, ``(B,)``
        :return: ``(B, burn_in + 1)`` flat steps (``(B, 0)`` without burn-in) and ``(B,)`` lengths
        """
        if self.burn_in == 0:
            return np.zeros((first_steps.shape[0], 0), dtype=np.int64), np.zeros(first_steps.shape[0], dtype=np.int64)
        env_start = first_steps - first_steps % self.n_steps
        row_start = np.maximum(env_start, first_steps - self.burn_in)
        # (B, 1) + (burn_in + 1,) -> (B, burn_in + 1), never past the env's last step
        rows = np.minimum(row_start[:, None] + np.arange(self.burn_in + 1), env_start[:, None] + self.n_steps - 1)
        return rows, first_steps - row_start

    def _burn_in(self, rows: np.ndarray, lengths: np.ndarray, row_steps: np.ndarray, slot_steps: int) -> BurnIn:
        """The burn-in part of a minibatch (see :class:`BurnIn`)."""
        device_rows = self._to_device(rows)
        first = device_rows[:, 0]
        return BurnIn(
            steps=self._to_device(row_steps.reshape(rows.shape)),
            episode_starts=self.data["episode_starts"][device_rows],
            lengths=self._to_device(lengths),
            memory=self._memory_at(first),
            # Planned on the host from the host copy of the flags: nothing is read back from the device
            layout=self._device_layout(self.host_episode_starts[rows]),
            slot_steps=slot_steps,
        )


class _WindowBufferMixin:
    """Window settings and sampling shared by both window buffers (placed before the sb3-contrib base)."""

    # What reads the full rollout's windows (attention memory's reads its stored block inputs too)
    sampler_class: type[WindowSampler] = WindowSampler

    # Set by the sb3-contrib / SB3 base buffer
    buffer_size: int
    n_envs: int
    full: bool
    device: th.device
    observations: np.ndarray | dict[str, np.ndarray]
    actions: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    episode_starts: np.ndarray
    hidden_states_pi: np.ndarray
    cell_states_pi: np.ndarray
    hidden_states_vf: np.ndarray
    cell_states_vf: np.ndarray

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        hidden_state_shape: tuple[int, int, int, int],
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        *,
        window_settings: WindowSettings,
        consecutive_windows: int = 1,
        seed: int | None = None,
        burn_in: int = 0,
        recurrent_layer_type: str = "lstm",
    ) -> None:
        if recurrent_layer_type not in ("lstm", "gru"):
            raise ValueError(f"recurrent_layer_type must be 'lstm' or 'gru', got {recurrent_layer_type!r}")
        if not isinstance(window_settings, WindowSettings):
            raise TypeError(
                f"window_settings must be a WindowSettings (WindowSettings.validated(...)), got {window_settings!r}"
            )
        window_settings.check_rollout(buffer_size)
        self.recurrent_layer_type = cast(RecurrentLayerType, recurrent_layer_type)
        self.state_names = memory_state_names(self.recurrent_layer_type)
        check_positive_int("consecutive_windows", consecutive_windows)
        check_non_negative_int("burn_in", burn_in)
        self.window_settings = window_settings
        self.burn_in = int(burn_in)
        self.consecutive_windows = consecutive_windows
        self._sampler: WindowSampler | None = None
        self.seed(seed)
        super().__init__(  # type: ignore[call-arg]  # the sb3-contrib base buffer, after this mixin
            buffer_size, observation_space, action_space, hidden_state_shape, device, gae_lambda, gamma, n_envs=n_envs
        )

    @property
    def window_size(self) -> int:
        """Steps per window."""
        return self.window_settings.window_size

    @property
    def boundary(self) -> Boundary:
        """``"reset"`` or ``"mask"``."""
        return self.window_settings.boundary

    @property
    def weighting(self) -> Weighting:
        """``"uniform"``, ``"importance"`` or ``"kept_mean"``."""
        return self.window_settings.weighting

    @property
    def window_stride(self) -> int:
        """Steps between the starts of the windows of an epoch (resolved)."""
        return self.window_settings.window_stride

    @property
    def window_coverage(self) -> Coverage:
        """``"full"`` or ``"inside"``."""
        return self.window_settings.window_coverage

    def seed(self, seed: int | None = None) -> None:
        """Seed the generator that orders the windows (its own, untouched by other code); ``None`` draws fresh entropy."""
        self.generator = np.random.default_rng(seed)

    @property
    def n_windows(self) -> int:
        """Most windows one epoch can hold: ``n_envs * ceil(n_starts / stride)`` (see ``n_window_starts``)."""
        stride = effective_stride(self.buffer_size, self.window_size, self.window_stride, self.window_coverage)
        return self.n_envs * -(-n_window_starts(self.buffer_size, self.window_size, self.window_coverage) // stride)

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        if self.recurrent_layer_type == "gru":
            # A GRU has no cell state: nothing is stored for it (sb3-contrib's arrays, zero-width)
            empty = np.zeros((*self.hidden_states_pi.shape[:3], 0), dtype=np.float32)
            self.cell_states_pi, self.cell_states_vf = empty, empty.copy()
        self._sampler = None

    def add(self, *args: Any, lstm_states: RNNStates, **kwargs: Any) -> None:
        """Add one step (sb3-contrib's ``add``); ``lstm_states``: the memory entering it, LSTM or GRU, actor and critic."""
        for states in lstm_states:
            if len(states) != len(self.state_names):
                raise ValueError(
                    f"this buffer stores {self.recurrent_layer_type.upper()} memory {self.state_names}, got a state tuple "
                    f"of {len(states)} tensors"
                )
        if self.recurrent_layer_type == "gru":
            # sb3-contrib's add stores a (hidden, cell) pair: an empty cell goes into the zero-width arrays
            lstm_states = RNNStates(*((states[0], states[0][..., :0]) for states in lstm_states))
        super().add(*args, lstm_states=lstm_states, **kwargs)  # type: ignore[misc]

    def sampler(self) -> WindowSampler:
        """The window view of the current (full) rollout, built on first use and kept until ``reset``."""
        if not self.full:
            raise RuntimeError("The rollout buffer must be full before windows can be sampled from it")
        if self._sampler is None:
            self._sampler = self.sampler_class(self)
        return self._sampler

    def _sampled_arrays(self) -> dict[str, np.ndarray]:
        """The per-step arrays minibatches gather, each ``(n_steps, n_envs, ...)``."""
        return {
            # float32 as SB3's samples (stored in the action space's dtype, e.g. int8 for MultiBinary)
            "actions": self.actions.astype(np.float32, copy=False),
            "old_values": self.values,
            "old_log_prob": self.log_probs,
            "advantages": self.advantages,
            "returns": self.returns,
            "episode_starts": self.episode_starts,
        }

    def release(self) -> None:
        """Drop the window view (the device copy of the rollout) until the next ``get``."""
        self._sampler = None

    def refresh_memory(self, policy: RecurrentActorCriticPolicy) -> th.Tensor:
        """Refresh the stored memory of the current rollout with the policy's parameters (see ``WindowSampler``)."""
        return self.sampler().refresh_memory(policy)

    def window_diagnostics(self) -> dict[str, float]:
        """The ``train/`` window diagnostics of the current rollout (see ``docs/design.md``)."""
        return self.sampler().diagnostics

    def get(  # windows, not transitions
        self, batch_size: int | None = None
    ) -> Generator[WindowRolloutBufferSamples, None, None]:
        """
        One epoch: the windows at a fresh random phase, shuffled and cut into minibatches (``docs/design.md``, "Epochs").

        :param batch_size: Transitions (real slots) per minibatch, as in SB3; ``None``: the whole epoch at once
        :return: Generator of minibatches, each per-slot field with leading shape ``(B, W)``
        """
        yield from self.sampler().minibatches(batch_size, self.generator)


class WindowRolloutBuffer(_WindowBufferMixin, RecurrentRolloutBuffer):  # type: ignore[misc]  # get yields windows
    """
    Rollout buffer that stores the LSTM or GRU memory entering every step and yields minibatches of windows
    (:class:`~sb3_reset_ppo.common.type_aliases.WindowRolloutBufferSamples`); storage and ``add`` are sb3-contrib's, and
    so are the arguments before ``window_settings`` (``buffer_size`` is ``n_steps``; ``hidden_state_shape``
    ``(n_steps, n_layers, n_envs, hidden_size)``, the shape of each memory tensor).

    :param window_settings: The window settings (:meth:`~sb3_reset_ppo.common.settings.WindowSettings.validated`)
    :param consecutive_windows: Consecutive windows of one env kept together in the shuffled order
    :param seed: Seed of the generator that orders the windows
    :param burn_in: Steps run without gradient before each window to give its first memory (0: the stored memory)
    :param recurrent_layer_type: ``"lstm"`` (stores hidden and cell states) or ``"gru"`` (hidden states only)
    """

    observations: np.ndarray


class DictWindowRolloutBuffer(_WindowBufferMixin, RecurrentDictRolloutBuffer):  # type: ignore[misc]  # get yields windows
    """:class:`WindowRolloutBuffer` for ``Dict`` observation spaces, with the same parameters."""

    observations: dict[str, np.ndarray]  # type: ignore[assignment]
