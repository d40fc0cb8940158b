"""
ONNX export: the exported actor, run by onnxruntime step by step beside ``model.predict(...,
deterministic=True)`` over multi-episode rollouts of several envs, gives the same actions and the same memory.
"""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv
from unity_loader import behavior_parameters, unity_failures

import sb3_reset_ppo.envs  # noqa: F401  # registers CueRecall-v0
from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import ML_AGENTS_VERSION_NUMBER, export_onnx, export_spec, read_metadata
from sb3_reset_ppo.export.__main__ import main as export_main

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = 8
# Steps of each side-by-side rollout: several episodes of 1 to 6 steps per env, starting at different steps
N_STEPS = 24
N_ENVS = 3


def scientific(value: float) -> str:
    """``value`` as the pages write a tolerance: ``1e-2``, ``5e-2``."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def session(path: Path) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def make_env_fn(obs_kind: str, action_space: spaces.Space, seed: int) -> Callable[[], gym.Env]:
    """``RandomEpisodeEnv`` factory; ``obs_kind="discrete"`` gives ``Discrete(5)`` observations."""

    def make() -> gym.Env:
        env = RandomEpisodeEnv(action_space, "box" if obs_kind == "discrete" else obs_kind, max_length=6)
        if obs_kind == "discrete":
            env.observation_space = spaces.Discrete(5)
        env.reset(seed=seed)
        return env

    return make


def vec_env(obs_kind: str, action_space: spaces.Space, n_envs: int = N_ENVS, seed: int = 0) -> DummyVecEnv:
    return DummyVecEnv([make_env_fn(obs_kind, action_space, seed + index) for index in range(n_envs)])


def randomise(model: BaseAlgorithm, seed: int = 0) -> None:
    """
    Random weights of unit gain (LeCun's normal: std ``1 / sqrt(fan_in)``; biases std 0.1) instead of SB3's action
    head of gain 0.01: actions depend on the memory and the input, and activations stay of order 1.
    """
    generator = th.Generator().manual_seed(seed)
    with th.no_grad():
        for parameter in model.policy.parameters():
            fan_in = int(np.prod(parameter.shape[1:])) if parameter.ndim >= 2 else 100
            parameter.copy_(th.randn(parameter.shape, generator=generator) / np.sqrt(fan_in))


def onnx_obs(obs: Any, obs_space: spaces.Space, transpose_images: bool, names: list[str] | None = None) -> dict[str, Any]:
    """The observation inputs of the plain layout (float32), images transposed to (N, C, H, W) if asked."""

    def convert(array: np.ndarray) -> np.ndarray:
        array = np.asarray(array, dtype=np.float32)
        if transpose_images and array.ndim == 4:
            array = array.transpose(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        return array

    if isinstance(obs, dict):
        return {f"obs_{key}": convert(value) for key, value in obs.items()}
    return {"obs": convert(obs)}


def random_masks(rng: np.random.Generator, branches: tuple[int, ...], n_envs: int) -> np.ndarray:
    """Random valid-action masks, at least one valid action per sub-action: ``(n_envs, sum(branches))`` bool."""
    parts = []
    for size in branches:
        part = rng.random((n_envs, size)) < 0.5
        part[np.arange(n_envs), rng.integers(size, size=n_envs)] = True
        parts.append(part)
    return np.concatenate(parts, axis=1)


def assert_valid(actions: np.ndarray, masks: np.ndarray, branches: tuple[int, ...]) -> None:
    actions = actions.reshape(len(actions), -1)
    offsets = np.cumsum((0,) + branches[:-1])
    for branch, offset in enumerate(offsets):
        assert masks[np.arange(len(actions)), offset + actions[:, branch]].all(), "a masked action was chosen"


def side_by_side(
    model: BaseAlgorithm,
    path: Path,
    env: DummyVecEnv,
    *,
    transpose_images: bool = False,
    masks_seed: int | None = None,
    n_steps: int = N_STEPS,
    atol: float = 1e-5,
    runtime: Callable[[Path], Any] = session,
) -> int:
    """
    Play ``env`` with ``predict(deterministic=True)``, running the plain-layout file beside it on its own memory
    (never copied from ``predict``); assert the same actions and the same memory at every step.

    :param runtime: What runs the file: onnxruntime (:func:`session`) or another runtime with its ``run(names, feed)``
    :return: The number of episode starts after the first step (the rollout must cross episodes)
    """
    sess = runtime(path)
    spec = export_spec(model)
    obs: Any = env.reset()
    n_envs = env.num_envs
    state: tuple[np.ndarray, ...] | None = None
    memory = [np.zeros((spec.n_layers, n_envs, spec.hidden_size), np.float32) for _ in range(spec.n_memory)]
    episode_start = np.ones(n_envs, dtype=bool)
    rng = np.random.default_rng(masks_seed)
    starts = 0
    for step in range(n_steps):
        feed = onnx_obs(obs, model.observation_space, transpose_images)
        feed.update(zip(["h", "c"], memory, strict=False))
        feed["episode_start"] = episode_start.astype(np.float32)
        kwargs: dict[str, Any] = {}
        if masks_seed is not None:
            masks = random_masks(rng, spec.branches, n_envs)
            feed["action_masks"] = masks.astype(np.float32)
            kwargs["action_masks"] = masks
        actions, state = model.predict(obs, state, episode_start, deterministic=True, **kwargs)
        assert state is not None
        action, *memory = sess.run(["action"] + [f"{name}_out" for name in ["h", "c"][: spec.n_memory]], feed)
        if spec.branches:
            np.testing.assert_array_equal(action, actions, err_msg=f"actions differ at step {step}")
        else:
            assert action.shape == actions.shape
            assert np.abs(action - actions).max() <= atol, f"actions differ at step {step}"
        assert len(state) == spec.n_memory
        for name, ours, theirs in zip(["h", "c"], memory, state, strict=False):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol, err_msg=f"{name} differs at step {step}")
        if masks_seed is not None:
            assert_valid(action, masks, spec.branches)
        obs, _, dones, _ = env.step(actions)
        episode_start = dones
        starts += int(dones.sum()) if step < n_steps - 1 else 0
    # The memory entering a reset was not zero: the reset is exercised
    assert np.abs(memory[0]).max() > 1e-3
    return starts


# (cell, n_layers, policy kind, observation kind, action space, opset): every policy kind with both cells, both
# layer counts and the three action kinds; every cell with every layer count; opsets 15 and 17 alternate
CASES = [
    ("Lstm", 1, "Mlp", "box", spaces.Discrete(3), 17),
    ("Gru", 2, "Mlp", "box", spaces.Box(-1.0, 1.0, (2,)), 15),
    ("Lstm", 2, "Mlp", "multidiscrete", spaces.MultiDiscrete([2, 3]), 17),
    ("Gru", 1, "Mlp", "discrete", spaces.Discrete(2), 15),
    ("Lstm", 1, "Mlp", "box", spaces.MultiBinary(3), 15),
    ("Gru", 1, "Cnn", "image", spaces.Box(-1.0, 1.0, (2,)), 17),
    ("Lstm", 2, "Cnn", "image", spaces.Discrete(3), 15),
    ("Gru", 2, "Cnn", "image", spaces.MultiDiscrete([2, 3]), 17),
    ("Lstm", 1, "MultiInput", "dict", spaces.Box(-1.0, 1.0, (2,)), 15),
    ("Gru", 2, "MultiInput", "dict", spaces.Discrete(3), 17),
    ("Gru", 1, "MultiInput", "dict", spaces.MultiDiscrete([2, 3]), 15),
    ("Lstm", 2, "MultiInput", "dict", spaces.Discrete(2), 17),
]


def case_id(case: tuple) -> str:
    cell, layers, kind, obs, action, opset = case
    return f"{kind}{cell}-{layers}layer-{obs}-{type(action).__name__}-opset{opset}"


def tiny_kwargs(cell: str, layers: int, kind: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lstm_hidden_size": HIDDEN, "n_lstm_layers": layers, "net_arch": [8]}
    if kind == "Cnn":
        kwargs["features_extractor_kwargs"] = {"features_dim": 8}
    if kind == "MultiInput":
        kwargs["features_extractor_kwargs"] = {"cnn_output_dim": 8}
    return kwargs


@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_step_by_step_matches_predict(case: tuple, tmp_path: Path) -> None:
    cell, layers, kind, obs_kind, action_space, opset = case
    env = vec_env(obs_kind, action_space)
    model = ResetPPO(
        f"{kind}{cell}Policy", env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs(cell, layers, kind), seed=0
    )
    randomise(model)
    # Cnn: the env's (H, W, C) images straight in (the graph transposes); MultiInput: (C, H, W) as the policy's space
    channels_last = kind == "Cnn"
    path = export_onnx(model, tmp_path / "policy.onnx", opset=opset, channels_last=channels_last)
    assert onnx.load(str(path)).opset_import[0].version == opset
    starts = side_by_side(model, path, vec_env(obs_kind, action_space, seed=10), transpose_images=kind == "MultiInput")
    assert starts >= 2 * N_ENVS


def test_squashed_gsde_actions(tmp_path: Path) -> None:
    """``use_sde`` with ``squash_output``: tanh of the mean, unscaled to the bounds as ``predict`` does."""
    action_space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))
    model = ResetPPO(
        "MlpLstmPolicy",
        vec_env("box", action_space),
        n_steps=16,
        batch_size=16,
        use_sde=True,
        policy_kwargs={**tiny_kwargs("Lstm", 1, "Mlp"), "squash_output": True},
        seed=0,
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "sde.onnx")
    side_by_side(model, path, vec_env("box", action_space, seed=3))


def test_box_actions_are_clipped(tmp_path: Path) -> None:
    """Means beyond the bounds are clipped as ``predict`` clips (the check fails if the graph does not clip)."""
    action_space = spaces.Box(-0.1, 0.1, (3,))
    model = ResetPPO(
        "MlpGruPolicy", vec_env("box", action_space), n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Gru", 1, "Mlp")
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "clip.onnx", distribution=True)
    sess = session(path)
    obs = np.random.default_rng(0).uniform(-5, 5, (64, 3)).astype(np.float32)
    action, mean, log_std = sess.run(
        ["action", "mean", "log_std"],
        {"obs": obs, "h": np.zeros((1, 64, HIDDEN), np.float32), "episode_start": np.ones(64, np.float32)},
    )
    assert np.abs(mean).max() > 0.1, "no mean outside the bounds: the test would not see a missing clip"
    np.testing.assert_array_equal(action, np.clip(mean, -0.1, 0.1))
    np.testing.assert_allclose(log_std, np.broadcast_to(model.policy.log_std.detach().numpy(), mean.shape))
    expected, _ = model.predict(obs, None, np.ones(64, bool), deterministic=True)
    assert np.abs(action - expected).max() <= 1e-5


def test_recurrent_ppo_model(tmp_path: Path) -> None:
    """An sb3-contrib RecurrentPPO model, saved and exported from its zip by the command line."""
    env = vec_env("box", spaces.Discrete(3))
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 2, "Mlp"), seed=0)
    randomise(model)
    model.save(tmp_path / "recurrent")
    export_main([str(tmp_path / "recurrent.zip"), str(tmp_path / "recurrent.onnx"), "--opset", "15"])
    assert read_metadata(tmp_path / "recurrent.onnx")["algorithm"] == "RecurrentPPO"
    side_by_side(model, tmp_path / "recurrent.onnx", vec_env("box", spaces.Discrete(3), seed=5))


@pytest.mark.parametrize(
    ("cell", "action_space"),
    [("Lstm", spaces.Discrete(4)), ("Gru", spaces.MultiDiscrete([3, 2])), ("Lstm", spaces.MultiBinary(2))],
    ids=["Lstm-Discrete", "Gru-MultiDiscrete", "Lstm-MultiBinary"],
)
def test_maskable_random_masks(cell: str, action_space: spaces.Space, tmp_path: Path) -> None:
    """MaskableResetPPO with new random masks every step: predict's actions, never a masked one."""
    model = MaskableResetPPO(
        f"Mlp{cell}Policy", vec_env("box", action_space), n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs(cell, 2, "Mlp")
    )
    randomise(model)
    model.save(tmp_path / "maskable")
    export_main([str(tmp_path / "maskable.zip"), str(tmp_path / "maskable.onnx")])
    assert [i.name for i in session(tmp_path / "maskable.onnx").get_inputs()][-1] == "action_masks"
    side_by_side(model, tmp_path / "maskable.onnx", vec_env("box", action_space, seed=7), masks_seed=1)


# ---------------------------------------------------------------------------------------------- ML-Agents layout


def mlagents_obs(obs: Any) -> dict[str, np.ndarray]:
    """
    ML-Agents' observation inputs: a Dict's keys in order, images (N, C, H, W) in Unity's [0, 1] scale (its sensors
    divide by 255, as ``predict`` does in float32), a Discrete index (N, 1); floats.
    """
    if isinstance(obs, dict):
        image = obs["image"].transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255)  # (N, H, W, C) -> (N, C, H, W)
        return {"obs_0": image, "obs_1": obs["vec"].astype(np.float32)}
    return {"obs_0": np.asarray(obs, np.float32).reshape(len(obs), -1)}


