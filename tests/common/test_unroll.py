"""The fused LSTM and GRU calls the unroll is built on, and the reset step in every floating-point dtype."""

import pytest
import torch as th
from torch import nn
from unroll_reference import reference_unroll

from sb3_reset_ppo.common.evaluation import categorical_log_prob_entropy
from sb3_reset_ppo.common.layout import plan_reset_steps
from sb3_reset_ppo.common.unroll import RESET_PREACTIVATION, _reset_weight, fused_gru_layer, fused_lstm_layer, unroll_rnn

DTYPES = [th.float16, th.bfloat16, th.float32, th.float64]
RNNS = pytest.mark.parametrize("rnn_class", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])


@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_layer_is_nn_lstm(bias: bool) -> None:
    # Wraps torch.lstm (what nn.LSTM.forward calls): fails loudly if torch changes it
    th.manual_seed(0)
    lstm = nn.LSTM(3, 4, bias=bias)
    inputs = th.randn(7, 5, 3, requires_grad=True)
    state = (th.randn(1, 5, 4), th.randn(1, 5, 4))
    expected, _ = lstm(inputs, state)
    weights = [p for _, p in lstm.named_parameters()]
    actual = fused_lstm_layer(inputs, state, weights, training=True)
    th.testing.assert_close(actual, expected, rtol=0, atol=0)
    wrt = [inputs, *weights]
    for grad_actual, grad_expected in zip(
        th.autograd.grad(actual.square().sum(), wrt), th.autograd.grad(expected.square().sum(), wrt), strict=True
    ):
        th.testing.assert_close(grad_actual, grad_expected)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_layer_is_nn_gru(bias: bool) -> None:
    # Wraps torch.gru (what nn.GRU.forward calls): fails loudly if torch changes it
    th.manual_seed(0)
    gru = nn.GRU(3, 4, bias=bias)
    inputs = th.randn(7, 5, 3, requires_grad=True)
    hidden = th.randn(1, 5, 4)
    expected, _ = gru(inputs, hidden)
    weights = [p for _, p in gru.named_parameters()]
    actual = fused_gru_layer(inputs, hidden, weights, training=True)
    th.testing.assert_close(actual, expected, rtol=0, atol=0)
    wrt = [inputs, *weights]
    for grad_actual, grad_expected in zip(
        th.autograd.grad(actual.square().sum(), wrt), th.autograd.grad(expected.square().sum(), wrt), strict=True
    ):
        th.testing.assert_close(grad_actual, grad_expected)


def _windows(
    dtype: th.dtype, seed: int = 0, rnn_class: type[nn.Module] = nn.LSTM
) -> tuple[nn.Module, th.Tensor, tuple[th.Tensor, ...], th.Tensor]:
    generator = th.Generator().manual_seed(seed)
    th.manual_seed(seed)
    lstm = rnn_class(3, 6, num_layers=2).to(dtype)
    features = th.randn(5, 8, 3, generator=generator).to(dtype).requires_grad_(True)
    memory: tuple[th.Tensor, ...] = (
        th.randn(5, 8, 2, 6, generator=generator).to(dtype),
        th.randn(5, 8, 2, 6, generator=generator).to(dtype),
    )
    if rnn_class is nn.GRU:
        memory = memory[:1]
    # Every window resets at slot 3, every other one at slot 6 too, and the first starts an episode at slot 0
    episode_starts = th.zeros(5, 8, dtype=dtype)
    episode_starts[:, 3] = 1.0
    episode_starts[::2, 6] = 1.0
    episode_starts[0, 0] = 1.0
    return lstm, features, memory, episode_starts


