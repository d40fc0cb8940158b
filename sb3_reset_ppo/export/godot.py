"""
The ``"godot"`` layout: the tensors of Godot RL Agents' ONNX inference, with the memory.

Godot RL Agents' plugin (``addons/godot_rl_agents/onnx/csharp/ONNXInference.cs``, read at
edbeeching/godot_rl_agents_plugin@bf5d6a2d) feeds each key of an agent's ``get_obs()`` dictionary as a float tensor
``(batch, n)`` named by the key, and ``state_ins``; it reads the float outputs ``output`` and ``state_outs``. Its
own exporter (godot_rl_agents' ``export_model_as_onnx``) names a single observation ``obs`` and passes ``state_ins``
through as ``state_outs``, of shape ``(batch,)``. ``sync.gd`` then takes, per action key of the agent's action space,
the argmax (or a softmax sample) of a discrete key's ``size`` values of ``output``, or a continuous key's ``size``
values clamped to ``[-1, 1]``. godot_rl_agents (0.8.2) trains SB3 on a ``MultiDiscrete`` of the discrete keys' sizes
when every key is discrete (one key too: ``MultiDiscrete([n])``), else on a ``Box(-1, 1)`` with one value per
continuous dimension and one per discrete key of size 2 (its sign): the plugin reads 2 logits for such a key, so a
file of an agent that mixes the two does not fit it (:class:`GodotLayout` warns).

This layout keeps those names and dtypes (float32) and gives the memory a width:

- inputs: one per observation key (a ``Dict``'s keys, named as the keys; a single observation ``obs``), each
  ``(batch, n)`` float with ``n`` its flattened size (the graph reshapes it to the policy's shape; a ``Discrete``
  observation is its index, ``n = 1``); ``state_ins`` ``(batch, memory_size)``: ``[h | c]``, each the layers one
  after the other, zeros at an episode's first step (the graph has no ``episode_start``);
- outputs: ``output`` ``(batch, n_out)`` float: for a discrete action the logits of each sub-action one after the
  other (``MultiBinary``: ``(0, logit)`` per entry, so that the plugin's argmax is SB3's mode and its softmax sample
  is the Bernoulli), for a ``Box`` the deterministic action as ``predict`` returns it (clipped to the bounds, or
  unscaled from ``[-1, 1]`` with ``squash_output``); ``state_outs`` ``(batch, memory_size)``: the next step's
  ``state_ins``.

The plugin as released passes a single number as ``state_ins`` and throws ``state_outs`` away:
``docs/deploy/godot_plugin_memory.patch`` makes it keep ``state_outs`` per agent, feed it back and zero it when the
agent's episode ends (docs/guide/deploy.md). The plugin feeds no action masks: a MaskableResetPPO policy is exported
without them (``predict`` without masks).
"""

import json
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch import nn

from sb3_reset_ppo.common.utils import warn_user
from sb3_reset_ppo.export.actor import ActorStep, ExportSpec, join_memory, observation_shapes, split_memory
from sb3_reset_ppo.export.layout import ExportOptions, Graph, Layout

__all__ = [
    "GODOT_MEMORY_INPUT",
    "GODOT_MEMORY_OUTPUT",
    "GODOT_OUTPUT",
    "GODOT_SINGLE_OBSERVATION",
    "GodotLayout",
    "GodotStep",
]

GODOT_MEMORY_INPUT = "state_ins"
GODOT_MEMORY_OUTPUT = "state_outs"
GODOT_OUTPUT = "output"
# The name of a single (non-Dict) observation: the key Godot RL Agents' AIController.get_obs() returns by default
GODOT_SINGLE_OBSERVATION = "obs"


