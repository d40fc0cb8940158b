"""
The memory an exported step carries, behind one interface: :class:`RecurrentMemory` (an LSTM's ``h``, ``c`` or a
GRU's ``h``) here, attention memory in :mod:`sb3_reset_ppo.export.attention`. The layouts and the export call it.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch as th
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn


@dataclass(frozen=True)
class Memory(ABC):
    """The actor's memory as an exported step carries it (the fields as :class:`~sb3_reset_ppo.export.ExportSpec`'s)."""

    cell: str
    n_layers: int
    hidden_size: int
    memory_length: int = 0

    # The policies whose memory this kind exports, and the cells it stands for
    policy_class: ClassVar[type[ActorCriticPolicy]]
    cells: ClassVar[tuple[str, ...]]

    @classmethod
    @abstractmethod
    def of(cls, policy: Any) -> "Memory":
        """The memory of ``policy``, an instance of :attr:`policy_class`; ``ValueError`` where export cannot write it."""

    @property
    @abstractmethod
    def names(self) -> list[str]:
        """The memory tensors' names, as the plain layout's inputs."""

    @property
    @abstractmethod
    def shapes(self) -> list[tuple[int | str, ...]]:
        """The memory tensors' shapes as ``predict``'s state holds them, ``"batch"`` for the env axis."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Width of the flat memory of the engines' layouts."""

    @property
    def dtypes(self) -> dict[str, th.dtype]:
        """The dtype of each memory tensor that ``predict`` holds as another than the graph's float."""
        return {}

    @abstractmethod
    def split(self, flat: th.Tensor) -> list[th.Tensor]:
        """The flat memory ``(batch, size)`` as the tensors of :attr:`shapes`."""

    @abstractmethod
    def join(self, memory: list[th.Tensor]) -> th.Tensor:
        """The inverse of :meth:`split`: the tensors of :attr:`shapes` as one ``(batch, size)`` tensor."""

    @abstractmethod
    def step(self, policy: Any, elementary: bool) -> nn.Module:
        """One step of the exported copy's memory: ``(features, memory, episode_start)`` -> ``(output, memory)``."""

    def elementary(self, cell_ops: str, fused_cells: tuple[str, ...], exporter: str, opset: int) -> bool:
        """Whether the memory is written as elementary operators (``ValueError`` for options it cannot be written with)."""
        return cell_ops == "elementary" or (cell_ops == "auto" and self.cell not in fused_cells)

    def metadata(self, flat: bool) -> dict[str, Any]:
        """The memory's own entries of the metadata's ``memory``, flat (the engines' layouts) or not; by default none."""
        return {}


class ElementaryRecurrent(nn.Module):
    """
    ``nn.LSTM`` / ``nn.GRU`` written as matrix products and pointwise operations, for engines that lack ONNX's
    ``LSTM`` or ``GRU`` operator; called as the layer ``rnn`` it wraps, whose weights it uses (not copied).
    """

    def __init__(self, rnn: nn.LSTM | nn.GRU) -> None:
        super().__init__()
        self.rnn = rnn
        self.is_lstm = isinstance(rnn, nn.LSTM)

    def forward(
        self, sequence: th.Tensor, state: th.Tensor | tuple[th.Tensor, th.Tensor]
    ) -> tuple[th.Tensor, th.Tensor | tuple[th.Tensor, th.Tensor]]:
        rnn = self.rnn
        # h (and c): (n_layers, batch, hidden)
        hidden, cell = state if isinstance(state, tuple) else (state, state)
        hiddens, cells = list(hidden.unbind(0)), list(cell.unbind(0))
        outputs = []
        sizes = [rnn.hidden_size] * (4 if self.is_lstm else 3)
        for step in sequence.unbind(0):  # (seq, batch, F) -> seq x (batch, F); one step in the export
            for layer in range(rnn.num_layers):
                bias_ih = getattr(rnn, f"bias_ih_l{layer}") if rnn.bias else None
                bias_hh = getattr(rnn, f"bias_hh_l{layer}") if rnn.bias else None
                # (batch, G * hidden), G = 4 (LSTM: i, f, g, o) or 3 (GRU: r, z, n)
                gates_x = nn.functional.linear(step, getattr(rnn, f"weight_ih_l{layer}"), bias_ih)
                gates_h = nn.functional.linear(hiddens[layer], getattr(rnn, f"weight_hh_l{layer}"), bias_hh)
                if self.is_lstm:
                    i, f, g, o = (gates_x + gates_h).split(sizes, dim=1)
                    cells[layer] = th.sigmoid(f) * cells[layer] + th.sigmoid(i) * th.tanh(g)
                    hiddens[layer] = th.sigmoid(o) * th.tanh(cells[layer])
                else:
                    x_r, x_z, x_n = gates_x.split(sizes, dim=1)
                    h_r, h_z, h_n = gates_h.split(sizes, dim=1)
                    reset, update = th.sigmoid(x_r + h_r), th.sigmoid(x_z + h_z)
                    new = th.tanh(x_n + reset * h_n)
                    # (1 - z) * n + z * h
                    hiddens[layer] = new + update * (hiddens[layer] - new)
                step = hiddens[layer]
            outputs.append(step)
        output = th.stack(outputs)  # seq x (batch, hidden) -> (seq, batch, hidden)
        if self.is_lstm:
            return output, (th.stack(hiddens), th.stack(cells))
        return output, th.stack(hiddens)


