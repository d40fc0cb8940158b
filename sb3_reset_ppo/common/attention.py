"""
Attention memory: pre-layer-norm Transformer-XL blocks over the last ``memory_length`` steps of the episode, with an
optional GTrXL gate, and the one mask that makes reset-and-continue of a window (``docs/design.md``, "Attention
memory").
"""

import math
from typing import Literal, NamedTuple, TypeAlias, get_args

import torch as th
from torch import nn
from torch.nn import functional as F

from sb3_reset_ppo.common.layout import is_episode_start

PositionalEncoding: TypeAlias = Literal["none", "learned", "sinusoidal"]
POSITIONAL_ENCODINGS: tuple[str, ...] = get_args(PositionalEncoding)
# Parisotto et al.'s gate bias: the update gate starts near 0, so each gated block starts near the identity
GATE_BIAS = 2.0


class AttentionState(NamedTuple):
    """
    The memory entering a step, for ``E`` envs (every tensor has the env on axis 1, as sb3-contrib's LSTM states):

    - ``memory``: the block inputs of the ``K`` steps before it (any episode, oldest first), ``(K, E, L, D)``
    - ``n_valid``: how many of them (the last ones) belong to the step's episode, before SB3's episode-start rule,
      ``(1, E)`` int64
    """

    memory: th.Tensor
    n_valid: th.Tensor


def attention_mask(episode_starts: th.Tensor, counts: th.Tensor, memory_length: int) -> th.Tensor:
    """
    Reset-and-continue as one boolean mask: which positions each slot of ``B`` rows attends to.

    The keys of a row are ``memory_length`` memory positions (the steps before the row's first slot, key times
    ``-K .. -1``) then the row's ``W`` slots (times ``0 .. W-1``). Slot ``i`` attends to the key times ``first_i ..
    i`` with ``first_i = max(i - K, last episode start at or before slot i, -counts)``: itself and the last ``K``
    steps before it of its own episode.

    :param episode_starts: SB3's episode-start flags of the slots, ``(B, W)``
    :param counts: Memory positions of the first slot's episode entering the row (before SB3's rule), ``(B,)``
    :param memory_length: ``K``, the memory positions before the row
    :return: bool ``(B, W, K + W)``, True where the slot attends to the key
    """
    width = episode_starts.shape[1]
    slot = th.arange(width, device=episode_starts.device)
    # (B, W): the last slot at or before each slot that starts an episode; below every key time where none does
    starts = th.where(is_episode_start(episode_starts), slot, -(memory_length + 1))
    last_start = starts.cummax(dim=1).values
    # (B, W) and (B, 1) -> (B, W): the first key time each slot attends to
    first = th.maximum(th.maximum(last_start, slot - memory_length), -counts[:, None].to(slot.dtype))
    key_time = th.arange(-memory_length, width, device=episode_starts.device)
    # (1, 1, K + W) against (B, W, 1) -> (B, W, K + W)
    return (key_time[None, None, :] >= first[:, :, None]) & (key_time[None, None, :] <= slot[None, :, None])


def sinusoids(n_positions: int, dim: int) -> th.Tensor:
    """
    Transformer-XL's sinusoidal encoding of the distances ``0 .. n_positions - 1``.

    :param n_positions: Number of distances
    :param dim: Model width
    :return: ``(n_positions, dim)``: sines in the first half of the columns, cosines in the second
    """
    frequencies = th.exp(th.arange(0, dim, 2, dtype=th.float32) * (-math.log(10000.0) / dim))
    # (n_positions, 1) * (dim / 2,) -> (n_positions, dim / 2)
    angles = th.arange(n_positions, dtype=th.float32)[:, None] * frequencies
    return th.cat([angles.sin(), angles.cos()], dim=1)[:, :dim]


