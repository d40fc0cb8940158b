"""
The update probe of the weight oracle: each step's share of the parameter update, after gradient clipping
and the optimizer, read through ResetPPO's own ``train()`` loop (see ``tests/reset_ppo/test_update_weights.py``).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch as th
from helpers import RandomEpisodeEnv
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

import sb3_reset_ppo.reset_ppo.reset_ppo as reset_ppo_module
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.type_aliases import WindowRolloutBufferSamples


def probe_model(
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


def fill(model: ResetPPO, episode_starts: np.ndarray) -> None:
    """The buffer holds each step's env-major flat index as its first observation, and the given episode starts."""
    buffer = model.rollout_buffer
    n_steps, n_envs = episode_starts.shape
    assert isinstance(buffer.observations, np.ndarray)
    # (n_steps, n_envs) flat ids e * n_steps + s
    buffer.observations[..., 0] = np.arange(n_envs)[None, :] * n_steps + np.arange(n_steps)[:, None]
    buffer.episode_starts[:] = episode_starts
    buffer.full = True


class Step(NamedTuple):
    """One optimizer step: of every slot of its minibatch, the step id, the update, whether it is kept, its weight."""

    ids: np.ndarray
    update: np.ndarray
    kept: np.ndarray
    weights: np.ndarray
    loss_normaliser: float | None


class UpdateRecorder:
    """Replaces the policy's evaluation by the probe and records, at every optimizer step, every slot's update."""

    def __init__(self, model: ResetPPO, monkeypatch: pytest.MonkeyPatch) -> None:
        buffer = model.rollout_buffer
        self.n_flat = buffer.n_envs * buffer.buffer_size
        rows = 2 * self.n_flat + 2 * model.window_length
        self.probe = th.nn.Parameter(th.zeros(rows, model.window_length, dtype=th.float64))
        model.policy.register_parameter("weight_probe", self.probe)
        # SB3 types optimizer_class as torch's base Optimizer, whose constructor takes no lr
        optimizer_class: Any = model.policy.optimizer_class
        model.policy.optimizer = optimizer_class(model.policy.parameters(), lr=1.0)
        self.samples: WindowRolloutBufferSamples | None = None
        self.steps: list[Step] = []
        monkeypatch.setattr(reset_ppo_module, "evaluate_windows", self._evaluate)
        step: Callable[..., Any] = model.policy.optimizer.step

        def recorded_step(*args: Any, **kwargs: Any) -> Any:
            before = self.probe.detach().clone()
            result = step(*args, **kwargs)
            assert self.samples is not None and isinstance(self.samples.observations, th.Tensor)
            rows, width = self.samples.kept.shape
            ids = self.samples.observations[:, 0].long()[self.samples.slot_steps].numpy()
            change = (before - self.probe.detach())[:rows, :width].numpy()
            samples = self.samples
            self.steps.append(Step(ids, change, samples.kept.numpy(), samples.weights.numpy(), samples.loss_normaliser))
            return result

        model.policy.optimizer.step = recorded_step  # type: ignore[method-assign]

    def _evaluate(self, policy: Any, samples: WindowRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        self.samples = samples
        rows, width = samples.kept.shape
        # (rows, width) slice of the probe, as float32 like the other per-slot terms
        return samples.old_values, samples.old_log_prob, -self.probe[:rows, :width].float()

    def train(self, model: ResetPPO) -> list[Step]:
        """One ``train()`` call: every optimizer step's slots."""
        self.steps = []
        model.train()
        return self.steps

    def per_step(self, steps: list[Step]) -> np.ndarray:
        """Each rollout step's total update over the given optimizer steps (env-major)."""
        total = np.zeros(self.n_flat)
        for step in steps:
            np.add.at(total, step.ids.ravel(), step.update.ravel())
        return total


def random_episode_starts(n_steps: int, n_envs: int, density: float, seed: int) -> np.ndarray:
    starts = (np.random.default_rng(seed).random((n_steps, n_envs)) < density).astype(np.float32)
    starts[0] = 1.0
    return starts
