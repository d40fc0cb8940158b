"""Reset-and-continue: the one unroll of an LSTM or a GRU over windows, used by actor and critic."""

import functools
from collections.abc import Iterator, Sequence

import torch as th
from torch import nn
from torch.nn import functional as F

from sb3_reset_ppo.common.layout import ResetLayout
from sb3_reset_ppo.common.recurrent import RecurrentLayer

# Added to the input- and forget-gate pre-activations at a reset step: its sigmoid is exactly 0 and it is finite from
# float16 to float64, so 0 * it is 0 at the other steps (-1e9 is -inf in float16); docs/design.md, "Unroll"
RESET_PREACTIVATION = -1e4


def fused_lstm_layer(
    inputs: th.Tensor, state: tuple[th.Tensor, th.Tensor], weights: Sequence[th.Tensor], training: bool
) -> th.Tensor:
    """
    One layer of torch's fused LSTM over a whole sequence: ``torch.lstm``, the call ``nn.LSTM.forward`` makes, with
    the weights as :func:`_contiguous_views` (``tests/common/test_unroll.py`` checks it against ``nn.LSTM``).

    :param inputs: Sequence, shape ``(steps, batch, input_size)``
    :param state: ``(hidden, cell)`` entering the first step, each ``(1, batch, hidden_size)``
    :param weights: ``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer
    :param training: Training mode (no effect without dropout; passed as ``nn.LSTM`` does)
    :return: Outputs of every step, shape ``(steps, batch, hidden_size)``
    """
    outputs, _, _ = th.lstm(inputs, state, _contiguous_views(weights), len(weights) == 4, 1, 0.0, training, False, False)
    return outputs


def fused_gru_layer(inputs: th.Tensor, hidden: th.Tensor, weights: Sequence[th.Tensor], training: bool) -> th.Tensor:
    """
    One layer of torch's fused GRU over a whole sequence, as :func:`fused_lstm_layer` (``tests/reset_ppo/test_gru.py``),
    from the ``hidden`` state ``(1, batch, hidden_size)`` (the weights' gates in PyTorch's order r, z, n).
    """
    outputs, _ = th.gru(inputs, hidden, _contiguous_views(weights), len(weights) == 4, 1, 0.0, training, False, False)
    return outputs


def _contiguous_views(weights: Sequence[th.Tensor]) -> list[th.Tensor]:
    """
    Where cuDNN runs the call, the weights as views of one contiguous copy (as ``nn.LSTM.flatten_parameters`` leaves
    them, so cuDNN does not re-pack them); elsewhere the weights themselves.
    """
    if weights[0].device.type != "cuda":
        return list(weights)
    # One copy into a flat buffer: [w_ih | w_hh | b_ih | b_hh]
    flat = th.cat([weight.reshape(-1) for weight in weights])
    views, offset = [], 0
    for weight in weights:
        views.append(flat[offset : offset + weight.numel()].view_as(weight))
        offset += weight.numel()
    return views


def check_supported_rnn(rnn: RecurrentLayer) -> None:
    """Raise a ``ValueError`` for recurrent-layer options the window unroll (and sb3-contrib's policies) do not support."""
    for option, value in (
        ("bidirectional", rnn.bidirectional),
        ("batch_first", rnn.batch_first),
        ("proj_size", getattr(rnn, "proj_size", 0)),
    ):
        if value:
            raise ValueError(f"policy_kwargs['lstm_kwargs'] sets {option}={value!r}, which ResetPPO does not support")


def unroll_rnn(
    rnn: RecurrentLayer,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    layout: ResetLayout,
    inputs: th.Tensor | None = None,
) -> th.Tensor:
    """
    Run an LSTM or a GRU over the slots of ``B`` windows with reset-and-continue, as one fused call per layer.

    Slot 0 starts from the memory recorded for its step; before a slot whose step starts an episode, a *reset step*
    zeroes the memory and every gradient through it (``docs/design.md``, "Unroll"); elsewhere the memory is carried.

    :param rnn: The LSTM or GRU (``batch_first=False``, as in sb3-contrib's policies)
    :param slot_features: Inputs of every slot, shape ``(B * W, input_size)``, slots row-major over ``(B, W)``
    :param memory: Memory entering each window's slot 0, LSTM ``(hidden, cell)`` or GRU ``(hidden,)``, each ``(B, L, H)``
    :param memory_not_start: ``1 - episode_start`` of each window's slot 0, shape ``(B,)``
    :param layout: Where each slot and reset step sits (see :func:`~sb3_reset_ppo.common.layout.plan_reset_steps`)
    :param inputs: :func:`row_inputs` of ``slot_features`` where the caller has it (actor and critic share it), or ``None``
    :return: Outputs of every slot, shape ``(B * W, hidden)``
    """
    layer_outputs = layer_rows(rnn, slot_features, memory, memory_not_start, layout, inputs)
    *_, last = layer_outputs
    # (row_length, B, hidden) -> (row_length * B, hidden) -> (B * W, hidden)
    return last.reshape(-1, last.shape[2])[layout.slot_positions]


