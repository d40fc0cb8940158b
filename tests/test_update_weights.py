"""
Issue 47: each step's share of the parameter *update*, after gradient clipping and the optimizer, measured through
ResetPPO's own ``train()`` loop.

The oracle gives every slot of a minibatch an identifiable input: the policy gains a probe parameter of one entry per
(row, slot) of a minibatch, and the policy's evaluation is replaced by one whose values and log-probs are the
rollout's (no gradient) and whose entropy is ``-probe``. The loss ``ResetPPO`` builds (``window_ppo_loss`` with
``ent_coef=1``) then has gradient ``weight / normaliser`` on each slot's probe entry and nothing else, every slot's
gradient has the same norm, and ``train()`` clips it (``max_grad_norm``) and steps the optimizer (SGD with learning
rate 1, so the update is the clipped gradient). Reading the probe's change at every optimizer step and the step id of
every slot (the observations hold each step's flat index) gives each step's share of the update, per epoch.

What ``docs/guide/parameters.md`` ("Minibatches") says, checked here:

- every minibatch holds the same number of real slots, so in reset mode under ``"uniform"`` weighting every trained
  slot of an epoch gets exactly the same share of the update, clipped or not (before issue 47 the epoch's short
  minibatch got ``sqrt(batch_size / remainder)`` times the others' share once clipped);
- averaged over epochs, each step's share is the brute-force expectation (window weights times the probability of
  not being left out, over the loss normaliser) up to one factor per setting: equal for every step with full
  coverage in reset mode, the ramp with inside coverage, the seed's ``min(j + 1, W)`` in mask mode without clipping;
- a minibatch with no kept slot takes no optimizer step (Adam's step count says so).
"""

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv, brute_force_effective_weights
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

import sb3_reset_ppo.reset_ppo.reset_ppo as reset_ppo_module
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples


def _model(
    n_steps: int,
    n_envs: int,
    batch_size: int | None,
    max_grad_norm: float,
    optimizer: type[th.optim.Optimizer] = th.optim.SGD,
    **window: Any,
) -> ResetPPO:
    model = ResetPPO(
        "MlpLstmPolicy",
        make_vec_env(RandomEpisodeEnv, n_envs=n_envs, seed=0),
        n_steps=n_steps,
        batch_size=batch_size,
        n_epochs=1,
        learning_rate=1.0,
        ent_coef=1.0,
        max_grad_norm=max_grad_norm,
        policy_kwargs={"lstm_hidden_size": 2, "net_arch": [], "optimizer_class": optimizer},
        seed=0,
        **window,
    )
    model.set_logger(configure(None, []))
    return model


def _fill(model: ResetPPO, episode_starts: np.ndarray) -> None:
    """The buffer holds each step's env-major flat index as its first observation, and the given episode starts."""
    buffer = model.rollout_buffer
    n_steps, n_envs = episode_starts.shape
    assert isinstance(buffer.observations, np.ndarray)
    # (n_steps, n_envs) flat ids e * n_steps + s
    buffer.observations[..., 0] = np.arange(n_envs)[None, :] * n_steps + np.arange(n_steps)[:, None]
    buffer.episode_starts[:] = episode_starts
    buffer.full = True


class _Step(NamedTuple):
    """One optimizer step: the step id, the update and whether it is kept, of every slot of its minibatch."""

    ids: np.ndarray
    update: np.ndarray
    kept: np.ndarray