@pytest.mark.parametrize(
    ("cell", "layers", "kind", "obs_kind", "action_space"),
    [
        ("Lstm", 1, "MultiInput", "dict", spaces.MultiDiscrete([3, 2])),
        ("Gru", 2, "MultiInput", "dict", spaces.Box(-1.0, 1.0, (2,))),
        ("Lstm", 2, "MultiInput", "dict", spaces.Discrete(3)),
        ("Gru", 1, "Mlp", "discrete", spaces.MultiBinary(2)),
    ],
    ids=[
        "Lstm-1layer-dict-MultiDiscrete",
        "Gru-2layer-dict-Box",
        "Lstm-2layer-dict-Discrete",
        "Gru-1layer-discrete-MultiBinary",
    ],
)
def test_mlagents_layout(cell: str, layers: int, kind: str, obs_kind: str, action_space: spaces.Space, tmp_path: Path) -> None:
    """Names, shapes and constants of Unity ML-Agents' contract, then the same step-by-step check through it."""
    model = ResetPPO(
        f"{kind}{cell}Policy",
        vec_env(obs_kind, action_space),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs(cell, layers, kind),
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "mlagents.onnx", layout="mlagents", opset=15)
    # Unity's loader accepts it (tests/oracles/unity_loader.py, tests/export/test_unity_loader.py)
    assert unity_failures(path, behavior_parameters(model.observation_space, model.action_space)) == []
    sess = session(path)
    discrete = not isinstance(action_space, spaces.Box)
    memory_size = (2 if cell == "Lstm" else 1) * layers * HIDDEN
    expected_inputs: dict[str, list[Any]] = {"recurrent_in": ["batch", 1, memory_size]}
    if obs_kind == "dict":
        expected_inputs.update({"obs_0": ["batch", 1, 36, 36], "obs_1": ["batch", 3]})
    else:
        expected_inputs["obs_0"] = ["batch", 1]
    if discrete:
        expected_inputs["action_masks"] = ["batch", export_spec(model).mask_dims]
    assert {i.name: i.shape for i in sess.get_inputs()} == expected_inputs
    kind = "discrete" if discrete else "continuous"
    n_branches = len(export_spec(model).branches)
    assert [o.name for o in sess.get_outputs()] == [
        "version_number",
        "memory_size",
        f"{kind}_actions",
        f"{kind}_action_output_shape",
        f"deterministic_{kind}_actions",
        "recurrent_out",
    ]
    n_envs = N_ENVS
    env = vec_env(obs_kind, action_space, seed=11)
    obs: Any = env.reset()
    recurrent = np.zeros((n_envs, 1, memory_size), np.float32)
    state: tuple[np.ndarray, ...] | None = None
    episode_start = np.ones(n_envs, dtype=bool)
    for step in range(N_STEPS):
        # Unity's side of the contract: the memory of an agent starting an episode is zeros
        recurrent[episode_start] = 0.0
        feed = {**mlagents_obs(obs), "recurrent_in": recurrent}
        if discrete:
            feed["action_masks"] = np.ones((n_envs, export_spec(model).mask_dims), np.float32)
        version, size, stochastic, shape, deterministic, recurrent = sess.run(None, feed)
        if step == 0:
            np.testing.assert_array_equal(version, [ML_AGENTS_VERSION_NUMBER])
            np.testing.assert_array_equal(size, [memory_size])
            assert version.dtype == size.dtype == shape.dtype == np.float32
            if discrete:
                np.testing.assert_array_equal(shape, [export_spec(model).branches])
            else:
                np.testing.assert_array_equal(shape, [2])
        actions, state = model.predict(obs, state, episode_start, deterministic=True)
        assert state is not None
        assert deterministic.shape == (n_envs, n_branches if discrete else 2)
        assert recurrent.shape == (n_envs, 1, memory_size)
        np.testing.assert_array_equal(stochastic, deterministic)
        np.testing.assert_allclose(deterministic.reshape(actions.shape), actions, rtol=0, atol=1e-5)
        # [h | c] on the last axis, layers one after the other in each part
        width = layers * HIDDEN
        for index, theirs in enumerate(state):
            ours = recurrent[:, 0, index * width : (index + 1) * width].reshape(n_envs, layers, HIDDEN).transpose(1, 0, 2)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5, err_msg=f"memory {index} differs at step {step}")
        obs, _, episode_start, _ = env.step(actions)


