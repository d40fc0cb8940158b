"""Reset-and-continue: the one unroll used by actor and critic, and the window evaluation of a policy."""

import functools
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple, Protocol, TypeAlias, TypeGuard

import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import CategoricalDistribution, Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import nn
from torch.nn import functional as F

from sb3_reset_ppo.common.layout import ResetLayout, plan_reset_steps
from sb3_reset_ppo.common.type_aliases import BurnIn, WindowRolloutBufferSamples

# Added to the input- and forget-gate pre-activations at a reset step: both gates become exactly 0. The
# sigmoid of it is exactly 0 in float16, bfloat16, float32 and float64 (exp(1e4) overflows in all four), it is
# finite in all four (float16's largest is 65504), and 0 * it is 0 at the other steps (-1e9 is -inf in
# float16, and 0 * -inf is NaN). Exact while the rest of a gate's pre-activation stays below ~9,000.
RESET_PREACTIVATION = -1e4

#: The recurrent layers the unroll supports: sb3-contrib's LSTM and the GRU of the GRU policies
RecurrentLayer: TypeAlias = nn.LSTM | nn.GRU
RecurrentLayerType = Literal["lstm", "gru"]


def recurrent_layer_type(rnn: nn.Module) -> RecurrentLayerType:
    """
    ``"lstm"`` or ``"gru"``: the kind of a policy's recurrent layer.

    :param rnn: The recurrent layer
    :return: Its type
    """
    if isinstance(rnn, nn.LSTM):
        return "lstm"
    if isinstance(rnn, nn.GRU):
        return "gru"
    raise TypeError(f"the policy's recurrent layer must be an nn.LSTM or an nn.GRU, got {type(rnn).__name__}")


CriticKind = Literal["separate", "shared", "none"]


class CriticVariant(NamedTuple):
    """
    Which of sb3-contrib's three critics a recurrent policy has, and the layer that turns the critic's features into
    its latent (the input of ``mlp_extractor.forward_critic``), as :func:`critic_variant` reads them:

    - ``"separate"`` (``enable_critic_lstm=True``, sb3-contrib's default): a recurrent layer of its own, ``rnn``
      (``policy.lstm_critic``), with a memory of its own.
    - ``"shared"`` (``shared_lstm=True``): the actor's recurrent output, detached (the value loss does not train the
      actor's layer); its memory is the actor's, detached.
    - ``"none"`` (neither): no recurrent layer, a linear layer on the features, ``linear`` (``policy.critic``); its
      memory is unused (sb3-contrib stores the actor's in its place).

    :param kind: ``"separate"``, ``"shared"`` or ``"none"``
    :param rnn: The critic's own LSTM or GRU (``"separate"``), else ``None``
    :param linear: The critic's layer on the features (``"none"``), else ``None``
    """

    kind: CriticKind
    rnn: RecurrentLayer | None
    linear: nn.Module | None


def critic_variant(policy: RecurrentActorCriticPolicy) -> CriticVariant:
    """
    The critic of a recurrent policy (sb3-contrib's LSTM policies, the GRU policies): the one place the three cases
    of ``enable_critic_lstm`` and ``shared_lstm`` are told apart (the window evaluation, the GRU policies' ``forward``,
    the maskable policies' latents, the memory refresh).

    :param policy: The recurrent policy
    :return: Its critic's variant and layer (see :class:`CriticVariant`)
    """
    rnn: RecurrentLayer | None = policy.lstm_critic
    if rnn is not None:
        return CriticVariant("separate", rnn, None)
    if policy.shared_lstm:
        return CriticVariant("shared", None, None)
    # sb3-contrib builds this layer whenever the critic has no recurrent layer and does not share the actor's
    assert policy.critic is not None
    return CriticVariant("none", None, policy.critic)


def memory_state_names(layer_type: RecurrentLayerType) -> tuple[str, ...]:
    """
    The tensors that make a layer's memory, in the order of its state tuple: an LSTM's ``(hidden, cell)``, a GRU's
    ``(hidden,)``.

    :param layer_type: ``"lstm"`` or ``"gru"``
    :return: ``("hidden", "cell")`` or ``("hidden",)``
    """
    return ("hidden", "cell") if layer_type == "lstm" else ("hidden",)


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
    outputs, _, _ = th.lstm(inputs, state, _contiguous_views(weights), len(weights) == 4, 1, 0.0, training, False, False)
    return outputs