class GRUGate(nn.Module):
    """
    GTrXL's gating layer (Parisotto et al., arXiv 1910.06764): ``g(x, y) = (1 - z) x + z h``, ``r = sigmoid(W_r y + U_r
    x)``, ``z = sigmoid(W_z y + U_z x - b_g)``, ``h = tanh(W_g y + U_g (r x))``.

    :param dim: Model width
    :param gate_bias: ``b_g``
    """

    def __init__(self, dim: int, gate_bias: float = GATE_BIAS) -> None:
        super().__init__()
        self.from_input = nn.Linear(dim, 3 * dim, bias=False)
        self.from_stream = nn.Linear(dim, 2 * dim, bias=False)
        self.candidate = nn.Linear(dim, dim, bias=False)
        self.gate_bias = nn.Parameter(th.full((dim,), gate_bias))

    def forward(self, stream: th.Tensor, update: th.Tensor) -> th.Tensor:
        """
        :param stream: ``x``, the residual stream, ``(..., dim)``
        :param update: ``y``, the sublayer's output, ``(..., dim)``
        :return: The gated stream, ``(..., dim)``
        """
        w_r, w_z, w_g = self.from_input(update).chunk(3, dim=-1)
        u_r, u_z = self.from_stream(stream).chunk(2, dim=-1)
        reset = th.sigmoid(w_r + u_r)
        gate = th.sigmoid(w_z + u_z - self.gate_bias)
        candidate = th.tanh(w_g + self.candidate(reset * stream))
        return (1.0 - gate) * stream + gate * candidate


class TransformerXLBlock(nn.Module):
    """
    One pre-layer-norm Transformer-XL block: multi-head attention of each slot over the memory positions and the
    row's slots (as the mask allows), then a feed-forward layer, each with a residual connection or a GTrXL gate.

    :param dim: Model width
    :param n_heads: Attention heads (``dim`` must be a multiple)
    :param memory_length: ``K``
    :param positional_encoding: ``"none"``, or relative distances encoded by a table the caller passes
        (``"learned"``, ``"sinusoidal"``)
    :param gated: GTrXL gates in place of the residual connections
    :param ff_dim: Hidden units of the feed-forward layer
    """

    def __init__(
        self, dim: int, n_heads: int, memory_length: int, positional_encoding: PositionalEncoding, gated: bool, ff_dim: int
    ) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.memory_length = n_heads, dim // n_heads, memory_length
        self.norm_attention = nn.LayerNorm(dim)
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Linear(ff_dim, dim))
        self.relative = positional_encoding != "none"
        if self.relative:
            # Transformer-XL's W_r (distance projection), u (content bias) and v (distance bias)
            self.distance = nn.Linear(dim, dim, bias=False)
            self.content_bias = nn.Parameter(th.zeros(n_heads, self.head_dim))
            self.distance_bias = nn.Parameter(th.zeros(n_heads, self.head_dim))
        self.attention_gate = GRUGate(dim) if gated else None
        self.ff_gate = GRUGate(dim) if gated else None

    def _heads(self, tensor: th.Tensor) -> th.Tensor:
        # (B, N, D) -> (B, N, H, D / H) -> (B, H, N, D / H)
        return tensor.reshape(*tensor.shape[:2], self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, memory: th.Tensor, slots: th.Tensor, allowed: th.Tensor, table: th.Tensor | None) -> th.Tensor:
        """
        :param memory: This block's inputs at the ``K`` memory positions of each row, ``(B, K, D)``
        :param slots: This block's inputs at the row's slots, ``(B, W, D)``
        :param allowed: :func:`attention_mask`, ``(B, W, K + W)``
        :param table: The encoding of the distances ``0 .. K``, ``(K + 1, D)``; ``None`` without positional encoding
        :return: The block's outputs at the slots, ``(B, W, D)``
        """
        n_rows, width, dim = slots.shape
        memory_length = self.memory_length
        # (B, K, D) and (B, W, D) -> (B, K + W, D)
        normed = self.norm_attention(th.cat([memory, slots], dim=1))
        query = self._heads(self.query(normed[:, memory_length:]))
        key, value = (self._heads(part) for part in self.key_value(normed).chunk(2, dim=-1))
        # (B, W, K + W) -> (B, 1, W, K + W): masked keys get weight exactly 0 (and no gradient)
        bias = th.zeros(allowed.shape, dtype=slots.dtype, device=slots.device).masked_fill(~allowed, -math.inf)[:, None]
        if self.relative:
            assert table is not None
            # (K + 1, D) -> (K + 1, H, D / H)
            distances = self.distance(table).reshape(-1, self.n_heads, self.head_dim)
            # (B, H, W, D / H) . (K + 1, H, D / H) -> (B, H, W, K + 1): each slot's score for every distance
            distance_scores = th.einsum("bhwe,khe->bhwk", query + self.distance_bias[:, None], distances)
            # (W, K + W): the distance from each slot to each key, clamped where the mask excludes the key anyway
            slot = th.arange(width, device=slots.device)
            key_index = th.arange(memory_length + width, device=slots.device)
            distance = (slot[:, None] + memory_length - key_index[None, :]).clamp(0, memory_length)
            # (B, H, W, K + 1) gathered at (B, H, W, K + W) -> (B, H, W, K + W), scaled as the content scores are
            scores = distance_scores.gather(3, distance.expand(n_rows, self.n_heads, width, -1)) / math.sqrt(self.head_dim)
            bias = bias + scores
            query = query + self.content_bias[:, None]
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=bias)
        # (B, H, W, D / H) -> (B, W, H, D / H) -> (B, W, D)
        attended = self.out(attended.transpose(1, 2).reshape(n_rows, width, dim))
        stream = slots + attended if self.attention_gate is None else self.attention_gate(slots, F.relu(attended))
        update = self.ff(self.norm_ff(stream))
        return stream + update if self.ff_gate is None else self.ff_gate(stream, F.relu(update))