class RecurrentStep(nn.Module):
    """One step of the policy's ``lstm_actor`` (``rnn``, not copied) on its tensors, with sb3-contrib's episode-start rule."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(
        self, features: th.Tensor, memory: list[th.Tensor], episode_start: th.Tensor | None
    ) -> tuple[th.Tensor, list[th.Tensor]]:
        if episode_start is not None:
            # sb3-contrib's rule: the memory entering the step times (1 - episode_start); (batch,) -> (1, batch, 1)
            keep = (1.0 - episode_start).reshape(1, -1, 1)
            memory = [keep * tensor for tensor in memory]
        rnn_input = features.unsqueeze(0)  # (batch, F) -> (1, batch, F): one step
        lstm = len(memory) == 2
        output, state = self.rnn(rnn_input, (memory[0], memory[1]) if lstm else memory[0])
        return output[0], list(state) if lstm else [state]


@dataclass(frozen=True)
class RecurrentMemory(Memory):
    """An LSTM's ``h``, ``c`` or a GRU's ``h``, each ``(n_layers, batch, hidden)``; flat ``[h_0 ... h_{L-1} | c_0 ...]``."""

    policy_class: ClassVar[type[ActorCriticPolicy]] = RecurrentActorCriticPolicy
    cells: ClassVar[tuple[str, ...]] = ("LSTM", "GRU")

    @classmethod
    def of(cls, policy: RecurrentActorCriticPolicy) -> "RecurrentMemory":
        rnn = policy.lstm_actor
        if isinstance(rnn, nn.LSTM):
            if rnn.proj_size:
                raise ValueError(f"an LSTM with proj_size={rnn.proj_size} is not supported by export: use proj_size=0")
            cell = "LSTM"
        elif isinstance(rnn, nn.GRU):
            cell = "GRU"
        else:
            raise TypeError(f"the actor's recurrent layer must be nn.LSTM or nn.GRU, got {type(rnn).__name__}")
        if rnn.batch_first or rnn.bidirectional:
            raise ValueError("recurrent layers with batch_first=True or bidirectional=True are not supported by export")
        return cls(cell, rnn.num_layers, rnn.hidden_size)

    @property
    def names(self) -> list[str]:
        return ["h", "c"] if self.cell == "LSTM" else ["h"]

    @property
    def shapes(self) -> list[tuple[int | str, ...]]:
        return [(self.n_layers, "batch", self.hidden_size)] * len(self.names)

    @property
    def size(self) -> int:
        return len(self.names) * self.n_layers * self.hidden_size

    def split(self, flat: th.Tensor) -> list[th.Tensor]:
        width, hidden = self.n_layers * self.hidden_size, self.hidden_size
        # Slices, not a reshape and a transpose, whose copy (Identity) dynamo cannot convert below opset 16
        parts = [flat[:, index * width : (index + 1) * width] for index in range(len(self.names))]  # (batch, L * H) each
        return [th.stack([part[:, layer * hidden : (layer + 1) * hidden] for layer in range(self.n_layers)]) for part in parts]

    def join(self, memory: list[th.Tensor]) -> th.Tensor:
        layers = [layer for tensor in memory for layer in tensor.unbind(0)]  # (batch, hidden) each
        return th.cat(layers, dim=1) if len(layers) > 1 else layers[0]

    def step(self, policy: RecurrentActorCriticPolicy, elementary: bool) -> nn.Module:
        if elementary:
            policy.add_module("lstm_actor", ElementaryRecurrent(policy.lstm_actor))
        return RecurrentStep(policy.lstm_actor)