def fused_gru_layer(inputs: th.Tensor, hidden: th.Tensor, weights: Sequence[th.Tensor], training: bool) -> th.Tensor:
    """
    One layer of torch's fused GRU over a whole sequence: ``torch.gru``, the call ``nn.GRU.forward`` makes, with
    the weights passed as in :func:`fused_lstm_layer`. ``tests/test_gru.py`` checks it against ``nn.GRU``.

    :param inputs: Sequence, shape ``(steps, batch, input_size)``
    :param hidden: Hidden state entering the first step, ``(1, batch, hidden_size)``
    :param weights: ``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer (gates in PyTorch's order r, z, n)
    :param training: Training mode (no effect without dropout; passed as ``nn.GRU`` does)
    :return: Outputs of every step, shape ``(steps, batch, hidden_size)``
    """
    outputs, _ = th.gru(inputs, hidden, _contiguous_views(weights), len(weights) == 4, 1, 0.0, training, False, False)
    return outputs


def _contiguous_views(weights: Sequence[th.Tensor]) -> list[th.Tensor]:
    """
    The weights copied into one contiguous buffer, in the given order, as views of it, where cuDNN runs the call;
    elsewhere (the CPU's fused kernels take the weights as they are) the weights themselves, uncopied.
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
    """
    Raise a ``ValueError`` for recurrent-layer options the window unroll (and sb3-contrib's policies) do not support.

    :param rnn: The policy's LSTM or GRU
    """
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

    Slot 0 of a window starts from the memory recorded for its step, times ``1 - episode_start`` (SB3's
    rule). At a slot whose step starts an episode (a reset), the memory is the one recorded for that step
    times ``1 - episode_start``, i.e. zero; at every other slot it is carried from the previous slot through
    the graph. The reset is realised as one extra *reset step* just before the reset slot, driven by a
    constant extra input column (1 at reset steps, 0 elsewhere) whose weights force the step's output to
    exactly 0 with every gradient path through the step exactly zero, so backpropagation through time stops at
    the boundary:

    - LSTM: the input and forget gates get ``RESET_PREACTIVATION`` and become exactly 0: the cell is
      ``0 * c + 0 * g = 0`` and the hidden state ``o * tanh(0) = 0``.
    - GRU (``r, z, n`` gates): the reset and update gates get ``RESET_PREACTIVATION`` (``r = z = 0``), and the
      candidate gate gets ``-b_in`` (its input bias, with autograd): ``n = tanh(-b_in + b_in + 0) = 0`` (the sum
      of ``b_in``, ``-b_in`` and zeros is exactly 0 in any order), so ``h = (1 - z) * n + z * h_prev = 0``.

    Each window then runs as one row of a single fused call per layer (``W`` steps plus its resets; rows are
    padded at the end).

    :param rnn: The LSTM or GRU (``batch_first=False``, as in sb3-contrib's policies)
    :param slot_features: Inputs of every slot, shape ``(B * W, input_size)``, slots row-major over ``(B, W)``
    :param memory: Recorded memory entering each window's slot 0, LSTM ``(hidden, cell)`` or GRU ``(hidden,)``,
        each ``(B, n_layers, hidden)``
    :param memory_not_start: ``1 - episode_start`` of each window's slot 0, shape ``(B,)``
    :param layout: Where each slot and reset step sits (see :func:`~sb3_reset_ppo.common.windows.plan_reset_steps`)
    :param inputs: The first layer's input as :func:`row_inputs` lays out ``slot_features``, when the caller has it
        (actor and critic that read the same features share it); ``None``: laid out here
    :return: Outputs of every slot, shape ``(B * W, hidden)``
    """
    layer_outputs = _layer_rows(rnn, slot_features, memory, memory_not_start, layout, inputs)
    *_, last = layer_outputs
    # (row_length, B, hidden) -> (row_length * B, hidden) -> (B * W, hidden)
    return last.reshape(-1, last.shape[2])[layout.slot_positions]


def _reset_weight(rnn: RecurrentLayer, layer: int, like: th.Tensor) -> th.Tensor:
    """
    The weight column of the reset input of one layer, ``(gates * hidden, 1)`` (see :func:`unroll_rnn`): LSTM
    (gates i, f, g, o) ``RESET_PREACTIVATION`` on i and f; GRU (gates r, z, n) ``RESET_PREACTIVATION`` on r and
    z, ``-b_in`` on n (a function of the parameter, so that its gradients cancel exactly as its values do).
    """
    hidden_size = rnn.hidden_size
    if isinstance(rnn, nn.LSTM):
        return _lstm_reset_column(hidden_size, like.dtype, like.device)
    else:
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
    :param layout: Where each slot and reset step sits (see :func:`~sb3_reset_ppo.common.windows.plan_reset_steps`)
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


def _layer_rows(
    rnn: RecurrentLayer,
    slot_features: th.Tensor,
    memory: tuple[th.Tensor, ...],
    memory_not_start: th.Tensor,
    layout: ResetLayout,
    first_inputs: th.Tensor | None = None,
) -> Iterator[th.Tensor]:
    """
    The unroll of :func:`unroll_rnn`, layer by layer: yields each layer's outputs, ``(row_length, B, hidden)``
    (slot ``i`` of window ``b`` at ``layout.slot_positions[b * W + i]`` of the flattened rows). ``first_inputs``:
    :func:`row_inputs` of the slot features, when the caller has it.
    """
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
        layer_weights = _layer_weights(rnn, layer)
        weights = [th.cat([layer_weights[0], _reset_weight(rnn, layer, slot_features)], dim=1), *layer_weights[1:]]
        # (row_length, B, F + 1) -> (row_length, B, hidden)
        if isinstance(rnn, nn.LSTM):
            outputs = fused_lstm_layer(
                with_reset_input, (state[0][layer : layer + 1], state[1][layer : layer + 1]), weights, rnn.training
            )
        else:
            outputs = fused_gru_layer(with_reset_input, state[0][layer : layer + 1], weights, rnn.training)
        yield outputs


def _layer_weights(rnn: RecurrentLayer, layer: int) -> list[th.Tensor]:
    """``[w_ih, w_hh]`` or ``[w_ih, w_hh, b_ih, b_hh]`` of one layer."""
    names = ["weight_ih", "weight_hh", *(["bias_ih", "bias_hh"] if rnn.bias else [])]
    return [getattr(rnn, f"{name}_l{layer}") for name in names]


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
def rnn_step_states(
    rnn: RecurrentLayer,
    features: th.Tensor,
    initial: tuple[th.Tensor, ...],
    episode_starts: th.Tensor,
    layout: ResetLayout | None = None,
) -> tuple[th.Tensor, ...]:
    """
    The memory entering every step of ``B`` sequences of ``L`` steps under SB3's episode-start rule, as the
    rollout buffer records it (before the rule is applied at that step), without gradient and without dropout
    (as during collection).

    Each layer's hidden states come from one fused call over all steps (:func:`unroll_rnn`'s layout, a reset
    step at every episode start); a GRU's memory is its hidden state. An LSTM's cell states, which a fused call
    does not return, are recomputed from the gates (one batched product over all steps) and the linear
    recurrence ``c_t = f_t * (1 - episode_start_t) * c_{t-1} + i_t * g_t``, solved as a parallel scan.

    :param rnn: The LSTM or GRU
    :param features: Inputs, ``(B, L, input_size)``
    :param initial: Memory entering step 0 as recorded (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each
        ``(B, n_layers, hidden)``
    :param episode_starts: SB3's episode-start flags, ``(B, L)``
    :param layout: ``plan_reset_steps`` of the flags on the features' device, when the caller has it (planned on the
        host from a host copy, it saves reading the flags back from the device)
    :return: Memory entering every step (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each
        ``(B, L, n_layers, hidden)``; step 0's is ``initial``
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
        rows = list(_layer_rows(rnn, features.reshape(n_sequences * length, -1), initial, 1.0 - episode_starts[:, 0], layout))
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
            weights = [weight[gate_rows] for weight in _layer_weights(rnn, layer)]
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
    ``burn_in`` steps before the window (fewer at the rollout start) from the stored memory of the first of them,
    with SB3's episode-start rule (so an episode start inside the burn-in gives SB3's episode-start memory).

    :param rnn: The LSTM or GRU
    :param step_features: Features of the minibatch's distinct steps, ``(U, F)``
    :param burn_in: The burn-in rows (see :class:`~sb3_reset_ppo.common.type_aliases.BurnIn`)
    :param first_memory: Stored memory entering each row's first step (LSTM ``(hidden, cell)``, GRU ``(hidden,)``),
        each ``(B, n_layers, hidden)``
    :return: Memory entering each window's first step, in the same form, each ``(B, n_layers, hidden)``
    """
    # (B, burn_in + 1) rows -> (B, burn_in + 1, F)
    states = rnn_step_states(rnn, step_features[burn_in.steps], first_memory, burn_in.episode_starts, burn_in.layout)
    windows = th.arange(states[0].shape[0], device=states[0].device)
    # (B, burn_in + 1, n_layers, H) -> (B, n_layers, H): the memory entering step t, `lengths` steps into the row
    return tuple(state[windows, burn_in.lengths] for state in states)


def _step_features(policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor]:
    """
    Actor and critic features of a minibatch's distinct steps, ``(U, F)`` each: with gradient for the steps that
    slots hold, without for the steps that only burn-in rows hold (they come last; see ``BurnIn.slot_steps``).
    """

    def extract(observations: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        features = policy.extract_features(observations)
        return features if isinstance(features, tuple) else (features, features)

    observations = samples.observations
    split = -1 if samples.burn_in is None else samples.burn_in.slot_steps
    n_steps = next(iter(observations.values())).shape[0] if isinstance(observations, dict) else observations.shape[0]
    if split < 0 or split >= n_steps:
        return extract(observations)

    def part(piece: slice) -> PyTorchObs:
        if isinstance(observations, dict):
            return {key: value[piece] for key, value in observations.items()}
        return observations[piece]

    trained = extract(part(slice(0, split)))
    with th.no_grad():
        burn_only = extract(part(slice(split, None)))
    # (slot steps, F) and (burn-in-only steps, F) -> (U, F)
    pi_features = th.cat([trained[0], burn_only[0]])
    vf_features = pi_features if trained[1] is trained[0] else th.cat([trained[1], burn_only[1]])
    return pi_features, vf_features


class MaskablePolicy(Protocol):
    """A recurrent policy whose action distribution takes each step's action masks (``MaskableResetPPO``'s)."""

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor, action_masks: th.Tensor | None = None) -> Distribution:
        """The action distribution of the actor's latent, with the masks applied."""
        ...


def _is_maskable(policy: RecurrentActorCriticPolicy) -> TypeGuard[MaskablePolicy]:
    """Whether ``policy`` is a maskable one: it holds sb3-contrib's maskable distribution (as the export tells)."""
    return hasattr(policy, "masked_action_dist")


def _masked_distribution(policy: RecurrentActorCriticPolicy, latent_pi: th.Tensor, masks: th.Tensor) -> Distribution:
    """The action distribution of a maskable policy with each slot's mask, ``masks`` ``(B * W, mask_dims)``."""
    if not _is_maskable(policy):
        raise TypeError(
            f"the minibatch holds action masks, but the policy {type(policy).__name__} takes none: action masks need a "
            "MaskableResetPPO policy"
        )
    return policy._get_action_dist_from_latent(latent_pi, masks)


def _plain_categorical(policy: RecurrentActorCriticPolicy) -> bool:
    """
    Whether the policy's action distribution is SB3's categorical over ``action_net``'s logits, built by SB3's own
    ``_get_action_dist_from_latent`` (not a maskable policy's, nor a subclass's own).
    """
    return (
        type(policy.action_dist) is CategoricalDistribution
        and type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
    )


def categorical_log_prob_entropy(logits: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """
    Log-probabilities of the actions and entropies of categorical distributions, as ``torch.distributions.Categorical``
    computes them (the same operations, so the same values and gradients: ``tests/test_unroll.py``), without
    building the distribution object or validating its arguments.

    :param logits: Unnormalised log-probabilities, ``(N, n_actions)``
    :param actions: Action indices, ``(N,)`` (integers)
    :return: Log-probabilities ``(N,)`` and entropies ``(N,)``
    """
    # Categorical(logits=...): normalised logits
    log_pmf = logits - logits.logsumexp(dim=-1, keepdim=True)
    # Categorical.log_prob: (N,) -> (N, 1) -> gathered -> (N,)
    log_prob = log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    # Categorical.entropy: the logits clamped to the dtype's smallest, times the probabilities
    p_log_p = th.clamp(log_pmf, min=th.finfo(log_pmf.dtype).min) * F.softmax(log_pmf, dim=-1)
    return log_prob, -p_log_p.sum(-1)


def evaluate_windows(
    policy: RecurrentActorCriticPolicy, samples: WindowRolloutBufferSamples
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
    """
    Values, log-probabilities and entropies of the actions of every slot of a minibatch of windows.

    The window counterpart of ``RecurrentActorCriticPolicy.evaluate_actions``: the same networks, critic
    variants (separate, shared or no critic LSTM: :func:`critic_variant`) and features extractors, with the
    memory given by :func:`unroll_rnn`. Features are computed once per distinct step of the minibatch, then
    gathered for every slot that holds the step.

    :param policy: The recurrent policy
    :param samples: A minibatch of windows from a window rollout buffer; with ``action_masks``, the policy's
        distribution is a maskable one (``MaskableResetPPO``) and each slot's mask is applied to it
    :return: values, log-probabilities and entropies (``None`` when the distribution has no closed form),
        each of shape ``(B, W)``
    """
    n_windows, window_size = samples.slot_steps.shape
    # (B, W) -> (B * W,)
    slot_steps = samples.slot_steps.reshape(-1)
    pi_features, vf_features = _step_features(policy, samples)
    memory_not_start = 1.0 - samples.episode_starts[:, 0]
    critic = critic_variant(policy)
    # The memory entering each window's slot 0: stored, or burned in over the steps before the window
    pi_memory, vf_memory = samples.lstm_states.pi, samples.lstm_states.vf
    if samples.burn_in is not None:
        pi_memory = burned_in_memory(policy.lstm_actor, pi_features, samples.burn_in, samples.burn_in.memory.pi)
        if critic.rnn is not None:
            vf_memory = burned_in_memory(critic.rnn, vf_features, samples.burn_in, samples.burn_in.memory.vf)

    # (U, F) -> (B * W, F): every slot's features; and their layout for the fused call, shared by actor and critic
    # when both read the same features (a shared features extractor)
    pi_slot_features = pi_features[slot_steps]
    pi_inputs = row_inputs(pi_slot_features, samples.layout)
    latent_pi = unroll_rnn(policy.lstm_actor, pi_slot_features, pi_memory, memory_not_start, samples.layout, pi_inputs)
    if critic.rnn is not None:
        if vf_features is pi_features:
            vf_slot_features, vf_inputs = pi_slot_features, pi_inputs
        else:
            vf_slot_features = vf_features[slot_steps]
            vf_inputs = row_inputs(vf_slot_features, samples.layout)
        latent_vf = unroll_rnn(critic.rnn, vf_slot_features, vf_memory, memory_not_start, samples.layout, vf_inputs)
    elif critic.linear is not None:
        latent_vf = critic.linear(vf_features)[slot_steps]
    else:  # shared: the actor's output, without backpropagation
        latent_vf = latent_pi.detach()

    latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
    latent_vf = policy.mlp_extractor.forward_critic(latent_vf)
    # (B, W, action_dim) -> (B * W, action_dim)
    actions = samples.actions.reshape(n_windows * window_size, -1)
    if isinstance(policy.action_space, spaces.Discrete):
        # (B * W, 1) float -> (B * W,) long
        actions = actions.long().flatten()
    entropy: th.Tensor | None
    if samples.action_masks is None and _plain_categorical(policy):
        log_prob, entropy = categorical_log_prob_entropy(policy.action_net(latent_pi), actions)
    else:
        if samples.action_masks is None:
            distribution = policy._get_action_dist_from_latent(latent_pi)
        else:
            # A maskable policy (MaskableResetPPO's): the mask stored with each slot's step,
            # (B, W, mask_dims) -> (B * W, mask_dims)
            masks = samples.action_masks.reshape(n_windows * window_size, -1)
            distribution = _masked_distribution(policy, latent_pi, masks)
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