def test_mlagents_masks_are_applied(tmp_path: Path) -> None:
    """In the ML-Agents layout, ``action_masks`` (1 = allowed) apply to any discrete policy, as Unity feeds them."""
    model = ResetPPO(
        "MlpLstmPolicy",
        vec_env("box", spaces.Discrete(4)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"),
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "m.onnx", layout="mlagents")
    assert unity_failures(path, behavior_parameters(model.observation_space, model.action_space)) == []
    sess = session(path)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(256, 3)).astype(np.float32)
    masks = random_masks(rng, (4,), 256)
    (actions,) = sess.run(
        ["deterministic_discrete_actions"],
        {"obs_0": obs, "action_masks": masks.astype(np.float32), "recurrent_in": np.zeros((256, 1, 2 * HIDDEN), np.float32)},
    )
    assert_valid(actions, masks, (4,))
    (unmasked,) = sess.run(
        ["deterministic_discrete_actions"],
        {
            "obs_0": obs,
            "action_masks": np.ones((256, 4), np.float32),
            "recurrent_in": np.zeros((256, 1, 2 * HIDDEN), np.float32),
        },
    )
    assert not masks[np.arange(256), unmasked[:, 0]].all(), "masks never changed an action: the check is void"


# ---------------------------------------------------------------------------------------------- other options


