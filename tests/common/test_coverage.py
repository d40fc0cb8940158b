"""
Full-coverage epochs (``window_coverage="full"``): clipped windows at the rollout's ends, padding slots that nothing
sees, every step trained exactly once per epoch at the default stride, and derived window lengths.
"""

from typing import Any

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv, assert_close_named, examples, filled_window_buffer, loss_from_fields
from hypothesis import given, settings
from hypothesis import strategies as st
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.env_util import make_vec_env
from test_evaluation import _oracle
from window_weights import brute_force_step_weights

from sb3_reset_ppo import ResetPPO, WindowRolloutBuffer, window_weights
from sb3_reset_ppo.common.epochs import EpochWindows, epoch_window_starts, window_units
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.layout import plan_reset_steps
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples


def _buffer(
    n_steps: int,
    n_envs: int,
    window_size: int,
    stride: int | None,
    boundary: str = "reset",
    weighting: str = "uniform",
    density: float = 0.3,
    seed: int = 1,
) -> WindowRolloutBuffer:
    """A full-coverage buffer whose observation at (step, env) is its env-major flat index; memory holds the same id."""
    return filled_window_buffer(
        n_steps, n_envs, window_size, boundary, weighting, stride,
        window_coverage="full", density=density, seed=seed, buffer_seed=seed,
    )  # fmt: skip


def _step_ids(batch: WindowRolloutBufferSamples) -> th.Tensor:
    assert isinstance(batch.observations, th.Tensor)
    return batch.observations[:, 0].long()[batch.slot_steps]


def _real(batch: WindowRolloutBufferSamples) -> th.Tensor:
    """Real slots, read from the layout-independent fields: padding repeats the last real step's id."""
    ids = _step_ids(batch)
    real = th.ones_like(ids, dtype=th.bool)
    real[:, 1:] = ids[:, 1:] != ids[:, :-1]
    return real


