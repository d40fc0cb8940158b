"""Fresh memory: refreshed stored states and burn-in, exact before any update, checked against step-by-step references."""

from typing import Any

import pytest
import torch as th
from helpers import RandomEpisodeEnv
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from torch import nn

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.unroll import lstm_step_states


def _reference_step_states(
    lstm: nn.LSTM, features: th.Tensor, initial: tuple[th.Tensor, th.Tensor], episode_starts: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """Step by step with nn.LSTM, as collection does: record the memory entering a step, then apply SB3's rule."""
    n_sequences, length, _ = features.shape
    # (B, L, H) -> (L, B, H)
    hidden, cell = (m.transpose(0, 1).contiguous() for m in initial)
    hiddens, cells = [], []
    for step in range(length):
        hiddens.append(hidden.transpose(0, 1))
        cells.append(cell.transpose(0, 1))
        not_start = (1.0 - episode_starts[:, step]).reshape(1, n_sequences, 1)
        _, (hidden, cell) = lstm(features[:, step][None], (hidden * not_start, cell * not_start))
    return th.stack(hiddens, dim=1), th.stack(cells, dim=1)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 70),
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    st.integers(0, 1000),
)
def test_step_states_equal_step_by_step_collection(
    n_sequences: int, length: int, layers: int, bias: bool, density: float, seed: int
) -> None:
    generator = th.Generator().manual_seed(seed)
    th.manual_seed(seed)
    lstm = nn.LSTM(3, 5, num_layers=layers, bias=bias, dropout=0.3 if layers > 1 else 0.0).train()
    features = th.randn(n_sequences, length, 3, generator=generator).requires_grad_(True)
    initial = (th.randn(n_sequences, layers, 5, generator=generator), th.randn(n_sequences, layers, 5, generator=generator))
    episode_starts = (th.rand(n_sequences, length, generator=generator) < density).float()
    hidden, cell = lstm_step_states(lstm, features, initial, episode_starts)
    # Collection runs without dropout: the reference too
    with th.no_grad():
        expected_hidden, expected_cell = _reference_step_states(lstm.eval(), features, initial, episode_starts)
    th.testing.assert_close(hidden, expected_hidden, rtol=1e-5, atol=1e-5)
    th.testing.assert_close(cell, expected_cell, rtol=1e-5, atol=1e-5)
    # Computed without gradient: nothing to backpropagate into
    assert not hidden.requires_grad and not cell.requires_grad


VARIANTS: dict[str, dict[str, Any]] = {
    "separate-critic-lstm": {},
    "shared-lstm": {"shared_lstm": True, "enable_critic_lstm": False},
    "no-critic-lstm": {"enable_critic_lstm": False},
    "two-layers": {"n_lstm_layers": 2},
    "separate-extractors": {"share_features_extractor": False},
}