class _UpdateRecorder:
    """Replaces the policy's evaluation by the probe and records, at every optimizer step, every slot's update."""

    def __init__(self, model: ResetPPO, monkeypatch: pytest.MonkeyPatch) -> None:
        buffer = model.rollout_buffer
        self.n_flat = buffer.n_envs * buffer.buffer_size
        rows = 2 * self.n_flat + 2 * model.window_length
        self.probe = th.nn.Parameter(th.zeros(rows, model.window_length, dtype=th.float64))
        model.policy.register_parameter("weight_probe", self.probe)
        model.policy.optimizer = model.policy.optimizer_class(model.policy.parameters(), lr=1.0)
        self.samples: WindowRolloutBufferSamples | None = None
        self.steps: list[_Step] = []
        monkeypatch.setattr(reset_ppo_module, "evaluate_windows", self._evaluate)
        step: Callable[..., Any] = model.policy.optimizer.step

        def recorded_step(*args: Any, **kwargs: Any) -> Any:
            before = self.probe.detach().clone()
            result = step(*args, **kwargs)
            assert self.samples is not None and isinstance(self.samples.observations, th.Tensor)
            rows, width = self.samples.kept.shape
            ids = self.samples.observations[:, 0].long()[self.samples.slot_steps].numpy()
            change = (before - self.probe.detach())[:rows, :width].numpy()
            self.steps.append(_Step(ids, change, self.samples.kept.numpy()))
            return result

        model.policy.optimizer.step = recorded_step  # type: ignore[method-assign]

    def _evaluate(self, policy: Any, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        self.samples = samples
        rows, width = samples.kept.shape
        # (rows, width) slice of the probe, as float32 like the other per-slot terms
        return samples.old_values, samples.old_log_prob, -self.probe[:rows, :width].float()

    def train(self, model: ResetPPO) -> list[_Step]:
        """One ``train()`` call: every optimizer step's slots."""
        self.steps = []
        model.train()
        return self.steps

    def per_step(self, steps: list[_Step]) -> np.ndarray:
        """Each rollout step's total update over the given optimizer steps (env-major)."""
        total = np.zeros(self.n_flat)
        for step in steps:
            np.add.at(total, step.ids.ravel(), step.update.ravel())
        return total


def _episode_starts(n_steps: int, n_envs: int, density: float, seed: int) -> np.ndarray:
    starts = (np.random.default_rng(seed).random((n_steps, n_envs)) < density).astype(np.float32)
    starts[0] = 1.0
    return starts


# Settings drawn from the options that decide the weights
@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    n_steps=st.integers(2, 20),
    n_envs=st.integers(1, 2),
    data=st.data(),
    coverage=st.sampled_from(["full", "inside"]),
    weighting=st.sampled_from(["uniform", "kept_mean"]),
    density=st.sampled_from([0.0, 0.2, 0.5]),
)
def test_every_trained_slot_of_an_epoch_gets_the_same_share_of_the_clipped_update(
    n_steps: int, n_envs: int, data: st.DataObject, coverage: str, weighting: str, density: float
) -> None:
    # Reset mode: every real slot is kept, and every minibatch holds the same number of them, so clipping scales every
    # minibatch of an epoch by the same factor. The threshold is far below every gradient's norm: every step clipped.
    window_size = data.draw(st.integers(1, n_steps), label="window_size")
    batch_size = data.draw(st.one_of(st.none(), st.integers(1, 2 * n_steps * n_envs)), label="batch_size")
    stride = data.draw(st.one_of(st.none(), st.integers(1, n_steps + window_size)), label="stride")
    with pytest.MonkeyPatch.context() as monkeypatch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _model(
            n_steps, n_envs, batch_size, 1e-6, window_size=window_size, window_stride=stride,
            window_coverage=coverage, weighting=weighting,
        )  # fmt: skip
        _fill(model, _episode_starts(n_steps, n_envs, density, seed=n_steps))
        recorder = _UpdateRecorder(model, monkeypatch)
        for _ in range(3):
            steps = recorder.train(model)
            # Every real slot of every minibatch of the epoch: the same share
            shares = np.concatenate([step.update[step.kept] for step in steps])
            assert shares.size and np.all(step.update[~step.kept] == 0 for step in steps)
            np.testing.assert_allclose(shares, shares[0], rtol=1e-9)
            # ... and the clipped update of every optimizer step has the threshold's norm
            for step in steps:
                assert np.linalg.norm(step.update) == pytest.approx(1e-6, rel=1e-4)  # torch adds 1e-6 to the norm


