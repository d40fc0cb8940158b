"""Fresh memory: refreshed stored states and burn-in, exact before any update, checked against step-by-step references."""

from typing import Any

import pytest
import torch as th
from helpers import RandomEpisodeEnv, examples, small_reset_ppo
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from torch import nn

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.memory import rnn_step_states

CELLS = pytest.mark.parametrize("cell", ["Lstm", "Gru"])


def _reference_step_states(
    rnn: nn.Module, features: th.Tensor, initial: tuple[th.Tensor, ...], episode_starts: th.Tensor
) -> tuple[th.Tensor, ...]:
    """
    Step by step with nn.LSTM (nn.GRU), as collection does: record the memory entering a step, then apply SB3's
    rule. Returns ``(hidden, cell)`` (``(hidden,)``), each ``(B, L, n_layers, H)``.
    """
    n_sequences, length, _ = features.shape
    # (B, L, H) -> (L, B, H)
    state = [m.transpose(0, 1).contiguous() for m in initial]
    entering: list[list[th.Tensor]] = [[] for _ in state]
    for step in range(length):
        for record, tensor in zip(entering, state, strict=True):
            record.append(tensor.transpose(0, 1))
        not_start = (1.0 - episode_starts[:, step]).reshape(1, n_sequences, 1)
        if isinstance(rnn, nn.LSTM):
            _, (hidden, cell) = rnn(features[:, step][None], (state[0] * not_start, state[1] * not_start))
            state = [hidden, cell]
        else:
            _, hidden = rnn(features[:, step][None], state[0] * not_start)
            state = [hidden]
    return tuple(th.stack(record, dim=1) for record in entering)


@settings(max_examples=examples(30), deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 70),
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    st.integers(0, 1000),
    st.sampled_from([nn.LSTM, nn.GRU]),
)
def test_step_states_equal_step_by_step_collection(
    n_sequences: int, length: int, layers: int, bias: bool, density: float, seed: int, rnn_class: type[nn.Module]
) -> None:
    generator = th.Generator().manual_seed(seed)
    th.manual_seed(seed)
    rnn = rnn_class(3, 5, num_layers=layers, bias=bias, dropout=0.3 if layers > 1 else 0.0).train()
    features = th.randn(n_sequences, length, 3, generator=generator).requires_grad_(True)
    initial: tuple[th.Tensor, ...] = (
        th.randn(n_sequences, layers, 5, generator=generator),
        th.randn(n_sequences, layers, 5, generator=generator),
    )
    initial = initial if rnn_class is nn.LSTM else initial[:1]
    episode_starts = (th.rand(n_sequences, length, generator=generator) < density).float()
    states = rnn_step_states(rnn, features, initial, episode_starts)  # type: ignore[arg-type]
    # Collection runs without dropout: the reference too
    with th.no_grad():
        expected = _reference_step_states(rnn.eval(), features, initial, episode_starts)
    assert len(states) == len(expected) == (2 if rnn_class is nn.LSTM else 1)
    for state, expected_state in zip(states, expected, strict=True):
        th.testing.assert_close(state, expected_state, rtol=1e-5, atol=1e-5)
        # Computed without gradient: nothing to backpropagate into
        assert not state.requires_grad


VARIANTS: dict[str, dict[str, Any]] = {
    "separate-critic-lstm": {},
    "shared-lstm": {"shared_lstm": True, "enable_critic_lstm": False},
    "no-critic-lstm": {"enable_critic_lstm": False},
    "two-layers": {"n_lstm_layers": 2},
    "separate-extractors": {"share_features_extractor": False},
}


def _model(policy_kwargs: dict[str, Any], learning_rate: float, cell: str = "Lstm", **kwargs: Any) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0)
    model = ResetPPO(
        f"Mlp{cell}Policy",
        env,
        learning_rate=learning_rate,
        n_steps=32,
        batch_size=32,
        n_epochs=3,
        window_size=8,
        memory_refresh=1,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8], **policy_kwargs},
        **kwargs,
    )
    model.set_logger(configure(None, []))
    return model