def _reset_weight(rnn: RecurrentLayer, layer: int, like: th.Tensor) -> th.Tensor:
    """
    The weight column of the reset input of one layer, ``(gates * hidden, 1)``: ``RESET_PREACTIVATION`` on an LSTM's
    i and f or a GRU's r and z, and ``-b_in`` on a GRU's n (a function of the parameter: its gradients cancel too).
    """
    hidden_size = rnn.hidden_size
    if isinstance(rnn, nn.LSTM):
        return _lstm_reset_column(hidden_size, like.dtype, like.device)
    gates = like.new_full((2 * hidden_size,), RESET_PREACTIVATION)
    candidate = -getattr(rnn, f"bias_ih_l{layer}")[2 * hidden_size :] if rnn.bias else like.new_zeros(hidden_size)
    column = th.cat([gates, candidate.to(like.dtype)])
    # (gates * hidden,) -> (gates * hidden, 1)
    return column[:, None]


@functools.cache
def _lstm_reset_column(hidden_size: int, dtype: th.dtype, device: th.device) -> th.Tensor:
    """An LSTM's reset weight column, ``(4 * hidden, 1)``: a constant, built once per size, dtype and device."""
    # A normal tensor even when first built under inference mode (it enters graphs later)
    with th.inference_mode(False):
        column = th.zeros(4 * hidden_size, 1, dtype=dtype, device=device)
        column[: 2 * hidden_size] = RESET_PREACTIVATION
    return column


def row_inputs(slot_features: th.Tensor, layout: ResetLayout) -> th.Tensor:
    """
    The first layer's input of the fused call of :func:`unroll_rnn`: every slot's features at its step of its
    window's row, zeros at the reset steps and after a row's end, and the reset input as a last column.

    :param slot_features: Inputs of every slot, ``(B * W, F)``, slots row-major over ``(B, W)``
    :param layout: Where each slot and reset step sits (see :func:`~sb3_reset_ppo.common.layout.plan_reset_steps`)
    :return: ``(row_length, B, F + 1)``
    """
    n_windows = layout.reset_steps.shape[1]
    # (B * W, F) -> (row_length * B, F) -> (row_length, B, F): slots at their steps, zeros elsewhere
    inputs = slot_features.new_zeros(layout.row_length * n_windows, slot_features.shape[1])
    if layout.input_slots is None:
        inputs = inputs.index_copy(0, layout.slot_positions, slot_features)
    else:
        # Clipped windows: only real slots are written (padding slots share their last real slot's position)
        inputs = inputs.index_copy(0, layout.slot_positions[layout.input_slots], slot_features[layout.input_slots])
    inputs = inputs.reshape(layout.row_length, n_windows, -1)
    # (row_length, B, F) and (row_length, B, 1) -> (row_length, B, F + 1)
    return th.cat([inputs, layout.reset_steps.to(slot_features.dtype)], dim=2)


def layer_rows(
    rnn: RecurrentLayer,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    layout: ResetLayout,
    first_inputs: th.Tensor | None = None,
) -> Iterator[th.Tensor]:
    """:func:`unroll_rnn` layer by layer (``first_inputs``: its ``inputs``): each layer's outputs, ``(row_length, B, H)``."""
    n_windows = memory_not_start.shape[0]
    reset_steps = layout.reset_steps.to(slot_features.dtype)
    # (row_length, B, F + 1)
    with_reset_input = row_inputs(slot_features, layout) if first_inputs is None else first_inputs
    # (B,) -> (1, B, 1): broadcasts over layers and hidden units
    not_start = memory_not_start.reshape(1, n_windows, 1)
    # (B, n_layers, hidden) -> (n_layers, B, hidden): torch's state layout; LSTM (hidden, cell), GRU (hidden,)
    state = [tensor.transpose(0, 1) * not_start for tensor in memory]
    outputs: th.Tensor | None = None  # the previous layer's
    for layer in range(rnn.num_layers):
        if outputs is not None:
            if rnn.dropout > 0 and rnn.training:
                outputs = F.dropout(outputs, rnn.dropout, training=True)
            # (row_length, B, hidden) -> (row_length, B, hidden + 1)
            with_reset_input = th.cat([outputs, reset_steps], dim=2)
        own = layer_weights(rnn, layer)
        weights = [th.cat([own[0], _reset_weight(rnn, layer, slot_features)], dim=1), *own[1:]]
        # (row_length, B, F + 1) -> (row_length, B, hidden)
        if isinstance(rnn, nn.LSTM):
            outputs = fused_lstm_layer(
                with_reset_input, (state[0][layer : layer + 1], state[1][layer : layer + 1]), weights, rnn.training
            )
        else:
            outputs = fused_gru_layer(with_reset_input, state[0][layer : layer + 1], weights, rnn.training)
        yield outputs


def layer_weights(rnn: RecurrentLayer, layer: int) -> list[th.Tensor]:
    """``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer."""
    names = ["weight_ih", "weight_hh", *(["bias_ih", "bias_hh"] if rnn.bias else [])]
    return [getattr(rnn, f"{name}_l{layer}") for name in names]
