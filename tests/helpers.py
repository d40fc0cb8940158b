"""Small test environments and helpers shared by the tests."""

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces

from sb3_reset_ppo import ResetPPO, WindowRolloutBuffer, WindowSettings
from sb3_reset_ppo.common.evaluation import evaluate_windows
from sb3_reset_ppo.common.loss import LossSettings, SlotTargets, WindowLoss, window_ppo_loss


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


def brute_force_window_starts(n_steps: int, window_size: int, window_coverage: str) -> list[int]:
    """Every window start of one env: ``0 .. T - W`` (``"inside"``) or ``-(W - 1) .. T - 1`` (``"full"``)."""
    if window_coverage == "full":
        return list(range(-(window_size - 1), n_steps))
    return list(range(n_steps - window_size + 1))


def brute_force_kept_steps(episode_starts: np.ndarray, start: int, window_size: int, boundary: str) -> list[int]:
    """
    The steps a window kept, with an explicit loop: its real steps (clipped to the rollout), in mask mode only those
    before the first episode start after its first real step. ``episode_starts``: one env's flags, ``(T,)``.
    """
    steps, alive = [], True
    real = [step for step in range(start, start + window_size) if 0 <= step < episode_starts.shape[0]]
    for slot, step in enumerate(real):
        if slot >= 1 and episode_starts[step] and boundary == "mask":
            alive = False
        if alive:
            steps.append(step)
    return steps


def brute_force_step_weights(
    episode_starts: np.ndarray,
    window_size: int,
    boundary: str,
    weighting: str,
    window_stride: int = 1,
    window_coverage: str = "inside",
) -> np.ndarray:
    """
    The design document's (docs/design.md) expected per-epoch weights with explicit loops: every phase ``p`` of the epoch's
    windows (starts ``p + j * k``, ``k = min(stride, number of starts)``) is equally likely, so the expected
    weight is the mean over phases of the weights of that phase's windows; importance weighting divides by
    the number of windows (of all, one at every start) in which the step is kept. ``"inside"``: starts ``0 .. T - W``;
    ``"full"``: starts ``-(W - 1) .. T - 1``, each window's steps clipped to ``0 .. T - 1`` (its first real step
    never resets). Input and output ``(T, E)``.
    """
    n_steps, n_envs = episode_starts.shape
    all_starts = brute_force_window_starts(n_steps, window_size, window_coverage)
    stride = min(window_stride, len(all_starts))

    def kept_steps(env: int, start: int) -> list[int]:
        return brute_force_kept_steps(episode_starts[:, env], start, window_size, boundary)

    counts = np.zeros((n_steps, n_envs))
    for env in range(n_envs):
        for start in all_starts:
            for step in kept_steps(env, start):
                counts[step, env] += 1
    totals = np.zeros((n_steps, n_envs))
    for phase in range(stride):
        for env in range(n_envs):
            for start in all_starts:
                if (start - phase) % stride != 0:
                    continue
                for step in kept_steps(env, start):
                    totals[step, env] += 1.0 if weighting != "importance" else 1.0 / counts[step, env]
    return totals / stride


def brute_force_effective_weights(
    episode_starts: np.ndarray,
    window_size: int,
    boundary: str,
    window_stride: int,
    window_coverage: str,
    batch_size: int | None,
) -> np.ndarray:
    """
    The design document's expected gradient weight per epoch of every step under uniform weighting, with explicit
    loops: for every combination of the envs' phases (equally likely), each step's kept slots, times the probability
    that a slot is trained in that epoch (an epoch of ``N`` real slots trains ``floor(N / M) * M`` of them,
    ``M = max(batch_size, W)``, each slot equally likely to be left out; all of them when ``N <= M``), divided by the
    loss normaliser ``min(M, mean N)``. Input and output ``(T, E)``.
    """
    n_steps, n_envs = episode_starts.shape
    all_starts = brute_force_window_starts(n_steps, window_size, window_coverage)
    stride = min(window_stride, len(all_starts))
    # Per env and phase: each step's kept slots and the epoch's real slots of that env
    kept = np.zeros((n_envs, stride, n_steps))
    real = np.zeros((n_envs, stride))
    for env in range(n_envs):
        for phase in range(stride):
            for start in all_starts[phase::stride]:
                real[env, phase] += min(start + window_size, n_steps) - max(start, 0)
                for step in brute_force_kept_steps(episode_starts[:, env], start, window_size, boundary):
                    kept[env, phase, step] += 1
    full = None if batch_size is None else max(batch_size, window_size)
    totals = np.zeros((n_steps, n_envs))
    slot_counts = []
    for phases in itertools.product(range(stride), repeat=n_envs):
        n_slots = sum(real[env, phase] for env, phase in enumerate(phases))
        slot_counts.append(n_slots)
        trained = 1.0 if full is None or n_slots <= full else (n_slots // full) * full / n_slots
        for env, phase in enumerate(phases):
            totals[:, env] += kept[env, phase] * trained
    mean_slots = float(np.mean(slot_counts))
    normaliser = mean_slots if full is None else min(full, mean_slots)
    return totals / stride**n_envs / normaliser


def reference_unroll(
    rnn: "th.nn.Module",
    features: "th.Tensor",
    memory: "tuple[th.Tensor, ...]",
    episode_starts: "th.Tensor",
    boundary: str,
) -> "th.Tensor":
    """
    The design document's (docs/design.md) unroll written literally, one slot at a time, for an LSTM or a GRU.

    :param features: ``(B, W, input)``
    :param memory: recorded memory entering every slot's step (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each
        ``(B, W, n_layers, hidden)``
    :param episode_starts: ``(B, W)``
    :param boundary: ``"reset"`` restores recorded memory at reset slots; ``"mask"`` carries it
    :return: ``(B, W, hidden)``
    """
    n_windows, window_size = episode_starts.shape
    # (B, W, L, H) -> (W, L, B, H)
    recorded = [m.permute(1, 2, 0, 3) for m in memory]
    state = [tensor[0] for tensor in recorded]
    outputs = []
    for slot in range(window_size):
        not_start = (1.0 - episode_starts[:, slot]).reshape(1, n_windows, 1)
        if slot > 0 and boundary == "reset":
            reset = (episode_starts[:, slot] > 0.5).reshape(1, n_windows, 1)
            state = [th.where(reset, tensor[slot], current) for tensor, current in zip(recorded, state, strict=True)]
        entering = [tensor * not_start for tensor in state]
        if isinstance(rnn, th.nn.LSTM):
            output, (hidden, cell) = rnn(features[:, slot].unsqueeze(0), (entering[0], entering[1]))
            state = [hidden, cell]
        else:
            output, hidden = rnn(features[:, slot].unsqueeze(0), entering[0])
            state = [hidden]
        outputs.append(output[0])
    return th.stack(outputs, dim=1)


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
