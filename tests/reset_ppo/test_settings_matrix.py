"""
The settings matrix: every combination of a covering array of ResetPPO's and MaskableResetPPO's options
(``tests/oracles/matrix.py``: every pair of option values in ``make test``, every triple in ``make test-matrix``) is checked
by three oracles:

- exactness: before any update, every slot's recomputed log-prob and value equal the rollout's, in every minibatch
  of two epochs (masks included);
- crashes and finiteness: a few updates on episodes that end anywhere (inside minibatches, at the rollout's edges)
  raise nothing and leave every parameter finite; ``save``/``load`` round-trips and the loaded model predicts the
  same actions and memory step by step;
- weights: through ``train()`` with clipping and the optimizer (``tests/oracles/update_probe.py``), every slot's share of the
  update is its loss weight over its minibatch's normaliser times the minibatch's clipping factor, and in reset mode
  under ``"uniform"`` and ``"kept_mean"`` weighting every trained slot of an epoch gets the same share.
"""

import pathlib
import warnings
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, RandomMaskEnv
from matrix import OPTIONS, Combination, allowed, combinations, uncovered_pairs
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv
from update_probe import UpdateRecorder, fill, probe_model, random_episode_starts

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

ACTIONS: dict[str, spaces.Space] = {
    "discrete": spaces.Discrete(3),
    "box": spaces.Box(-1.0, 1.0, shape=(2,)),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
}
COMBINATIONS = combinations()


def _env(combination: Combination, seed: int) -> VecEnv:
    kwargs = {"action_space": ACTIONS[combination["action"]], "obs_kind": combination["observation"], "max_length": 5}
    env_class = RandomMaskEnv if combination["masks"] else RandomEpisodeEnv
    return make_vec_env(env_class, n_envs=combination["n_envs"], seed=seed, env_kwargs=kwargs)


def _model(combination: Combination, learning_rate: float) -> ResetPPO:
    model_class = MaskableResetPPO if combination["masks"] else ResetPPO
    with warnings.catch_warnings():
        # The batch-size warnings of non-dividing sizes are the point of some combinations
        warnings.simplefilter("ignore", UserWarning)
        return model_class(
            combination.policy(),
            _env(combination, seed=0),
            learning_rate=learning_rate,
            n_epochs=2,
            seed=0,
            **combination.model_kwargs(),
        )


def _check_exact(model: ResetPPO) -> None:
    """
    Before any update: every slot of every minibatch of two epochs recomputes the rollout's log-prob and value (with
    attention memory every real slot: a padding slot attends to other keys than the step it repeats, and is never
    trained).
    """
    policy: Any = model.policy
    attention = isinstance(policy, TrXLActorCriticPolicy)
    for _ in range(2):
        for samples in model.rollout_buffer.get(model.batch_size):
            with th.no_grad():
                values, log_prob, entropy = (
                    policy.evaluate_windows(samples) if attention else evaluate_windows(policy, samples)
                )
            if attention:
                # (B, W): a padding slot repeats the step before it, a real one never does
                real = th.ones_like(samples.kept)
                real[:, 1:] = samples.slot_steps[:, 1:] != samples.slot_steps[:, :-1]
                log_prob, values = log_prob[real], values[real]
                samples = samples._replace(old_log_prob=samples.old_log_prob[real], old_values=samples.old_values[real])
            th.testing.assert_close(log_prob, samples.old_log_prob, rtol=1e-5, atol=1e-5)
            th.testing.assert_close(values, samples.old_values, rtol=1e-5, atol=1e-5)
            assert entropy is None or bool(th.isfinite(entropy).all())
            assert bool(th.isfinite(samples.weights).all()) and bool((samples.weights >= 0).all())


