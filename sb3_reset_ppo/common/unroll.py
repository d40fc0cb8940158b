"""Reset-and-continue: the one unroll used by actor and critic, and the window evaluation of a policy."""

from collections.abc import Iterator, Sequence

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch import nn
from torch.nn import functional as F

from sb3_reset_ppo.common.type_aliases import BurnIn, WindowRolloutBufferSamples
from sb3_reset_ppo.common.windows import ResetLayout, plan_reset_steps

# Added to the input- and forget-gate pre-activations at a reset step: both gates become exactly 0. The
# sigmoid of it is exactly 0 in float16, bfloat16, float32 and float64 (exp(1e4) overflows in all four), it is
# finite in all four (float16's largest is 65504), and 0 * it is 0 at the other steps (-1e9 is -inf in
# float16, and 0 * -inf is NaN). Exact while the rest of a gate's pre-activation stays below ~9,000.
RESET_PREACTIVATION = -1e4


def fused_lstm_layer(
    inputs: th.Tensor, state: tuple[th.Tensor, th.Tensor], weights: Sequence[th.Tensor], training: bool
) -> th.Tensor:
    """
    One layer of torch's fused LSTM over a whole sequence: ``torch.lstm``, the call ``nn.LSTM.forward`` makes.

    The weights are first copied into one contiguous buffer, in ``nn.LSTM``'s order (``w_ih, w_hh[, b_ih,
    b_hh]``), and passed as views of it: the form ``nn.LSTM.flatten_parameters`` gives them, so cuDNN uses
    them without re-packing (and without its "not part of single contiguous chunk of memory" warning).
    ``tests/test_unroll.py`` checks this function against ``nn.LSTM`` so that a change in torch fails loudly.

    :param inputs: Sequence, shape ``(steps, batch, input_size)``
    :param state: ``(hidden, cell)`` entering the first step, each ``(1, batch, hidden_size)``
    :param weights: ``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer
    :param training: Training mode (no effect without dropout; passed as ``nn.LSTM`` does)
    :return: Outputs of every step, shape ``(steps, batch, hidden_size)``
    """
    # One copy into a flat buffer: [w_ih | w_hh | b_ih | b_hh]
    flat = th.cat([weight.reshape(-1) for weight in weights])
    views, offset = [], 0
    for weight in weights:
        views.append(flat[offset : offset + weight.numel()].view_as(weight))
        offset += weight.numel()
    outputs, _, _ = th.lstm(inputs, state, views, len(weights) == 4, 1, 0.0, training, False, False)
    return outputs


def check_supported_lstm(lstm: nn.LSTM) -> None:
    """
    Raise a ``ValueError`` for LSTM options the window unroll (and sb3-contrib's policies) do not support.

    :param lstm: The policy's LSTM
    """
    for option, value in (
        ("bidirectional", lstm.bidirectional),
        ("batch_first", lstm.batch_first),
        ("proj_size", lstm.proj_size),
    ):
        if value:
            raise ValueError(f"policy_kwargs['lstm_kwargs'] sets {option}={value!r}, which ResetPPO does not support")


