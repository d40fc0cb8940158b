"""
ONNX export of attention-memory policies (``MlpTrXLPolicy``, ...): the exported step, run by onnxruntime on its own
memory beside ``model.predict(..., deterministic=True)`` over multi-episode rollouts of several envs, gives the same
actions, the same memory and the same count of valid positions at every step. The layouts' flat memory (ML-Agents',
Godot's) is played in the export matrix (``tests/export/test_export_matrix.py``).
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from test_export import onnx_obs, randomise, session, vec_env

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.attention import attention_mask
from sb3_reset_ppo.export import export_onnx, export_spec, read_metadata
from sb3_reset_ppo.export.__main__ import main as export_main
from sb3_reset_ppo.export.attention import single_slot_mask

pytest.importorskip("onnxruntime")

MEMORY_LENGTH = 3
DIM = 8
N_LAYERS = 2
# Episodes of 1 to 6 steps (test_export's envs) against a memory of 3: shorter and longer than the memory
N_STEPS = 24


def attention_model(kind: str, obs_kind: str, action_space: spaces.Space, **policy_kwargs: Any) -> ResetPPO:
    """A tiny attention-memory model with random weights of unit gain."""
    kwargs: dict[str, Any] = {
        "memory_length": MEMORY_LENGTH,
        "trxl_dim": DIM,
        "n_trxl_layers": N_LAYERS,
        "n_attention_heads": 2,
        "net_arch": [8],
        **policy_kwargs,
    }
    if kind == "Cnn":
        kwargs["features_extractor_kwargs"] = {"features_dim": 8}
    if kind == "MultiInput":
        kwargs["features_extractor_kwargs"] = {"cnn_output_dim": 8}
    model = ResetPPO(f"{kind}TrXLPolicy", vec_env(obs_kind, action_space), n_steps=16, batch_size=16, policy_kwargs=kwargs)
    randomise(model)
    return model


@pytest.mark.parametrize("memory_length", [1, 2, 5])
def test_single_slot_mask_is_the_window_mask_of_one_slot(memory_length: int) -> None:
    # Every count 0 .. K (and above K, which no step writes) with and without an episode start
    counts = th.arange(memory_length + 2).repeat(2)
    starts = th.cat([th.zeros(memory_length + 2), th.ones(memory_length + 2)])
    expected = attention_mask(starts[:, None], counts, memory_length)
    after_rule = th.where(starts > 0.5, th.zeros_like(counts), counts)
    assert th.equal(single_slot_mask(after_rule, memory_length), expected)
    assert th.equal(single_slot_mask(after_rule.float(), memory_length), expected)


# (policy kind, observation kind, action space, positional encoding, gated): every kind, encoding and gate setting
CASES = [
    ("Mlp", "box", spaces.Discrete(3), "none", True),
    ("Mlp", "box", spaces.Box(-1.0, 1.0, (2,)), "learned", False),
    ("Cnn", "image", spaces.MultiDiscrete([2, 3]), "sinusoidal", True),
    ("MultiInput", "dict", spaces.Box(-1.0, 1.0, (2,)), "sinusoidal", False),
    ("MultiInput", "dict", spaces.Discrete(3), "learned", True),
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=[
        f"{kind}-{type(action).__name__}-{encoding}-{'gated' if gated else 'residual'}"
        for kind, _, action, encoding, gated in CASES
    ],
)
def test_step_by_step_matches_predict(case: tuple, tmp_path: Path) -> None:
    kind, obs_kind, action_space, encoding, gated = case
    model = attention_model(kind, obs_kind, action_space, positional_encoding=encoding, gated=gated)
    sess = session(export_onnx(model, tmp_path / "model.onnx"))
    env = vec_env(obs_kind, action_space)
    obs: Any = env.reset()
    n_envs = env.num_envs
    memory = np.zeros((MEMORY_LENGTH, n_envs, N_LAYERS, DIM), np.float32)
    n_valid = np.zeros((1, n_envs), np.int64)
    state: tuple[np.ndarray, ...] | None = None
    episode_start = np.ones(n_envs, dtype=bool)
    full_memory = masked_reset = 0
    for step in range(N_STEPS):
        # Episodes longer than the memory (its oldest position dropped), episode starts with a memory to mask
        full_memory += int(((n_valid[0] == MEMORY_LENGTH) & ~episode_start).sum())
        masked_reset += int(((n_valid[0] > 0) & episode_start).sum())
        feed = onnx_obs(obs, model.observation_space, transpose_images=True)
        feed.update(memory=memory, n_valid=n_valid, episode_start=episode_start.astype(np.float32))
        actions, state = model.predict(obs, state, episode_start, deterministic=True)
        assert state is not None
        action, memory, n_valid = sess.run(["action", "memory_out", "n_valid_out"], feed)
        message = f"step {step}"
        if isinstance(action_space, spaces.Box):
            np.testing.assert_allclose(action, actions, rtol=0, atol=1e-5, err_msg=message)
        else:
            np.testing.assert_array_equal(action, actions, err_msg=message)
        np.testing.assert_allclose(memory, state[0], rtol=0, atol=1e-5, err_msg=message)
        assert n_valid.dtype == np.int64
        np.testing.assert_array_equal(n_valid, state[1], err_msg=message)
        obs, _, episode_start, _ = env.step(actions)
    assert full_memory > 0 and masked_reset > 0, (full_memory, masked_reset)


def test_float16_follows_predict(tmp_path: Path) -> None:
    """Fed the same memory (random, every count, episode starts), float16 within docs/guide/deploy.md's 1e-2."""
    model = attention_model("Mlp", "box", spaces.Box(-1.0, 1.0, (2,)), gated=True)
    sess = session(export_onnx(model, tmp_path / "half.onnx", dtype="float16"))
    rng = np.random.default_rng(0)
    batch = 32
    memory = rng.normal(size=(MEMORY_LENGTH, batch, N_LAYERS, DIM)).astype(np.float32)
    n_valid = rng.integers(0, MEMORY_LENGTH + 1, size=(1, batch))
    obs = rng.uniform(-2, 2, (batch, 3)).astype(np.float32)
    starts = rng.random(batch) < 0.3
    actions, state = model.predict(obs, (memory, n_valid), starts, deterministic=True)
    assert state is not None
    new_memory, new_valid = state
    feed: dict[str, np.ndarray] = {"obs": obs, "memory": memory, "n_valid": n_valid}
    feed["episode_start"] = starts.astype(np.float32)
    half = {name: value if name == "n_valid" else value.astype(np.float16) for name, value in feed.items()}
    action, memory_out, valid_out = sess.run(["action", "memory_out", "n_valid_out"], half)
    np.testing.assert_array_equal(valid_out, new_valid)
    np.testing.assert_allclose(memory_out.astype(np.float32), new_memory, rtol=0, atol=1e-2)
    np.testing.assert_allclose(action.astype(np.float32), actions, rtol=0, atol=1e-2)