def _model(policy_kwargs: dict[str, Any], learning_rate: float, **kwargs: Any) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0)
    model = ResetPPO(
        "MlpLstmPolicy",
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


@pytest.mark.parametrize("name", list(VARIANTS))
def test_refresh_before_any_update_is_the_recorded_memory(name: str) -> None:
    model = _model(VARIANTS[name], learning_rate=0.0)
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


def test_refresh_after_updates_uses_the_current_parameters_and_windows_start_from_it() -> None:
    model = _model({}, learning_rate=3e-3)
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
    first = (sampler.recorded_memory["hidden_pi"][::32], sampler.recorded_memory["cell_pi"][::32])
    # (n_envs * n_steps, F) -> (n_envs, n_steps, F)
    hidden, _ = _reference_step_states(
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


def _burn_in_model(burn_in: int, learning_rate: float, window_stride: int | None = None, **kwargs: Any) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=1, env_kwargs=kwargs.pop("env_kwargs", {}))
    model = ResetPPO(
        "MlpLstmPolicy",
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


@pytest.mark.parametrize("window_stride", [1, None])
@pytest.mark.parametrize("policy_kwargs", [{}, {"n_lstm_layers": 2}, {"enable_critic_lstm": False}])
def test_burn_in_before_any_update_is_exact(window_stride: int | None, policy_kwargs: dict[str, Any]) -> None:
    from helpers import check_exact

    check_exact(_burn_in_model(5, 0.0, window_stride, policy_kwargs=policy_kwargs))


def test_burn_in_equals_step_by_step_reference_and_stops_at_episode_starts() -> None:
    burn_in = 6
    model = _burn_in_model(burn_in, 3e-3, window_stride=1)
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
        from sb3_reset_ppo.common.unroll import burned_in_memory

        hidden, cell = burned_in_memory(model.policy.lstm_actor, features, samples.burn_in, samples.burn_in.memory.pi)
        all_features = model.policy.extract_features(observations)
    assert isinstance(all_features, th.Tensor)
    starts = sampler.data["episode_starts"]
    checked_short, checked_reset = 0, 0
    for window, step in enumerate(flat.tolist()):
        t = step % 32
        first = step - min(t, burn_in)
        # Reference: nn.LSTM step by step from the stored memory entering `first`, SB3's rule at every step
        memory = (sampler.memory["hidden_pi"][first : first + 1], sampler.memory["cell_pi"][first : first + 1])
        expected = _reference_step_states(
            model.policy.lstm_actor,
            all_features[first : step + 1][None],
            memory,
            starts[first : step + 1][None],
        )
        th.testing.assert_close(hidden[window], expected[0][0, -1], rtol=1e-5, atol=1e-5)
        th.testing.assert_close(cell[window], expected[1][0, -1], rtol=1e-5, atol=1e-5)
        checked_short += t < burn_in
        checked_reset += bool(starts[first:step].any())
    assert checked_short > 0 and checked_reset > 0
    # An episode start inside the burn-in (before the window's first step): the memory before it does not matter,
    # in burned_in_memory itself
    first_pi = samples.burn_in.memory.pi
    with th.no_grad():
        moved, _ = burned_in_memory(model.policy.lstm_actor, features, samples.burn_in, (first_pi[0] + 5.0, first_pi[1] - 5.0))
    rows = samples.burn_in.episode_starts
    lengths = samples.burn_in.lengths
    # (B, burn_in + 1): an episode start among the first `lengths` steps of the row
    inside = (rows * (th.arange(rows.shape[1])[None] < lengths[:, None])).sum(dim=1) > 0
    assert inside.any() and (~inside).any()
    th.testing.assert_close(moved[inside], hidden[inside])
    assert not th.allclose(moved[~inside], hidden[~inside])
    # After updates the burned-in memory differs from the stored one: burn-in does something
    assert not th.allclose(hidden, sampler.memory["hidden_pi"][flat], atol=1e-4)


def test_no_gradient_flows_into_burn_in_steps() -> None:
    model = _burn_in_model(6, 3e-3, window_stride=1, env_kwargs={"min_length": 1000, "max_length": 1000})
    # Two windows: most of their burn-in steps are in neither window
    samples = next(model.rollout_buffer.get(2 * 8))
    assert samples.burn_in is not None and isinstance(samples.observations, th.Tensor)
    observations = samples.observations.clone().requires_grad_(True)
    from sb3_reset_ppo.common.unroll import evaluate_windows

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


@pytest.mark.parametrize("learning_rate", [0.0, 3e-3])
def test_burn_in_logs_staleness(learning_rate: float) -> None:
    model = _burn_in_model(6, learning_rate)
    model.set_logger(configure(None, []))
    model.train()
    staleness = model.logger.name_to_value["train/memory_staleness"]
    assert (staleness < 1e-5) if learning_rate == 0.0 else (staleness > 1e-3)


def test_windows_start_from_the_burned_in_memory() -> None:
    # After updates, evaluate_windows with burn-in equals the unroll from burned_in_memory, and differs from the
    # unroll from the stored memory: the burn-in is used
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    from sb3_reset_ppo.common.unroll import burned_in_memory, evaluate_windows

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
