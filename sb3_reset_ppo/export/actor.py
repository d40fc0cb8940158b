"""What every layout shares: the export's description and options, one step of the actor."""

from dataclasses import dataclass
from typing import TypeAlias, cast

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableBernoulliDistribution
from stable_baselines3.common.distributions import BernoulliDistribution, StateDependentNoiseDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from torch import nn

from sb3_reset_ppo.common.categorical import MASKED_LOGIT
from sb3_reset_ppo.export.attention import AttentionMemory
from sb3_reset_ppo.export.memory import Memory, RecurrentMemory
from sb3_reset_ppo.export.normalize import ObservationNormalizer

# The kinds of memory export writes: a new kind is a new Memory subclass and one entry here
MEMORY_KINDS: tuple[type[Memory], ...] = (RecurrentMemory, AttentionMemory)
# A policy export takes: one of a memory kind's policy_class
ExportablePolicy: TypeAlias = ActorCriticPolicy


@dataclass(frozen=True)
class ExportSpec:
    """What an exported file holds, derived from the policy."""

    cell: str  #: the kind of memory: ``"LSTM"``, ``"GRU"`` or ``"TrXL"`` (attention memory)
    n_layers: int  #: number of recurrent (or transformer) layers of the actor
    hidden_size: int  #: hidden size of each layer (a transformer's width)
    obs_keys: tuple[str, ...]  #: the ``Dict`` observation's keys in input order, ``()`` for a single observation
    with_masks: bool  #: whether the graph takes ``action_masks``
    mask_dims: int  #: width of ``action_masks``: the sum of the sub-actions' sizes
    branches: tuple[int, ...]  #: sizes of the discrete sub-actions (2 per ``MultiBinary`` entry), ``()`` for a ``Box``
    memory_length: int = 0  #: a transformer's ``memory_length`` ``K``; 0 for an LSTM or GRU

    @property
    def memory(self) -> Memory:
        """The memory's kind: its tensors, flat form and step."""
        kind = next(kind for kind in MEMORY_KINDS if self.cell in kind.cells)
        return kind(self.cell, self.n_layers, self.hidden_size, self.memory_length)

    @property
    def n_memory(self) -> int:
        """Memory tensors: 2 (``h``, ``c``) for an LSTM, 1 (``h``) for a GRU, 2 (``memory``, ``n_valid``) for attention."""
        return len(self.memory.names)

    @property
    def memory_size(self) -> int:
        """Width of the flat memory: ``n_memory * n_layers * hidden_size``; attention's positions and count."""
        return self.memory.size

    @property
    def memory_names(self) -> list[str]:
        """The memory tensors' names: ``["h", "c"]`` (LSTM), ``["h"]`` (GRU), ``["memory", "n_valid"]`` (attention)."""
        return self.memory.names

    @property
    def memory_shapes(self) -> list[tuple[int | str, ...]]:
        """The memory tensors' shapes as ``predict``'s state holds them, ``"batch"`` for the env axis."""
        return self.memory.shapes


@dataclass(frozen=True)
class ExportOptions:
    """The checked arguments of ``export_onnx``."""

    dtype: th.dtype  #: the float dtype of the graph
    opset: int  #: the ONNX opset
    channels_last: bool  #: whether image observations arrive ``(batch, H, W, C)``
    distribution: bool  #: whether the distribution's parameters are outputs
    elementary: bool  #: whether the recurrent layer is written as elementary operators
    exporter: str  #: torch's exporter: ``"torchscript"`` or ``"dynamo"``


def observation_spaces(policy: ExportablePolicy, spec: ExportSpec) -> list[spaces.Space]:
    """The observation inputs' spaces, in input order."""
    space = policy.observation_space
    return [cast(spaces.Dict, space)[key] for key in spec.obs_keys] if spec.obs_keys else [space]


def observation_shapes(policy: ExportablePolicy, spec: ExportSpec, channels_last: bool) -> list[tuple[int, ...]]:
    """The observation inputs' shapes as :class:`ActorStep` takes them, without the batch axis, in input order."""
    shapes = []
    for space in observation_spaces(policy, spec):
        shape = tuple(int(n) for n in (space.shape or ()))
        # (C, H, W) -> (H, W, C)
        shapes.append((shape[1], shape[2], shape[0]) if _transposed(space, channels_last) else shape)
    return shapes


def _transposed(space: spaces.Space, channels_last: bool) -> bool:
    """Whether the graph transposes the observation of ``space``: an image taken channels-last."""
    return channels_last and is_image_space(space, check_channels=False) and len(space.shape or ()) == 3


