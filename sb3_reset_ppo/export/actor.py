"""What every layout shares: the export's description and options, one step of the actor, the flat memory ``[h | c]``."""

from dataclasses import dataclass
from typing import TypeAlias, cast

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableBernoulliDistribution
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import BernoulliDistribution, StateDependentNoiseDistribution
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from torch import nn

from sb3_reset_ppo.export.attention import AttentionMemoryStep
from sb3_reset_ppo.export.normalize import ObservationNormalizer
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

# A policy export takes: sb3-contrib's recurrent ones (LSTM, GRU) and the attention-memory ones
ExportablePolicy: TypeAlias = RecurrentActorCriticPolicy | TrXLActorCriticPolicy
# ExportSpec.cell of an attention-memory policy
ATTENTION = "TrXL"


@dataclass(frozen=True)
class ExportSpec:
    """
    What an exported file holds, derived from the policy.

    :param cell: ``"LSTM"``, ``"GRU"`` or ``"TrXL"`` (:data:`ATTENTION`)
    :param n_layers: Number of recurrent (or transformer) layers of the actor
    :param hidden_size: Hidden size of each layer (a transformer's width)
    :param obs_keys: The ``Dict`` observation's keys in input order, ``()`` for a single observation
    :param with_masks: Whether the graph takes ``action_masks``
    :param mask_dims: Width of ``action_masks``: the sum of the sub-actions' sizes
    :param branches: Sizes of the discrete sub-actions (2 per ``MultiBinary`` entry), ``()`` for a ``Box``
    :param memory_length: A transformer's ``memory_length`` ``K``; 0 for an LSTM or GRU
    """

    cell: str
    n_layers: int
    hidden_size: int
    obs_keys: tuple[str, ...]
    with_masks: bool
    mask_dims: int
    branches: tuple[int, ...]
    memory_length: int = 0

    @property
    def n_memory(self) -> int:
        """Memory tensors: 2 (``h``, ``c``) for an LSTM, 1 (``h``) for a GRU, 2 (``memory``, ``n_valid``) for a TrXL."""
        return 1 if self.cell == "GRU" else 2

    @property
    def attention_size(self) -> int:
        """Width of a transformer's flat memory positions: ``memory_length * n_layers * hidden_size``."""
        return self.memory_length * self.n_layers * self.hidden_size

    @property
    def memory_size(self) -> int:
        """Width of the flat memory: ``n_memory * n_layers * hidden_size``; a TrXL's positions and its count."""
        if self.cell == ATTENTION:
            return self.attention_size + 1
        return self.n_memory * self.n_layers * self.hidden_size

    @property
    def memory_names(self) -> list[str]:
        """The memory tensors' names: ``["h", "c"]`` (LSTM), ``["h"]`` (GRU), ``["memory", "n_valid"]`` (TrXL)."""
        return ["memory", "n_valid"] if self.cell == ATTENTION else ["h", "c"][: self.n_memory]

    @property
    def memory_shapes(self) -> list[tuple[int | str, ...]]:
        """The memory tensors' shapes as ``predict``'s state holds them, ``"batch"`` for the env axis."""
        if self.cell == ATTENTION:
            return [(self.memory_length, "batch", self.n_layers, self.hidden_size), (1, "batch")]
        return [(self.n_layers, "batch", self.hidden_size)] * self.n_memory


@dataclass(frozen=True)
class ExportOptions:
    """
    The checked arguments of ``export_onnx``.

    :param dtype: The float dtype of the graph
    :param opset: The ONNX opset
    :param channels_last: Whether image observations arrive ``(batch, H, W, C)``
    :param distribution: Whether the distribution's parameters are outputs
    :param elementary: Whether the recurrent layer is written as elementary operators
    :param exporter: torch's exporter: ``"torchscript"`` or ``"dynamo"``
    """

    dtype: th.dtype
    opset: int
    channels_last: bool
    distribution: bool
    elementary: bool
    exporter: str


def observation_spaces(policy: ExportablePolicy, spec: ExportSpec) -> list[spaces.Space]:
    """The observation inputs' spaces, in input order."""
    space = policy.observation_space
    return [cast(spaces.Dict, space)[key] for key in spec.obs_keys] if spec.obs_keys else [space]


