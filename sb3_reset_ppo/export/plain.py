"""The ``"plain"`` layout (the default): the recurrent layer's own tensors (docs/guide/deploy.md)."""

from typing import ClassVar

import torch as th
from gymnasium import spaces
from torch import nn

from sb3_reset_ppo.export.actor import ActorStep, observation_shapes
from sb3_reset_ppo.export.layout import MASKS, ExportOptions, Graph, Layout


class PlainStep(nn.Module):
    """
    The plain layout's module: ``(*obs, h[, c], episode_start[, action_masks])`` ->
    ``(action, h_out[, c_out][, parameters])``; attention memory's ``memory``, ``n_valid`` in place of ``h``, ``c``.
    """

    def __init__(self, actor: ActorStep) -> None:
        super().__init__()
        self.actor = actor
        # predict returns a Discrete action as (batch,), the other discrete ones as (batch, n_branches)
        self.squeeze_action = isinstance(actor.policy.action_space, spaces.Discrete)

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        spec = self.actor.spec
        n_obs = max(len(spec.obs_keys), 1)
        obs, memory = list(inputs[:n_obs]), list(inputs[n_obs : n_obs + spec.n_memory])
        episode_start = inputs[n_obs + spec.n_memory]
        masks = inputs[n_obs + spec.n_memory + 1] if spec.with_masks else None
        action, new_memory, parameters = self.actor(obs, memory, episode_start, masks)
        action = action[:, 0] if self.squeeze_action else action  # (batch, 1) -> (batch,), as predict
        return (action, *new_memory, *(parameters if self.actor.options.distribution else []))


class PlainLayout(Layout):
    """
    The plain layout: ``obs``, ``h``, ``c``, ``episode_start`` -> ``action``, ``h_out``, ``c_out``; the memory's own
    tensors as ``predict``'s state holds them (attention memory's ``memory`` and ``n_valid``, int64).
    """

    name: ClassVar[str] = "plain"
    distribution_outputs: ClassVar[bool] = True
    flat_memory: ClassVar[bool] = False
    memory_shape: ClassVar[tuple[str | int, ...]] = ("n_layers", "batch", "hidden_size")
    memory_reset: ClassVar[str] = "memory * (1 - episode_start)"

    def graph(self, actor: ActorStep, options: ExportOptions) -> Graph:
        spec = actor.spec
        names = [f"obs_{key}" for key in spec.obs_keys] or ["obs"]
        obs_shapes = observation_shapes(actor.policy, spec, options.channels_last)
        inputs: dict[str, tuple[int | str, ...]] = {
            name: ("batch", *shape) for name, shape in zip(names, obs_shapes, strict=True)
        }
        inputs.update(zip(spec.memory_names, spec.memory_shapes, strict=True))
        inputs["episode_start"] = ("batch",)
        if spec.with_masks:
            inputs[MASKS] = ("batch", spec.mask_dims)
        memory_out = [f"{name}_out" for name in spec.memory_names]
        parameters = (["logits"] if spec.branches else ["mean", "log_std"]) if options.distribution else []
        outputs: dict[str, int | None] = {"action": 0, **dict.fromkeys(memory_out, 1), **dict.fromkeys(parameters, 0)}
        return Graph(PlainStep(actor).eval(), inputs, outputs, options.dtype, spec.memory.dtypes)