def test_metadata(tmp_path: Path) -> None:
    model = ResetPPO(
        "MultiInputGruPolicy",
        vec_env("dict", spaces.Discrete(2)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Gru", 2, "MultiInput"),
    )
    path = export_onnx(model, tmp_path / "meta.onnx", opset=15)
    metadata = read_metadata(path)
    import sb3_reset_ppo

    assert metadata["sb3_reset_ppo_version"] == sb3_reset_ppo.__version__
    assert metadata["layout"] == "plain"
    assert metadata["opset"] == "15"
    assert metadata["observation_space"] == repr(model.observation_space)
    assert metadata["action_space"] == repr(model.action_space)
    assert json.loads(metadata["observation_keys"]) == ["image", "vec"]
    memory = json.loads(metadata["memory"])
    assert (memory["cell"], memory["n_layers"], memory["hidden_size"], memory["tensors"]) == ("GRU", 2, HIDDEN, ["h"])
    assert json.loads(metadata["inputs"])["h"] == [2, "batch", HIDDEN]
    # onnxruntime reads them too (the torch-free example does)
    assert session(path).get_modelmeta().custom_metadata_map["memory"] == metadata["memory"]


def test_float16_export(tmp_path: Path) -> None:
    """A float16 file (inputs, weights, outputs) follows ``predict`` within 1e-2 per step, fed ``predict``'s memory."""
    action_space = spaces.Box(-1.0, 1.0, (2,))
    model = ResetPPO(
        "MlpLstmPolicy", vec_env("box", action_space), n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 2, "Mlp")
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "half.onnx", dtype="float16")
    sess = session(path)
    assert {i.type for i in sess.get_inputs()} == {"tensor(float16)"}
    rng = np.random.default_rng(0)
    state = (rng.normal(size=(2, 32, HIDDEN)).astype(np.float32) * 0.5,) * 2
    obs = rng.uniform(-5, 5, (32, 3)).astype(np.float32)
    starts = rng.random(32) < 0.3
    actions, new_state = model.predict(obs, state, starts, deterministic=True)
    assert new_state is not None
    feed = {"obs": obs, "h": state[0], "c": state[1], "episode_start": starts.astype(np.float32)}
    action, h, c = sess.run(None, {name: value.astype(np.float16) for name, value in feed.items()})
    assert action.dtype == np.float16
    np.testing.assert_allclose(action.astype(np.float32), actions, rtol=0, atol=1e-2)
    np.testing.assert_allclose(h.astype(np.float32), new_state[0], rtol=0, atol=1e-2)
    np.testing.assert_allclose(c.astype(np.float32), new_state[1], rtol=0, atol=1e-2)