@settings(max_examples=examples(150), deadline=None)
@given(
    st.integers(1, 24),
    st.integers(1, 3),
    st.data(),
    st.sampled_from(["reset", "mask"]),
    st.sampled_from(["uniform", "importance", "kept_mean"]),
)
def test_full_window_weights_match_brute_force(
    n_steps: int, n_envs: int, data: st.DataObject, boundary: str, weighting: str
) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    stride = data.draw(st.integers(1, 2 * n_steps + 2))
    density = data.draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    episode_starts = (rng.random((n_steps, n_envs)) < density).astype(np.float32)
    expected = brute_force_step_weights(episode_starts, window_size, boundary, weighting, stride, "full")
    actual = window_weights(episode_starts, window_size, boundary, weighting, stride, window_coverage="full")
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_full_coverage_weights_in_closed_form() -> None:
    # Reset mode, uniform: every step W / k, rollout ends included (inside: min(s+1, W, T-s, T-W+1) / k)
    episode_starts = np.zeros(40)
    episode_starts[[0, 7, 33]] = 1
    for stride in (1, 4, 8, 13):
        weights = window_weights(episode_starts, 8, "reset", window_stride=stride, window_coverage="full")
        np.testing.assert_allclose(weights, 8 / stride)
        inside = window_weights(episode_starts, 8, "reset", window_stride=stride, window_coverage="inside")
        assert inside[0] < weights[0] and inside[-1] < weights[-1]
    # Mask mode: the episode that begins in the last W - 1 steps is trained (inside: never)
    mask_full = window_weights(episode_starts, 8, "mask", window_stride=1, window_coverage="full")
    mask_inside = window_weights(episode_starts, 8, "mask", window_stride=1, window_coverage="inside")
    assert np.all(mask_inside[33:] == 0) and np.all(mask_full[33:] > 0)
    # k steps into an episode: at most min(k + 1, W) windows keep it
    np.testing.assert_array_equal(mask_full[7:15], np.arange(1, 9))


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(1, 20), st.integers(1, 3), st.data())
def test_every_step_is_trained_at_most_once_per_epoch_at_stride_w(n_steps: int, n_envs: int, data: st.DataObject) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    batch_size = data.draw(st.integers(1, 4 * window_size))
    buffer = _buffer(n_steps, n_envs, window_size, None, density=data.draw(st.sampled_from([0.0, 0.3, 1.0])))
    full = max(batch_size, window_size)
    for _ in range(3):
        counts = th.zeros(n_envs * n_steps)
        batches = list(buffer.get(batch_size=batch_size))
        for batch in batches:
            real = _real(batch)
            # Reset mode: the kept slots are the real ones, and their weights are 1
            assert th.equal(batch.kept, real)
            assert th.equal(batch.weights, real.float())
            assert batch.n_real_slots == (None if bool(real.all()) else int(real.sum()))
            counts.index_add_(0, _step_ids(batch)[real], th.ones(int(real.sum())))
        # Every step in exactly one window: trained once, but the epoch's remainder, which is left out
        n_slots = n_envs * n_steps
        left_out = 0 if full >= n_slots else n_slots % full
        assert th.all(counts <= 1) and int(counts.sum()) == n_slots - left_out, counts
        # Minibatches of exactly `full` real slots (batch_size, at least one window's worth), or the whole epoch
        sizes = [int(_real(batch).sum()) for batch in batches]
        assert sizes == ([n_slots] if full >= n_slots else [full] * (n_slots // full))


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 16), st.integers(1, 3), st.data())
def test_every_step_is_trained_exactly_w_times_per_epoch_at_stride_1(n_steps: int, n_envs: int, data: st.DataObject) -> None:
    window_size = data.draw(st.integers(1, n_steps))
    buffer = _buffer(n_steps, n_envs, window_size, 1)
    # Minibatches of 3 W: the epoch's n_envs * n_steps * W slots are a multiple of it only when 3 divides them
    batch_size = 3 * window_size if (n_envs * n_steps) % 3 == 0 else None
    counts = th.zeros(n_envs * n_steps)
    sizes = []
    for batch in buffer.get(batch_size=batch_size):
        real = _real(batch)
        ids = _step_ids(batch)
        counts.index_add_(0, ids[real], th.ones(int(real.sum())))
        sizes.append(int(real.sum()))
    assert th.all(counts == window_size)
    # n_steps + W - 1 clipped windows per env, n_steps * W real slots, in minibatches of 3 W (nothing left out)
    if batch_size is None:
        assert sizes == [n_envs * n_steps * window_size]
    else:
        assert sizes == [batch_size] * (n_envs * n_steps // 3)


def test_clipped_windows_start_from_the_memory_of_their_first_real_step() -> None:
    buffer = _buffer(12, 2, 5, None)
    for _ in range(5):
        for batch in buffer.get(batch_size=10):
            ids = _step_ids(batch)
            assert th.equal(batch.window_starts, ids[:, 0])
            assert th.equal(batch.lstm_states.pi[0][:, 0, 0].long(), ids[:, 0])
            real = _real(batch)
            # Padding slots: no episode start, no reset, never kept
            assert not bool(batch.episode_starts[~real].any())
            assert not bool(batch.resets[~real].any())
            # Consecutive real slots are consecutive steps of one env
            steps = ids[:, 1:] - ids[:, :-1]
            assert th.all(steps[real[:, 1:]] == 1)


@pytest.mark.parametrize("n_steps,window_size,phase", [(16, 4, 1), (16, 4, 0), (32, 24, 5), (32, 24, 20), (10, 10, 3)])
def test_epoch_windows_and_units(n_steps: int, window_size: int, phase: int) -> None:
    class Fixed(np.random.Generator):
        def __init__(self) -> None:
            super().__init__(np.random.PCG64(0))

        def integers(self, *args: Any, size: Any = None, **kwargs: Any) -> Any:
            return np.full(size, phase)

    epoch = epoch_window_starts(n_steps, 2, window_size, window_size, Fixed(), "full")
    first = phase - window_size if phase > 0 else 0
    virtual = list(range(first, n_steps, window_size))
    expected = [(max(s, 0), min(s + window_size, n_steps) - max(s, 0)) for s in virtual]
    assert [(int(s), int(n)) for s, n in zip(epoch.starts[: len(expected)], epoch.lengths, strict=False)] == expected
    units = window_units(epoch, window_size)
    per_env = len(expected)
    head, tail = expected[0][1], expected[-1][1]
    paired = head < window_size and tail < window_size and per_env > 1 and head + tail <= window_size
    assert units[per_env - 1] == (units[0] if paired else units[per_env - 2] + 1)
    assert len(np.unique(units)) == 2 * (per_env - int(paired))


def test_window_units_of_inside_windows_are_the_windows() -> None:
    epoch = EpochWindows(starts=np.array([0, 4, 16, 20]), position=np.array([0, 1, 0, 1]), lengths=np.full(4, 4))
    np.testing.assert_array_equal(window_units(epoch, 4), np.arange(4))


def test_plan_reset_steps_with_padding_matches_the_truncated_windows() -> None:
    rng = np.random.default_rng(0)
    flags = (rng.random((5, 8)) < 0.3).astype(np.float32)
    lengths = np.array([8, 3, 1, 6, 8])
    padded = plan_reset_steps(flags, lengths)
    assert padded.input_slots is not None
    for window, length in enumerate(lengths):
        # The real slots sit where a window of `length` slots puts them; padding repeats the last real slot
        alone = plan_reset_steps(flags[window : window + 1, :length])
        positions = padded.slot_positions.reshape(5, 8)[window]
        steps = positions // 5
        np.testing.assert_array_equal(steps[:length].numpy(), (alone.slot_positions // 1).numpy())
        assert th.all(steps[length:] == steps[length - 1])
        reset_rows = th.nonzero(padded.reset_steps[:, window, 0]).flatten()
        np.testing.assert_array_equal(reset_rows.numpy(), th.nonzero(alone.reset_steps[:, 0, 0]).flatten().numpy())
    # The longest row: a window's real slots and resets
    assert padded.row_length == max(int(n) + int(flags[w, 1:n].sum()) for w, n in enumerate(lengths))
    # Only real slots are written into the input
    assert padded.input_slots.tolist() == [w * 8 + i for w, n in enumerate(lengths) for i in range(n)]


@pytest.mark.parametrize("weighting", ["uniform", "importance", "kept_mean"])
@pytest.mark.parametrize("mask", [False, True])
def test_loss_ignores_padding(weighting: str, mask: bool) -> None:
    # The loss over windows with padding slots equals the loss over the real slots alone, whatever the padding holds
    rng = th.Generator().manual_seed(0)
    lengths = th.tensor([6, 2, 4])
    real = th.arange(6)[None, :] < lengths[:, None]
    kept = real.clone()
    if mask:
        kept[0, 4:] = False
    fields = {name: th.randn(3, 6, generator=rng) for name in ("log_prob", "old_log_prob", "advantages", "values", "returns")}
    fields["old_values"] = fields["values"] + 0.1 * th.randn(3, 6, generator=rng)
    fields["entropy"] = th.rand(3, 6, generator=rng)
    weights = kept.float() * (1 + th.rand(3, 6, generator=rng) if weighting == "importance" else 1)
    common = dict(weighting=weighting, clip_range=0.2, clip_range_vf=0.3, ent_coef=0.01, vf_coef=0.5)
    n_real = int(real.sum())
    padded = loss_from_fields(**fields, kept=kept, weights=weights, n_real_slots=n_real, **common)
    # The same real slots as one window with no padding
    flat = {name: value[real][None, :] for name, value in fields.items()}
    reference = loss_from_fields(**flat, kept=kept[real][None, :], weights=weights[real][None, :], **common)
    for name, a, b in zip(padded._fields, padded, reference, strict=True):
        assert_close_named(a, b, name, rtol=1e-6, atol=1e-7)
    # Other padding values change nothing
    garbage = {name: th.where(real, value, 1e3 * th.randn(3, 6, generator=rng)) for name, value in fields.items()}
    again = loss_from_fields(**garbage, kept=kept, weights=weights, n_real_slots=n_real, **common)
    for name, a, b in zip(padded._fields, padded, again, strict=True):
        assert_close_named(a, b, name, rtol=0, atol=0)
    # The control: counting padding in the normaliser changes the uniform loss
    if weighting == "uniform":
        wrong = loss_from_fields(**fields, kept=kept, weights=weights, **common)
        assert not th.isclose(wrong.loss, padded.loss)


def _model(window_size: int | str = 6, **kwargs: Any) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=kwargs.pop("env_kwargs", {}))
    return ResetPPO(
        kwargs.pop("policy", "MlpLstmPolicy"),
        env,
        n_steps=16,
        batch_size=kwargs.pop("batch_size", 24),
        n_epochs=2,
        window_size=window_size,
        window_coverage="full",
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8], **kwargs.pop("policy_kwargs", {})},
        **kwargs,
    )


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"policy": "MlpGruPolicy"},
        {"policy_kwargs": {"shared_lstm": True, "enable_critic_lstm": False}},
        {"policy_kwargs": {"n_lstm_layers": 2}},
        {"window_stride": 1},
    ],
    ids=["lstm", "gru", "shared-lstm", "two-layers", "stride1"],
)
def test_clipped_windows_equal_sb3_contrib_evaluate_actions(variant: dict[str, Any]) -> None:
    # Oracle: each clipped window's real slots, evaluated by sb3-contrib as one sequence from the recorded memory
    model = _model(**variant)
    model.learn(2 * 16 * 2)
    samples = next(model.rollout_buffer.get(None))
    assert samples.n_real_slots is not None and samples.resets.any()
    model.policy.set_training_mode(True)
    ours = evaluate_windows(model.policy, samples)
    real = samples.kept  # reset mode: the real slots
    pieces: list[tuple[th.Tensor, th.Tensor, th.Tensor | None]] = []
    for window in range(samples.slot_steps.shape[0]):
        length = int(real[window].sum())

        def cut(tensor: th.Tensor, window: int = window, length: int = length) -> th.Tensor:
            return tensor[window : window + 1, :length]

        def memory(states: tuple[th.Tensor, ...], window: int = window) -> tuple[th.Tensor, ...]:
            return tuple(state[window : window + 1] for state in states)

        one = samples._replace(
            slot_steps=cut(samples.slot_steps),
            actions=cut(samples.actions),
            episode_starts=cut(samples.episode_starts),
            lstm_states=RNNStates(memory(samples.lstm_states.pi), memory(samples.lstm_states.vf)),
        )
        pieces.append(_oracle(model, one))
    generator = th.Generator().manual_seed(1)
    coefficients = [th.randn(int(real.sum()), generator=generator) for _ in range(2)]

    def real_loss(values: th.Tensor, log_prob: th.Tensor) -> th.Tensor:
        return (values * coefficients[0]).sum() + (log_prob * coefficients[1]).sum()

    theirs_values = th.cat([values.reshape(-1) for values, _, _ in pieces])
    theirs_log_prob = th.cat([log_prob.reshape(-1) for _, log_prob, _ in pieces])
    assert_close_named(ours[0][real], theirs_values, "values", rtol=1e-5, atol=1e-5)
    assert_close_named(ours[1][real], theirs_log_prob, "log_prob", rtol=1e-5, atol=1e-5)
    parameters = [p for p in model.policy.parameters() if p.requires_grad]
    ours_grads = th.autograd.grad(real_loss(ours[0][real], ours[1][real]), parameters, allow_unused=True)
    theirs_grads = th.autograd.grad(real_loss(theirs_values, theirs_log_prob), parameters, allow_unused=True)
    for index, (a, b) in enumerate(zip(ours_grads, theirs_grads, strict=True)):
        if a is None or b is None:
            assert a is None and b is None
            continue
        assert_close_named(a, b, f"gradient {index}", rtol=1e-4, atol=1e-5)


