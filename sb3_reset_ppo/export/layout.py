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
    """A layout's module and its named tensors, as ``torch.onnx.export`` takes them."""

    module: nn.Module  #: the module exported: its ``forward`` takes the inputs and returns the outputs, in order
    inputs: dict[str, tuple[int | str, ...]]  #: each input's shape, ``"batch"`` for the batch axis
    outputs: dict[str, int | None]  #: each output's batch axis, ``None`` for a constant
    dtype: th.dtype  #: the float dtype of the inputs
    input_dtypes: dict[str, th.dtype] = field(default_factory=dict)  #: the dtype of each input not of ``dtype``

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
    """A layout: its name, defaults and checks, its module around the actor's step, and its metadata."""

    name: ClassVar[str]  #: the public name (``export_onnx(layout=...)``, ``--layout``)
    default_opset: ClassVar[int] = DEFAULT_OPSET  #: the opset exported when none is asked for
    #: the cells whose ONNX operator the engine implements (``cell_ops="auto"`` writes the others as elementary operators)
    fused_cells: ClassVar[tuple[str, ...]] = ("LSTM", "GRU")
    #: whether the engine gives uint8-bounded images in [0, 1], so that the graph does not divide them by 255
    images_in_unit_range: ClassVar[bool] = False
    distribution_outputs: ClassVar[bool] = False  #: whether the layout can output the distribution's parameters
    flat_memory: ClassVar[bool] = True  #: whether the memory is one flat tensor (``Memory.size`` wide), not its own tensors
    memory_shape: ClassVar[tuple[str | int, ...]] = ("batch", 1, "memory_size")  #: the memory's shape in the metadata
    memory_reset: ClassVar[str] = "zeros at an episode start"  #: how an episode start resets the memory, in the metadata

    def with_masks(self, maskable: bool, branches: tuple[int, ...]) -> bool:
        """
        Whether the graph takes ``action_masks``, by default those of a maskable policy's discrete action.

        :param maskable: Whether the policy is MaskableResetPPO's
        :param branches: The discrete sub-actions' sizes, ``()`` for a ``Box``
        """
        return bool(branches) and maskable

    def check(self, policy: ExportablePolicy, spec: ExportSpec, options: ExportOptions) -> None:
        """Refuse (``ValueError``) what the layout's engine cannot run; warn about what it runs differently."""
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