def unroll_lstm(
    lstm: nn.LSTM,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    layout: ResetLayout,
) -> th.Tensor:
    """
    Run an LSTM over the slots of ``B`` windows with reset-and-continue, as one fused LSTM call per layer.

    Slot 0 of a window starts from the memory recorded for its step, times ``1 - episode_start`` (SB3's
    rule). At a slot whose step starts an episode (a reset), the memory is the one recorded for that step
    times ``1 - episode_start``, i.e. zero; at every other slot it is carried from the previous slot through
    the graph. The reset is realised as one extra *reset step* just before the reset slot, whose input and
    forget gates are forced to exactly 0 by a constant extra input: the cell becomes ``0 * c + 0 * g = 0``
    and the hidden state ``o * tanh(0) = 0``, and every gradient path through that step is exactly zero, so
    backpropagation through time stops at the boundary. Each window then runs as one row of a single fused
    LSTM call (``W`` steps plus its resets; rows are padded at the end).

    :param lstm: The LSTM (``batch_first=False``, as in sb3-contrib's policies)
    :param slot_features: Inputs of every slot, shape ``(B * W, input_size)``, slots row-major over ``(B, W)``
    :param memory: Recorded ``(hidden, cell)`` entering each window's slot 0, each ``(B, n_layers, hidden)``
    :param memory_not_start: ``1 - episode_start`` of each window's slot 0, shape ``(B,)``
    :param layout: Where each slot and reset step sits (see :func:`~sb3_reset_ppo.common.windows.plan_reset_steps`)
    :return: LSTM outputs of every slot, shape ``(B * W, hidden)``
    """
    layer_outputs = _layer_rows(lstm, slot_features, memory, memory_not_start, layout)
    *_, last = layer_outputs
    # (row_length, B, hidden) -> (row_length * B, hidden) -> (B * W, hidden)
    return last.reshape(-1, last.shape[2])[layout.slot_positions]


def _layer_rows(
    lstm: nn.LSTM,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    layout: ResetLayout,
) -> Iterator[th.Tensor]:
    """
    The unroll of :func:`unroll_lstm`, layer by layer: yields each layer's outputs, ``(row_length, B, hidden)``
    (slot ``i`` of window ``b`` at ``layout.slot_positions[b * W + i]`` of the flattened rows).
    """
    n_windows = memory_not_start.shape[0]
    reset_steps = layout.reset_steps.to(slot_features.dtype)
    # (B * W, F) -> (row_length * B, F) -> (row_length, B, F): slots at their steps, zeros elsewhere
    inputs = slot_features.new_zeros(layout.row_length * n_windows, slot_features.shape[1])
    inputs = inputs.index_copy(0, layout.slot_positions, slot_features).reshape(layout.row_length, n_windows, -1)
    # (B,) -> (1, B, 1): broadcasts over layers and hidden units
    not_start = memory_not_start.reshape(1, n_windows, 1)
    # (B, n_layers, hidden) -> (n_layers, B, hidden): nn.LSTM's state layout
    hidden = memory[0].transpose(0, 1) * not_start
    cell = memory[1].transpose(0, 1) * not_start
    hidden_size = lstm.hidden_size
    # (4 * hidden, 1): weight of the reset input, on the input and forget gates (PyTorch order: i, f, g, o)
    reset_weight = slot_features.new_zeros(4 * hidden_size, 1)
    reset_weight[: 2 * hidden_size] = RESET_PREACTIVATION
    for layer in range(lstm.num_layers):
        if layer > 0 and lstm.dropout > 0 and lstm.training:
            inputs = F.dropout(inputs, lstm.dropout, training=True)
        weights = [th.cat([getattr(lstm, f"weight_ih_l{layer}"), reset_weight], dim=1), *_layer_weights(lstm, layer)[1:]]
        # (row_length, B, F + 1) -> (row_length, B, hidden)
        inputs = fused_lstm_layer(
            th.cat([inputs, reset_steps], dim=2),
            (hidden[layer : layer + 1], cell[layer : layer + 1]),
            weights,
            lstm.training,
        )
        yield inputs


def _layer_weights(lstm: nn.LSTM, layer: int) -> list[th.Tensor]:
    """``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer."""
    names = ["weight_ih", "weight_hh", *(["bias_ih", "bias_hh"] if lstm.bias else [])]
    return [getattr(lstm, f"{name}_l{layer}") for name in names]


