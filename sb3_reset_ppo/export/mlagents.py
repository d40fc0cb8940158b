"""The ``"mlagents"`` layout: Unity ML-Agents' tensors and constants, model API version 3 (docs/guide/deploy.md)."""

from typing import ClassVar

import torch as th
from gymnasium import spaces
from torch import nn

from sb3_reset_ppo.common.utils import warn_user
from sb3_reset_ppo.export.actor import ActorStep, ExportablePolicy, ExportSpec, observation_shapes, observation_spaces
from sb3_reset_ppo.export.layout import MASKS, ExportOptions, Graph, Layout

# Unity ML-Agents' model API version of the files its 2.x and 3.x trainers write (ModelApiVersion.MLAgents2_0)
ML_AGENTS_VERSION_NUMBER = 3
# The default opset for Unity: Sentis documents opsets 7 to 15
MLAGENTS_OPSET = 15


class MlAgentsStep(nn.Module):
    """
    The ML-Agents layout's module: ``(*obs_i[, action_masks], recurrent_in)`` -> ``(version_number, memory_size,
    *_actions, *_action_output_shape, deterministic_*_actions, recurrent_out)``.
    """

    # ML-Agents' constants, outputs of the graph (float vectors, as its trainers export them)
    version_number: th.Tensor
    memory_size: th.Tensor
    action_output_shape: th.Tensor

    def __init__(self, actor: ActorStep) -> None:
        super().__init__()
        self.actor = actor
        spec = actor.spec
        # ML-Agents feeds a Discrete observation as (batch, 1)
        self.discrete_obs = [isinstance(space, spaces.Discrete) for space in observation_spaces(actor.policy, spec)]
        self.register_buffer("version_number", th.tensor([float(ML_AGENTS_VERSION_NUMBER)]))
        self.register_buffer("memory_size", th.tensor([float(spec.memory_size)]))
        # Each branch's size, or a Box's flattened size
        shape = [[float(n) for n in spec.branches]] if spec.branches else [float(spaces.flatdim(actor.policy.action_space))]
        self.register_buffer("action_output_shape", th.tensor(shape))

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        spec = self.actor.spec
        n_obs = max(len(spec.obs_keys), 1)
        # (batch, 1) -> (batch,) for a Discrete observation
        obs = [
            tensor.reshape(-1) if discrete else tensor
            for tensor, discrete in zip(inputs[:n_obs], self.discrete_obs, strict=True)
        ]
        masks = inputs[n_obs] if spec.with_masks else None
        memory = spec.memory.split(inputs[-1][:, 0])  # (batch, 1, memory_size) -> (batch, memory_size) -> parts
        action, new_memory, _ = self.actor(obs, memory, None, masks)
        recurrent_out = spec.memory.join(new_memory).unsqueeze(1)  # (batch, memory_size) -> (batch, 1, memory_size)
        # ML-Agents' stochastic outputs carry the deterministic action too (no sampling in the graph)
        return (self.version_number, self.memory_size, action, self.action_output_shape, action, recurrent_out)


class MlAgentsLayout(Layout):
    """Unity ML-Agents' layout: ``obs_i``, ``action_masks``, ``recurrent_in`` -> its actions and ``recurrent_out``."""

    name: ClassVar[str] = "mlagents"
    default_opset: ClassVar[int] = MLAGENTS_OPSET
    # No Sentis or Inference Engine version implements ONNX's GRU
    fused_cells: ClassVar[tuple[str, ...]] = ("LSTM",)
    images_in_unit_range: ClassVar[bool] = True

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        # Unity feeds action_masks to every discrete policy
        return bool(branches)

    def check(self, policy: ExportablePolicy, spec: ExportSpec, options: ExportOptions) -> None:
        if options.channels_last:
            raise ValueError(
                "channels_last=True is not supported with layout='mlagents': Unity ML-Agents feeds images channel-first, "
                "(batch, C, H, W), as the layout takes them; export with channels_last=False"
            )
        if options.opset > MLAGENTS_OPSET:
            warn_user(
                f"layout='mlagents' with opset={options.opset}: Unity's Sentis imports opsets 7 to {MLAGENTS_OPSET} and "
                f"will refuse the file; leave opset at its default ({MLAGENTS_OPSET}) for Unity"
            )
        if spec.cell == "GRU" and not options.elementary:
            warn_user(
                "layout='mlagents' with cell_ops='fused' writes ONNX's GRU operator, which no Sentis or Inference Engine "
                "version implements: Unity cannot load the file; use cell_ops='auto' (elementary operators for a GRU)"
            )
        super().check(policy, spec, options)

    def graph(self, actor: ActorStep, options: ExportOptions) -> Graph:
        spec = actor.spec
        obs_spaces = observation_spaces(actor.policy, spec)
        obs_shapes = observation_shapes(actor.policy, spec, False)
        inputs: dict[str, tuple[int | str, ...]] = {
            f"obs_{index}": ("batch", *((1,) if isinstance(space, spaces.Discrete) else shape))
            for index, (space, shape) in enumerate(zip(obs_spaces, obs_shapes, strict=True))
        }
        if spec.with_masks:
            inputs[MASKS] = ("batch", spec.mask_dims)
        inputs["recurrent_in"] = ("batch", 1, spec.memory_size)
        kind = "discrete" if spec.branches else "continuous"
        outputs = {
            "version_number": None,
            "memory_size": None,
            f"{kind}_actions": 0,
            f"{kind}_action_output_shape": None,
            f"deterministic_{kind}_actions": 0,
            "recurrent_out": 0,
        }
        return Graph(MlAgentsStep(actor).eval(), inputs, outputs, options.dtype)

    def images_metadata(self, policy: ExportablePolicy) -> str:
        return "uint8-bounded image Box taken in [0, 1], Unity's scale (not divided by 255)"
