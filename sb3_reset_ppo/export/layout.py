"""A layout: the tensors an engine feeds and reads around one step of the actor, and its checks and metadata."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch as th
from torch import nn

from sb3_reset_ppo.export.actor import ActorStep, ExportablePolicy, ExportOptions, ExportSpec

# The default opset of the layouts whose engines read any recent opset (onnxruntime)
DEFAULT_OPSET = 17
# The action masks' input, sb3-contrib's layout: 1 = allowed
MASKS = "action_masks"


@dataclass
class Graph:
    """
    A layout's module and its named tensors, as ``torch.onnx.export`` takes them.

    :param module: The module exported: its ``forward`` takes the inputs and returns the outputs, in order
    :param inputs: Each input's shape, ``"batch"`` for the batch axis
    :param outputs: Each output's batch axis, ``None`` for a constant
    :param dtype: The float dtype of the inputs
    :param input_dtypes: The dtype of each input that is not of ``dtype``
    """

    module: nn.Module
    inputs: dict[str, tuple[int | str, ...]]
    outputs: dict[str, int | None]
    dtype: th.dtype
    input_dtypes: dict[str, th.dtype] = field(default_factory=dict)

    def example(self, batch: int = 2) -> tuple[th.Tensor, ...]:
        """Example inputs: zeros, and ones (all allowed) for the masks."""
        return tuple(
            (th.ones if name == MASKS else th.zeros)(
                tuple(batch if size == "batch" else int(size) for size in shape), dtype=self.input_dtypes.get(name, self.dtype)
            )
            for name, shape in self.inputs.items()
        )

    @property
    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """``torch.onnx.export``'s ``dynamic_axes``: the batch axis of every input and output that has one."""
        axes = {
            name: {axis: "batch" for axis, size in enumerate(shape) if size == "batch"} for name, shape in self.inputs.items()
        }
        axes.update({name: {axis: "batch"} for name, axis in self.outputs.items() if axis is not None})
        return axes


class Layout(ABC):
    """
    A layout: its name, defaults and checks, its module around the actor's step, and its metadata.

    :cvar name: The public name (``export_onnx(layout=...)``, ``--layout``)
    :cvar default_opset: The opset exported when none is asked for
    :cvar fused_cells: The cells whose ONNX operator the engine implements (``cell_ops="auto"`` writes the others)
    :cvar images_in_unit_range: Whether the engine gives uint8-bounded images in [0, 1], not divided by 255
    :cvar distribution_outputs: Whether the layout can output the distribution's parameters
    :cvar flat_memory: Whether the memory is one flat tensor (:attr:`Memory.size
        <sb3_reset_ppo.export.memory.Memory.size>` wide), not the memory's own tensors
    :cvar memory_shape: The memory's shape in the metadata
    :cvar memory_reset: How an episode start resets the memory, in the metadata
    """

    name: ClassVar[str]
    default_opset: ClassVar[int] = DEFAULT_OPSET
    fused_cells: ClassVar[tuple[str, ...]] = ("LSTM", "GRU")
    images_in_unit_range: ClassVar[bool] = False
    distribution_outputs: ClassVar[bool] = False
    flat_memory: ClassVar[bool] = True
    memory_shape: ClassVar[tuple[str | int, ...]] = ("batch", 1, "memory_size")
    memory_reset: ClassVar[str] = "zeros at an episode start"

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        """
        Whether the graph takes ``action_masks``, by default those of a maskable policy's discrete action.

        :param maskable: Whether the policy is MaskableResetPPO's
        :param branches: The discrete sub-actions' sizes, ``()`` for a ``Box``
        :return: Whether the graph takes the masks
        """
        return bool(branches) and maskable

    def check(self, policy: ExportablePolicy, spec: ExportSpec, options: ExportOptions) -> None:
        """
        Refuse (``ValueError``) what the layout's engine cannot run; warn about what it runs differently.

        :param policy: The policy exported
        :param spec: The export's description
        :param options: The export's options
        """
        if options.distribution and not self.distribution_outputs:
            raise ValueError(
                f"distribution=True needs layout='plain' (the engines' layouts have no such outputs), got {self.name!r}"
            )

    @abstractmethod
    def graph(self, actor: ActorStep, options: ExportOptions) -> Graph:
        """The layout's module around ``actor``, with its tensors."""

    def images_metadata(self, policy: ExportablePolicy) -> str:
        """How the graph takes uint8-bounded images: a phrase of the metadata's ``preprocessing``."""
        return f"uint8-bounded image Box divided by 255 when normalize_images={policy.normalize_images}"

    def memory_metadata(self, spec: ExportSpec) -> dict[str, Any]:
        """The metadata's ``memory`` entry: the cell, tensors, sizes, shape and reset rule."""
        memory = {
            "cell": spec.cell,
            "tensors": spec.memory_names,
            "n_layers": spec.n_layers,
            "hidden_size": spec.hidden_size,
            "shape": list(self.memory_shape),
            "memory_size": spec.memory_size,
            "reset": self.memory_reset,
        }
        memory.update(spec.memory.metadata(self.flat_memory))
        return memory

    def extra_metadata(self, spec: ExportSpec) -> dict[str, str]:
        """The layout's own metadata entries, by default none."""
        return {}