@CELLS
@pytest.mark.parametrize("name", list(VARIANTS))
def test_refresh_before_any_update_is_the_recorded_memory(name: str, cell: str) -> None:
    model = _model(VARIANTS[name], learning_rate=0.0, cell=cell)
    # Two rollouts: the second starts from non-zero memory carried over from the first
    model.learn(2 * 32 * 2)
    buffer = model.rollout_buffer
    buffer.release()
    staleness = buffer.refresh_memory(model.policy)
    sampler = buffer.sampler()
    for key, recorded in sampler.recorded_memory.items():
        assert recorded.abs().sum() > 0
        th.testing.assert_close(sampler.memory[key], recorded, rtol=1e-5, atol=1e-5)
    assert float(staleness) < 1e-5
    # train() refreshed before epochs 2 and 3 at learning rate 0: nothing moved
    assert model.logger.name_to_value["train/memory_staleness"] < 1e-5
    assert model.logger.name_to_value["train/approx_kl"] < 1e-8


@CELLS
def test_refresh_after_updates_uses_the_current_parameters_and_windows_start_from_it(cell: str) -> None:
    model = _model({}, learning_rate=3e-3, cell=cell)
    model.learn(3 * 32 * 2)
    buffer = model.rollout_buffer
    buffer.release()
    staleness = float(buffer.refresh_memory(model.policy))
    assert staleness > 1e-3
    sampler = buffer.sampler()
    # The refreshed memory is what the current parameters give, step by step from each env's first step
    observations = sampler.observations
    assert isinstance(observations, th.Tensor)
    with th.no_grad():
        features = model.policy.extract_features(observations)
    assert isinstance(features, th.Tensor)
    first = tuple(sampler.recorded_memory[f"{name}_pi"][::32] for name in model.rollout_buffer.state_names)
    # (n_envs * n_steps, F) -> (n_envs, n_steps, F)
    hidden, *_ = _reference_step_states(
        model.policy.lstm_actor, features.reshape(2, 32, -1), first, sampler.data["episode_starts"].reshape(2, 32)
    )
    th.testing.assert_close(sampler.memory["hidden_pi"].reshape(2, 32, 1, -1), hidden, rtol=1e-5, atol=1e-5)
    # Windows start from it
    samples = next(buffer.get(None))
    flat = samples.window_starts
    assert isinstance(samples.observations, th.Tensor)
    assert th.equal(observations[flat], samples.observations[samples.slot_steps[:, 0]])
    th.testing.assert_close(samples.lstm_states.pi[0], sampler.memory["hidden_pi"][flat])
    assert not th.allclose(samples.lstm_states.pi[0], sampler.recorded_memory["hidden_pi"][flat])


@pytest.mark.parametrize("bad,error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_memory_refresh(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="memory_refresh must be a non-negative int"):
        ResetPPO("MlpLstmPolicy", make_vec_env(RandomEpisodeEnv, n_envs=1), n_steps=16, window_size=4, memory_refresh=bad)  # type: ignore[arg-type]


def _burn_in_model(
    burn_in: int, learning_rate: float, window_stride: int | None = None, cell: str = "Lstm", **kwargs: Any
) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=1, env_kwargs=kwargs.pop("env_kwargs", {}))
    model = ResetPPO(
        f"Mlp{cell}Policy",
        env,
        learning_rate=learning_rate,
        n_steps=32,
        batch_size=64,
        n_epochs=2,
        window_size=8,
        window_stride=window_stride,
        burn_in=burn_in,
        seed=1,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8], **kwargs.pop("policy_kwargs", {})},
        **kwargs,
    )
    model.learn(3 * 32 * 2)
    return model


@CELLS
@pytest.mark.parametrize("window_stride", [1, None])
@pytest.mark.parametrize("policy_kwargs", [{}, {"n_lstm_layers": 2}, {"enable_critic_lstm": False}])
def test_burn_in_before_any_update_is_exact(window_stride: int | None, policy_kwargs: dict[str, Any], cell: str) -> None:
    from helpers import check_exact

    check_exact(_burn_in_model(5, 0.0, window_stride, cell=cell, policy_kwargs=policy_kwargs))


