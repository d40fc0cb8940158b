"""
ONNX export of a recurrent policy's actor, one step at a time, with the memory as explicit inputs and outputs.

The exported graph is the actor of ``policy.predict(obs, state, episode_start, deterministic=True)`` for one step:
SB3's observation preprocessing (``preprocess_obs``: images divided by 255, one-hot of ``Discrete`` and
``MultiDiscrete`` observations, a ``Dict``'s keys through the combined extractor), the episode-start reset of the
memory (``memory * (1 - episode_start)``, sb3-contrib's rule), the recurrent layer, the actor's MLP and the
deterministic action (argmax per sub-action; the Gaussian's mean clipped to the ``Box`` bounds, or unscaled from
``[-1, 1]`` with ``squash_output``, as ``predict`` does). The critic is not exported.

Two layouts name the tensors (see docs/guide/deploy.md):

- ``"plain"``: inputs ``obs`` (``obs_<key>`` for each key of a ``Dict``), ``h`` (and ``c`` for an LSTM), each
  ``(n_layers, batch, hidden)``, ``episode_start`` ``(batch,)``, and ``action_masks`` ``(batch, mask_dims)`` for
  MaskableResetPPO; outputs ``action``, ``h_out`` (and ``c_out``), optionally the distribution's parameters.
- ``"mlagents"``: Unity ML-Agents' contract (model API version 3): inputs ``obs_0`` ..., ``action_masks``
  (discrete actions), ``recurrent_in`` ``(batch, 1, memory_size)``; outputs ``version_number``, ``memory_size``,
  ``continuous_actions`` / ``discrete_actions`` with their ``*_output_shape`` and ``deterministic_*`` twins, and
  ``recurrent_out``. The memory is ``[h | c]`` on the last axis (layers one after the other in each part). Images
  arrive in Unity's [0, 1] scale, channel-first; a GRU is written as elementary operators (``cell_ops``), as no
  version of Unity's Sentis or Inference Engine implements ONNX's ``GRU``.
- ``"godot"``: Godot RL Agents' contract (:mod:`sb3_reset_ppo.export.godot`): one flat float input per observation
  key, ``state_ins`` ``(batch, memory_size)`` (``[h | c]``); outputs ``output`` and ``state_outs``.

With ``vec_normalize`` (:mod:`sb3_reset_ppo.export.normalize`) the graph takes raw observations and normalises them
as SB3's ``VecNormalize`` does, before the preprocessing.
"""

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import (
    MaskableBernoulliDistribution,
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
    StateDependentNoiseDistribution,
)
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from stable_baselines3.common.vec_env import VecNormalize
from torch import nn

from sb3_reset_ppo.common.utils import warn_user
from sb3_reset_ppo.export.normalize import (
    ObservationNormalizer,
    load_vec_normalize,
    normalization_metadata,
    observation_normalizer,
    warn_if_unnormalized,
)
from sb3_reset_ppo.version import __version__

__all__ = [
    "ML_AGENTS_VERSION_NUMBER",
    "SUPPORTED_ACTION_SPACES",
    "SUPPORTED_OBSERVATION_SPACES",
    "ExportSpec",
    "export_onnx",
    "export_spec",
    "read_metadata",
]

Layout = Literal["plain", "mlagents", "godot"]
ExportDtype = Literal["float32", "float16"]
Exporter = Literal["torchscript", "dynamo"]