class ActorStep(nn.Module):
    """
    One deterministic step of the actor of ``policy``, as ``predict`` computes it, on the recurrent layer's own tensors.

    :param policy: The policy (a copy on the CPU, in eval mode, of the graph's dtype)
    :param normalizer: ``VecNormalize``'s observation normalisation, or ``None``
    :param normalize_images: Whether uint8-bounded images are divided by 255
    """

    # Buffers: the Box bounds
    low: th.Tensor
    high: th.Tensor

    def __init__(
        self,
        policy: ExportablePolicy,
        spec: ExportSpec,
        options: ExportOptions,
        normalizer: ObservationNormalizer | None,
        normalize_images: bool,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.spec = spec
        self.options = options
        self.normalizer = normalizer
        self.normalize_images = normalize_images
        action_space = policy.action_space
        if isinstance(action_space, spaces.Box):
            self.register_buffer("low", th.as_tensor(action_space.low, dtype=options.dtype).reshape(-1))
            self.register_buffer("high", th.as_tensor(action_space.high, dtype=options.dtype).reshape(-1))
        self.memory_step = spec.memory.step(policy, options.elementary)

    def _observation(self, raw: list[th.Tensor]) -> th.Tensor | dict[str, th.Tensor]:
        """SB3's ``preprocess_obs`` of the observation inputs, then cast to the graph's dtype."""
        space = self.policy.observation_space
        keys = self.spec.obs_keys or ("",)
        obs: dict[str, th.Tensor] = {}
        for key, subspace, tensor in zip(keys, observation_spaces(self.policy, self.spec), raw, strict=True):
            # (batch, H, W, C) -> (batch, C, H, W)
            obs[key] = tensor.permute(0, 3, 1, 2) if _transposed(subspace, self.options.channels_last) else tensor
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        processed = preprocess_obs(obs if self.spec.obs_keys else obs[""], space, normalize_images=self.normalize_images)
        if isinstance(processed, dict):
            return {key: value.to(self.options.dtype) for key, value in processed.items()}
        return processed.to(self.options.dtype)

    def _discrete(self, logits: th.Tensor, masks: th.Tensor | None) -> tuple[th.Tensor, th.Tensor]:
        """The deterministic action (argmax per sub-action, ``(batch, n_branches)``) and the masked logits."""
        dist = self.policy.action_dist
        if isinstance(dist, BernoulliDistribution) and not isinstance(dist, MaskableBernoulliDistribution):
            # SB3's mode rounds sigmoid(x): 1 where x > 0. As two logits (0, x), argmax picks the first on a tie
            zeros = th.zeros_like(logits)
            logits = th.stack([zeros, logits], dim=2).reshape(logits.shape[0], -1)  # (batch, n) -> (batch, 2 n)
        if masks is not None:
            # sb3-contrib's masked logit, or float16's lowest, -65504, as it holds no -1e8
            masked = max(MASKED_LOGIT, float(th.finfo(logits.dtype).min))
            logits = th.where(masks > 0.5, logits, th.full_like(logits, masked))
        branches = th.split(logits, list(self.spec.branches), dim=1)
        actions = th.stack([branch.argmax(dim=1) for branch in branches], dim=1)  # (batch, n_branches)
        return actions, logits

    def _log_std(self, mean: th.Tensor, latent_pi: th.Tensor) -> th.Tensor:
        """The Gaussian's log standard deviation, ``(batch, action_dim)`` (gSDE: its state-dependent one)."""
        policy = self.policy
        dist = policy.action_dist
        log_std = cast(th.Tensor, policy.log_std)
        if isinstance(dist, StateDependentNoiseDistribution):
            # SB3's proba_distribution: variance = latent^2 @ std^2, scale = sqrt(variance + epsilon)
            variance = th.mm(latent_pi**2, dist.get_std(log_std) ** 2)
            return 0.5 * th.log(variance + dist.epsilon)
        return log_std.expand_as(mean)

    def forward(
        self,
        observations: list[th.Tensor],
        memory: list[th.Tensor],
        episode_start: th.Tensor | None = None,
        masks: th.Tensor | None = None,
    ) -> tuple[th.Tensor, list[th.Tensor], list[th.Tensor]]:
        """
        One step of the actor.

        :param observations: One tensor per observation input, ``(batch, *shape)`` (:func:`observation_shapes`)
        :param memory: The memory tensors entering the step (:attr:`ExportSpec.memory_shapes`)
        :param episode_start: ``(batch,)``, or ``None`` where the caller zeroes the memory at an episode start
        :param masks: ``(batch, mask_dims)``, 1 = allowed, or ``None``
        :return: The deterministic action, the memory tensors after the step, and the distribution's parameters (the
            masked logits of a discrete action; the Gaussian's mean and log std with ``distribution``)
        """
        spec = self.spec
        policy = self.policy
        features = policy.pi_features_extractor(self._observation(observations))
        output, new_memory = self.memory_step(features, memory, episode_start)
        latent_pi = policy.mlp_extractor.forward_actor(output)
        logits = policy.action_net(latent_pi)
        if spec.branches:
            actions, masked_logits = self._discrete(logits, masks)
            return actions, new_memory, [masked_logits]
        mean = logits
        if policy.squash_output:
            # SB3's squashed Gaussian mode, then predict's unscale_action: [-1, 1] -> [low, high]
            actions = self.low + 0.5 * (th.tanh(mean) + 1.0) * (self.high - self.low)
        else:
            # predict clips to the bounds
            actions = th.minimum(th.maximum(mean, self.low), self.high)
        shape = cast(tuple[int, ...], policy.action_space.shape)
        actions = actions.reshape(-1, *shape)  # (batch, prod(shape)) -> (batch, *shape)
        parameters = [mean, self._log_std(mean, latent_pi)] if self.options.distribution else []
        return actions, new_memory, parameters
