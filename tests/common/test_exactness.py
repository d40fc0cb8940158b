"""Before any update, every recomputed log-prob and value equals the rollout's, in every window."""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, check_exact
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.epochs import plan_epoch
from sb3_reset_ppo.common.evaluation import evaluate_windows

N_STEPS = 16
# Every window every epoch, and the default (windows every window_size steps from a random phase); windows inside the
# rollout and every window that meets it, clipped (padding slots after the real ones)
STRIDES = pytest.mark.parametrize(
    "window_stride,window_coverage",
    [(1, "inside"), (None, "inside"), (1, "full"), (None, "full")],
    ids=["stride1", "strideW", "full-stride1", "full-strideW"],
)
# The LSTM policies and the GRU policies (policy names "<kind>LstmPolicy" / "<kind>GruPolicy")
CELLS = pytest.mark.parametrize("cell", ["Lstm", "Gru"])


def _rolled_out_model(
    policy: str = "MlpLstmPolicy",
    action_space: spaces.Space | None = None,
    obs_kind: str = "box",
    boundary: str = "reset",
    weighting: str = "uniform",
    window_size: int = 6,
    policy_kwargs: dict[str, Any] | None = None,
    window_stride: int | None = 1,
    **kwargs: Any,
) -> ResetPPO:
    env = make_vec_env(RandomEpisodeEnv, n_envs=2, seed=0, env_kwargs=dict(action_space=action_space, obs_kind=obs_kind))
    model = ResetPPO(
        policy,
        env,
        learning_rate=0.0,
        n_steps=N_STEPS,
        batch_size=3 * window_size,
        n_epochs=1,
        window_size=window_size,
        boundary=boundary,
        weighting=weighting,
        window_stride=window_stride,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8], **(policy_kwargs or {})},
        **kwargs,
    )
    # Two rollouts: the second starts mid-episode, from non-zero recorded memory
    model.learn(2 * N_STEPS * 2)
    return model


@CELLS
@pytest.mark.parametrize("boundary", ["reset", "mask"])
@pytest.mark.parametrize("window_coverage", ["full", "inside"])
@pytest.mark.parametrize("burn_in", [0, 3])
def test_windows_cut_at_minibatch_edges(cell: str, boundary: str, window_coverage: str, burn_in: int) -> None:
    # Minibatches of 7 transitions cut windows of 6: the later piece of a cut window starts from the memory
    # stored for its first step, which before any update is the memory the unroll carries there
    model = _rolled_out_model(
        f"Mlp{cell}Policy", boundary=boundary, window_stride=None, window_coverage=window_coverage, burn_in=burn_in
    )
    buffer = model.rollout_buffer
    sampler = buffer.sampler()
    plan = plan_epoch(sampler.n_steps, sampler.n_envs, sampler.settings, 7, sampler.consecutive_windows, buffer.generator)
    assert bool((plan.offsets > 0).any())
    check_exact(model, batch_size=7, epochs=4)


@CELLS
@STRIDES
@pytest.mark.parametrize("boundary", ["reset", "mask"])
@pytest.mark.parametrize(
    "policy_kwargs",
    [
        {},
        {"shared_lstm": True, "enable_critic_lstm": False},
        {"enable_critic_lstm": False},
        {"n_lstm_layers": 2},
        {"share_features_extractor": False},
        {"net_arch": {"pi": [8, 8], "vf": [4]}},
    ],
    ids=["separate-critic", "shared-lstm", "no-critic-lstm", "two-layers", "separate-extractors", "net-arch"],
)
def test_policy_variants(
    boundary: str, policy_kwargs: dict[str, Any], window_stride: int | None, window_coverage: str, cell: str
) -> None:
    model = _rolled_out_model(
        f"Mlp{cell}Policy",
        boundary=boundary,
        policy_kwargs=policy_kwargs,
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    check_exact(model)


@CELLS
@STRIDES
@pytest.mark.parametrize(
    "action_space",
    [
        spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
        spaces.Discrete(3),
        spaces.MultiDiscrete([2, 3]),
        spaces.MultiBinary(3),
    ],
    ids=["box", "discrete", "multidiscrete", "multibinary"],
)
@pytest.mark.parametrize("boundary", ["reset", "mask"])
def test_action_spaces(
    action_space: spaces.Space, boundary: str, window_stride: int | None, window_coverage: str, cell: str
) -> None:
    model = _rolled_out_model(
        f"Mlp{cell}Policy",
        action_space=action_space,
        boundary=boundary,
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    check_exact(model)


@CELLS
@STRIDES
@pytest.mark.parametrize("weighting", ["uniform", "importance", "kept_mean"])
def test_gsde(weighting: str, window_stride: int | None, window_coverage: str, cell: str) -> None:
    box = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    model = _rolled_out_model(
        f"Mlp{cell}Policy",
        action_space=box,
        use_sde=True,
        sde_sample_freq=4,
        weighting=weighting,
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    check_exact(model)


@CELLS
@STRIDES
@pytest.mark.parametrize("boundary", ["reset", "mask"])
def test_dict_observations(boundary: str, window_stride: int | None, window_coverage: str, cell: str) -> None:
    kwargs = {"features_extractor_kwargs": {"cnn_output_dim": 8}}
    model = _rolled_out_model(
        f"MultiInput{cell}Policy",
        obs_kind="dict",
        boundary=boundary,
        policy_kwargs=kwargs,
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    check_exact(model)


@CELLS
@STRIDES
@pytest.mark.parametrize("share_features_extractor", [True, False])
def test_cnn_policy(share_features_extractor: bool, window_stride: int | None, window_coverage: str, cell: str) -> None:
    kwargs = {"features_extractor_kwargs": {"features_dim": 8}, "share_features_extractor": share_features_extractor}
    model = _rolled_out_model(
        f"Cnn{cell}Policy",
        obs_kind="image",
        window_size=4,
        policy_kwargs=kwargs,
        window_stride=window_stride,
        window_coverage=window_coverage,
    )
    check_exact(model)


@CELLS
def test_invariant_fails_without_recorded_memory(cell: str) -> None:
    # Control: starting every window from zero memory instead of the recorded one breaks the invariant,
    # so the exactness checks above can fail.
    model = _rolled_out_model(f"Mlp{cell}Policy")
    samples = next(model.rollout_buffer.get(None))
    zero_memory = type(samples.lstm_states)(
        tuple(th.zeros_like(t) for t in samples.lstm_states.pi), tuple(th.zeros_like(t) for t in samples.lstm_states.vf)
    )
    with th.no_grad():
        _, log_prob, _ = evaluate_windows(model.policy, samples._replace(lstm_states=zero_memory))
    assert not th.allclose(log_prob, samples.old_log_prob, atol=1e-5)


@CELLS
@pytest.mark.parametrize("boundary", ["reset", "mask"])
def test_multidiscrete_observations(boundary: str, cell: str) -> None:
    # SB3 sizes MultiDiscrete observations with a numpy integer; ResetPPO's policies pass torch an int
    check_exact(_rolled_out_model(f"Mlp{cell}Policy", obs_kind="multidiscrete", boundary=boundary))


def test_sb3_contrib_policy_rejects_multidiscrete_observations() -> None:
    # Why ResetPPO subclasses sb3-contrib's LSTM policies: theirs fail on MultiDiscrete observations with torch 2.13
    # (if this starts passing upstream, the subclasses can go)
    from sb3_contrib import RecurrentPPO

    env = make_vec_env(RandomEpisodeEnv, n_envs=1, env_kwargs=dict(obs_kind="multidiscrete"))
    with pytest.raises(TypeError, match="input_size should be of type int"):
        RecurrentPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16)