def _check_predict_round_trip(model: ResetPPO, path: pathlib.Path, combination: Combination) -> None:
    model.save(path)
    loaded = type(model).load(path)
    env = _env(combination, seed=1)
    obs: Any = env.reset()
    states: dict[str, Any] = {"model": None, "loaded": None}
    episode_start = np.ones(env.num_envs, dtype=bool)
    for _ in range(8):
        kwargs = {"action_masks": get_action_masks(env)} if combination["masks"] else {}
        action, states["model"] = model.predict(obs, states["model"], episode_start, deterministic=True, **kwargs)
        again, states["loaded"] = loaded.predict(obs, states["loaded"], episode_start, deterministic=True, **kwargs)
        np.testing.assert_array_equal(action, again)
        for mine, theirs in zip(states["model"], states["loaded"], strict=True):
            np.testing.assert_array_equal(mine, theirs)
        obs, _, episode_start, _ = env.step(action)


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[combination.id for combination in COMBINATIONS])
def test_combination_is_exact_finite_and_round_trips(combination: Combination, tmp_path: pathlib.Path) -> None:
    # A learning rate of 0: the rollout is collected and train() leaves the parameters as they were
    model = _model(combination, learning_rate=0.0)
    n_steps = model.n_steps * model.n_envs
    model.learn(n_steps)
    _check_exact(model)
    # A few real updates
    model.learning_rate = 3e-3
    model._setup_lr_schedule()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.learn(3 * n_steps, reset_num_timesteps=False)
    for name, parameter in model.policy.named_parameters():
        assert bool(th.isfinite(parameter).all()), name
    _check_predict_round_trip(model, tmp_path / "model.zip", combination)


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[combination.id for combination in COMBINATIONS])
def test_combination_update_shares(combination: Combination, monkeypatch: pytest.MonkeyPatch) -> None:
    # The combination's window, size and loss settings on the probe (the policy's evaluation is replaced: spaces and
    # cells do not matter here); every update clipped
    n_steps, batch_size = combination["sizes"]
    kwargs = combination.model_kwargs()
    window = {key: kwargs[key] for key in ("boundary", "weighting", "window_coverage", "window_size", "window_stride")}
    threshold = 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = probe_model(
            n_steps,
            combination["n_envs"],
            batch_size,
            threshold,
            consecutive_windows=combination["consecutive_windows"],
            burn_in=combination["burn_in"],
            memory_refresh=combination["memory_refresh"],
            normalize_advantage=combination["normalize_advantage"],
            clip_range_vf=combination["clip_range_vf"],
            **window,
        )
    fill(model, random_episode_starts(n_steps, combination["n_envs"], 0.3, seed=n_steps))
    recorder = UpdateRecorder(model, monkeypatch)
    model.n_epochs = 2
    steps = recorder.train(model)
    assert steps
    for step in steps:
        normaliser = step.loss_normaliser if combination["weighting"] == "uniform" else step.weights.sum()
        assert normaliser is not None and normaliser > 0
        gradient = step.weights * step.kept / normaliser
        factor = min(1.0, threshold / (np.linalg.norm(gradient) + 1e-6))
        np.testing.assert_allclose(step.update, gradient * factor, rtol=1e-5, atol=1e-12)
    if combination["boundary"] == "reset" and combination["weighting"] != "importance":
        for epoch in np.array_split(np.arange(len(steps)), model.n_epochs):
            shares = np.concatenate([steps[i].update[steps[i].kept] for i in epoch])
            np.testing.assert_allclose(shares, shares[0], rtol=1e-6)


def test_the_matrix_covers_every_allowed_pair() -> None:
    # The covering array's promise, by brute force: every pair of values of two options that the constraints allow
    assert uncovered_pairs(OPTIONS, COMBINATIONS, allowed) == []
    assert all(allowed(dict(zip(OPTIONS, c.values, strict=True))) for c in COMBINATIONS)


def test_the_docs_state_the_matrix_as_it_is() -> None:
    # docs/guide/reliability.md states the number of combinations of each strength: kept in step with tests/oracles/matrix.py
    text = " ".join((pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "reliability.md").read_text().split())
    assert f"{len(OPTIONS)} options" in text
    assert f"one of {len(combinations(2))} combinations" in text
    assert f"every triple, {len(combinations(3))} combinations" in text