@CELLS
def test_burn_in_equals_step_by_step_reference_and_stops_at_episode_starts(cell: str) -> None:
    burn_in = 6
    model = _burn_in_model(burn_in, 3e-3, window_stride=1, cell=cell)
    names = model.rollout_buffer.state_names
    buffer = model.rollout_buffer
    sampler = buffer.sampler()
    samples = next(buffer.get(None))
    assert samples.burn_in is not None
    observations = sampler.observations
    assert isinstance(observations, th.Tensor) and isinstance(samples.observations, th.Tensor)
    # Flat step of each window's slot 0
    flat = samples.window_starts
    assert th.equal(observations[flat], samples.observations[samples.slot_steps[:, 0]])
    with th.no_grad():
        features = model.policy.extract_features(samples.observations)
        assert isinstance(features, th.Tensor)
        from sb3_reset_ppo.common.memory import burned_in_memory

        burned = burned_in_memory(model.policy.lstm_actor, features, samples.burn_in, samples.burn_in.memory.pi)
        hidden = burned[0]
        all_features = model.policy.extract_features(observations)
    assert isinstance(all_features, th.Tensor)
    starts = sampler.data["episode_starts"]
    checked_short, checked_reset = 0, 0
    for window, step in enumerate(flat.tolist()):
        t = step % 32
        first = step - min(t, burn_in)
        # Reference: nn.LSTM step by step from the stored memory entering `first`, SB3's rule at every step
        memory = tuple(sampler.memory[f"{name}_pi"][first : first + 1] for name in names)
        expected = _reference_step_states(
            model.policy.lstm_actor,
            all_features[first : step + 1][None],
            memory,
            starts[first : step + 1][None],
        )
        assert len(burned) == len(expected) == len(names)
        for state, expected_state in zip(burned, expected, strict=True):
            th.testing.assert_close(state[window], expected_state[0, -1], rtol=1e-5, atol=1e-5)
        checked_short += t < burn_in
        checked_reset += bool(starts[first:step].any())
    assert checked_short > 0 and checked_reset > 0
    # An episode start inside the burn-in (before the window's first step): the memory before it does not matter,
    # in burned_in_memory itself
    first_pi = samples.burn_in.memory.pi
    with th.no_grad():
        shifted = tuple(tensor + 5.0 for tensor in first_pi)
        moved = burned_in_memory(model.policy.lstm_actor, features, samples.burn_in, shifted)[0]
    rows = samples.burn_in.episode_starts
    lengths = samples.burn_in.lengths
    # (B, burn_in + 1): an episode start among the first `lengths` steps of the row
    inside = (rows * (th.arange(rows.shape[1])[None] < lengths[:, None])).sum(dim=1) > 0
    assert inside.any() and (~inside).any()
    th.testing.assert_close(moved[inside], hidden[inside])
    assert not th.allclose(moved[~inside], hidden[~inside])
    # After updates the burned-in memory differs from the stored one: burn-in does something
    assert not th.allclose(hidden, sampler.memory["hidden_pi"][flat], atol=1e-4)


@CELLS
def test_no_gradient_flows_into_burn_in_steps(cell: str) -> None:
    model = _burn_in_model(6, 3e-3, window_stride=1, cell=cell, env_kwargs={"min_length": 1000, "max_length": 1000})
    # Two windows: most of their burn-in steps are in neither window
    samples = next(model.rollout_buffer.get(2 * 8))
    assert samples.burn_in is not None and isinstance(samples.observations, th.Tensor)
    observations = samples.observations.clone().requires_grad_(True)
    from sb3_reset_ppo.common.evaluation import evaluate_windows

    values, log_prob, _ = evaluate_windows(model.policy, samples._replace(observations=observations))
    (grad,) = th.autograd.grad(log_prob.sum() + values.sum(), observations)
    in_windows = th.zeros(observations.shape[0], dtype=th.bool)
    in_windows[samples.slot_steps.reshape(-1)] = True
    burn_in_only = th.zeros_like(in_windows)
    burn_in_only[samples.burn_in.steps.reshape(-1)] = True
    burn_in_only &= ~in_windows
    assert burn_in_only.any()
    assert th.all(grad[burn_in_only] == 0)
    assert th.all(grad[in_windows].abs().sum(dim=-1) > 0)


@pytest.mark.parametrize("bad,error", [(-2, ValueError), (2.0, TypeError)])
def test_bad_burn_in(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="burn_in must be a non-negative int"):
        ResetPPO("MlpLstmPolicy", make_vec_env(RandomEpisodeEnv, n_envs=1), n_steps=16, window_size=4, burn_in=bad)  # type: ignore[arg-type]