def test_padding_slots_leave_the_gradient_unchanged() -> None:
    model = _model()
    model.learn(2 * 16 * 2)
    samples = next(model.rollout_buffer.get(None))
    assert samples.n_real_slots is not None
    padding = ~samples.kept

    def gradient(batch: WindowRolloutBufferSamples) -> list[th.Tensor]:
        model.policy.zero_grad()
        model._minibatch_loss(batch, clip_range=0.2, clip_range_vf=None).loss.backward()
        return [p.grad.clone() if p.grad is not None else th.zeros(0) for p in model.policy.parameters()]

    before = gradient(samples)
    noise = th.Generator().manual_seed(3)
    altered = samples._replace(
        advantages=th.where(padding, 50 * th.randn(padding.shape, generator=noise), samples.advantages),
        returns=th.where(padding, 50 * th.randn(padding.shape, generator=noise), samples.returns),
        old_log_prob=th.where(padding, -20 * th.rand(padding.shape, generator=noise), samples.old_log_prob),
        actions=th.where(padding[..., None], 1 - samples.actions, samples.actions),
    )
    after = gradient(altered)
    for a, b in zip(before, after, strict=True):
        assert th.equal(a, b)
    # The control: the same change on a real slot changes the gradient
    real_changed = samples._replace(advantages=samples.advantages + 5 * samples.kept.float() * (th.arange(6) == 0))
    assert any(not th.equal(a, b) for a, b in zip(before, gradient(real_changed), strict=True))