def _fused(lstm: nn.Module, features: th.Tensor, memory: tuple[th.Tensor, ...], episode_starts: th.Tensor) -> th.Tensor:
    n_windows, window_size = episode_starts.shape
    layout = plan_reset_steps(episode_starts.float().numpy())
    # (B, W, L, H) -> (B, L, H): the memory recorded for slot 0; (B, W, F) -> (B * W, F)
    out = unroll_rnn(
        lstm,  # type: ignore[arg-type]
        features.reshape(n_windows * window_size, -1),
        tuple(tensor[:, 0] for tensor in memory),
        1.0 - episode_starts[:, 0],
        layout,
    )
    # (B * W, H) -> (B, W, H)
    return out.reshape(n_windows, window_size, -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reset_step_zeroes_the_memory_exactly_in_every_dtype(dtype: th.dtype) -> None:
    # The reset step's output is o * tanh(0 * c + 0 * g) = 0 exactly, and nothing is NaN or infinite
    th.manual_seed(0)
    lstm = nn.LSTM(3, 6).to(dtype)
    reset_weight = th.zeros(24, 1, dtype=dtype)
    reset_weight[:12] = RESET_PREACTIVATION
    # Steps 0-1: normal inputs; step 2: the reset step (input 0, reset flag 1); steps 3-4 normal
    inputs = th.randn(5, 4, 3).to(dtype) * 3
    inputs[2] = 0
    flags = th.zeros(5, 4, 1, dtype=dtype)
    flags[2] = 1
    state = (th.randn(1, 4, 6).to(dtype) * 3, th.randn(1, 4, 6).to(dtype) * 3)
    weights = [
        th.cat([lstm.get_parameter("weight_ih_l0"), reset_weight], dim=1),
        *(lstm.get_parameter(name) for name in ("weight_hh_l0", "bias_ih_l0", "bias_hh_l0")),
    ]
    outputs = fused_lstm_layer(th.cat([inputs, flags], dim=2), state, weights, training=False)
    assert th.isfinite(outputs).all()
    assert th.equal(outputs[2], th.zeros_like(outputs[2]))
    # After the reset the memory is zero: steps 3-4 equal an LSTM started from zero memory, in the same dtype, up
    # to the dtype's rounding (torch's default tolerances): the fused call multiplies by a weight with one more
    # input column, which some CPUs' kernels sum in another order (last-bit differences on AVX2, none on AVX-512)
    restarted, _ = lstm(inputs[3:], (th.zeros(1, 4, 6, dtype=dtype), th.zeros(1, 4, 6, dtype=dtype)))
    th.testing.assert_close(outputs[3:], restarted)
    # The pre-activation -1e9 used before is -inf in float16: 0 * -inf made every step NaN there
    assert th.isfinite(th.tensor(RESET_PREACTIVATION, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gru_reset_step_zeroes_the_memory_exactly_in_every_dtype(dtype: th.dtype) -> None:
    # r = z = 0 and n = tanh(-b_in + b_in + 0) = 0: the reset step's output is exactly 0, and no gradient reaches
    # the memory entering it
    th.manual_seed(0)
    gru = nn.GRU(3, 6).to(dtype)
    with th.no_grad():
        gru.get_parameter("bias_ih_l0").mul_(40)  # large candidate biases: -b_in + b_in must still cancel exactly
    inputs = th.randn(5, 4, 3).to(dtype) * 3
    inputs[2] = 0
    flags = th.zeros(5, 4, 1, dtype=dtype)
    flags[2] = 1
    hidden = (th.randn(1, 4, 6).to(dtype) * 3).requires_grad_(True)
    weights = [
        th.cat([gru.get_parameter("weight_ih_l0"), _reset_weight(gru, 0, inputs)], dim=1),
        *(gru.get_parameter(name) for name in ("weight_hh_l0", "bias_ih_l0", "bias_hh_l0")),
    ]
    outputs = fused_gru_layer(th.cat([inputs, flags], dim=2), hidden, weights, training=False)
    assert th.isfinite(outputs).all()
    assert th.equal(outputs[2], th.zeros_like(outputs[2]))
    restarted, _ = gru(inputs[3:], th.zeros(1, 4, 6, dtype=dtype))
    th.testing.assert_close(outputs[3:], restarted)  # up to the dtype's rounding, as for the LSTM
    (grad,) = th.autograd.grad(outputs[2:].float().sum(), hidden)
    assert th.equal(grad, th.zeros_like(grad))
    # Control: without the candidate column (only r and z forced) the output is tanh(b_in) * 1, not 0
    weights[0] = th.cat(
        [gru.get_parameter("weight_ih_l0"), _reset_weight(gru, 0, inputs).clone().index_fill_(0, th.arange(12, 18), 0)], dim=1
    )
    leaky = fused_gru_layer(th.cat([inputs, flags], dim=2), hidden, weights, training=False)
    assert leaky[2].abs().sum() > 0


@RNNS
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unroll_matches_reference_in_every_dtype(dtype: th.dtype, rnn_class: type[nn.Module]) -> None:
    lstm, features, memory, episode_starts = _windows(dtype, rnn_class=rnn_class)
    actual = _fused(lstm, features, memory, episode_starts)
    # The slot-by-slot definition, computed in float64
    lstm64 = rnn_class(3, 6, num_layers=2).double()
    lstm64.load_state_dict({k: v.double() for k, v in lstm.state_dict().items()})
    expected = reference_unroll(
        lstm64,
        features.detach().double(),
        tuple(tensor.double() for tensor in memory),
        episode_starts.double(),
        "reset",
    )
    assert actual.dtype == dtype and th.isfinite(actual).all()
    tolerance = {th.float16: 1e-2, th.bfloat16: 5e-2, th.float32: 1e-5, th.float64: 1e-10}[dtype]
    th.testing.assert_close(actual.double(), expected, rtol=tolerance, atol=tolerance)
    # Backpropagation stays finite and stops at the reset of slot 3 exactly
    (grad,) = th.autograd.grad(actual[:, 5].float().sum(), features)
    assert th.isfinite(grad).all()
    assert th.equal(grad[:, :3], th.zeros_like(grad[:, :3]))
    assert (grad[:, 3:6].abs().sum(dim=-1) > 0).all()


@RNNS
def test_dropout_between_layers_in_training_mode_matches_nn_module(rnn_class: type[nn.Module]) -> None:
    # With no reset the unroll is nn.LSTM's (nn.GRU's) fused multi-layer call, dropout masks included (same seed)
    lstm = rnn_class(3, 5, num_layers=3, dropout=0.4).train()
    generator = th.Generator().manual_seed(0)
    features = th.randn(4, 6, 3, generator=generator)
    memory: tuple[th.Tensor, ...] = (th.randn(4, 6, 3, 5, generator=generator), th.randn(4, 6, 3, 5, generator=generator))
    memory = memory if rnn_class is nn.LSTM else memory[:1]
    no_starts = th.zeros(4, 6)
    th.manual_seed(5)
    actual = _fused(lstm, features, memory, no_starts)
    th.manual_seed(5)
    # (B, L, H) -> (L, B, H); (B, W, F) -> (W, B, F)
    state = tuple(tensor[:, 0].transpose(0, 1).contiguous() for tensor in memory)
    expected, _ = lstm(features.transpose(0, 1), state if rnn_class is nn.LSTM else state[0])
    # Up to float32 rounding (torch's default tolerances; bitwise on some CPUs, not on all): another dropout mask
    # differs by far more (checked below)
    th.testing.assert_close(actual, expected.transpose(0, 1))
    # Dropout is on: another seed gives other outputs
    th.manual_seed(6)
    assert not th.allclose(_fused(lstm, features, memory, no_starts), actual)


@pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device")
@RNNS
def test_cuda_unroll_takes_weights_without_repacking(rnn_class: type[nn.Module]) -> None:
    # cuDNN warns (and re-packs on every call) when the weights are not one contiguous chunk: make it an error
    import warnings

    lstm, features, memory, episode_starts = _windows(th.float32, rnn_class=rnn_class)
    lstm = lstm.cuda()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*contiguous chunk of memory.*")
        with th.backends.cudnn.flags(enabled=True, allow_tf32=False):
            actual = _fused(lstm, features.detach().cuda(), tuple(m.cuda() for m in memory), episode_starts.cuda())
            actual.sum().backward()
    expected = _fused(lstm.cpu(), features.detach(), memory, episode_starts)
    th.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n_actions", [2, 5])
def test_categorical_log_prob_entropy_is_torchs_categorical_bitwise(n_actions: int) -> None:
    # evaluate_windows computes a plain categorical policy's log-probabilities and entropies without building the
    # distribution: the same values and gradients as torch's Categorical, bit for bit, large logits included
    generator = th.Generator().manual_seed(n_actions)
    logits = th.randn(64, n_actions, generator=generator) * th.tensor([1.0] * 60 + [80.0] * 4)[:, None]
    logits.requires_grad_(True)
    actions = th.randint(0, n_actions, (64,), generator=generator)
    weights = th.randn(64, generator=generator)
    distribution = th.distributions.Categorical(logits=logits)
    expected = (distribution.log_prob(actions), distribution.entropy())
    (expected_grad,) = th.autograd.grad((weights * expected[0]).sum() + expected[1].sum(), logits)
    log_prob, entropy = categorical_log_prob_entropy(logits, actions)
    (grad,) = th.autograd.grad((weights * log_prob).sum() + entropy.sum(), logits)
    assert th.equal(log_prob, expected[0]) and th.equal(entropy, expected[1]) and th.equal(grad, expected_grad)