def observation_shapes(policy: ExportablePolicy, spec: ExportSpec, channels_last: bool) -> list[tuple[int, ...]]:
    """
    The observation inputs' shapes as :class:`ActorStep` takes them, without the batch axis.

    :param policy: The recurrent policy
    :param spec: The export's description
    :param channels_last: Whether image observations arrive ``(batch, H, W, C)``
    :return: One shape per observation input
    """
    shapes = []
    for space in observation_spaces(policy, spec):
        shape = tuple(int(n) for n in (space.shape or ()))
        # (C, H, W) -> (H, W, C)
        shapes.append((shape[1], shape[2], shape[0]) if _transposed(space, channels_last) else shape)
    return shapes


def _transposed(space: spaces.Space, channels_last: bool) -> bool:
    """Whether the graph transposes the observation of ``space``: an image taken channels-last."""
    return channels_last and is_image_space(space, check_channels=False) and len(space.shape or ()) == 3


class ElementaryRecurrent(nn.Module):
    """
    ``nn.LSTM`` / ``nn.GRU`` written as matrix products and pointwise operations, for engines that lack ONNX's
    ``LSTM`` or ``GRU`` operator; called as the layer it wraps.

    :param rnn: The recurrent layer whose weights it uses (not copied)
    """

    def __init__(self, rnn: nn.LSTM | nn.GRU) -> None:
        super().__init__()
        self.rnn = rnn
        self.is_lstm = isinstance(rnn, nn.LSTM)

    def forward(
        self, sequence: th.Tensor, state: th.Tensor | tuple[th.Tensor, th.Tensor]
    ) -> tuple[th.Tensor, th.Tensor | tuple[th.Tensor, th.Tensor]]:
        rnn = self.rnn
        # h (and c): (n_layers, batch, hidden)
        hidden, cell = state if isinstance(state, tuple) else (state, state)
        hiddens, cells = list(hidden.unbind(0)), list(cell.unbind(0))
        outputs = []
        sizes = [rnn.hidden_size] * (4 if self.is_lstm else 3)
        for step in sequence.unbind(0):  # (seq, batch, F) -> seq x (batch, F); one step in the export
            for layer in range(rnn.num_layers):
                bias_ih = getattr(rnn, f"bias_ih_l{layer}") if rnn.bias else None
                bias_hh = getattr(rnn, f"bias_hh_l{layer}") if rnn.bias else None
                # (batch, G * hidden), G = 4 (LSTM: i, f, g, o) or 3 (GRU: r, z, n)
                gates_x = nn.functional.linear(step, getattr(rnn, f"weight_ih_l{layer}"), bias_ih)
                gates_h = nn.functional.linear(hiddens[layer], getattr(rnn, f"weight_hh_l{layer}"), bias_hh)
                if self.is_lstm:
                    i, f, g, o = (gates_x + gates_h).split(sizes, dim=1)
                    cells[layer] = th.sigmoid(f) * cells[layer] + th.sigmoid(i) * th.tanh(g)
                    hiddens[layer] = th.sigmoid(o) * th.tanh(cells[layer])
                else:
                    x_r, x_z, x_n = gates_x.split(sizes, dim=1)
                    h_r, h_z, h_n = gates_h.split(sizes, dim=1)
                    reset, update = th.sigmoid(x_r + h_r), th.sigmoid(x_z + h_z)
                    new = th.tanh(x_n + reset * h_n)
                    # (1 - z) * n + z * h
                    hiddens[layer] = new + update * (hiddens[layer] - new)
                step = hiddens[layer]
            outputs.append(step)
        output = th.stack(outputs)  # seq x (batch, hidden) -> (seq, batch, hidden)
        if self.is_lstm:
            return output, (th.stack(hiddens), th.stack(cells))
        return output, th.stack(hiddens)