def test_metadata_and_command_line(tmp_path: Path) -> None:
    model = attention_model("Mlp", "box", spaces.Discrete(3))
    model.save(tmp_path / "model.zip")
    path = export_main([str(tmp_path / "model.zip"), str(tmp_path / "plain.onnx"), "--no-vec-normalize"])
    memory = json.loads(read_metadata(path)["memory"])
    assert memory["cell"] == "TrXL" and memory["tensors"] == ["memory", "n_valid"]
    assert memory["memory_length"] == MEMORY_LENGTH
    assert memory["shape"] == {"memory": ["memory_length", "batch", "n_layers", "hidden_size"], "n_valid": [1, "batch"]}
    assert read_metadata(path)["policy"] == "TrXLActorCriticPolicy"
    godot = export_onnx(model, tmp_path / "godot.onnx", layout="godot")
    flat = json.loads(read_metadata(godot)["memory"])
    assert flat["memory_size"] == MEMORY_LENGTH * N_LAYERS * DIM + 1 == export_spec(model, "godot").memory_size
    assert flat["shape"] == ["batch", flat["memory_size"]]
    inputs = {value.name: value.shape for value in session(godot).get_inputs()}
    assert inputs["state_ins"] == ["batch", flat["memory_size"]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cell_ops": "fused"}, r"cell_ops='fused' needs an LSTM or GRU.*use cell_ops='auto' or 'elementary'"),
        ({"exporter": "dynamo", "opset": 17}, r"exporter='dynamo' with attention memory needs opset >= 18, got 17"),
    ],
)
def test_refusals_say_why(kwargs: dict[str, Any], message: str, tmp_path: Path) -> None:
    model = attention_model("Mlp", "box", spaces.Discrete(3))
    with pytest.raises(ValueError, match=message):
        export_onnx(model, tmp_path / "x.onnx", **kwargs)
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.slow
def test_dynamo_exporter_at_opset_18(tmp_path: Path) -> None:
    model = attention_model("Mlp", "box", spaces.Discrete(3), gated=True)
    path = export_onnx(model, tmp_path / "dynamo.onnx", exporter="dynamo", opset=18)
    reference = session(export_onnx(model, tmp_path / "torchscript.onnx"))
    rng = np.random.default_rng(0)
    feed = {
        "obs": rng.normal(size=(4, 3)).astype(np.float32),
        "memory": rng.normal(size=(MEMORY_LENGTH, 4, N_LAYERS, DIM)).astype(np.float32),
        "n_valid": np.array([[0, 1, 3, 2]]),
        "episode_start": np.array([0, 0, 0, 1], np.float32),
    }
    for ours, theirs in zip(session(path).run(None, feed), reference.run(None, feed), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
