"""
The ``"mlagents"`` layout: Unity ML-Agents' contract (model API version 3), so that the file drops into a Unity
project's ``Behavior Parameters`` as a model.

- inputs: ``obs_0`` ... (a ``Dict``'s keys in order; a ``Discrete`` observation ``(batch, 1)``; images in [0, 1],
  channel-first), ``action_masks`` (any discrete action: Unity always feeds it), ``recurrent_in``
  ``(batch, 1, memory_size)``;
- outputs: ``version_number``, ``memory_size``, ``continuous_actions`` / ``discrete_actions`` with their
  ``*_output_shape`` and ``deterministic_*`` twins, and ``recurrent_out``.

The memory is ``[h | c]`` on the last axis (layers one after the other in each part). A GRU is written as elementary
operators by default, as no version of Unity's Sentis or Inference Engine implements ONNX's ``GRU``.
"""

from typing import ClassVar

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch import nn

from sb3_reset_ppo.common.utils import warn_user
from sb3_reset_ppo.export.actor import ActorStep, ExportSpec, join_memory, observation_shapes, observation_spaces, split_memory
from sb3_reset_ppo.export.layout import ExportOptions, Graph, Layout

__all__ = ["MLAGENTS_OPSET", "ML_AGENTS_VERSION_NUMBER", "MlAgentsLayout", "MlAgentsStep"]

# Unity ML-Agents' model API version of the files its 2.x and 3.x trainers write (ModelApiVersion.MLAgents2_0)
ML_AGENTS_VERSION_NUMBER = 3
# The default opset for Unity: Sentis documents opsets 7 to 15
MLAGENTS_OPSET = 15


class MlAgentsStep(nn.Module):
    """
    The ML-Agents layout's module: ``(*obs_i[, action_masks], recurrent_in)`` -> ``(version_number, memory_size,
    *_actions, *_action_output_shape, deterministic_*_actions, recurrent_out)``.

    :param actor: One step of the actor
    """

    # ML-Agents' constants, outputs of the graph (float vectors, as its trainers export them)
    version_number: th.Tensor
    memory_size: th.Tensor
    action_output_shape: th.Tensor

    def __init__(self, actor: ActorStep) -> None:
        super().__init__()
        self.actor = actor
        spec = self.spec = actor.spec
        # ML-Agents feeds a Discrete observation as (batch, 1)
        self.discrete_obs = [isinstance(space, spaces.Discrete) for space in observation_spaces(actor.policy, spec)]
        self.register_buffer("version_number", th.tensor([float(ML_AGENTS_VERSION_NUMBER)]))
        self.register_buffer("memory_size", th.tensor([float(spec.memory_size)]))
        if spec.branches:
            self.register_buffer("action_output_shape", th.tensor([[float(n) for n in spec.branches]]))
        else:
            # A Box: its flattened size
            self.register_buffer("action_output_shape", th.tensor([float(spaces.flatdim(actor.policy.action_space))]))

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        spec = self.spec
        n_obs = max(len(spec.obs_keys), 1)
        # (batch, 1) -> (batch,) for a Discrete observation
        obs = [
            tensor.reshape(-1) if discrete else tensor
            for tensor, discrete in zip(inputs[:n_obs], self.discrete_obs, strict=True)
        ]
        masks = inputs[n_obs] if spec.with_masks else None
        memory = split_memory(inputs[-1][:, 0], spec)  # (batch, 1, memory_size) -> (batch, memory_size) -> parts
        step = self.actor(obs, memory, None, masks)
        recurrent_out = join_memory(step.memory).unsqueeze(1)  # [h | c] (batch, memory_size) -> (batch, 1, memory_size)
        # ML-Agents' stochastic outputs carry the deterministic action too (no sampling in the graph)
        return (self.version_number, self.memory_size, step.action, self.action_output_shape, step.action, recurrent_out)


class MlAgentsLayout(Layout):
    """Unity ML-Agents' layout: ``obs_i``, ``action_masks``, ``recurrent_in`` -> its actions and ``recurrent_out``."""

    name: ClassVar[str] = "mlagents"
    default_opset: ClassVar[int] = MLAGENTS_OPSET
    images_in_unit_range: ClassVar[bool] = True

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        # Unity feeds action_masks to every discrete policy
        return bool(branches)

    def elementary_by_default(self, spec: ExportSpec) -> bool:
        # No Sentis or Inference Engine version implements ONNX's GRU
        return spec.cell == "GRU"

    def check(self, policy: RecurrentActorCriticPolicy, spec: ExportSpec, options: ExportOptions) -> None:
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

    def graph(self, actor: ActorStep, options: ExportOptions, batch: int) -> Graph:
        spec, dtype = actor.spec, options.dtype
        obs_shapes = [
            (1,) if isinstance(space, spaces.Discrete) else shape
            for space, shape in zip(
                observation_spaces(actor.policy, spec), observation_shapes(actor.policy, spec, False), strict=True
            )
        ]
        names = [f"obs_{index}" for index in range(len(obs_shapes))]
        shapes: list[tuple[int | str, ...]] = [("batch", *shape) for shape in obs_shapes]
        example = [th.zeros((batch, *shape), dtype=dtype) for shape in obs_shapes]
        if spec.with_masks:
            names.append("action_masks")
            shapes.append(("batch", spec.mask_dims))
            example.append(th.ones((batch, spec.mask_dims), dtype=dtype))
        names.append("recurrent_in")
        shapes.append(("batch", 1, spec.memory_size))
        example.append(th.zeros((batch, 1, spec.memory_size), dtype=dtype))
        kind = "discrete" if spec.branches else "continuous"
        actions = [f"{kind}_actions", f"deterministic_{kind}_actions"]
        outputs = ["version_number", "memory_size", actions[0], f"{kind}_action_output_shape", actions[1], "recurrent_out"]
        output_axes = {**dict.fromkeys(actions, 0), "recurrent_out": 0}
        return Graph(MlAgentsStep(actor).eval(), names, outputs, example, shapes, output_axes)

    def images_metadata(self, policy: RecurrentActorCriticPolicy) -> str:
        return "uint8-bounded image Box taken in [0, 1], Unity's scale (not divided by 255)"


MLAGENTS = MlAgentsLayout()