def test_full_coverage_logs_every_step_trained() -> None:
    model = _model(boundary="mask")
    model.learn(2 * 16 * 2)
    diagnostics = model.rollout_buffer.window_diagnostics()
    flags = model.rollout_buffer.episode_starts
    expected = window_weights(flags, 6, "mask", window_stride=None, window_coverage="full")
    assert diagnostics["train/untrained_step_fraction"] == pytest.approx(float(np.mean(expected == 0)))
    assert diagnostics["train/untrained_step_fraction"] == 0.0  # every step starts a clipped window in mask mode too


@pytest.mark.parametrize(
    "window_size,batch_size,expected", [("batch", 24, 16), ("batch", 8, 8), ("batch", None, 16), ("rollout", 8, 16), (5, 8, 5)]
)
def test_derived_window_sizes(window_size: int | str, batch_size: int | None, expected: int) -> None:
    model = _model(window_size, batch_size=batch_size)
    assert model.window_length == expected
    assert model.rollout_buffer.window_size == expected
    assert model.window_size == window_size


def test_derived_window_size_follows_n_steps_on_load(tmp_path: Any) -> None:
    model = _model("batch", batch_size=128)
    model.save(tmp_path / "model")
    loaded = ResetPPO.load(tmp_path / "model", env=model.env, n_steps=8)
    assert loaded.window_size == "batch" and loaded.window_coverage == "full"
    assert loaded.rollout_buffer.window_size == 8


@pytest.mark.parametrize("bad,error", [("window", ValueError), ("16", ValueError), (0, ValueError), (2.5, TypeError)])
def test_bad_window_size_is_named(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="window_size"):
        _model(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["all", None, "Full"])
def test_bad_window_coverage_is_named(bad: object) -> None:
    env = make_vec_env(RandomEpisodeEnv, n_envs=1, seed=0)
    with pytest.raises(ValueError, match=r"window_coverage.*full.*inside"):
        ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, window_coverage=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window_coverage"):
        window_weights(np.zeros(8), 4, window_coverage=bad)  # type: ignore[arg-type]
