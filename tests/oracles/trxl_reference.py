"""
The design document's attention memory (docs/design.md, "Attention memory") written literally: one step at a time, one
head at a time, each step attending to the block inputs of its own episode's last ``memory_length`` steps and itself.
The batched, masked :class:`~sb3_reset_ppo.common.attention.TransformerXL` is checked against it.
"""

import math
from typing import Any

import torch as th
from torch.nn import functional as F


def _linear(module: Any, x: th.Tensor) -> th.Tensor:
    weight, bias = module.weight, module.bias
    return x @ weight.T + (0 if bias is None else bias)


def _layer_norm(module: Any, x: th.Tensor) -> th.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / th.sqrt(variance + module.eps) * module.weight + module.bias


def _gate(gate: Any, stream: th.Tensor, update: th.Tensor) -> th.Tensor:
    """A ``GRUGate``'s formula, from its weights."""
    dim = stream.shape[-1]
    w_r, w_z, w_g = (update @ gate.from_input.weight[i * dim : (i + 1) * dim].T for i in range(3))
    u_r, u_z = (stream @ gate.from_stream.weight[i * dim : (i + 1) * dim].T for i in range(2))
    reset = th.sigmoid(w_r + u_r)
    z = th.sigmoid(w_z + u_z - gate.gate_bias)
    candidate = th.tanh(w_g + (reset * stream) @ gate.candidate.weight.T)
    return (1 - z) * stream + z * candidate


def _block(block: Any, keys: th.Tensor, table: "th.Tensor | None") -> th.Tensor:
    """
    One block (a ``TransformerXLBlock``) at one step: ``keys`` ``(n, D)`` are the episode's attended block inputs,
    oldest first, the step last.
    """
    n, dim = keys.shape
    heads, head_dim = block.n_heads, block.head_dim
    normed = _layer_norm(block.norm_attention, keys)
    query = _linear(block.query, normed[-1])
    key_value = _linear(block.key_value, normed)
    key, value = key_value[:, :dim], key_value[:, dim:]
    outputs = []
    for head in range(heads):
        part = slice(head * head_dim, (head + 1) * head_dim)
        q, k, v = query[part], key[:, part], value[:, part]
        if table is None:
            scores = k @ q / math.sqrt(head_dim)
        else:
            distances = (table @ block.distance.weight.T)[:, part]
            per_key = []
            for j in range(n):
                # The key's distance from the step: the step itself is at distance 0
                distance = n - 1 - j
                content = (q + block.content_bias[head]) @ k[j]
                position = (q + block.distance_bias[head]) @ distances[distance]
                per_key.append((content + position) / math.sqrt(head_dim))
            scores = th.stack(per_key)
        outputs.append(th.softmax(scores, dim=0) @ v)
    attended = _linear(block.out, th.cat(outputs))
    step = keys[-1]
    gate = block.attention_gate
    stream = step + attended if gate is None else _gate(gate, step, F.relu(attended))
    ff = block.ff
    update = _linear(ff[2], th.relu(_linear(ff[0], _layer_norm(block.norm_ff, stream))))
    return stream + update if block.ff_gate is None else _gate(block.ff_gate, stream, F.relu(update))


def reference_sequence(
    transformer: Any,
    features: th.Tensor,
    episode_starts: th.Tensor,
    memory: th.Tensor,
    n_valid: int,
) -> tuple[th.Tensor, th.Tensor]:
    """
    One env's steps, one at a time.

    :param transformer: A ``TransformerXL``
    :param features: ``(T, F)``
    :param episode_starts: ``(T,)``
    :param memory: Block inputs of the ``K`` steps before the first, ``(K, L, D)``
    :param n_valid: How many of them (the last ones) belong to the first step's episode
    :return: Outputs ``(T, D)`` and every step's block inputs ``(T, L, D)``
    """
    memory_length = transformer.memory_length
    table = transformer.learned_table if transformer.learned_table is not None else transformer.sinusoid_table
    # Per layer, the block inputs of the current episode's steps so far
    history = [list(memory[memory.shape[0] - n_valid :, layer]) if n_valid else [] for layer in range(transformer.n_layers)]
    outputs, inputs = [], []
    for step in range(features.shape[0]):
        if episode_starts[step] > 0.5:
            history = [[] for _ in history]
        stream = th.relu(_linear(transformer.embedding, features[step]))
        step_inputs = []
        for layer, block in enumerate(transformer.blocks):
            step_inputs.append(stream)
            attended = history[layer][-memory_length:] if memory_length else []
            stream = _block(block, th.stack([*attended, stream]), table)
        for layer, value in enumerate(step_inputs):
            history[layer].append(value)
        outputs.append(_layer_norm(transformer.norm_out, stream))
        inputs.append(th.stack(step_inputs))
    return th.stack(outputs), th.stack(inputs)
