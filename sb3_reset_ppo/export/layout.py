"""
What a layout is: the tensors an engine feeds and reads, around one step of the actor (:class:`ActorStep`). Each
layout is one module (:mod:`~sb3_reset_ppo.export.plain`, :mod:`~sb3_reset_ppo.export.mlagents`,
:mod:`~sb3_reset_ppo.export.godot`) with one :class:`Layout` subclass; :func:`~sb3_reset_ppo.export.export_onnx`
looks the layout up by its name once and asks it for the rest. A new layout is a new module and one registry entry
(``sb3_reset_ppo.export.onnx_export.LAYOUTS``).
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch as th
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch import nn

from sb3_reset_ppo.export.actor import ActorStep, ExportSpec

__all__ = ["DEFAULT_OPSET", "ExportOptions", "Graph", "Layout"]

# The default opset of the layouts whose engines read any recent opset (onnxruntime)
DEFAULT_OPSET = 17


@dataclass(frozen=True)
class ExportOptions:
    """
    ``export_onnx``'s checked arguments that a layout reads.

    :param dtype: The float dtype of the graph
    :param opset: The ONNX opset
    :param channels_last: Whether image observations arrive ``(batch, H, W, C)``
    :param distribution: Whether the distribution's parameters are outputs
    :param elementary: Whether the recurrent layer is written as elementary operators
    """

    dtype: th.dtype
    opset: int
    channels_last: bool
    distribution: bool
    elementary: bool


@dataclass
class Graph:
    """
    A layout's module and its tensors, as ``torch.onnx.export`` takes them.

    :param module: The module exported: its ``forward`` takes the inputs and returns the outputs, in order
    :param input_names: The inputs' names
    :param output_names: The outputs' names
    :param example: Example inputs (zeros; masks ones), batch 2
    :param input_shapes: The inputs' shapes, ``"batch"`` for the batch axis
    :param output_batch_axes: Per output with a batch axis, that axis
    """

    module: nn.Module
    input_names: list[str]
    output_names: list[str]
    example: list[th.Tensor]
    input_shapes: list[tuple[int | str, ...]]
    output_batch_axes: dict[str, int]

    @property
    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """``torch.onnx.export``'s ``dynamic_axes``: the batch axis of every input and output that has one."""
        axes = {
            name: {axis: "batch" for axis, size in enumerate(shape) if size == "batch"}
            for name, shape in zip(self.input_names, self.input_shapes, strict=True)
        }
        axes.update({name: {axis: "batch"} for name, axis in self.output_batch_axes.items()})
        return axes


class Layout(ABC):
    """
    One layout: its name, defaults and checks, its module around the actor's step, and its metadata.

    :cvar name: The public name (``export_onnx(layout=...)``, ``--layout``)
    :cvar default_opset: The opset exported when none is asked for
    :cvar images_in_unit_range: Whether the engine gives uint8-bounded images in [0, 1] (not divided by 255)
    :cvar distribution_outputs: Whether the layout can output the distribution's parameters (``distribution=True``)
    :cvar memory_shape: The memory's shape in the metadata
    :cvar memory_reset: How an episode start resets the memory, in the metadata
    """

    name: ClassVar[str]
    default_opset: ClassVar[int] = DEFAULT_OPSET
    images_in_unit_range: ClassVar[bool] = False
    distribution_outputs: ClassVar[bool] = False
    memory_shape: ClassVar[tuple[str | int, ...]] = ("batch", 1, "memory_size")
    memory_reset: ClassVar[str] = "zeros at an episode start"

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        """
        Whether the graph takes ``action_masks``.

        :param maskable: Whether the policy is MaskableResetPPO's
        :param branches: The discrete sub-actions' sizes (``()`` for a ``Box``)
        :return: By default, for a maskable policy's discrete action
        """
        return bool(branches) and maskable

    def elementary_by_default(self, spec: ExportSpec) -> bool:
        """
        Whether ``cell_ops="auto"`` writes the recurrent layer as elementary operators (the engine lacks its operator).

        :param spec: The export's description
        :return: By default ``False``: ONNX's ``LSTM`` or ``GRU`` operator
        """
        return False

    def check(self, policy: RecurrentActorCriticPolicy, spec: ExportSpec, options: ExportOptions) -> None:
        """
        Refuse (``ValueError``) what the layout's engine cannot run, warn about what it runs differently.

        :param policy: The policy exported
        :param spec: The export's description
        :param options: The export's options
        """
        if options.distribution and not self.distribution_outputs:
            raise ValueError(
                f"distribution=True needs layout='plain' (the engines' layouts have no such outputs), got {self.name!r}"
            )

    @abstractmethod
    def graph(self, actor: ActorStep, options: ExportOptions, batch: int) -> Graph:
        """
        The layout's module around ``actor``, its tensors' names and its example inputs.

        :param actor: One step of the actor (its ``policy`` and ``spec`` describe the export)
        :param options: The export's options
        :param batch: The example inputs' batch size
        :return: The graph to export
        """

    def images_metadata(self, policy: RecurrentActorCriticPolicy) -> str:
        """
        How the graph takes uint8-bounded images, for the metadata's ``preprocessing``.

        :param policy: The policy exported
        :return: One phrase
        """
        return f"uint8-bounded image Box divided by 255 when normalize_images={policy.normalize_images}"

    def memory_metadata(self, spec: ExportSpec) -> dict[str, Any]:
        """
        The metadata's ``memory`` entry (before JSON).

        :param spec: The export's description
        :return: The cell, tensors, sizes, shape and reset rule
        """
        return {
            "cell": spec.cell,
            "tensors": spec.memory_names,
            "n_layers": spec.n_layers,
            "hidden_size": spec.hidden_size,
            "shape": list(self.memory_shape),
            "memory_size": spec.memory_size,
            "reset": self.memory_reset,
        }

    def extra_metadata(self, spec: ExportSpec) -> dict[str, str]:
        """
        The layout's own metadata entries, after the others.

        :param spec: The export's description
        :return: By default none
        """
        return {}