def _linear_recurrence(decay: th.Tensor, drive: th.Tensor, initial: th.Tensor) -> th.Tensor:
    """
    ``c_t = decay_t * c_{t-1} + drive_t`` for every ``t``, from ``c_{-1} = initial``, as a parallel scan
    (Hillis-Steele: ``log2(L)`` vectorised passes, no loop over steps).

    :param decay: ``(B, L, H)``
    :param drive: ``(B, L, H)``
    :param initial: ``(B, H)``
    :return: ``c_t`` for every step, ``(B, L, H)``
    """
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
def lstm_step_states(
    lstm: nn.LSTM,
    features: th.Tensor,
    initial: tuple[th.Tensor, th.Tensor],
    episode_starts: th.Tensor,
    layout: ResetLayout | None = None,
) -> tuple[th.Tensor, th.Tensor]:
    """
    The memory entering every step of ``B`` sequences of ``L`` steps under SB3's episode-start rule, as the
    rollout buffer records it (before the rule is applied at that step), without gradient and without dropout
    (as during collection).

    Each layer's hidden states come from one fused LSTM call over all steps (:func:`unroll_lstm`'s layout, a
    reset step at every episode start); the cell states, which a fused call does not return, are recomputed
    from the gates (one batched product over all steps) and the linear recurrence
    ``c_t = f_t * (1 - episode_start_t) * c_{t-1} + i_t * g_t``, solved as a parallel scan.

    :param lstm: The LSTM
    :param features: Inputs, ``(B, L, input_size)``
    :param initial: ``(hidden, cell)`` entering step 0 as recorded, each ``(B, n_layers, hidden)``
    :param episode_starts: SB3's episode-start flags, ``(B, L)``
    :param layout: ``plan_reset_steps`` of the flags on the features' device, when the caller has it (planned on the
        host from a host copy, it saves reading the flags back from the device)
    :return: ``(hidden, cell)`` entering every step, each ``(B, L, n_layers, hidden)``; step 0's is ``initial``
    """
    n_sequences, length, _ = features.shape
    if layout is None:
        layout = plan_reset_steps(episode_starts.detach().cpu().numpy())
        layout = layout._replace(
            slot_positions=layout.slot_positions.to(features.device), reset_steps=layout.reset_steps.to(features.device)
        )
    training = lstm.training
    lstm.train(False)
    try:
        # (B, L, F) -> (B * L, F): slots row-major over (B, L)
        rows = list(_layer_rows(lstm, features.reshape(n_sequences * length, -1), initial, 1.0 - episode_starts[:, 0], layout))
    finally:
        lstm.train(training)
    # (B, L) -> (B, L, 1): SB3's rule at every step
    not_start = (1.0 - episode_starts)[:, :, None]
    hidden_entering, cell_entering = [], []
    inputs = features
    for layer, row in enumerate(rows):
        # (row_length, B, H) -> (row_length * B, H) -> (B * L, H) -> (B, L, H): the layer's output at every step
        outputs = row.reshape(-1, row.shape[2])[layout.slot_positions].reshape(n_sequences, length, -1)
        h_initial, c_initial = initial[0][:, layer], initial[1][:, layer]
        # Raw hidden state entering every step: the initial one, then the previous step's output
        h_entering = th.cat([h_initial[:, None], outputs[:, :-1]], dim=1)
        weights = _layer_weights(lstm, layer)
        gates = inputs @ weights[0].T + (h_entering * not_start) @ weights[1].T
        if lstm.bias:
            gates = gates + weights[2] + weights[3]
        input_gate, forget_gate, cell_gate, _ = gates.chunk(4, dim=2)
        cell = _linear_recurrence(th.sigmoid(forget_gate) * not_start, th.sigmoid(input_gate) * th.tanh(cell_gate), c_initial)
        hidden_entering.append(h_entering)
        cell_entering.append(th.cat([c_initial[:, None], cell[:, :-1]], dim=1))
        inputs = outputs
    # n_layers x (B, L, H) -> (B, L, n_layers, H)
    return th.stack(hidden_entering, dim=2), th.stack(cell_entering, dim=2)


