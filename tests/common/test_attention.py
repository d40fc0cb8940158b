"""The Transformer-XL blocks and the reset mask, against a step-by-step reference and a literal double loop."""

import numpy as np
import pytest
import torch as th
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from trxl_reference import reference_sequence

from sb3_reset_ppo.common.attention import TransformerXL, attention_mask

ENCODINGS = pytest.mark.parametrize("positional_encoding", ["none", "learned", "sinusoidal"])
GATED = pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
MEMORY_LENGTH = 3
N_STEPS = 14


def literal_mask(episode_starts: np.ndarray, counts: np.ndarray, memory_length: int) -> np.ndarray:
    """The design's rule read one slot and one key at a time: itself and its episode's last K steps before it."""
    n_rows, width = episode_starts.shape
    allowed = np.zeros((n_rows, width, memory_length + width), dtype=bool)
    for row in range(n_rows):
        for slot in range(width):
            # The slot's episode began at the last slot up to it that starts one; where none does, it began before
            # the row, which holds `counts` of its positions in the memory
            begun = [i for i in range(slot + 1) if episode_starts[row, i]]
            episode_first = begun[-1] if begun else -int(counts[row])
            first = max(episode_first, slot - memory_length)
            for key in range(memory_length + width):
                allowed[row, slot, key] = first <= key - memory_length <= slot
    return allowed


@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.data(),
    memory_length=st.integers(1, 5),
    width=st.integers(1, 8),
    n_rows=st.integers(1, 3),
)
def test_mask_is_the_literal_rule(data: st.DataObject, memory_length: int, width: int, n_rows: int) -> None:
    starts = np.array(data.draw(st.lists(st.booleans(), min_size=n_rows * width, max_size=n_rows * width))).reshape(
        n_rows, width
    )
    counts = np.array(data.draw(st.lists(st.integers(0, memory_length), min_size=n_rows, max_size=n_rows)))
    mask = attention_mask(th.as_tensor(starts, dtype=th.float32), th.as_tensor(counts), memory_length)
    np.testing.assert_array_equal(mask.numpy(), literal_mask(starts, counts, memory_length))


def _episode(seed: int) -> tuple[th.Tensor, th.Tensor, th.Tensor, int]:
    """Features, episode starts (short episodes), memory entering the first step and its count, float64."""
    generator = th.Generator().manual_seed(seed)
    features = th.randn(N_STEPS, 5, generator=generator, dtype=th.float64)
    starts = (th.rand(N_STEPS, generator=generator) < 0.3).double()
    starts[[4, 5, 11]] = 1.0
    memory = th.randn(MEMORY_LENGTH, 2, 8, generator=generator, dtype=th.float64)
    return features, starts, memory, 2


def _transformer(positional_encoding: str, gated: bool) -> TransformerXL:
    th.manual_seed(0)
    transformer = TransformerXL(5, 8, 2, 2, MEMORY_LENGTH, positional_encoding, gated)  # type: ignore[arg-type]
    with th.no_grad():
        for parameter in transformer.parameters():
            # Away from the initial values (zero biases, near-identity gates) so that every term counts
            parameter.add_(0.3 * th.randn_like(parameter))
    return transformer.double()


@ENCODINGS
@GATED
def test_windows_equal_the_step_by_step_reference(positional_encoding: str, gated: bool) -> None:
    transformer = _transformer(positional_encoding, gated)
    features, starts, memory, n_valid = _episode(1)
    with th.no_grad():
        expected, expected_inputs = reference_sequence(transformer, features, starts, memory, n_valid)
        # Every window of 5 slots, all at once; each reads the reference's block inputs before it as its memory
        width = 5
        # The reference's memory positions: the memory entering the episode, then every step's block inputs
        positions = th.cat([memory, expected_inputs])
        counts = [n_valid]
        for step in range(N_STEPS - 1):
            counts.append(min((0 if starts[step] > 0.5 else counts[-1]) + 1, MEMORY_LENGTH))
        window_starts = range(N_STEPS - width + 1)
        rows = th.stack([features[t : t + width] for t in window_starts])
        row_memory = th.stack([positions[t : t + MEMORY_LENGTH] for t in window_starts])
        row_starts = th.stack([starts[t : t + width] for t in window_starts])
        allowed = attention_mask(row_starts, th.tensor([counts[t] for t in window_starts]), MEMORY_LENGTH)
        outputs, inputs = transformer(rows, row_memory, allowed)
    for row, t in enumerate(window_starts):
        th.testing.assert_close(outputs[row], expected[t : t + width], rtol=0, atol=1e-10)
        th.testing.assert_close(inputs[row], expected_inputs[t : t + width], rtol=0, atol=1e-10)


@ENCODINGS
def test_steps_equal_the_reference(positional_encoding: str) -> None:
    # Collection and predict: one step of every env at a time, the memory carried in the state
    transformer = _transformer(positional_encoding, gated=True)
    features, starts, memory, n_valid = _episode(2)
    with th.no_grad():
        expected, _ = reference_sequence(transformer, features, starts, memory, n_valid)
        # (K, L, D) -> (K, 1, L, D): one env
        state: tuple[th.Tensor, ...] = (memory[:, None], th.tensor([[n_valid]]))
        for step in range(N_STEPS):
            output, state = transformer.step(features[step : step + 1], state, starts[step : step + 1])
            th.testing.assert_close(output[0], expected[step], rtol=0, atol=1e-10)


@ENCODINGS
@GATED
def test_no_gradient_crosses_an_episode_start(positional_encoding: str, gated: bool) -> None:
    transformer = _transformer(positional_encoding, gated)
    features, _, memory, _ = _episode(3)
    width, start = 6, 3
    features = features[None, :width].clone().requires_grad_(True)
    memory = memory[None].clone().requires_grad_(True)
    starts = th.zeros(1, width, dtype=th.float64)
    starts[0, start] = 1.0
    allowed = attention_mask(starts, th.tensor([MEMORY_LENGTH]), MEMORY_LENGTH)
    outputs, _ = transformer(features, memory, allowed)
    for slot in range(width):
        feature_grad, memory_grad = th.autograd.grad(outputs[0, slot].sum(), (features, memory), retain_graph=True)
        # Nothing after it reaches a slot
        assert bool((feature_grad[0, slot + 1 :] == 0).all())
        if slot >= start:
            # Exactly 0: the earlier episode's slots and the memory get softmax weight 0
            assert bool((feature_grad[0, :start] == 0).all()) and bool((memory_grad == 0).all())
            # ... and the earlier slots of its own episode (within the window) are reached
            assert bool((feature_grad[0, start : slot + 1].abs().sum(dim=1) > 0).all())
        else:
            # Its episode began before the window: the memory and every earlier slot are reached
            assert bool((feature_grad[0, : slot + 1].abs().sum(dim=1) > 0).all())
            assert float(memory_grad.abs().sum()) > 0


def test_float32_windows_equal_the_reference() -> None:
    transformer = _transformer("sinusoidal", gated=True)
    features, starts, memory, n_valid = _episode(4)
    with th.no_grad():
        expected, _ = reference_sequence(transformer, features, starts, memory, n_valid)
        single = transformer.float()
        allowed = attention_mask(starts[None].float(), th.tensor([n_valid]), MEMORY_LENGTH)
        outputs, _ = single(features[None].float(), memory[None].float(), allowed)
    th.testing.assert_close(outputs[0], expected.float(), rtol=0, atol=1e-5)