def split_memory(flat: th.Tensor, spec: ExportSpec) -> list[th.Tensor]:
    """
    The flat memory ``[h_0 ... h_{L-1} | c_0 ... c_{L-1}]`` as the recurrent layer's tensors; a TrXL's ``[memory |
    n_valid]`` (each env's ``(K, L, D)`` positions row-major, then its count) as ``predict``'s state.

    :param flat: The flat memory, ``(batch, memory_size)``
    :param spec: The export's description
    :return: ``h`` (and ``c``), each ``(n_layers, batch, hidden)``; a TrXL's ``memory`` ``(K, batch, L, D)`` and
        ``n_valid`` ``(1, batch)``
    """
    if spec.cell == ATTENTION:
        positions = spec.attention_size
        # (batch, K * L * D) -> (batch, K, L, D) -> (K, batch, L, D)
        memory = flat[:, :positions].reshape(-1, spec.memory_length, spec.n_layers, spec.hidden_size).transpose(0, 1)
        # (batch, 1) -> (1, batch)
        return [memory, flat[:, positions:].transpose(0, 1)]
    width, hidden = spec.n_layers * spec.hidden_size, spec.hidden_size
    # Slices, not a reshape and a transpose, whose copy (Identity) dynamo cannot convert below opset 16
    parts = [flat[:, index * width : (index + 1) * width] for index in range(spec.n_memory)]  # (batch, L * H) each
    return [th.stack([part[:, layer * hidden : (layer + 1) * hidden] for layer in range(spec.n_layers)]) for part in parts]


def join_memory(memory: list[th.Tensor], spec: ExportSpec) -> th.Tensor:
    """The inverse of :func:`split_memory`: ``h`` (and ``c``), each ``(n_layers, batch, hidden)``, as one tensor."""
    if spec.cell == ATTENTION:
        positions, count = memory
        # (K, batch, L, D) -> (batch, K, L, D) -> (batch, K * L * D); (1, batch) -> (batch, 1)
        return th.cat([positions.transpose(0, 1).reshape(positions.shape[1], -1), count.transpose(0, 1)], dim=1)
    layers = [layer for tensor in memory for layer in tensor.unbind(0)]  # (batch, hidden) each
    return th.cat(layers, dim=1) if len(layers) > 1 else layers[0]


class ActorStep(nn.Module):
    """
    One deterministic step of the actor of ``policy``, as ``predict`` computes it, on the recurrent layer's own tensors.

    :param policy: The recurrent or attention-memory policy (a copy on the CPU, in eval mode, of the graph's dtype)
    :param spec: The export's description
    :param options: The export's options
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
        self.attention = AttentionMemoryStep(policy.trxl_actor) if isinstance(policy, TrXLActorCriticPolicy) else None

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
            # sb3-contrib's masked logit, -1e8, or float16's lowest, -65504, as it holds no -1e8
            masked = max(-1e8, float(th.finfo(logits.dtype).min))
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

    def _recurrent(
        self, features: th.Tensor, memory: list[th.Tensor], episode_start: th.Tensor | None
    ) -> tuple[th.Tensor, list[th.Tensor]]:
        """The LSTM's or GRU's output ``(batch, hidden)`` and ``h`` (and ``c``) after the step."""
        policy = cast(RecurrentActorCriticPolicy, self.policy)
        if episode_start is not None:
            # sb3-contrib's rule: the memory entering the step times (1 - episode_start); (batch,) -> (1, batch, 1)
            keep = (1.0 - episode_start).reshape(1, -1, 1)
            memory = [keep * tensor for tensor in memory]
        rnn_input = features.unsqueeze(0)  # (batch, F) -> (1, batch, F): one step
        lstm = self.spec.cell == "LSTM"
        output, state = policy.lstm_actor(rnn_input, (memory[0], memory[1]) if lstm else memory[0])
        return output[0], list(state) if lstm else [state]

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
        :param memory: ``h`` (and ``c``) entering the step, each ``(n_layers, batch, hidden)``; a TrXL's ``memory``
            ``(K, batch, L, D)`` and ``n_valid`` ``(1, batch)``
        :param episode_start: ``(batch,)``, or ``None`` where the caller zeroes the memory at an episode start
        :param masks: ``(batch, mask_dims)``, 1 = allowed, or ``None``
        :return: The deterministic action, ``h`` (and ``c``) after the step, and the distribution's parameters (the
            masked logits of a discrete action; the Gaussian's mean and log std with ``distribution``)
        """
        spec = self.spec
        policy = self.policy
        features = policy.pi_features_extractor(self._observation(observations))
        if self.attention is not None:
            # The episode-start rule is the attention mask's: the memory is kept, its positions masked
            output, *new_memory = self.attention(features, memory[0], memory[1], episode_start)
        else:
            output, new_memory = self._recurrent(features, memory, episode_start)
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