def check_attention_arguments(
    memory_length: object, dim: object, n_layers: object, n_heads: object, positional_encoding: object, ff_dim: object
) -> None:
    """
    Raise a ``ValueError`` (``TypeError`` for a non-int size) naming the argument, its value and what is allowed.

    :param memory_length: ``memory_length``, a positive int
    :param dim: ``trxl_dim``, a positive int, a multiple of ``n_attention_heads``
    :param n_layers: ``n_trxl_layers``, a positive int
    :param n_heads: ``n_attention_heads``, a positive int
    :param positional_encoding: One of :data:`POSITIONAL_ENCODINGS`
    :param ff_dim: ``trxl_ff_dim``, a positive int or ``None``
    """
    from sb3_reset_ppo.common.settings import check_positive_int

    for name, value in (
        ("memory_length", memory_length),
        ("trxl_dim", dim),
        ("n_trxl_layers", n_layers),
        ("n_attention_heads", n_heads),
    ):
        check_positive_int(name, value)
    if ff_dim is not None:
        check_positive_int("trxl_ff_dim", ff_dim, "; or None (trxl_dim)")
    assert isinstance(dim, int) and isinstance(n_heads, int)
    if dim % n_heads:
        raise ValueError(f"trxl_dim={dim} must be a multiple of n_attention_heads={n_heads} (each head gets trxl_dim / heads)")
    if positional_encoding not in POSITIONAL_ENCODINGS:
        raise ValueError(f"positional_encoding must be one of {POSITIONAL_ENCODINGS}, got {positional_encoding!r}")


