"""Small test environments and helpers shared by the tests."""

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import settings
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import ResetPPO, WindowRolloutBuffer, WindowSettings
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.loss import LossSettings, SlotTargets, WindowLoss, window_ppo_loss
from sb3_reset_ppo.maskable.buffers import mask_dims


class RandomEpisodeEnv(gym.Env):
    """
    Random observations and episodes of random length (1 to ``max_length`` steps); the last step of an
    episode is a termination or, with ``truncate=True``, a truncation every other episode.

    :param action_space: Any action space
    :param obs_kind: ``"box"``, ``"box64"`` (float64), ``"image"`` (36x36x1 uint8), ``"dict"`` (image and vector) or
        ``"multidiscrete"``
    :param max_length: Longest episode
    :param min_length: Shortest episode
    :param truncate: Alternate terminations and truncations
    """

    def __init__(
        self,
        action_space: spaces.Space | None = None,
        obs_kind: str = "box",
        max_length: int = 6,
        min_length: int = 1,
        truncate: bool = False,
    ) -> None:
        self.action_space = action_space if action_space is not None else spaces.Discrete(2)
        image = spaces.Box(0, 255, shape=(36, 36, 1), dtype=np.uint8)
        vector = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
        kinds: dict[str, spaces.Space] = {
            "box": vector,
            "box64": spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float64),
            "image": image,
            "dict": spaces.Dict({"image": image, "vec": vector}),
            "multidiscrete": spaces.MultiDiscrete([3, 4]),
        }
        self.observation_space = kinds[obs_kind]
        self.min_length = min_length
        self.max_length = max_length
        self.truncate = truncate
        self._remaining = 0
        self._episodes = 0

    def _obs(self) -> Any:
        return self.observation_space.sample()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self._remaining = int(self.np_random.integers(self.min_length, self.max_length + 1))
        self._episodes += 1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._remaining -= 1
        done = self._remaining <= 0
        truncated = done and self.truncate and self._episodes % 2 == 0
        return self._obs(), float(self.np_random.normal()), done and not truncated, truncated, {}


def check_exact(model: "ResetPPO", expect_resets: bool = True, epochs: int = 3, batch_size: int | None = None) -> None:
    """
    Before any update, every slot's recomputed log-prob and value equal the rollout's, in every window of
    ``epochs`` epochs (with ``window_stride=1``, every window of the rollout), in minibatches of ``batch_size``
    transitions (``None``: the whole epoch, no window cut at a minibatch edge).
    """
    batches = [samples for _ in range(epochs) for samples in model.rollout_buffer.get(batch_size)]
    # The check is meaningful only if windows cross episodes and start from non-zero memory
    assert any(bool(samples.resets.any()) for samples in batches) or not expect_resets
    # ... and, with window_coverage="full", only if some windows are clipped (padding slots)
    assert model.window_coverage == "inside" or any(samples.n_real_slots is not None for samples in batches)
    for samples in batches:
        assert samples.lstm_states.pi[0].abs().sum() > 0
        with th.no_grad():
            values, log_prob, _ = evaluate_windows(model.policy, samples)
            losses = model._minibatch_loss(samples, clip_range=0.2, clip_range_vf=None)
        kept = samples.kept
        if model.boundary == "reset":
            # Every real slot; padding slots (of clipped windows) never
            assert int(kept.sum()) == (kept.numel() if samples.n_real_slots is None else samples.n_real_slots)
        elif expect_resets and samples.resets.any():
            assert not kept.all()
        # Every slot, dropped ones included: both boundaries share the unroll
        th.testing.assert_close(log_prob, samples.old_log_prob, rtol=1e-5, atol=1e-5)
        th.testing.assert_close(values, samples.old_values, rtol=1e-5, atol=1e-5)
        assert float(losses.approx_kl) < 1e-8
        assert float(losses.clip_fraction) == 0.0


