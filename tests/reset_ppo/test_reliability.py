"""Reliability: determinism, non-finite detection, resume, hostile input, damaged checkpoints."""

import io
import struct
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv, check_exact, resident_memory_bytes
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecCheckNan

from sb3_reset_ppo import NonFiniteTrainingError, ResetPPO

SMALL: dict[str, Any] = dict(
    n_steps=16, batch_size=16, n_epochs=2, window_size=4, policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]}
)


def _env(n_envs: int = 2, seed: int = 0, **kwargs: Any):
    return make_vec_env(RandomEpisodeEnv, n_envs=n_envs, seed=seed, env_kwargs=kwargs)


def _parameters(model: ResetPPO) -> list[th.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def _train(seed: int, boundary: str = "reset", weighting: str = "uniform", **kwargs: Any) -> list[th.Tensor]:
    settings = {**SMALL, **kwargs}
    model = ResetPPO("MlpLstmPolicy", _env(seed=seed), boundary=boundary, weighting=weighting, seed=seed, **settings)
    model.learn(3 * 16 * 2)
    return _parameters(model)


@pytest.mark.parametrize("window_stride", [1, None])
@pytest.mark.parametrize("boundary", ["reset", "mask"])
@pytest.mark.parametrize("weighting", ["uniform", "importance", "kept_mean"])
def test_same_seed_gives_bit_identical_parameters(boundary: str, weighting: str, window_stride: int | None) -> None:
    first = _train(7, boundary, weighting, window_stride=window_stride)
    second = _train(7, boundary, weighting, window_stride=window_stride)
    assert all(th.equal(a, b) for a, b in zip(first, second, strict=True))
    other = _train(8, boundary, weighting, window_stride=window_stride)
    assert not all(th.equal(a, b) for a, b in zip(first, other, strict=True))


def test_window_order_ignores_global_random_state() -> None:
    # Other code drawing from numpy's and torch's global generators does not change the window order
    model = ResetPPO("MlpLstmPolicy", _env(seed=1), seed=1, **SMALL)
    model.learn(32)
    buffer = model.rollout_buffer
    buffer.seed(5)
    order_a = [batch.slot_steps.clone() for batch in buffer.get(4)]
    buffer.seed(5)
    np.random.rand(10)  # noqa: NPY002  (global state, on purpose)
    th.rand(10)
    order_b = [batch.slot_steps.clone() for batch in buffer.get(4)]
    assert all(th.equal(a, b) for a, b in zip(order_a, order_b, strict=True))
    # The model's seed seeds it
    model.set_random_seed(5)
    order_c = [batch.slot_steps.clone() for batch in buffer.get(4)]
    assert all(th.equal(a, c) for a, c in zip(order_a, order_c, strict=True))


class _RewardEnv(RandomEpisodeEnv):
    """Rewards become ``bad_value`` after ``after`` steps."""

    def __init__(self, bad_value: float, after: int = 5) -> None:
        super().__init__(max_length=4)
        self.bad_value = bad_value
        self.after = after
        self.steps = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        return obs, self.bad_value if self.steps > self.after else reward, terminated, truncated, info


@pytest.mark.parametrize("bad_value,term", [(float("nan"), "value_loss"), (float("inf"), "value_loss")])
def test_non_finite_loss_raises_and_does_not_step(bad_value: float, term: str) -> None:
    model = ResetPPO("MlpLstmPolicy", make_vec_env(_RewardEnv, n_envs=2, env_kwargs={"bad_value": bad_value}), **SMALL)
    before = _parameters(model)
    with pytest.raises(NonFiniteTrainingError, match=rf"non-finite .*{term}.* in update 1 .*VecCheckNan"):
        model.learn(32)
    assert all(th.equal(a, b) for a, b in zip(before, _parameters(model), strict=True))


def test_vec_check_nan_gives_sb3_error() -> None:
    class NanObsEnv(RandomEpisodeEnv):
        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            obs, reward, terminated, truncated, info = super().step(action)
            return np.full_like(obs, np.nan), reward, terminated, truncated, info

    env = VecCheckNan(make_vec_env(NanObsEnv, n_envs=2), raise_exception=True)
    with pytest.raises(ValueError, match="found nan in observations"):
        ResetPPO("MlpLstmPolicy", env, **SMALL).learn(32)


def test_resume_continues_updates_schedule_and_timesteps(tmp_path: Path) -> None:
    class SaveMidway(BaseCallback):
        # A rollout starts after the previous train(): the checkpoint holds two full updates
        def _on_rollout_start(self) -> None:
            if self.num_timesteps == 64:
                self.model.save(tmp_path / "midway.zip")

        def _on_step(self) -> bool:
            return True

    def schedule(progress: float) -> float:
        return 1e-3 * progress

    model = ResetPPO("MlpLstmPolicy", _env(), learning_rate=schedule, **SMALL)
    model.learn(128, callback=SaveMidway())
    loaded = ResetPPO.load(tmp_path / "midway.zip", env=_env())
    assert loaded.num_timesteps == 64 and loaded._n_updates == 2 * SMALL["n_epochs"]
    loaded.set_logger(configure(None, []))
    loaded.learn(64, reset_num_timesteps=False)
    assert loaded.num_timesteps == 128
    assert loaded._n_updates == model._n_updates
    # Learning-rate schedule progress continued from where it was saved, as in the uninterrupted run
    assert loaded.policy.optimizer.param_groups[0]["lr"] == pytest.approx(model.policy.optimizer.param_groups[0]["lr"])


@pytest.mark.parametrize(
    "name,env_kwargs,settings,expect_resets",
    [
        ("episodes of length 1", dict(max_length=1), {}, True),
        ("no episode end", dict(min_length=1000, max_length=1000), {}, False),
        ("window_size == n_steps", {}, dict(window_size=16), True),
        ("n_envs == 1", dict(n_envs=1), {}, True),
        ("truncations", dict(truncate=True, max_length=4), {}, True),
        ("dict image + vector", dict(obs_kind="dict"), dict(policy="MultiInputLstmPolicy"), True),
        ("multidiscrete", dict(action_space=spaces.MultiDiscrete([3, 2])), {}, True),
        ("multibinary", dict(action_space=spaces.MultiBinary(2)), {}, True),
    ],
)
@pytest.mark.parametrize("window_stride", [1, None])
@pytest.mark.parametrize("boundary", ["reset", "mask"])
def test_odd_input_trains_and_stays_exact(
    name: str,
    env_kwargs: dict[str, Any],
    settings: dict[str, Any],
    expect_resets: bool,
    boundary: str,
    window_stride: int | None,
) -> None:
    env_kwargs = dict(env_kwargs)
    n_envs = env_kwargs.pop("n_envs", 2)
    settings = {**SMALL, **settings, "learning_rate": 0.0}
    policy = settings.pop("policy", "MlpLstmPolicy")
    if policy == "MultiInputLstmPolicy":
        settings["policy_kwargs"] = {"lstm_hidden_size": 8}
    env = _env(n_envs=n_envs, **env_kwargs)
    model = ResetPPO(policy, env, boundary=boundary, seed=0, window_stride=window_stride, **settings)
    model.learn(2 * 16 * n_envs)
    check_exact(model, expect_resets=expect_resets)


def test_window_size_one_makes_reset_and_mask_identical() -> None:
    reset = _train(3, "reset", "uniform", window_size=1)
    mask = _train(3, "mask", "uniform", window_size=1)
    assert all(th.equal(a, b) for a, b in zip(reset, mask, strict=True))
    # Control: with longer windows the modes differ
    assert not all(th.equal(a, b) for a, b in zip(_train(3, "reset"), _train(3, "mask"), strict=True))


def _saved(tmp_path: Path) -> Path:
    model = ResetPPO("MlpLstmPolicy", _env(), **SMALL)
    model.save(tmp_path / "model.zip")
    return tmp_path / "model.zip"


def test_truncated_checkpoint_gives_clear_error(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    data = path.read_bytes()
    (tmp_path / "truncated.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cannot load checkpoint .*truncated.zip.*truncated or corrupt"):
        ResetPPO.load(tmp_path / "truncated.zip")


def test_short_file_gives_clear_error(tmp_path: Path) -> None:
    (tmp_path / "short.zip").write_bytes(_saved(tmp_path).read_bytes()[:100])
    with pytest.raises(ValueError, match=r"cannot load checkpoint .*short.zip.*not a readable zip archive"):
        ResetPPO.load(tmp_path / "short.zip")


def test_corrupt_checkpoint_gives_clear_error(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("policy.pth")
    data = bytearray(path.read_bytes())
    # Flip bytes inside the stored policy (after its local header): the CRC check fails
    offset = info.header_offset
    name_length, extra_length = struct.unpack("<HH", data[offset + 26 : offset + 30])
    start = offset + 30 + name_length + extra_length
    middle = start + info.compress_size // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"cannot load checkpoint .*corrupt"):
        ResetPPO.load(corrupt)


def test_zip_that_is_not_a_checkpoint_and_buffers(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ValueError, match="or not a Stable-Baselines3 checkpoint"):
        ResetPPO.load(tmp_path / "other.zip")
    # An open file object works and is rewound for SB3
    buffer = io.BytesIO(_saved(tmp_path).read_bytes())
    assert isinstance(ResetPPO.load(buffer), ResetPPO)


def test_observation_space_mismatch_gives_sb3_error(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    other = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=2)
    with pytest.raises(ValueError, match="Observation spaces do not match"):
        ResetPPO.load(path, env=other)


def test_set_parameters_loads_weights_only(tmp_path: Path) -> None:
    source = ResetPPO("MlpLstmPolicy", _env(), seed=1, **SMALL)
    source.save(tmp_path / "trusted.zip")
    target = ResetPPO("MlpLstmPolicy", _env(), seed=2, **SMALL)
    target.set_parameters(str(tmp_path / "trusted.zip"))
    assert all(th.equal(a, b) for a, b in zip(_parameters(source), _parameters(target), strict=True))


@pytest.mark.slow
def test_memory_is_flat_over_300_updates() -> None:
    memory: dict[int, int] = {}

    class Measure(BaseCallback):
        # A rollout starts right after the previous train(): record memory after updates 30 and 300
        def _on_rollout_start(self) -> None:
            iteration = self.num_timesteps // 32
            if iteration in (30, 300):
                memory[iteration] = resident_memory_bytes()

        def _on_step(self) -> bool:
            return True

    model = ResetPPO("MlpLstmPolicy", _env(max_length=5), tensorboard_log=None, **{**SMALL, "n_epochs": 1})
    model.learn(301 * 32, callback=Measure())
    assert set(memory) == {30, 300}
    assert memory[300] <= 1.10 * memory[30], f"resident memory grew from {memory[30]} to {memory[300]} bytes"


def test_missing_checkpoint_names_the_files_tried(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no file .*missing\.zip$"):
        ResetPPO.load(tmp_path / "missing.zip")
    with pytest.raises(FileNotFoundError, match=r"no file .*missing or .*missing\.zip$"):
        ResetPPO.load(tmp_path / "missing")