@CELLS
@pytest.mark.parametrize("learning_rate", [0.0, 3e-3])
def test_burn_in_logs_staleness(learning_rate: float, cell: str) -> None:
    model = _burn_in_model(6, learning_rate, cell=cell)
    model.set_logger(configure(None, []))
    model.train()
    # Burn-in's per-minibatch measure has its own key; the whole-rollout refresh measure is not logged without refresh
    assert "train/memory_staleness" not in model.logger.name_to_value
    staleness = model.logger.name_to_value["train/burn_in_staleness"]
    assert (staleness < 1e-5) if learning_rate == 0.0 else (staleness > 1e-3)


def test_windows_start_from_the_burned_in_memory() -> None:
    # After updates, evaluate_windows with burn-in equals the unroll from burned_in_memory, and differs from the
    # unroll from the stored memory: the burn-in is used
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    from sb3_reset_ppo.common.evaluation import evaluate_windows
    from sb3_reset_ppo.common.memory import burned_in_memory

    model = _burn_in_model(6, 3e-3)
    samples = next(model.rollout_buffer.get(None))
    assert samples.burn_in is not None
    with th.no_grad():
        _, log_prob, _ = evaluate_windows(model.policy, samples)
        features = model.policy.extract_features(samples.observations)
        assert isinstance(features, th.Tensor)
        pi = burned_in_memory(model.policy.lstm_actor, features, samples.burn_in, samples.burn_in.memory.pi)
        vf = burned_in_memory(model.policy.lstm_critic, features, samples.burn_in, samples.burn_in.memory.vf)  # type: ignore[arg-type]
        _, manual, _ = evaluate_windows(model.policy, samples._replace(burn_in=None, lstm_states=RNNStates(pi, vf)))
        _, stored, _ = evaluate_windows(model.policy, samples._replace(burn_in=None))
    th.testing.assert_close(log_prob, manual)
    assert not th.allclose(log_prob, stored, atol=1e-5)


def test_burn_in_only_steps_skip_autograd_in_the_features_extractor() -> None:
    model = small_reset_ppo(burn_in=6, window_size=4, n_steps=32, batch_size=8)
    model.learn(64 * 2)
    calls: list[tuple[bool, int]] = []
    handle = model.policy.features_extractor.register_forward_hook(
        lambda module, inputs, output: calls.append((th.is_grad_enabled(), int(output.shape[0])))
    )
    try:
        samples = next(model.rollout_buffer.get(8))
        assert samples.burn_in is not None
        model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None)
    finally:
        handle.remove()
    slot_steps = int(samples.slot_steps.unique().numel())
    distinct = int(samples.observations.shape[0])  # type: ignore[union-attr]
    assert distinct > slot_steps  # the burn-in reaches steps no slot holds
    # One call with gradient over the slots' steps, one without over the burn-in-only steps
    assert calls == [(True, slot_steps), (False, distinct - slot_steps)]


def test_burn_in_features_without_gradient_change_nothing_else() -> None:
    # The same loss and gradients as computing every feature with autograd (up to float rounding)
    from sb3_reset_ppo.common import unroll

    model = small_reset_ppo(burn_in=6, window_size=4, n_steps=32, batch_size=8, learning_rate=3e-3)
    model.learn(64 * 2)
    samples = next(model.rollout_buffer.get(8))
    assert samples.burn_in is not None

    def gradients(batch: object) -> list[th.Tensor]:
        model.policy.zero_grad()
        model._minibatch_loss(batch, clip_range=0.2, clip_range_vf=None).loss.backward()  # type: ignore[arg-type]
        return [p.grad.clone() for p in model.policy.parameters() if p.grad is not None]

    split = gradients(samples)
    # slot_steps=-1: every feature with autograd
    whole = gradients(samples._replace(burn_in=samples.burn_in._replace(slot_steps=-1)))
    for a, b in zip(split, whole, strict=True):
        th.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert unroll is not None


def test_refresh_and_burn_in_staleness_have_separate_keys() -> None:
    model = small_reset_ppo(memory_refresh=1, burn_in=4, learning_rate=3e-3)
    model.learn(32)
    model.set_logger(configure(None, []))
    model.train()
    logged = model.logger.name_to_value
    assert "train/memory_staleness" in logged and "train/burn_in_staleness" in logged