class TransformerXL(nn.Module):
    """
    An embedding of the features, ``n_layers`` :class:`TransformerXLBlock`, and a final layer norm.

    :param input_dim: Features per step
    :param dim: Model width ``D``
    :param n_layers: Blocks ``L``
    :param n_heads: Attention heads per block
    :param memory_length: ``K``, the steps before each step it attends to (of the step's episode)
    :param positional_encoding: ``"none"``, ``"learned"`` or ``"sinusoidal"`` relative distances
    :param gated: GTrXL gates in place of the residual connections
    :param ff_dim: Hidden units of each feed-forward layer (``None``: ``dim``)
    """

    def __init__(
        self,
        input_dim: int,
        dim: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        memory_length: int = 32,
        positional_encoding: PositionalEncoding = "sinusoidal",
        gated: bool = False,
        ff_dim: int | None = None,
    ) -> None:
        super().__init__()
        check_attention_arguments(memory_length, dim, n_layers, n_heads, positional_encoding, ff_dim)
        self.dim, self.n_layers, self.memory_length = dim, n_layers, memory_length
        self.embedding = nn.Linear(input_dim, dim)
        self.blocks = nn.ModuleList(
            TransformerXLBlock(dim, n_heads, memory_length, positional_encoding, gated, ff_dim or dim) for _ in range(n_layers)
        )
        self.norm_out = nn.LayerNorm(dim)
        self.learned_table: nn.Parameter | None = None
        self.sinusoid_table: th.Tensor | None
        if positional_encoding == "learned":
            self.learned_table = nn.Parameter(th.randn(memory_length + 1, dim) * 0.02)
        # A constant, rebuilt with the module: not saved
        table = sinusoids(memory_length + 1, dim) if positional_encoding == "sinusoidal" else None
        self.register_buffer("sinusoid_table", table, persistent=False)

    @property
    def memory_shape(self) -> tuple[int, int, int]:
        """``(K, L, D)``: a step's memory, per env."""
        return self.memory_length, self.n_layers, self.dim

    def forward(self, features: th.Tensor, memory: th.Tensor, allowed: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """
        Run ``B`` rows of ``W`` slots, each layer's slots at once.

        :param features: The slots' features, ``(B, W, input_dim)``
        :param memory: The block inputs of the ``K`` steps before each row, ``(B, K, L, D)``
        :param allowed: :func:`attention_mask`, ``(B, W, K + W)``
        :return: The outputs ``(B, W, D)`` and the block inputs of every slot ``(B, W, L, D)`` (what the memory stores)
        """
        stream = F.relu(self.embedding(features))
        table = self.learned_table if self.learned_table is not None else self.sinusoid_table
        inputs = []
        for layer, block in enumerate(self.blocks):
            inputs.append(stream)
            stream = block(memory[:, :, layer], stream, allowed, None if table is None else table.to(stream.dtype))
        # n_layers x (B, W, D) -> (B, W, L, D)
        return self.norm_out(stream), th.stack(inputs, dim=2)

    def initial_state(self, n_envs: int, device: th.device | str = "cpu") -> AttentionState:
        """The memory entering an env's first step: zeros, no position of the episode."""
        memory = th.zeros((self.memory_length, n_envs, self.n_layers, self.dim), device=device)
        return AttentionState(memory, th.zeros((1, n_envs), dtype=th.int64, device=device))

    def step(
        self, features: th.Tensor, state: tuple[th.Tensor, ...], episode_starts: th.Tensor
    ) -> tuple[th.Tensor, AttentionState]:
        """
        One step of ``E`` envs (collection, ``predict``): :meth:`forward` with rows of one slot.

        :param features: ``(E, input_dim)``
        :param state: The memory entering the step (:class:`AttentionState`, or its two tensors)
        :param episode_starts: SB3's episode-start flags, ``(E,)``
        :return: The outputs ``(E, D)`` and the memory entering the next step
        """
        memory, count = state
        # (1, E) -> (E,)
        counts = count[0]
        # (E,) -> (E, 1): rows of one slot
        starts = episode_starts.reshape(-1, 1)
        allowed = attention_mask(starts, counts, self.memory_length)
        # (K, E, L, D) -> (E, K, L, D); (E, F) -> (E, 1, F)
        outputs, inputs = self(features[:, None], memory.transpose(0, 1), allowed)
        counts = th.where(is_episode_start(starts[:, 0]), th.zeros_like(counts), counts)
        # Drop the oldest position, append the step's inputs: (K - 1, E, L, D) and (1, E, L, D) -> (K, E, L, D)
        new_memory = th.cat([memory[1:], inputs.transpose(0, 1)], dim=0)
        # (E,) -> (1, E)
        new_count = th.clamp(counts + 1, max=self.memory_length)[None]
        # (E, 1, D) -> (E, D)
        return outputs[:, 0], AttentionState(new_memory, new_count)