# torch's own notes while tracing nn.GRU with torch.export (deprecations inside torch)
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_dynamo_exporter(tmp_path: Path) -> None:
    """torch's ``torch.export``-based exporter, as an option, gives the same file behaviour (GRU, 2 layers)."""
    pytest.importorskip("onnxscript")
    model = ResetPPO(
        "MlpGruPolicy",
        vec_env("box", spaces.Discrete(3)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Gru", 2, "Mlp"),
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "dynamo.onnx", exporter="dynamo", opset=17)
    assert read_metadata(path)["exporter"] == "dynamo"
    side_by_side(model, path, vec_env("box", spaces.Discrete(3), seed=2), n_steps=12)


# ---------------------------------------------------------------------------------------------- errors


def test_unsupported_policy_says_what_is_supported(tmp_path: Path) -> None:
    model = PPO("MlpPolicy", vec_env("box", spaces.Discrete(2)), n_steps=16, batch_size=16)
    with pytest.raises(TypeError, match=r"ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO.*got PPO"):
        export_onnx(model, tmp_path / "x.onnx")


def test_unsupported_spaces_say_what_is_supported() -> None:
    model = ResetPPO(
        "MlpLstmPolicy",
        vec_env("box", spaces.Discrete(2)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"),
    )
    model.policy.observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    with pytest.raises(ValueError, match=r"observation space Tuple.*use Box \(images included\), Discrete, MultiDiscrete"):
        export_spec(model)
    model.policy.observation_space = spaces.Dict({"a": spaces.Dict({"b": spaces.Discrete(2)})})
    with pytest.raises(ValueError, match=r"key 'a'.*Dict of these"):
        export_spec(model)
    model.policy.observation_space = spaces.Box(-1, 1, (3,))
    model.policy.action_space = spaces.Tuple((spaces.Discrete(2),))
    with pytest.raises(ValueError, match=r"action space Tuple.*use Box, Discrete, MultiDiscrete or MultiBinary"):
        export_spec(model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layout": "unity"}, r"layout must be one of \('plain', 'mlagents', 'godot'\), got 'unity'"),
        ({"opset": 9}, r"opset must be an integer from 14 to 20, got 9"),
        ({"dtype": "bfloat16"}, r"dtype must be one of \('float32', 'float16'\), got 'bfloat16'"),
        ({"exporter": "tf"}, r"exporter must be one of \('torchscript', 'dynamo'\), got 'tf'"),
        ({"layout": "mlagents", "distribution": True}, r"distribution=True needs layout='plain'"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], message: str, tmp_path: Path) -> None:
    model = ResetPPO(
        "MlpLstmPolicy",
        vec_env("box", spaces.Discrete(2)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"),
    )
    with pytest.raises(ValueError, match=message):
        export_onnx(model, tmp_path / "x.onnx", **kwargs)


def test_cli_in_a_subprocess(tmp_path: Path) -> None:
    """``python -m sb3_reset_ppo.export`` with the ML-Agents layout; the algorithm read from the zip."""
    model = ResetPPO(
        "MlpGruPolicy",
        vec_env("box", spaces.Discrete(2)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Gru", 1, "Mlp"),
    )
    model.save(tmp_path / "model")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sb3_reset_ppo.export",
            str(tmp_path / "model.zip"),
            str(tmp_path / "out.onnx"),
            "--layout",
            "mlagents",
            "--opset",
            "15",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ResetPPO" in result.stdout and "out.onnx" in result.stdout
    metadata = read_metadata(tmp_path / "out.onnx")
    assert (metadata["algorithm"], metadata["layout"], metadata["opset"]) == ("ResetPPO", "mlagents", "15")
    assert unity_failures(tmp_path / "out.onnx", behavior_parameters(model.observation_space, model.action_space)) == []


# ---------------------------------------------------------------------------------------------- the torch-free example


def test_torch_free_example_plays_as_evaluate_policy(tmp_path: Path) -> None:
    """
    examples/onnx_play.py, with torch made unimportable, plays a briefly trained CueRecall model's exported file to
    the very returns of SB3's ``evaluate_policy`` (deterministic, one env, the same seed), episode by episode.
    """
    model = ResetPPO(
        "MlpLstmPolicy",
        make_vec_env("CueRecall-v0", n_envs=4, seed=0),
        n_steps=64,
        batch_size=64,
        policy_kwargs={"lstm_hidden_size": 16, "net_arch": [16]},
        seed=0,
    )
    model.learn(2048)
    model.save(tmp_path / "cue")
    export_main([str(tmp_path / "cue.zip"), str(tmp_path / "cue.onnx")])
    episodes, seed = 40, 123
    returns, _ = evaluate_policy(
        model, make_vec_env("CueRecall-v0", n_envs=1, seed=seed), n_eval_episodes=episodes, return_episode_rewards=True
    )
    code = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = ['onnx_play.py', {str(tmp_path / 'cue.onnx')!r}, '--episodes', '{episodes}', '--seed', '{seed}', "
        "'--json']; runpy.run_path('examples/onnx_play.py', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr
    played = json.loads(result.stdout)
    assert isinstance(returns, list)
    assert played["returns"] == [float(value) for value in returns]
    assert played["mean_return"] == pytest.approx(float(np.mean(returns)))
    # Episodes won and episodes lost: the sequence of returns tells policies apart
    assert set(played["returns"]) == {0.0, 1.0}
