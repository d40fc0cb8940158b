"""
Attention-memory policies of ResetPPO: Transformer-XL blocks over the last ``memory_length`` steps of the episode in
place of the LSTM (``docs/design.md``, "Attention memory"). Their arguments follow sb3-contrib's LSTM policies: a critic
transformer of its own (``enable_critic_trxl``, the default), the actor's output (``shared_trxl``), or neither.
"""

from typing import Any, NoReturn

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    MlpExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

from sb3_reset_ppo.common.attention import AttentionState, PositionalEncoding, TransformerXL, attention_mask
from sb3_reset_ppo.common.evaluation import slot_heads
from sb3_reset_ppo.common.type_aliases import Memory, NumpyObs, WindowRolloutBufferSamples
from sb3_reset_ppo.reset_ppo.policies import heads, n_observations

__all__ = ["CnnTrXLPolicy", "MlpTrXLPolicy", "MultiInputTrXLPolicy", "TrXLActorCriticPolicy"]


class TrXLActorCriticPolicy(ActorCriticPolicy):
    """
    Actor-critic policy with attention memory: the features of each step go through a :class:`TransformerXL
    <sb3_reset_ppo.common.attention.TransformerXL>` that attends over the step and the last ``memory_length`` steps
    of its episode, then through ``net_arch`` and the heads as in SB3's ``ActorCriticPolicy``.

    :param observation_space: Observation space
    :param action_space: Action space
    :param lr_schedule: Learning rate schedule (could be constant)
    :param net_arch: The specification of the policy and value networks after the transformer
    :param activation_fn: Activation function of ``net_arch``
    :param ortho_init: Whether to use orthogonal initialization (of the features extractor, ``net_arch`` and heads)
    :param use_sde: Whether to use State Dependent Exploration or not
    :param log_std_init: Initial value for the log standard deviation
    :param full_std: Whether to use (n_features x n_actions) parameters for the std instead of only (n_features,)
        when using gSDE
    :param use_expln: Use ``expln()`` function instead of ``exp()`` to ensure a positive standard deviation
    :param squash_output: Whether to squash the output using a tanh function
    :param features_extractor_class: Features extractor to use
    :param features_extractor_kwargs: Keyword arguments to pass to the features extractor
    :param share_features_extractor: If True, the features extractor is shared between the policy and value networks
    :param normalize_images: Whether to normalize images or not, dividing by 255.0
    :param optimizer_class: The optimizer to use, ``th.optim.Adam`` by default
    :param optimizer_kwargs: Additional keyword arguments, excluding the learning rate, to pass to the optimizer
    :param memory_length: Steps before each step that it attends to (of its own episode)
    :param trxl_dim: Width of the transformer (its output is the latent of ``net_arch``)
    :param n_trxl_layers: Transformer blocks
    :param n_attention_heads: Attention heads per block (``trxl_dim`` must be a multiple)
    :param positional_encoding: ``"none"``, ``"learned"`` or ``"sinusoidal"`` encoding of the distance between steps
    :param gated: GTrXL gates in place of the residual connections
    :param trxl_ff_dim: Hidden units of each block's feed-forward layer (``None``: ``trxl_dim``)
    :param shared_trxl: The critic reads the actor's transformer output, detached
    :param enable_critic_trxl: The critic has a transformer of its own
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        use_sde: bool = False,
        log_std_init: float = 0.0,
        full_std: bool = True,
        use_expln: bool = False,
        squash_output: bool = False,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        share_features_extractor: bool = True,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        memory_length: int = 32,
        trxl_dim: int = 64,
        n_trxl_layers: int = 2,
        n_attention_heads: int = 4,
        positional_encoding: PositionalEncoding = "sinusoidal",
        gated: bool = False,
        trxl_ff_dim: int | None = None,
        shared_trxl: bool = False,
        enable_critic_trxl: bool = True,
    ) -> None:
        if shared_trxl and enable_critic_trxl:
            raise ValueError(
                "shared_trxl=True and enable_critic_trxl=True: the critic either reads the actor's transformer "
                "(shared_trxl=True, enable_critic_trxl=False) or has its own (shared_trxl=False, the default)"
            )
        self.trxl_dim = trxl_dim
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch,
            activation_fn,
            ortho_init,
            use_sde,
            log_std_init,
            full_std,
            use_expln,
            squash_output,
            features_extractor_class,
            features_extractor_kwargs,
            share_features_extractor,
            normalize_images,
            optimizer_class,
            optimizer_kwargs,
        )
        self.trxl_kwargs: dict[str, Any] = dict(
            dim=trxl_dim,
            n_layers=n_trxl_layers,
            n_heads=n_attention_heads,
            memory_length=memory_length,
            positional_encoding=positional_encoding,
            gated=gated,
            ff_dim=trxl_ff_dim,
        )
        self.shared_trxl, self.enable_critic_trxl = shared_trxl, enable_critic_trxl
        # SB3 sizes a MultiDiscrete observation space with a numpy integer
        features_dim = int(self.features_dim)
        self.trxl_actor = TransformerXL(features_dim, **self.trxl_kwargs)
        self.trxl_critic = TransformerXL(features_dim, **self.trxl_kwargs) if enable_critic_trxl else None
        # As sb3-contrib: a critic without memory of its own or shared maps the features linearly
        self.critic = None if shared_trxl or enable_critic_trxl else nn.Linear(features_dim, trxl_dim)
        # The optimizer held the parameters before the transformers existed: built again as SB3 builds it
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    @property
    def lstm_actor(self) -> NoReturn:
        """An attention policy has no LSTM: sb3-contrib's ``RecurrentPPO`` reads one first, and is refused here."""
        raise TypeError(
            f"{type(self).__name__} is an attention-memory policy: it has no LSTM (lstm_actor), so sb3-contrib's "
            "RecurrentPPO cannot train, load or run it; use sb3_reset_ppo.ResetPPO (ResetPPO.load for a checkpoint)"
        )

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = MlpExtractor(self.trxl_dim, self.net_arch, self.activation_fn, device=self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        kwargs = self.trxl_kwargs
        data.update(
            memory_length=kwargs["memory_length"],
            trxl_dim=kwargs["dim"],
            n_trxl_layers=kwargs["n_layers"],
            n_attention_heads=kwargs["n_heads"],
            positional_encoding=kwargs["positional_encoding"],
            gated=kwargs["gated"],
            trxl_ff_dim=kwargs["ff_dim"],
            shared_trxl=self.shared_trxl,
            enable_critic_trxl=self.enable_critic_trxl,
        )
        return data

    @property
    def memory_shape(self) -> tuple[int, int, int]:
        """``(memory_length, n_trxl_layers, trxl_dim)``: one step's memory, per env."""
        return self.trxl_actor.memory_shape

    def initial_state(self, n_envs: int) -> RNNStates:
        """The memory of actor and critic entering each env's first step (zeros, count 0), as collection keeps it."""
        actor = self.trxl_actor.initial_state(n_envs, self.device)
        critic = actor if self.trxl_critic is None else self.trxl_critic.initial_state(n_envs, self.device)
        return RNNStates(tuple(actor), tuple(critic))

    def _features(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        return features if isinstance(features, tuple) else (features, features)

    def _critic_latent(
        self,
        latent_pi: th.Tensor,
        vf_features: th.Tensor,
        state_pi: AttentionState,
        state_vf: tuple[th.Tensor, ...],
        episode_starts: th.Tensor,
    ) -> tuple[th.Tensor, AttentionState]:
        """The critic's latent and memory after one step, as its kind computes them."""
        if self.trxl_critic is not None:
            return self.trxl_critic.step(vf_features, state_vf, episode_starts)
        if self.critic is not None:
            return self.critic(vf_features), state_pi
        return latent_pi.detach(), state_pi

    def forward(  # type: ignore[override]  # as sb3-contrib's recurrent policies: the memory in and out
        self, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor, deterministic: bool = False
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates]:
        """
        One step of every env (collection).

        :param obs: Observations, one per env
        :param lstm_states: The memory of actor and critic entering the step, each ``(memory, count)``
        :param episode_starts: Whether the observations start new episodes (no earlier step is attended to then)
        :param deterministic: Whether to sample or use deterministic actions
        :return: action, value and log probability of the action, and the memory entering the next step
        """
        latent_pi, latent_vf, states = self.step_latents(obs, lstm_states, episode_starts)
        return (*heads(self, latent_pi, latent_vf, deterministic), states)

    def step_latents(
        self, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, RNNStates]:
        """
        One step of every env without the heads (``forward``'s, and the maskable policies').

        :param obs: Observations, one per env
        :param lstm_states: The memory of actor and critic entering the step, each ``(memory, count)``
        :param episode_starts: Whether the observations start new episodes
        :return: The actor's and the critic's latents (after ``net_arch``) and the memory entering the next step
        """
        pi_features, vf_features = self._features(obs)
        latent_pi, state_pi = self.trxl_actor.step(pi_features, lstm_states.pi, episode_starts)
        latent_vf, state_vf = self._critic_latent(latent_pi, vf_features, state_pi, lstm_states.vf, episode_starts)
        latent_pi = self.mlp_extractor.forward_actor(latent_pi)
        latent_vf = self.mlp_extractor.forward_critic(latent_vf)
        return latent_pi, latent_vf, RNNStates(tuple(state_pi), tuple(state_vf))

    def predict_values(  # type: ignore[override]  # with the critic's memory, as sb3-contrib's
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> th.Tensor:
        """
        The values of one step of every env.

        :param obs: Observations, one per env
        :param lstm_states: The critic's memory entering the step (the actor's, without a critic transformer)
        :param episode_starts: Whether the observations start new episodes
        :return: The values, ``(n_envs, 1)``
        """
        pi_features, vf_features = self._features(obs)
        if self.trxl_critic is not None:
            latent_vf, _ = self.trxl_critic.step(vf_features, lstm_states, episode_starts)
        elif self.critic is not None:
            latent_vf = self.critic(vf_features)
        else:
            latent_vf, _ = self.trxl_actor.step(pi_features, lstm_states, episode_starts)
            latent_vf = latent_vf.detach()
        return self.value_net(self.mlp_extractor.forward_critic(latent_vf))

    def get_distribution(  # type: ignore[override]  # with the memory, as sb3-contrib's
        self, obs: PyTorchObs, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> tuple[Distribution, AttentionState]:
        """
        The action distribution of one step of every env, and the actor's memory entering the next step.

        :param obs: Observations, one per env
        :param lstm_states: The actor's memory entering the step, ``(memory, count)``
        :param episode_starts: Whether the observations start new episodes
        :return: The distribution and the next memory
        """
        pi_features, _ = self._features(obs)
        latent_pi, state = self.trxl_actor.step(pi_features, lstm_states, episode_starts)
        return self._get_action_dist_from_latent(self.mlp_extractor.forward_actor(latent_pi)), state

    def _predict(  # type: ignore[override]  # sb3-contrib's recurrent signature
        self,
        observation: PyTorchObs,
        lstm_states: tuple[th.Tensor, ...],
        episode_starts: th.Tensor,
        deterministic: bool = False,
    ) -> tuple[th.Tensor, AttentionState]:
        distribution, state = self.get_distribution(observation, lstm_states, episode_starts)
        return distribution.get_actions(deterministic=deterministic), state

    def predict(
        self, observation: NumpyObs, state: Memory = None, episode_start: np.ndarray | None = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Memory]:
        """
        Get the policy action from an observation and the memory, as sb3-contrib's recurrent policies do.

        :param observation: The input observation
        :param state: The actor's memory ``(memory, count)``: ``memory`` ``(memory_length, n_envs, n_trxl_layers,
            trxl_dim)`` float, ``count`` ``(1, n_envs)`` int (the memory positions of the current episode); ``None``:
            zeros, count 0
        :param episode_start: Whether the observations start new episodes (no earlier step is attended to then)
        :param deterministic: Whether or not to return deterministic actions
        :return: The action and the next memory
        """
        self.set_training_mode(False)
        n_envs = n_observations(observation, self.observation_space)
        memory_length, n_layers, dim = self.memory_shape
        if state is None:
            initial = self.trxl_actor.initial_state(n_envs)
            state = (initial.memory.numpy(), initial.n_valid.numpy())
        expected = ((memory_length, n_envs, n_layers, dim), (1, n_envs))
        shapes = tuple(np.shape(part) for part in state) if isinstance(state, (tuple, list)) else None
        if shapes != expected:
            raise ValueError(
                f"state must be None or (memory, count) with memory of shape (memory_length, n_envs, n_trxl_layers, "
                f"trxl_dim) = {expected[0]} and count of shape (1, n_envs) = {expected[1]} for {n_envs} observation(s); "
                f"got {'shapes ' + str(shapes) if shapes is not None else type(state).__name__} (an LSTM's (hidden, "
                "cell) state does not fit an attention policy)"
            )
        if episode_start is None:
            episode_start = np.zeros(n_envs, dtype=bool)
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)
        with th.no_grad():
            memory = th.as_tensor(np.asarray(state[0]), dtype=th.float32, device=self.device)
            count = th.as_tensor(np.asarray(state[1]), dtype=th.int64, device=self.device)
            episode_starts = th.as_tensor(np.asarray(episode_start), dtype=th.float32, device=self.device).reshape(-1)
            actions, new_state = self._predict(obs_tensor, (memory, count), episode_starts, deterministic)
        # (n_envs * ...) -> (n_envs, *action shape)
        numpy_actions = actions.cpu().numpy().reshape((-1, *(self.action_space.shape or ())))
        if isinstance(self.action_space, spaces.Box):
            if self.squash_output:
                numpy_actions = self.unscale_action(numpy_actions)
            else:
                numpy_actions = np.clip(numpy_actions, self.action_space.low, self.action_space.high)
        if not vectorized_env:
            numpy_actions = numpy_actions.squeeze(axis=0)
        return numpy_actions, (new_state.memory.cpu().numpy(), new_state.n_valid.cpu().numpy())

    def evaluate_windows(self, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """
        Values, log-probabilities and entropies of every slot of a minibatch of windows: each row's slots attend, all
        at once, to the stored memory before the row and to the row's earlier slots of their episode
        (:func:`~sb3_reset_ppo.common.attention.attention_mask`), the row's slots recomputed with gradient.

        :param samples: A minibatch of an attention window buffer (``samples.attention`` set)
        :return: values, log-probabilities and entropies (``None`` when the distribution has no closed form), each
            ``(B, W)``
        """
        rows = samples.attention
        if rows is None:
            raise ValueError("the minibatch holds no attention memory (samples.attention): it is not from an attention buffer")
        n_rows, width = samples.slot_steps.shape
        pi_features, vf_features = self._features(samples.observations)
        allowed = attention_mask(samples.episode_starts, rows.counts, self.trxl_actor.memory_length)

        def run(transformer: TransformerXL, features: th.Tensor, memory: th.Tensor) -> th.Tensor:
            # (U, F) -> (B, W, F): every slot's features
            outputs, _ = transformer(features[samples.slot_steps], memory, allowed)
            # (B, W, D) -> (B * W, D)
            return outputs.reshape(n_rows * width, -1)

        latent_pi = run(self.trxl_actor, pi_features, rows.memory_pi)
        if self.trxl_critic is not None:
            assert rows.memory_vf is not None
            latent_vf = run(self.trxl_critic, vf_features, rows.memory_vf)
        elif self.critic is not None:
            # (B, W) -> (B * W,): every slot's step
            latent_vf = self.critic(vf_features)[samples.slot_steps.reshape(-1)]
        else:
            latent_vf = latent_pi.detach()
        return slot_heads(self, latent_pi, latent_vf, samples)


class CnnTrXLPolicy(TrXLActorCriticPolicy):
    """:class:`TrXLActorCriticPolicy` with SB3's ``NatureCNN`` features extractor (image observations)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", NatureCNN)
        super().__init__(*args, **kwargs)


class MultiInputTrXLPolicy(TrXLActorCriticPolicy):
    """:class:`TrXLActorCriticPolicy` with SB3's ``CombinedExtractor`` (``Dict`` observations)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", CombinedExtractor)
        super().__init__(*args, **kwargs)


MlpTrXLPolicy = TrXLActorCriticPolicy