@pytest.mark.parametrize(
    "n_steps,n_envs,batch_size,window,boundary,coverage,stride,clip",
    [
        # The example: 200 = 3 * 64 + 8, clipped (was: the 8 transitions weighed sqrt(8) times the others)
        (200, 1, 64, "batch", "reset", "full", None, True),
        # Non-dividing, two envs, a stride below the window, clipped
        (13, 2, 8, 4, "reset", "full", 3, True),
        # The inside ramp, clipped
        (12, 1, 6, 4, "reset", "inside", 1, True),
        # The seed's min(j + 1, W) in mask mode, without clipping (clipping rescales minibatches by their kept slots)
        (16, 2, 8, 4, "mask", "full", 1, False),
        (15, 1, 6, 4, "mask", "inside", 2, False),
    ],
)
def test_mean_update_per_step_is_the_documented_expectation(
    n_steps: int,
    n_envs: int,
    batch_size: int,
    window: int | str,
    boundary: str,
    coverage: str,
    stride: int | None,
    clip: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _model(
            n_steps, n_envs, batch_size, 1e-6 if clip else 1e9, window_size=window, boundary=boundary,
            window_coverage=coverage, window_stride=stride,
        )  # fmt: skip
    starts = _episode_starts(n_steps, n_envs, 0.25, seed=1)
    _fill(model, starts)
    recorder = _UpdateRecorder(model, monkeypatch)
    model.n_epochs = 400
    steps = recorder.train(model)
    mean = recorder.per_step(steps) / model.n_epochs
    expected = brute_force_effective_weights(
        starts, model.window_length, boundary, model.window_settings.window_stride, coverage, batch_size
    ).T.reshape(-1)
    if clip:
        # Every optimizer step's update has the threshold's norm: compare shares relative to their mean
        mean, expected = mean / mean.mean(), expected / expected.mean()
    # A step's share per epoch lies in [0, ceil(W / k)] times one slot's share: binomial-like spread, 6 standard errors
    slot = np.max(expected) / max(1.0, model.window_length / model.window_settings.stride(n_steps))
    tolerance = 6 * np.sqrt(slot * expected / model.n_epochs) + 1e-9
    assert np.all(np.abs(mean - expected) <= tolerance), (mean, expected, tolerance)
    assert np.all(mean[expected == 0] == 0)


def test_a_minibatch_without_a_kept_slot_takes_no_optimizer_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # With full minibatches every minibatch holds some window's slot 0, which is always kept; before issue 47 the short
    # minibatch could hold only the later piece of a window whose episode had ended (37 of 1400 minibatches in the
    # issue's run), and the optimizer still stepped, on Adam's momentum alone. The guard is checked here on minibatches
    # emptied by hand: Adam's step count is the number of minibatches that keep a slot, and nothing is logged for them.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _model(16, 2, 8, 0.5, optimizer=th.optim.Adam, window_size=4, window_stride=1, boundary="mask")
    _fill(model, _episode_starts(16, 2, 0.3, seed=0))
    recorder = _UpdateRecorder(model, monkeypatch)
    model.n_epochs = 5
    n_minibatches = 0
    get = model.rollout_buffer.get

    def every_other_emptied(batch_size: int | None = None) -> Any:
        nonlocal n_minibatches
        for samples in get(batch_size):
            n_minibatches += 1
            if n_minibatches % 2 == 0:
                samples = samples._replace(kept=th.zeros_like(samples.kept), weights=th.zeros_like(samples.weights))
            yield samples

    monkeypatch.setattr(model.rollout_buffer, "get", every_other_emptied)
    steps = recorder.train(model)
    assert n_minibatches >= 4
    assert len(steps) == (n_minibatches + 1) // 2
    assert model.policy.optimizer.state[recorder.probe]["step"] == (n_minibatches + 1) // 2
    assert all(np.isfinite(step.update).all() for step in steps)
