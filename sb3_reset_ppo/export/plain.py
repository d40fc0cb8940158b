"""
The ``"plain"`` layout (the default): the recurrent layer's own tensors, for onnxruntime and robotics stacks.

- inputs: ``obs`` (``obs_<key>`` for each key of a ``Dict``), ``h`` (and ``c`` for an LSTM), each
  ``(n_layers, batch, hidden)``, ``episode_start`` ``(batch,)``, and ``action_masks`` ``(batch, mask_dims)`` for
  MaskableResetPPO;
- outputs: ``action``, ``h_out`` (and ``c_out``), and with ``distribution=True`` the distribution's parameters
  (``logits``, or ``mean`` and ``log_std``).
"""

from typing import ClassVar

import torch as th
from gymnasium import spaces
from torch import nn

from sb3_reset_ppo.export.actor import ActorStep, observation_shapes
from sb3_reset_ppo.export.layout import ExportOptions, Graph, Layout

__all__ = ["PlainLayout", "PlainStep"]


class PlainStep(nn.Module):
    """
    The plain layout's module: ``(*obs, h[, c], episode_start[, action_masks])`` ->
    ``(action, h_out[, c_out][, parameters])``.

    :param actor: One step of the actor
    """

    def __init__(self, actor: ActorStep) -> None:
        super().__init__()
        self.actor = actor
        self.spec = actor.spec
        # predict returns a Discrete action as (batch,), the other discrete ones as (batch, n_branches)
        self.squeeze_action = isinstance(actor.policy.action_space, spaces.Discrete)

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        spec = self.spec
        n_obs = max(len(spec.obs_keys), 1)
        obs, memory = list(inputs[:n_obs]), list(inputs[n_obs : n_obs + spec.n_memory])
        episode_start = inputs[n_obs + spec.n_memory]
        masks = inputs[n_obs + spec.n_memory + 1] if spec.with_masks else None
        step = self.actor(obs, memory, episode_start, masks)
        action = step.action[:, 0] if self.squeeze_action else step.action  # (batch, 1) -> (batch,), as predict
        parameters = step.parameters if self.actor.distribution else []
        return (action, *step.memory, *parameters)


class PlainLayout(Layout):
    """The plain layout: ``obs``, ``h``, ``c``, ``episode_start`` -> ``action``, ``h_out``, ``c_out``."""

    name: ClassVar[str] = "plain"
    distribution_outputs: ClassVar[bool] = True
    memory_shape: ClassVar[tuple[str | int, ...]] = ("n_layers", "batch", "hidden_size")
    memory_reset: ClassVar[str] = "memory * (1 - episode_start)"

    def graph(self, actor: ActorStep, options: ExportOptions, batch: int) -> Graph:
        spec, dtype = actor.spec, options.dtype
        names = [f"obs_{key}" for key in spec.obs_keys] or ["obs"]
        obs_shapes = observation_shapes(actor.policy, spec, options.channels_last)
        shapes: list[tuple[int | str, ...]] = [("batch", *shape) for shape in obs_shapes]
        example = [th.zeros((batch, *shape), dtype=dtype) for shape in obs_shapes]
        for name in spec.memory_names:
            names.append(name)
            shapes.append((spec.n_layers, "batch", spec.hidden_size))
            example.append(th.zeros((spec.n_layers, batch, spec.hidden_size), dtype=dtype))
        names.append("episode_start")
        shapes.append(("batch",))
        example.append(th.zeros(batch, dtype=dtype))
        if spec.with_masks:
            names.append("action_masks")
            shapes.append(("batch", spec.mask_dims))
            example.append(th.ones((batch, spec.mask_dims), dtype=dtype))
        memory_out = [f"{name}_out" for name in spec.memory_names]
        parameters = (["logits"] if spec.branches else ["mean", "log_std"]) if options.distribution else []
        output_axes = {"action": 0, **dict.fromkeys(memory_out, 1), **dict.fromkeys(parameters, 0)}
        return Graph(PlainStep(actor).eval(), names, ["action", *memory_out, *parameters], example, shapes, output_axes)


PLAIN = PlainLayout()
