"""
The ``"godot"`` layout: the tensors of Godot RL Agents' ONNX inference, with the memory.

Godot RL Agents' plugin (``addons/godot_rl_agents/onnx/csharp/ONNXInference.cs``, read at
edbeeching/godot_rl_agents_plugin@bf5d6a2d) feeds each key of an agent's ``get_obs()`` dictionary as a float tensor
``(batch, n)`` named by the key, and ``state_ins``; it reads the float outputs ``output`` and ``state_outs``. Its
own exporter (godot_rl_agents' ``export_model_as_onnx``) names a single observation ``obs`` and passes ``state_ins``
through as ``state_outs``, of shape ``(batch,)``. ``sync.gd`` then takes, per action key of the agent's action space,
the argmax (or a softmax sample) of a discrete key's ``size`` values of ``output``, or a continuous key's ``size``
values clamped to ``[-1, 1]``.

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
import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from torch import nn

from sb3_reset_ppo.export.onnx_export import ExportSpec, _ActorStep, _join_memory, _split_memory

__all__ = ["GODOT_MEMORY_INPUT", "GODOT_MEMORY_OUTPUT", "GODOT_OUTPUT", "GODOT_SINGLE_OBSERVATION", "GodotStep", "godot_graph"]

GODOT_MEMORY_INPUT = "state_ins"
GODOT_MEMORY_OUTPUT = "state_outs"
GODOT_OUTPUT = "output"
# The name of a single (non-Dict) observation: the key Godot RL Agents' AIController.get_obs() returns by default
GODOT_SINGLE_OBSERVATION = "obs"


class GodotStep(nn.Module):
    """
    The plain layout's step (:class:`~sb3_reset_ppo.export.onnx_export._ActorStep`, built with ``layout="plain"``,
    without masks, and with the logits as an output for a discrete action) behind Godot's tensors: flat observations
    reshaped to the plain inputs' shapes, ``state_ins`` split into ``h`` (and ``c``), no ``episode_start`` (``None``:
    the plain step's reset is skipped, the plugin zeroes the memory), then ``output`` and ``state_outs``.

    :param step: The plain layout's step
    :param obs_shapes: Each observation input's shape in the plain layout, without the batch axis
    """

    def __init__(self, step: _ActorStep, obs_shapes: list[tuple[int, ...]]) -> None:
        super().__init__()
        self.step = step
        self.spec = step.spec
        self.obs_shapes = obs_shapes

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        spec = self.spec
        *flat_obs, state_ins = inputs
        # (batch, n) -> (batch, *shape); a Discrete index (batch, 1) -> (batch,)
        obs = [tensor.reshape(-1, *shape) for tensor, shape in zip(flat_obs, self.obs_shapes, strict=True)]
        memory = _split_memory(state_ins, spec)  # (batch, memory_size) -> each (L, batch, H)
        action, *rest = self.step(*obs, *memory, None)
        memory_out, parameters = rest[: spec.n_memory], rest[spec.n_memory :]
        # Discrete: the (batch, sum of branches) logits; Box: the action, (batch, *shape) -> (batch, action_dim)
        output = parameters[0] if spec.branches else action.reshape(action.shape[0], -1)
        state_outs = _join_memory(memory_out)  # each (L, batch, H) -> [h | c] (batch, memory_size)
        return output, state_outs


def godot_graph(
    step: _ActorStep, example: list[th.Tensor], shapes: list[tuple[int | str, ...]]
) -> tuple[GodotStep, list[str], list[str], list[th.Tensor], list[tuple[int | str, ...]]]:
    """
    The Godot layout's module, names, example inputs and input shapes, from the plain layout's.

    :param step: The plain layout's step (``layout="plain"``, the logits output for a discrete action)
    :param example: The plain layout's example inputs (observations, memory, ``episode_start``)
    :param shapes: Their shapes, ``"batch"`` for the batch axis
    :return: The module, input names, output names, example inputs and input shapes
    """
    spec = step.spec
    _check(step)
    n_obs = max(len(spec.obs_keys), 1)
    obs_shapes = [tuple(int(size) for size in shape[1:]) for shape in shapes[:n_obs]]
    batch = example[0].shape[0]
    # (batch, *shape) -> (batch, n)
    inputs = [tensor.reshape(batch, -1) for tensor in example[:n_obs]]
    input_shapes: list[tuple[int | str, ...]] = [("batch", int(np.prod(shape))) for shape in obs_shapes]
    inputs.append(th.zeros((batch, spec.memory_size), dtype=example[0].dtype))
    input_shapes.append(("batch", spec.memory_size))
    input_names = [*(spec.obs_keys or (GODOT_SINGLE_OBSERVATION,)), GODOT_MEMORY_INPUT]
    return GodotStep(step, obs_shapes).eval(), input_names, [GODOT_OUTPUT, GODOT_MEMORY_OUTPUT], inputs, input_shapes


def godot_metadata(metadata: dict[str, str], spec: ExportSpec) -> dict[str, str]:
    """
    The metadata entries that differ in the Godot layout: ``memory`` (its shape and tensors) and ``godot`` (JSON:
    what ``output`` and ``state_outs`` hold).

    :param metadata: The file's metadata as the other layouts write it
    :param spec: The export's description
    :return: The entries to update
    """
    memory: dict[str, Any] = json.loads(metadata["memory"])
    memory.update({"tensors": [GODOT_MEMORY_INPUT], "parts": ["h", "c"][: spec.n_memory], "shape": ["batch", "memory_size"]})
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
    return {"memory": json.dumps(memory), "godot": json.dumps(godot)}


def _check(step: _ActorStep) -> None:
    """What the plugin cannot run: float16 (it feeds float32 tensors), a key named ``state_ins``; a warning for a
    ``Box`` action beyond ``[-1, 1]`` (the plugin clamps continuous actions to it)."""
    if step.dtype != th.float32:
        raise ValueError(
            f"dtype must be 'float32' with layout='godot' (Godot RL Agents' plugin feeds float32 tensors), got {step.dtype}"
        )
    if GODOT_MEMORY_INPUT in step.spec.obs_keys:
        raise ValueError(
            f"observation key {GODOT_MEMORY_INPUT!r} is the Godot layout's memory input: rename the key to export "
            "with layout='godot'"
        )
    action_space = step.policy.action_space
    if isinstance(action_space, spaces.Box) and (np.any(action_space.low < -1.0) or np.any(action_space.high > 1.0)):
        warnings.warn(
            f"The action space {action_space} reaches beyond [-1, 1]: Godot RL Agents' plugin clamps continuous actions "
            "to [-1, 1] (sync.gd's _extract_action_dict), so the agent will not get actions outside it",
            UserWarning,
            stacklevel=4,
        )