def burned_in_memory(
    lstm: nn.LSTM, step_features: th.Tensor, burn_in: BurnIn, first_memory: tuple[th.Tensor, ...]
) -> tuple[th.Tensor, th.Tensor]:
    """
    The memory entering each window's first step after its burn-in: the LSTM run without gradient over the
    ``burn_in`` steps before the window (fewer at the rollout start) from the stored memory of the first of them,
    with SB3's episode-start rule (so an episode start inside the burn-in gives SB3's episode-start memory).

    :param lstm: The LSTM
    :param step_features: Features of the minibatch's distinct steps, ``(U, F)``
    :param burn_in: The burn-in rows (see :class:`~sb3_reset_ppo.common.type_aliases.BurnIn`)
    :param first_memory: Stored ``(hidden, cell)`` entering each row's first step, each ``(B, n_layers, hidden)``
    :return: ``(hidden, cell)`` entering each window's first step, each ``(B, n_layers, hidden)``
    """
    # (B, burn_in + 1) rows -> (B, burn_in + 1, F)
    hidden, cell = lstm_step_states(
        lstm, step_features[burn_in.steps], (first_memory[0], first_memory[1]), burn_in.episode_starts, burn_in.layout
    )
    windows = th.arange(hidden.shape[0], device=hidden.device)
    # (B, burn_in + 1, n_layers, H) -> (B, n_layers, H): the memory entering step t, `lengths` steps into the row
    return hidden[windows, burn_in.lengths], cell[windows, burn_in.lengths]


def evaluate_windows(
    policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of the actions of every slot of a minibatch of windows.

    The window counterpart of ``RecurrentActorCriticPolicy.evaluate_actions``: the same networks, critic
    variants (separate, shared or no critic LSTM) and features extractors, with the memory given by
    :func:`unroll_lstm`. Features are computed once per distinct step of the minibatch, then gathered
    for every slot that holds the step.

    :param policy: The recurrent policy
    :param samples: A minibatch of windows from a window rollout buffer
    :return: values, log-probabilities and entropies (``None`` when the distribution has no closed form),
        each of shape ``(B, W)``
    """
    n_windows, window_size = samples.slot_steps.shape
    # (B, W) -> (B * W,)
    slot_steps = samples.slot_steps.reshape(-1)
    features = policy.extract_features(samples.observations)
    if isinstance(features, tuple):
        pi_features, vf_features = features
    else:
        pi_features = vf_features = features
    memory_not_start = 1.0 - samples.episode_starts[:, 0]
    # The memory entering each window's slot 0: stored, or burned in over the steps before the window
    pi_memory, vf_memory = samples.lstm_states.pi, samples.lstm_states.vf
    if samples.burn_in is not None:
        pi_memory = burned_in_memory(policy.lstm_actor, pi_features, samples.burn_in, samples.burn_in.memory.pi)
        if policy.lstm_critic is not None:
            vf_memory = burned_in_memory(policy.lstm_critic, vf_features, samples.burn_in, samples.burn_in.memory.vf)

    def unroll(lstm: nn.LSTM, step_features: th.Tensor, memory: tuple[th.Tensor, ...]) -> th.Tensor:
        return unroll_lstm(lstm, step_features[slot_steps], memory, memory_not_start, samples.layout)

    latent_pi = unroll(policy.lstm_actor, pi_features, pi_memory)
    if policy.lstm_critic is not None:
        latent_vf = unroll(policy.lstm_critic, vf_features, vf_memory)
    elif policy.shared_lstm:
        latent_vf = latent_pi.detach()
    else:
        assert policy.critic is not None
        latent_vf = policy.critic(vf_features)[slot_steps]

    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    distribution = policy._get_action_dist_from_latent(latent_pi)

    # (B, W, action_dim) -> (B * W, action_dim)
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(policy.action_space, spaces.Discrete):
        # (B * W, 1) float -> (B * W,) long
        actions = actions.long().flatten()
    log_prob = distribution.log_prob(actions)
    entropy = distribution.entropy()
    values = policy.value_net(latent_vf)
    # (B * W,) or (B * W, 1) -> (B, W)
    shape = (n_windows, window_size)
    return (
        values.reshape(shape),
        log_prob.reshape(shape),
        None if entropy is None else entropy.reshape(shape),
    )