LAYOUTS: tuple[Layout, ...] = ("plain", "mlagents", "godot")
DTYPES: dict[str, th.dtype] = {"float32": th.float32, "float16": th.float16}
EXPORTERS: tuple[Exporter, ...] = ("torchscript", "dynamo")
# The opsets exported and tested (15 and 17 by the tests; Unity's Sentis reads opsets up to 15)
MIN_OPSET, MAX_OPSET = 14, 20
# The default opset: 15 for Unity (Sentis documents opsets 7 to 15), 17 for the other layouts
MLAGENTS_OPSET, DEFAULT_OPSET = 15, 17
CellOps = Literal["auto", "fused", "elementary"]
CELL_OPS: tuple[CellOps, ...] = ("auto", "fused", "elementary")
# Unity ML-Agents' model API version of the files its 2.x and 3.x trainers write (ModelApiVersion.MLAgents2_0)
ML_AGENTS_VERSION_NUMBER = 3
SUPPORTED_OBSERVATION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
SUPPORTED_ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
_CONTINUOUS_DISTRIBUTIONS = (DiagGaussianDistribution, StateDependentNoiseDistribution)
_DISCRETE_DISTRIBUTIONS = (
    CategoricalDistribution,
    MultiCategoricalDistribution,
    BernoulliDistribution,
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
# A masked logit, as sb3-contrib's maskable distributions set it (float16 holds no -1e8: see _masked_logit)
_MASKED_LOGIT = -1e8


@dataclass(frozen=True)
class ExportSpec:
    """
    What an exported file holds, derived from the policy (the tests and the example read it back from the metadata).

    :param cell: ``"LSTM"`` or ``"GRU"``
    :param n_layers: Recurrent layers of the actor
    :param hidden_size: Hidden size of each layer
    :param obs_keys: The ``Dict`` observation's keys in input order; ``()`` for a single observation
    :param with_masks: Whether the graph takes ``action_masks`` (MaskableResetPPO; every discrete action space in
        the ML-Agents layout)
    :param mask_dims: Width of ``action_masks`` (sb3-contrib's: the sum of the sub-actions' sizes)
    :param branches: Sizes of the discrete sub-actions (a ``MultiBinary`` action: 2 each); ``()`` for ``Box``
    """

    cell: str
    n_layers: int
    hidden_size: int
    obs_keys: tuple[str, ...]
    with_masks: bool
    mask_dims: int
    branches: tuple[int, ...]

    @property
    def n_memory(self) -> int:
        """Memory tensors: 2 (``h``, ``c``) for an LSTM, 1 (``h``) for a GRU."""
        return 2 if self.cell == "LSTM" else 1

    @property
    def memory_size(self) -> int:
        """ML-Agents' ``memory_size``: the width of ``recurrent_in`` (``n_memory * n_layers * hidden_size``)."""
        return self.n_memory * self.n_layers * self.hidden_size


def _masked_logit(dtype: th.dtype) -> float:
    """
    The logit of a masked action: sb3-contrib's -1e8 where ``dtype`` holds it (float32), else the dtype's lowest
    finite value (float16: -65504, where -1e8 overflowed to an error). No finite logit of the dtype is lower, so the
    argmax picks an allowed action unless every allowed logit of a sub-action is -65504 or overflowed.

    :param dtype: The float dtype of the logits
    :return: The masked logit
    """
    return max(_MASKED_LOGIT, float(th.finfo(dtype).min))


def _policy_of(model: Any) -> RecurrentActorCriticPolicy:
    policy = model.policy if isinstance(model, BaseAlgorithm) else model
    if not isinstance(policy, RecurrentActorCriticPolicy):
        raise TypeError(
            f"model must be a ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its recurrent policy "
            f"(a subclass of sb3-contrib's RecurrentActorCriticPolicy: LSTM or GRU, Mlp, Cnn or MultiInput); got "
            f"{type(model).__name__} with policy {type(policy).__name__}"
        )
    return policy


def _check_observation_space(space: spaces.Space) -> tuple[str, ...]:
    """The ``Dict`` keys in input order (``()`` for a single observation); a ``ValueError`` for other spaces."""
    supported = "Box (images included), Discrete, MultiDiscrete, MultiBinary, or a Dict of these"
    if isinstance(space, spaces.Dict):
        for key, subspace in space.spaces.items():
            if not isinstance(subspace, SUPPORTED_OBSERVATION_SPACES):
                raise ValueError(
                    f"observation space key {key!r} is {subspace}, which export does not support: use {supported}"
                )
        return tuple(space.spaces)
    if not isinstance(space, SUPPORTED_OBSERVATION_SPACES):
        raise ValueError(f"observation space {space} is not supported by export: use {supported}")
    return ()


def export_spec(model: Any, layout: str = "plain") -> ExportSpec:
    """
    Check that ``model`` can be exported and describe its exported graph.

    :param model: A ResetPPO, MaskableResetPPO or RecurrentPPO model, or its policy
    :param layout: ``"plain"`` or ``"mlagents"``
    :return: The export's description
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    policy = _policy_of(model)
    rnn = policy.lstm_actor
    if isinstance(rnn, nn.LSTM):
        if rnn.proj_size:
            raise ValueError(f"an LSTM with proj_size={rnn.proj_size} is not supported by export: use proj_size=0")
        cell = "LSTM"
    elif isinstance(rnn, nn.GRU):
        cell = "GRU"
    else:
        raise TypeError(f"the actor's recurrent layer must be nn.LSTM or nn.GRU, got {type(rnn).__name__}")
    if rnn.batch_first or rnn.bidirectional:
        raise ValueError("recurrent layers with batch_first=True or bidirectional=True are not supported by export")
    obs_keys = _check_observation_space(policy.observation_space)
    action_space = policy.action_space
    if not isinstance(action_space, SUPPORTED_ACTION_SPACES):
        raise ValueError(
            f"action space {action_space} is not supported by export: use Box, Discrete, MultiDiscrete or MultiBinary"
        )
    distribution = policy.action_dist
    if not isinstance(distribution, _CONTINUOUS_DISTRIBUTIONS + _DISCRETE_DISTRIBUTIONS):
        raise ValueError(
            f"action distribution {type(distribution).__name__} is not supported by export: use SB3's DiagGaussian, "
            "StateDependentNoise, Categorical, MultiCategorical or Bernoulli distributions, or sb3-contrib's maskable ones"
        )
    maskable = hasattr(policy, "masked_action_dist")
    branches: tuple[int, ...] = ()
    if isinstance(action_space, spaces.Discrete):
        branches = (int(action_space.n),)
    elif isinstance(action_space, spaces.MultiDiscrete):
        branches = tuple(int(n) for n in np.asarray(action_space.nvec).ravel())
    elif isinstance(action_space, spaces.MultiBinary):
        branches = (2,) * int(np.prod(action_space.shape))
    # Godot RL Agents' plugin feeds no masks: a maskable policy's unmasked logits
    with_masks = bool(branches) and ((maskable and layout != "godot") or layout == "mlagents")
    return ExportSpec(
        cell=cell,
        n_layers=rnn.num_layers,
        hidden_size=rnn.hidden_size,
        obs_keys=obs_keys,
        with_masks=with_masks,
        mask_dims=sum(branches),
        branches=branches,
    )


def _copy_policy(policy: RecurrentActorCriticPolicy) -> RecurrentActorCriticPolicy:
    """
    A deep copy of ``policy`` (the export casts and moves it), without the state its distributions keep from the
    last call: gSDE's exploration matrices are not graph leaves, which ``copy.deepcopy`` refuses. The export does
    not read that state.
    """
    distributions = [value for value in vars(policy).values() if isinstance(value, Distribution)]
    saved = [dict(vars(distribution)) for distribution in distributions]
    try:
        for distribution, attributes in zip(distributions, saved, strict=True):
            for name, value in attributes.items():
                if isinstance(value, th.Tensor | th.distributions.Distribution):
                    setattr(distribution, name, None)
        return copy.deepcopy(policy)
    finally:
        for distribution, attributes in zip(distributions, saved, strict=True):
            vars(distribution).update(attributes)


class _ElementaryRecurrent(nn.Module):
    """
    ``nn.LSTM`` / ``nn.GRU`` (every layer, unidirectional, no projection) written with matrix products and pointwise
    operations, PyTorch's own equations, with the same call as the layer it wraps: the exported graph then holds
    ``Gemm``, ``Add``, ``Sigmoid``, ``Tanh``, ``Mul`` and ``Sub`` instead of ONNX's ``LSTM`` or ``GRU`` operator,
    which some engines lack (no version of Unity's Sentis or Inference Engine implements ``GRU``).

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


def _split_memory(flat: th.Tensor, spec: ExportSpec) -> list[th.Tensor]:
    """
    A flat memory ``[h_0 ... h_{L-1} | c_0 ... c_{L-1}]``, ``(batch, memory_size)``, as the recurrent layer's tensors,
    each ``(n_layers, batch, hidden)``: each layer's slice, stacked. Not a reshape and a transpose: torch's dynamo
    exporter needs the memory contiguous, and the copy that makes it so is an ``Identity`` node, which its
    conversion below opset 16 cannot convert.
    """
    width, hidden = spec.n_layers * spec.hidden_size, spec.hidden_size
    parts = [flat[:, index * width : (index + 1) * width] for index in range(spec.n_memory)]  # (batch, L * H) each
    return [th.stack([part[:, layer * hidden : (layer + 1) * hidden] for layer in range(spec.n_layers)]) for part in parts]


def _join_memory(memory: list[th.Tensor]) -> th.Tensor:
    """
    :func:`_split_memory`'s inverse: each ``(n_layers, batch, hidden)`` -> ``(batch, memory_size)``, the layers side by
    side (not a transpose and a reshape, whose copy is an ``Identity`` node: see :func:`_split_memory`).
    """
    layers = [layer for tensor in memory for layer in tensor.unbind(0)]  # (batch, hidden) each
    return th.cat(layers, dim=1) if len(layers) > 1 else layers[0]


class _ActorStep(nn.Module):
    """
    One step of the actor of ``policy``, inputs and outputs in the order of :func:`_io_names`.

    :param policy: The recurrent policy (a copy, on the CPU, in eval mode, of the export's dtype)
    :param spec: The export's description
    :param layout: ``"plain"`` or ``"mlagents"``
    :param dtype: The float dtype of the graph
    :param channels_last: Whether image observations arrive ``(batch, H, W, C)`` (transposed in the graph)
    :param distribution: Whether to output the distribution's parameters (``plain`` layout)
    :param normalizer: ``VecNormalize``'s observation normalisation, applied before SB3's preprocessing, or ``None``
    """

    # Buffers: the Box bounds and ML-Agents' constants
    low: th.Tensor
    high: th.Tensor
    version_number: th.Tensor
    memory_size: th.Tensor
    action_output_shape: th.Tensor

    def __init__(
        self,
        policy: RecurrentActorCriticPolicy,
        spec: ExportSpec,
        layout: Layout,
        dtype: th.dtype,
        channels_last: bool,
        distribution: bool,
        normalizer: ObservationNormalizer | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.spec = spec
        self.layout = layout
        self.dtype = dtype
        self.channels_last = channels_last
        self.distribution = distribution
        self.normalizer = normalizer
        action_space = policy.action_space
        if isinstance(action_space, spaces.Box):
            self.register_buffer("low", th.as_tensor(action_space.low, dtype=dtype).reshape(-1))
            self.register_buffer("high", th.as_tensor(action_space.high, dtype=dtype).reshape(-1))
        # ML-Agents' constants, outputs of the graph (float vectors, as its trainers export them)
        self.register_buffer("version_number", th.tensor([float(ML_AGENTS_VERSION_NUMBER)]))
        self.register_buffer("memory_size", th.tensor([float(spec.memory_size)]))
        if spec.branches:
            self.register_buffer("action_output_shape", th.tensor([[float(n) for n in spec.branches]]))
        else:
            # A Box (export_spec): its flattened size
            self.register_buffer("action_output_shape", th.tensor([float(spaces.flatdim(action_space))]))

    def _observation(self, raw: list[th.Tensor]) -> th.Tensor | dict[str, th.Tensor]:
        """SB3's ``preprocess_obs`` of the observation inputs, then cast to the graph's dtype."""
        space = self.policy.observation_space
        keys = self.spec.obs_keys or ("",)
        subspaces = [cast(spaces.Dict, space)[key] for key in keys] if self.spec.obs_keys else [space]
        obs: dict[str, th.Tensor] = {}
        for key, subspace, tensor in zip(keys, subspaces, raw, strict=True):
            if isinstance(subspace, spaces.Discrete) and self.layout == "mlagents":
                # ML-Agents feeds (batch, 1)
                tensor = tensor.reshape(-1)  # (batch, 1) -> (batch,)
            if self.channels_last and is_image_space(subspace, check_channels=False) and len(subspace.shape or ()) == 3:
                tensor = tensor.permute(0, 3, 1, 2)  # (batch, H, W, C) -> (batch, C, H, W)
            obs[key] = tensor
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        # Unity's sensors give images in [0, 1] (ML-Agents' ObservationWriter.WriteTexture divides by 255): the
        # ML-Agents layout takes them so, where predict divides uint8 images by 255
        normalize_images = self.policy.normalize_images and self.layout != "mlagents"
        processed = preprocess_obs(obs if self.spec.obs_keys else obs[""], space, normalize_images=normalize_images)
        if isinstance(processed, dict):
            return {key: value.to(self.dtype) for key, value in processed.items()}
        return processed.to(self.dtype)

    def _memory_in(self, memory: list[th.Tensor], episode_start: th.Tensor | None) -> list[th.Tensor]:
        """The memory entering the step, each ``(n_layers, batch, hidden)``, zeroed at episode starts."""
        spec = self.spec
        if self.layout == "mlagents":
            memory = _split_memory(memory[0][:, 0], spec)  # (batch, 1, memory_size) -> (batch, memory_size) -> parts
        if episode_start is not None:
            # sb3-contrib's rule: the memory entering the step times (1 - episode_start); (batch,) -> (1, batch, 1)
            keep = (1.0 - episode_start).reshape(1, -1, 1)
            memory = [keep * tensor for tensor in memory]
        return memory

    def _memory_out(self, memory: list[th.Tensor]) -> list[th.Tensor]:
        if self.layout != "mlagents":
            return memory
        return [_join_memory(memory).unsqueeze(1)]  # [h | c] (batch, memory_size) -> (batch, 1, memory_size)

    def _discrete(self, logits: th.Tensor, masks: th.Tensor | None) -> tuple[th.Tensor, th.Tensor]:
        """The deterministic action (argmax per sub-action, ``(batch, n_branches)``) and the masked logits."""
        policy = self.policy
        dist = policy.action_dist
        if isinstance(dist, BernoulliDistribution) and not isinstance(dist, MaskableBernoulliDistribution):
            # SB3's mode rounds sigmoid(x): 1 where x > 0. As two logits (0, x), argmax picks the first on a tie
            zeros = th.zeros_like(logits)
            logits = th.stack([zeros, logits], dim=2).reshape(logits.shape[0], -1)  # (batch, n) -> (batch, 2 n)
        if masks is not None:
            logits = th.where(masks > 0.5, logits, th.full_like(logits, _masked_logit(logits.dtype)))
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

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        spec = self.spec
        policy = self.policy
        n_obs = max(len(spec.obs_keys), 1)
        raw_obs, rest = list(inputs[:n_obs]), list(inputs[n_obs:])
        if self.layout == "plain":
            memory, rest = rest[: spec.n_memory], rest[spec.n_memory :]
            episode_start: th.Tensor | None = rest.pop(0)
            masks = rest.pop(0) if spec.with_masks else None
        else:
            masks = rest.pop(0) if spec.with_masks else None
            memory, episode_start = [rest.pop(0)], None
        features = policy.pi_features_extractor(self._observation(raw_obs))
        state = self._memory_in(memory, episode_start)
        rnn_input = features.unsqueeze(0)  # (batch, F) -> (1, batch, F): one step
        if spec.cell == "LSTM":
            output, (hidden, cell) = policy.lstm_actor(rnn_input, (state[0], state[1]))
            new_memory = [hidden, cell]
        else:
            output, hidden = policy.lstm_actor(rnn_input, state[0])
            new_memory = [hidden]
        latent_pi = policy.mlp_extractor.forward_actor(output[0])
        logits = policy.action_net(latent_pi)
        parameters: list[th.Tensor]
        if spec.branches:
            actions, masked_logits = self._discrete(logits, masks)
            if isinstance(policy.action_space, spaces.Discrete) and self.layout == "plain":
                actions = actions[:, 0]  # (batch, 1) -> (batch,), as predict; ML-Agents keeps (batch, n_branches)
            parameters = [masked_logits]
        else:
            mean = logits
            actions = mean
            if policy.squash_output:
                # SB3's squashed Gaussian mode, then predict's unscale_action: [-1, 1] -> [low, high]
                actions = self.low + 0.5 * (th.tanh(mean) + 1.0) * (self.high - self.low)
            else:
                # predict clips to the bounds
                actions = th.minimum(th.maximum(actions, self.low), self.high)
            shape = cast(tuple[int, ...], policy.action_space.shape)
            actions = actions.reshape(-1, *shape)  # (batch, prod(shape)) -> (batch, *shape)
            parameters = [mean, self._log_std(mean, latent_pi)] if self.distribution else []
        memory_out = self._memory_out(new_memory)
        if self.layout == "plain":
            return (actions, *memory_out, *(parameters if self.distribution else []))
        constants: list[th.Tensor] = [self.version_number, self.memory_size]
        # ML-Agents' stochastic outputs carry the deterministic action too (no sampling in the graph)
        action_outputs = [actions, self.action_output_shape, actions]
        return (*constants, *action_outputs, *memory_out)


def _io_names(spec: ExportSpec, layout: Layout, distribution: bool) -> tuple[list[str], list[str]]:
    """Input and output names, in the order of :meth:`_ActorStep.forward`."""
    memory = ["h", "c"][: spec.n_memory]
    if layout == "plain":
        obs = [f"obs_{key}" for key in spec.obs_keys] or ["obs"]
        inputs = [*obs, *memory, "episode_start"] + (["action_masks"] if spec.with_masks else [])
        parameters = ["logits"] if spec.branches else ["mean", "log_std"]
        outputs = ["action"] + [f"{name}_out" for name in memory] + (parameters if distribution else [])
        return inputs, outputs
    obs = [f"obs_{index}" for index in range(max(len(spec.obs_keys), 1))]
    inputs = [*obs] + (["action_masks"] if spec.with_masks else []) + ["recurrent_in"]
    kind = "discrete" if spec.branches else "continuous"
    outputs = [
        "version_number",
        "memory_size",
        f"{kind}_actions",
        f"{kind}_action_output_shape",
        f"deterministic_{kind}_actions",
        "recurrent_out",
    ]
    return inputs, outputs


def _example_inputs(
    policy: RecurrentActorCriticPolicy, spec: ExportSpec, layout: Layout, dtype: th.dtype, channels_last: bool, batch: int
) -> tuple[list[th.Tensor], list[tuple[int | str, ...]]]:
    """Example inputs of the graph (zeros; observations sampled) and their shapes with ``"batch"`` as the batch axis."""
    space = policy.observation_space
    subspaces = [cast(spaces.Dict, space)[key] for key in spec.obs_keys] if spec.obs_keys else [space]
    tensors: list[th.Tensor] = []
    shapes: list[tuple[int | str, ...]] = []
    for subspace in subspaces:
        shape = tuple(int(n) for n in (subspace.shape or ()))
        if channels_last and is_image_space(subspace, check_channels=False) and len(shape) == 3:
            shape = (shape[1], shape[2], shape[0])  # (C, H, W) -> (H, W, C)
        if isinstance(subspace, spaces.Discrete) and layout == "mlagents":
            shape = (1,)
        tensors.append(th.zeros((batch, *shape), dtype=dtype))
        shapes.append(("batch", *shape))
    memory_shape: tuple[int | str, ...]
    if layout == "plain":
        memory_shape = (spec.n_layers, "batch", spec.hidden_size)
        for _ in range(spec.n_memory):
            tensors.append(th.zeros((spec.n_layers, batch, spec.hidden_size), dtype=dtype))
            shapes.append(memory_shape)
        tensors.append(th.zeros(batch, dtype=dtype))
        shapes.append(("batch",))
        if spec.with_masks:
            tensors.append(th.ones((batch, spec.mask_dims), dtype=dtype))
            shapes.append(("batch", spec.mask_dims))
    else:
        if spec.with_masks:
            tensors.append(th.ones((batch, spec.mask_dims), dtype=dtype))
            shapes.append(("batch", spec.mask_dims))
        tensors.append(th.zeros((batch, 1, spec.memory_size), dtype=dtype))
        shapes.append(("batch", 1, spec.memory_size))
    return tensors, shapes


def _metadata(
    model: Any,
    policy: RecurrentActorCriticPolicy,
    spec: ExportSpec,
    layout: Layout,
    opset: int,
    dtype: str,
    exporter: str,
    channels_last: bool,
    inputs: list[str],
    outputs: list[str],
    shapes: list[tuple[int | str, ...]],
) -> dict[str, str]:
    """The file's ``metadata_props``: strings, structured ones as JSON."""
    memory_names = ["h", "c"][: spec.n_memory]
    images = f"uint8-bounded image Box divided by 255 when normalize_images={policy.normalize_images}"
    if layout == "mlagents":
        images = "uint8-bounded image Box taken in [0, 1], Unity's scale (not divided by 255)"
    return {
        "producer": "sb3_reset_ppo.export",
        "sb3_reset_ppo_version": __version__,
        "torch_version": th.__version__,
        "algorithm": type(model).__name__ if isinstance(model, BaseAlgorithm) else "",
        "policy": type(policy).__name__,
        "layout": layout,
        "opset": str(opset),
        "dtype": dtype,
        "exporter": exporter,
        "observation_space": repr(policy.observation_space),
        "action_space": repr(policy.action_space),
        "observation_keys": json.dumps(list(spec.obs_keys)),
        "channels_last": json.dumps(channels_last),
        "preprocessing": (
            f"in the graph: SB3's preprocess_obs ({images}, one-hot of Discrete/MultiDiscrete, Dict keys through the "
            "combined extractor)"
        ),
        "memory": json.dumps(
            {
                "cell": spec.cell,
                "tensors": memory_names,
                "n_layers": spec.n_layers,
                "hidden_size": spec.hidden_size,
                "shape": ["n_layers", "batch", "hidden_size"] if layout == "plain" else ["batch", 1, "memory_size"],
                "memory_size": spec.memory_size,
                "reset": "memory * (1 - episode_start)" if layout == "plain" else "zeros at an episode start",
            }
        ),
        "action": json.dumps(
            {
                "kind": "discrete" if spec.branches else "continuous",
                "branches": list(spec.branches),
                "deterministic": True,
                "masks": "action_masks: 1 = allowed, 0 = masked" if spec.with_masks else None,
            }
        ),
        "inputs": json.dumps(dict(zip(inputs, [list(shape) for shape in shapes], strict=True))),
        "outputs": json.dumps(outputs),
    }


def export_onnx(
    model: Any,
    path: str | Path,
    *,
    layout: str = "plain",
    opset: int | None = None,
    dtype: str = "float32",
    distribution: bool = False,
    channels_last: bool = False,
    exporter: str = "torchscript",
    cell_ops: str = "auto",
    vec_normalize: VecNormalize | str | Path | None = None,
) -> Path:
    """
    Export one step of a recurrent policy's actor to an ONNX file, the memory as inputs and outputs.

    :param model: A ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its recurrent policy
    :param path: The ONNX file to write
    :param layout: ``"plain"`` (``obs``, ``h``, ``c``, ``episode_start`` -> ``action``, ``h_out``, ``c_out``) or
        ``"mlagents"`` (Unity ML-Agents' tensor names and constants); see the module's docstring
    :param opset: The ONNX opset, 14 to 20 (15 and 17 are tested); default: 15 for ``"mlagents"`` (Unity's Sentis
        documents opsets 7 to 15), else 17
    :param dtype: ``"float32"`` or ``"float16"`` (weights, float inputs and outputs; see docs/guide/deploy.md for
        the tolerance)
    :param distribution: Also output the distribution's parameters (``plain`` layout): the (masked) ``logits`` of
        a discrete action, or the Gaussian's ``mean`` and ``log_std`` (before clipping or squashing)
    :param channels_last: Take image observations as ``(batch, H, W, C)``, as the env gives them before SB3's
        ``VecTransposeImage`` (the graph transposes them); default: the policy's ``(batch, C, H, W)``. Not with
        ``"mlagents"``: Unity feeds ``(batch, C, H, W)``
    :param exporter: ``"torchscript"`` (``torch.onnx.export(..., dynamo=False)``, the default: see
        docs/guide/deploy.md) or ``"dynamo"`` (torch's ``torch.export``-based exporter; needs ``onnxscript``). An
        exporter that cannot write ``opset`` (the dynamo exporter at 14 writes 18) is a ``ValueError``
    :param cell_ops: How the recurrent layer is written: ``"fused"`` (ONNX's ``LSTM`` or ``GRU`` operator),
        ``"elementary"`` (matrix products and pointwise operations, for engines without those operators) or
        ``"auto"``: elementary for a GRU in the ``"mlagents"`` layout (Unity has no ``GRU`` operator), else fused
    :param vec_normalize: The ``VecNormalize`` the model was trained with, or the path of its pickle (the RL Zoo's
        ``vecnormalize.pkl``): the graph then takes raw observations and normalises them as it does (clipped to
        ``clip_obs``; a ``Dict``'s ``norm_obs_keys``); the metadata's ``vec_normalize`` says so. ``None``: the graph
        takes observations as the policy sees them (a warning when the model's env is a ``VecNormalize``)
    :return: ``path``
    """
    import onnx

    spec = export_spec(model, layout)
    checked_layout = cast(Layout, layout)
    if opset is None:
        opset = MLAGENTS_OPSET if layout == "mlagents" else DEFAULT_OPSET
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an integer from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    if cell_ops not in CELL_OPS:
        raise ValueError(f"cell_ops must be one of {CELL_OPS}, got {cell_ops!r}")
    if channels_last and layout == "mlagents":
        raise ValueError(
            "channels_last=True is not supported with layout='mlagents': Unity ML-Agents feeds images channel-first, "
            "(batch, C, H, W), as the layout takes them; export with channels_last=False"
        )
    elementary = cell_ops == "elementary" or (cell_ops == "auto" and layout == "mlagents" and spec.cell == "GRU")
    if layout == "mlagents" and opset > MLAGENTS_OPSET:
        warn_user(
            f"layout='mlagents' with opset={opset}: Unity's Sentis imports opsets 7 to {MLAGENTS_OPSET} and will refuse "
            f"the file; leave opset at its default ({MLAGENTS_OPSET}) for Unity"
        )
    if layout == "mlagents" and spec.cell == "GRU" and not elementary:
        warn_user(
            "layout='mlagents' with cell_ops='fused' writes ONNX's GRU operator, which no Sentis or Inference Engine "
            "version implements: Unity cannot load the file; use cell_ops='auto' (elementary operators for a GRU)"
        )
    if distribution and layout != "plain":
        raise ValueError(f"distribution=True needs layout='plain' (the engines' layouts have no such outputs), got {layout!r}")
    normalizer = None
    if vec_normalize is None:
        warn_if_unnormalized(model)
    else:
        normalizer = observation_normalizer(load_vec_normalize(vec_normalize), _policy_of(model).observation_space)
    torch_dtype = DTYPES[dtype]
    policy = _copy_policy(_policy_of(model)).to(device="cpu", dtype=torch_dtype)
    policy.set_training_mode(False)
    if elementary:
        policy.add_module("lstm_actor", _ElementaryRecurrent(policy.lstm_actor))
    # The Godot layout wraps the plain one (sb3_reset_ppo.export.godot), with the logits of a discrete action
    inner: Layout = "plain" if checked_layout == "godot" else checked_layout
    parameters = distribution or (checked_layout == "godot" and bool(spec.branches))
    step: nn.Module = _ActorStep(policy, spec, inner, torch_dtype, channels_last, parameters, normalizer).eval()
    input_names, output_names = _io_names(spec, inner, parameters)
    batch = 2
    example, shapes = _example_inputs(policy, spec, inner, torch_dtype, channels_last, batch)
    if checked_layout == "godot":
        from sb3_reset_ppo.export.godot import godot_graph

        step, input_names, output_names, example, shapes = godot_graph(cast(_ActorStep, step), example, shapes)
    dynamic_axes: dict[str, dict[int, str]] = {
        name: {axis: "batch" for axis, size in enumerate(shape) if size == "batch"}
        for name, shape in zip(input_names, shapes, strict=True)
    }
    batch_outputs = {"action": 0, "h_out": 1, "c_out": 1, "logits": 0, "mean": 0, "log_std": 0, "recurrent_out": 0}
    batch_outputs.update({f"{kind}_actions": 0 for kind in ("discrete", "continuous", "deterministic_discrete")})
    batch_outputs["deterministic_continuous_actions"] = 0
    batch_outputs.update(output=0, state_outs=0)
    dynamic_axes.update({name: {batch_outputs[name]: "batch"} for name in output_names if name in batch_outputs})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with th.no_grad():
        if exporter == "torchscript":
            _export_torchscript(step, tuple(example), path, opset, input_names, output_names, dynamic_axes)
        else:
            th.onnx.export(
                step,
                tuple(example),
                str(path),
                input_names=input_names,
                output_names=output_names,
                opset_version=opset,
                # torch.export's form of dynamic_axes: one {axis: Dim} per positional input
                dynamic_shapes=(tuple(dict.fromkeys(dynamic_axes[name], th.export.Dim.DYNAMIC) for name in input_names),),
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    proto = onnx.load(str(path))
    written = next(entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx"))
    if written != opset:
        path.unlink()
        raise ValueError(
            f"exporter={exporter!r} wrote opset {written}, not the opset={opset} asked for (torch's dynamo exporter "
            "builds opset 18 and converts down, which fails for some graphs): use exporter='torchscript' or another "
            "opset; no file was written"
        )
    metadata = _metadata(
        model, policy, spec, checked_layout, opset, dtype, exporter, channels_last, input_names, output_names, shapes
    )
    metadata["cell_ops"] = "elementary" if elementary else "fused"
    source = "" if vec_normalize is None else "object" if isinstance(vec_normalize, VecNormalize) else str(vec_normalize)
    metadata.update(normalization_metadata(normalizer, source))
    if checked_layout == "godot":
        from sb3_reset_ppo.export.godot import godot_metadata

        metadata.update(godot_metadata(metadata, spec))
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.doc_string = "One step of a recurrent policy's actor, exported by sb3_reset_ppo.export (docs/guide/deploy.md)"
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    return path


def _export_torchscript(
    step: nn.Module,
    example: tuple[th.Tensor, ...],
    path: Path,
    opset: int,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    """``torch.onnx.export(..., dynamo=False)`` with its deprecation and tracer warnings silenced (see the guide)."""
    import warnings

    with warnings.catch_warnings():
        # The deprecation notice of the TorchScript-based exporter, the tracer's notes on nn.LSTM/nn.GRU's own shape
        # checks (constant for a given model), and the note on GRU exports with a batch other than 1 (the memory's
        # batch axis is dynamic here, and the tests run batches of 1 and several)
        warnings.simplefilter("ignore")
        th.onnx.export(
            step,
            example,
            str(path),
            input_names=input_names,
            output_names=output_names,
            opset_version=opset,
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
            dynamo=False,
        )


def read_metadata(path: str | Path) -> dict[str, str]:
    """
    The ``metadata_props`` of an exported file (onnx only; the torch-free example reads them with onnxruntime).

    :param path: The ONNX file
    :return: Its metadata as strings
    """
    import onnx

    return {entry.key: entry.value for entry in onnx.load(str(path)).metadata_props}
