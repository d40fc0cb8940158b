"""The ``"godot"`` layout: Godot RL Agents' tensors, with the memory given a width (docs/guide/deploy.md)."""

import json
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from torch import nn

from sb3_reset_ppo.common.utils import warn_user
from sb3_reset_ppo.export.actor import ActorStep, ExportablePolicy, ExportSpec, observation_shapes
from sb3_reset_ppo.export.layout import ExportOptions, Graph, Layout

GODOT_MEMORY_INPUT = "state_ins"
GODOT_MEMORY_OUTPUT = "state_outs"
GODOT_OUTPUT = "output"
# The name of a single (non-Dict) observation: the key Godot RL Agents' AIController.get_obs() returns by default
GODOT_SINGLE_OBSERVATION = "obs"


class GodotStep(nn.Module):
    """
    The Godot layout's module: ``(*flat_obs, state_ins)`` -> ``(output, state_outs)``.

    :param obs_shapes: Each observation input's shape as the actor takes it, without the batch axis
    """

    def __init__(self, actor: ActorStep, obs_shapes: list[tuple[int, ...]]) -> None:
        super().__init__()
        self.actor = actor
        self.obs_shapes = obs_shapes

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        spec = self.actor.spec
        *flat_obs, state_ins = inputs
        # (batch, n) -> (batch, *shape); a Discrete index (batch, 1) -> (batch,)
        obs = [tensor.reshape(-1, *shape) for tensor, shape in zip(flat_obs, self.obs_shapes, strict=True)]
        memory = spec.memory.split(state_ins)  # (batch, memory_size) -> the memory's tensors
        action, new_memory, parameters = self.actor(obs, memory)
        # Discrete: the (batch, sum of branches) logits; Box: the action, (batch, *shape) -> (batch, action_dim)
        output = parameters[0] if spec.branches else action.reshape(action.shape[0], -1)
        state_outs = spec.memory.join(new_memory)  # the memory's tensors -> (batch, memory_size)
        return output, state_outs


class GodotLayout(Layout):
    """Godot RL Agents' layout: one flat input per observation key, ``state_ins`` -> ``output``, ``state_outs``."""

    name: ClassVar[str] = "godot"
    memory_shape: ClassVar[tuple[str | int, ...]] = ("batch", "memory_size")

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        # The plugin feeds no masks: a maskable policy's unmasked logits
        return False

    def check(self, policy: ExportablePolicy, spec: ExportSpec, options: ExportOptions) -> None:
        super().check(policy, spec, options)
        if options.dtype != th.float32:
            raise ValueError(
                "dtype must be 'float32' with layout='godot' (Godot RL Agents' plugin feeds float32 tensors), got "
                f"{options.dtype}"
            )
        if GODOT_MEMORY_INPUT in spec.obs_keys:
            raise ValueError(
                f"observation key {GODOT_MEMORY_INPUT!r} is the Godot layout's memory input: rename the key to export "
                "with layout='godot'"
            )
        action_space = policy.action_space
        if not isinstance(action_space, spaces.Box):
            return
        if np.any(action_space.low < -1.0) or np.any(action_space.high > 1.0):
            warn_user(
                f"The action space {action_space} reaches beyond [-1, 1]: Godot RL Agents' plugin clamps continuous "
                "actions to [-1, 1] (sync.gd's _extract_action_dict), so the agent will not get actions outside it"
            )
        elif np.all(action_space.low == -1.0) and np.all(action_space.high == 1.0):
            warn_user(
                f"layout='godot' with the action space {action_space}: output holds one value per dimension, which "
                "fits an agent whose action keys are all continuous. If the agent's get_action_space() mixes "
                "continuous keys with a discrete key, godot_rl_agents (0.8.2) trained this Box with one value per "
                "discrete key of size 2 (its sign), while the plugin reads 2 logits for a discrete key: the file does "
                "not fit such an agent (make the agent's keys all continuous or all discrete, then train again)"
            )

    def graph(self, actor: ActorStep, options: ExportOptions) -> Graph:
        spec = actor.spec
        obs_shapes = observation_shapes(actor.policy, spec, options.channels_last)
        names = spec.obs_keys or (GODOT_SINGLE_OBSERVATION,)
        inputs: dict[str, tuple[int | str, ...]] = {
            name: ("batch", int(np.prod(shape))) for name, shape in zip(names, obs_shapes, strict=True)
        }
        inputs[GODOT_MEMORY_INPUT] = ("batch", spec.memory_size)
        outputs: dict[str, int | None] = {GODOT_OUTPUT: 0, GODOT_MEMORY_OUTPUT: 0}
        return Graph(GodotStep(actor, obs_shapes).eval(), inputs, outputs, options.dtype)

    def memory_metadata(self, spec: ExportSpec) -> dict[str, Any]:
        memory = super().memory_metadata(spec)
        memory.update(tensors=[GODOT_MEMORY_INPUT], parts=spec.memory_names)
        return memory

    def extra_metadata(self, spec: ExportSpec) -> dict[str, str]:
        output = (
            "the logits of each sub-action, one after the other (MultiBinary: (0, logit) per entry)"
            if spec.branches
            else "the deterministic action, clipped to the Box bounds (unscaled with squash_output)"
        )
        godot = {
            GODOT_OUTPUT: output,
            GODOT_MEMORY_OUTPUT: f"[{' | '.join(spec.memory_names)}] after the step: feed it back as state_ins; zeros at an "
            "episode start",
            "plugin_patch": "docs/deploy/godot_plugin_memory.patch",
        }
        return {"godot": json.dumps(godot)}
