"""The memory entering each step, recomputed with the current parameters (``memory_refresh``, ``burn_in``)."""

import torch as th
from torch import nn

from sb3_reset_ppo.common.layout import ResetLayout, plan_reset_steps
from sb3_reset_ppo.common.recurrent import RecurrentLayer
from sb3_reset_ppo.common.type_aliases import BurnIn
from sb3_reset_ppo.common.unroll import layer_rows, layer_weights


def _linear_recurrence(decay: th.Tensor, drive: th.Tensor, initial: th.Tensor) -> th.Tensor:
    """``c_t = decay_t * c_{t-1} + drive_t`` from ``c_{-1} = initial`` ``(B, H)``, each ``(B, L, H)``, as a parallel scan."""
    # Fold the initial value into step 0: c_0 = decay_0 * initial + drive_0, and nothing before it
    drive = th.cat([decay[:, :1] * initial[:, None] + drive[:, :1], drive[:, 1:]], dim=1)
    decay = th.cat([th.zeros_like(decay[:, :1]), decay[:, 1:]], dim=1)
    offset = 1
    while offset < drive.shape[1]:
        # Compose each step with the one `offset` earlier: (a, b) after (a', b') is (a * a', a * b' + b)
        drive = th.cat([drive[:, :offset], drive[:, offset:] + decay[:, offset:] * drive[:, :-offset]], dim=1)
        decay = th.cat([decay[:, :offset], decay[:, offset:] * decay[:, :-offset]], dim=1)
        offset *= 2
    return drive


@th.no_grad()
def rnn_step_states(
    rnn: RecurrentLayer,
    features: th.Tensor,
    initial: tuple[th.Tensor, ...],
    episode_starts: th.Tensor,
    layout: ResetLayout | None = None,
) -> tuple[th.Tensor, ...]:
    """
    The memory entering every step of ``B`` sequences of ``L`` steps as the rollout buffer records it, without gradient
    or dropout (``docs/design.md``, "Fresh memory").

    :param features: Inputs, ``(B, L, input_size)``
    :param initial: Memory entering step 0 as recorded (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each ``(B, L, H)``
    :param episode_starts: SB3's episode-start flags, ``(B, L)``
    :param layout: ``plan_reset_steps`` of the flags on the features' device, when the caller planned it on the host
    :return: Memory entering every step, in the same form, each ``(B, L, n_layers, hidden)``; step 0's is ``initial``
    """
    n_sequences, length, _ = features.shape
    if layout is None:
        layout = plan_reset_steps(episode_starts.detach().cpu().numpy())
        layout = layout._replace(
            slot_positions=layout.slot_positions.to(features.device), reset_steps=layout.reset_steps.to(features.device)
        )
    training = rnn.training
    rnn.train(False)
    try:
        # (B, L, F) -> (B * L, F): slots row-major over (B, L)
        rows = list(layer_rows(rnn, features.reshape(n_sequences * length, -1), initial, 1.0 - episode_starts[:, 0], layout))
    finally:
        rnn.train(training)
    # (B, L) -> (B, L, 1): SB3's rule at every step
    not_start = (1.0 - episode_starts)[:, :, None]
    hidden_entering, cell_entering = [], []
    inputs = features
    for layer, row in enumerate(rows):
        # (row_length, B, H) -> (row_length * B, H) -> (B * L, H) -> (B, L, H): the layer's output at every step
        outputs = row.reshape(-1, row.shape[2])[layout.slot_positions].reshape(n_sequences, length, -1)
        # Raw hidden state entering every step: the initial one, then the previous step's output
        h_entering = th.cat([initial[0][:, layer, None], outputs[:, :-1]], dim=1)
        hidden_entering.append(h_entering)
        if isinstance(rnn, nn.LSTM):
            c_initial = initial[1][:, layer]
            # The input, forget and cell gates (rows i, f, g of the weights; the output gate is not needed)
            gate_rows = slice(0, 3 * rnn.hidden_size)
            weights = [weight[gate_rows] for weight in layer_weights(rnn, layer)]
            gates = inputs @ weights[0].T + (h_entering * not_start) @ weights[1].T
            if rnn.bias:
                gates = gates + (weights[2] + weights[3])
            input_gate, forget_gate, cell_gate = gates.chunk(3, dim=2)
            cell = _linear_recurrence(
                th.sigmoid(forget_gate) * not_start, th.sigmoid(input_gate) * th.tanh(cell_gate), c_initial
            )
            cell_entering.append(th.cat([c_initial[:, None], cell[:, :-1]], dim=1))
        inputs = outputs
    # n_layers x (B, L, H) -> (B, L, n_layers, H)
    if isinstance(rnn, nn.LSTM):
        return th.stack(hidden_entering, dim=2), th.stack(cell_entering, dim=2)
    return (th.stack(hidden_entering, dim=2),)


def burned_in_memory(
    rnn: RecurrentLayer, step_features: th.Tensor, burn_in: BurnIn, first_memory: tuple[th.Tensor, ...]
) -> tuple[th.Tensor, ...]:
    """
    The memory entering each window's first step after its burn-in: the LSTM or GRU run without gradient over the
    steps before the window from the stored memory of the first of them, with SB3's episode-start rule.

    :param step_features: Features of the minibatch's distinct steps, ``(U, F)``
    :param burn_in: The burn-in rows (see :class:`~sb3_reset_ppo.common.type_aliases.BurnIn`)
    :param first_memory: Stored memory entering each row's first step (LSTM ``(hidden, cell)``, GRU ``(hidden,)``)
    :return: Memory entering each window's first step, in the same form, each ``(B, n_layers, hidden)``
    """
    # (B, burn_in + 1) rows -> (B, burn_in + 1, F)
    states = rnn_step_states(rnn, step_features[burn_in.steps], first_memory, burn_in.episode_starts, burn_in.layout)
    windows = th.arange(states[0].shape[0], device=states[0].device)
    # (B, burn_in + 1, n_layers, H) -> (B, n_layers, H): the memory entering step t, `lengths` steps into the row
    return tuple(state[windows, burn_in.lengths] for state in states)