class GodotStep(nn.Module):
    """
    The Godot layout's module around the actor's step: flat observations reshaped to the actor's shapes, ``state_ins``
    split into ``h`` (and ``c``), no ``episode_start`` (the plugin zeroes the memory) and no masks, then ``output``
    (a discrete action's logits; a ``Box``'s action) and ``state_outs``.

    :param actor: One step of the actor
    :param obs_shapes: Each observation input's shape as the actor takes it, without the batch axis
    """

    def __init__(self, actor: ActorStep, obs_shapes: list[tuple[int, ...]]) -> None:
        super().__init__()
        self.actor = actor
        self.spec = actor.spec
        self.obs_shapes = obs_shapes

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        spec = self.spec
        *flat_obs, state_ins = inputs
        # (batch, n) -> (batch, *shape); a Discrete index (batch, 1) -> (batch,)
        obs = [tensor.reshape(-1, *shape) for tensor, shape in zip(flat_obs, self.obs_shapes, strict=True)]
        memory = split_memory(state_ins, spec)  # (batch, memory_size) -> each (L, batch, H)
        step = self.actor(obs, memory)
        # Discrete: the (batch, sum of branches) logits; Box: the action, (batch, *shape) -> (batch, action_dim)
        output = step.parameters[0] if spec.branches else step.action.reshape(step.action.shape[0], -1)
        state_outs = join_memory(step.memory)  # each (L, batch, H) -> [h | c] (batch, memory_size)
        return output, state_outs


class GodotLayout(Layout):
    """Godot RL Agents' layout: one flat input per observation key, ``state_ins`` -> ``output``, ``state_outs``."""

    name: ClassVar[str] = "godot"
    memory_shape: ClassVar[tuple[str | int, ...]] = ("batch", "memory_size")

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        # The plugin feeds no masks: a maskable policy's unmasked logits
        return False

    def check(self, policy: RecurrentActorCriticPolicy, spec: ExportSpec, options: ExportOptions) -> None:
        """What the plugin cannot run: float16 (it feeds float32 tensors), a key named ``state_ins``; a warning for a
        ``Box`` action beyond ``[-1, 1]`` (the plugin clamps continuous actions to it), and for godot_rl_agents'
        ``Box(-1, 1)`` (an agent that mixes continuous and discrete keys is trained on it, and does not fit)."""
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

    def graph(self, actor: ActorStep, options: ExportOptions, batch: int) -> Graph:
        spec = actor.spec
        obs_shapes = observation_shapes(actor.policy, spec, options.channels_last)
        names = [*(spec.obs_keys or (GODOT_SINGLE_OBSERVATION,)), GODOT_MEMORY_INPUT]
        shapes: list[tuple[int | str, ...]] = [("batch", int(np.prod(shape))) for shape in obs_shapes]
        shapes.append(("batch", spec.memory_size))
        example = [th.zeros((batch, int(shape[1])), dtype=options.dtype) for shape in shapes]
        module = GodotStep(actor, obs_shapes).eval()
        outputs = [GODOT_OUTPUT, GODOT_MEMORY_OUTPUT]
        return Graph(module, names, outputs, example, shapes, dict.fromkeys(outputs, 0))

    def memory_metadata(self, spec: ExportSpec) -> dict[str, Any]:
        memory = super().memory_metadata(spec)
        memory.update(tensors=[GODOT_MEMORY_INPUT], parts=spec.memory_names)
        return memory

    def extra_metadata(self, spec: ExportSpec) -> dict[str, str]:
        """``godot`` (JSON): what ``output`` and ``state_outs`` hold."""
        output = (
            "the logits of each sub-action, one after the other (MultiBinary: (0, logit) per entry)"
            if spec.branches
            else "the deterministic action, clipped to the Box bounds (unscaled with squash_output)"
        )
        godot = {
            GODOT_OUTPUT: output,
            GODOT_MEMORY_OUTPUT: "[h | c] after the step: feed it back as state_ins; zeros at an episode start",
            "plugin_patch": "docs/deploy/godot_plugin_memory.patch",
        }
        return {"godot": json.dumps(godot)}


GODOT = GodotLayout()