def resident_memory_bytes() -> int:
    """Resident memory of this process after a garbage collection and returning freed memory to the OS."""
    import contextlib
    import ctypes
    import gc
    import os

    gc.collect()
    with contextlib.suppress(OSError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def assert_close_named(actual: "th.Tensor", expected: "th.Tensor", name: str, **tolerances: float) -> None:
    """``torch.testing.assert_close`` whose failure message starts with ``name``."""
    try:
        th.testing.assert_close(actual, expected, **tolerances)  # type: ignore[arg-type]
    except AssertionError as error:
        raise AssertionError(f"{name}: {error}") from None


def filled_window_buffer(
    n_steps: int,
    n_envs: int,
    window_size: int,
    boundary: str = "reset",
    weighting: str = "uniform",
    stride: int | None = 1,
    *,
    window_coverage: str = "inside",
    density: float = 0.3,
    seed: int = 1,
    buffer_seed: int | None = None,
) -> WindowRolloutBuffer:
    """
    A full window buffer whose observation at (step, env) is its env-major flat index and whose memory holds the same
    id; episode starts drawn with probability ``density`` from a generator seeded ``seed``.
    """
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    rng = np.random.default_rng(seed)
    buffer = WindowRolloutBuffer(
        n_steps,
        spaces.Box(-np.inf, np.inf, shape=(1,)),
        spaces.Discrete(2),
        (n_steps, 1, n_envs, 2),
        "cpu",
        n_envs=n_envs,
        window_settings=WindowSettings.validated(window_size, boundary, weighting, stride, window_coverage, n_steps),
        seed=buffer_seed,
    )
    starts = (rng.random((n_steps, n_envs)) < density).astype(np.float32)
    for step in range(n_steps):
        ids = np.arange(n_envs) * n_steps + step
        memory = th.as_tensor(np.repeat(ids[None, :, None], 2, axis=2), dtype=th.float32)
        buffer.add(
            ids[:, None].astype(np.float32),
            np.zeros((n_envs, 1)),
            np.zeros(n_envs),
            starts[step],
            th.zeros(n_envs),
            th.zeros(n_envs),
            lstm_states=RNNStates((memory, memory), (memory, memory)),
        )
    buffer.compute_returns_and_advantage(th.zeros(n_envs), np.zeros(n_envs))
    return buffer


def loss_from_fields(**fields: Any) -> WindowLoss:
    """
    ``window_ppo_loss`` called with its inputs by name, as the loss tests write them: the current policy's
    ``log_prob``, ``values`` and ``entropy``, the :class:`SlotTargets` fields (``uniform_normaliser`` for
    ``loss_normaliser``) and the :class:`LossSettings` fields.
    """
    if "uniform_normaliser" in fields:
        fields["loss_normaliser"] = fields.pop("uniform_normaliser")
    targets = SlotTargets(**{name: fields.pop(name) for name in SlotTargets._fields if name in fields})
    settings = LossSettings(**{name: fields.pop(name) for name in LossSettings._fields if name in fields})
    return window_ppo_loss(fields.pop("log_prob"), fields.pop("values"), fields.pop("entropy"), targets, settings, **fields)


class RandomMaskEnv(RandomEpisodeEnv):
    """
    ``RandomEpisodeEnv`` whose valid actions change at random every step (at least one valid per sub-action); with
    ``strict`` an invalid action raises.
    """

    def __init__(self, strict: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.strict = strict
        self._mask = np.ones(mask_dims(self.action_space), dtype=bool)

    def _new_mask(self) -> None:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            sizes = [int(space.n)]
        elif isinstance(space, spaces.MultiDiscrete):
            sizes = [int(n) for n in space.nvec]
        else:
            assert isinstance(space, spaces.MultiBinary)
            sizes = [2] * int(np.prod(space.n))
        parts = []
        for size in sizes:
            part = self.np_random.random(size) < 0.5
            part[self.np_random.integers(size)] = True
            parts.append(part)
        self._mask = np.concatenate(parts)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        result = super().reset(seed=seed, options=options)
        self._new_mask()
        return result

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.strict:
            check_valid(self.action_space, np.asarray(action)[None], self._mask[None])
        result = super().step(action)
        self._new_mask()
        return result

    def action_masks(self) -> np.ndarray:
        return self._mask.copy()


def check_valid(action_space: spaces.Space, actions: np.ndarray, masks: np.ndarray) -> None:
    """Raise unless every action of ``actions`` (``(n, ...)``) is allowed by its mask (``(n, mask_dims)``)."""
    if isinstance(action_space, spaces.Discrete):
        chosen = masks[np.arange(len(masks)), actions.reshape(-1).astype(int)]
    else:
        if isinstance(action_space, spaces.MultiDiscrete):
            sizes = [int(n) for n in action_space.nvec]
        else:
            assert isinstance(action_space, spaces.MultiBinary)
            sizes = [2] * int(np.prod(action_space.n))
        offsets = np.cumsum([0, *sizes[:-1]])
        # (n, n_sub) indices into the flat mask
        chosen = np.take_along_axis(masks, offsets[None, :] + actions.reshape(len(masks), -1).astype(int), axis=1)
    assert bool(np.all(chosen)), f"invalid action {actions} under mask {masks}"


N_CUES, N_WAIT = 4, 2


class CueMemoryFake:
    """
    A scripted MaskedCueRecall policy that needs its state: perfect iff the state is carried and reset per episode.

    The state it returns holds, per env, the cue it remembers (-1: none). It reads the cue only at a step flagged by
    ``episode_start`` (the first observation of an episode shows it) and at the query answers the remembered cue, or
    0 when it remembers none: so with its state dropped it scores chance. Before the query it takes the valid wait
    action that ``action_masks`` shows (without masks: the first wait action, valid only when ``n_wait=1``).

    :param expect_masks: Whether every call must get ``action_masks`` (``False``: none may)
    """

    def __init__(self, expect_masks: bool = True) -> None:
        self.expect_masks = expect_masks
        self.calls = 0

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        assert isinstance(observation, np.ndarray)
        assert episode_start is not None
        n_envs = observation.shape[0]  # observation: (n_envs, n_cues + 1)
        if self.expect_masks:
            assert action_masks is not None, "action_masks missing at a step"
            assert action_masks.shape == (n_envs, N_CUES + N_WAIT)
        else:
            assert action_masks is None
        self.calls += 1
        cues = np.full(n_envs, -1) if state is None else state[0].copy()
        cues[episode_start] = np.argmax(observation[episode_start, :N_CUES], axis=1)
        is_query = observation[:, -1] == 1
        # Before the query the only valid action is a wait: the first valid action of the mask
        waits = np.full(n_envs, N_CUES) if action_masks is None else np.argmax(action_masks, axis=1)
        actions = np.where(is_query, np.maximum(cues, 0), waits)
        return actions, (cues,)


def small_reset_ppo(**kwargs: object) -> ResetPPO:
    """A small ResetPPO on ``RandomEpisodeEnv``: ``n_envs`` and ``policy`` among ``kwargs``, the rest ResetPPO's."""
    env = make_vec_env(RandomEpisodeEnv, n_envs=kwargs.pop("n_envs", 2), seed=0)  # type: ignore[arg-type]
    settings: dict = dict(n_steps=16, batch_size=16, n_epochs=2, window_size=4, seed=0)
    settings.update(kwargs)
    settings.setdefault("policy_kwargs", {"lstm_hidden_size": 8, "net_arch": [8]})
    return ResetPPO(settings.pop("policy", "MlpLstmPolicy"), env, **settings)


def examples(count: int) -> int:
    """
    A property test's examples under the loaded Hypothesis profile (``tests/conftest.py``).

    :param count: The examples under the ``thorough`` profile (``make test-slow``)
    :return: ``count`` under ``thorough``; a quarter of it (at least 10, at most ``count``) under ``ci``, the default
    """
    profile = settings.default  # None only before Hypothesis loads a profile; conftest.py loads one
    per_hundred = 100 if profile is None else profile.max_examples
    return max(count * per_hundred // 100, min(count, 10))


def run_zoo_in_process(
    args: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess:
    """
    ``python -m sb3_reset_ppo.zoo ARGS`` as :func:`sb3_reset_ppo.zoo.main` (all that the module runs) in this process:
    an interpreter that imports torch and the RL Zoo costs seconds of CPU. tests/zoo/test_zoo.py runs the module once.

    :param args: The arguments after ``python -m sb3_reset_ppo.zoo``
    :param capfd: The test's capture of the file descriptors: the output, as a subprocess's would be read
    :param monkeypatch: The test's monkeypatch, which restores ``sys.argv`` (main sets the zoo's) after the test
    :return: The run as a completed process: its exit status (0 unless it exits) and its output
    """
    from sb3_reset_ppo.zoo import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    capfd.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["python", "-m", "sb3_reset_ppo.zoo", *args], code, out, err)
