"""
Files Unity loads: every ``mlagents`` file passes the checks of Unity ML-Agents' C# loader and of Sentis's
importer, re-implemented in ``tests/oracles/unity_loader.py`` (each failure names the C# check it mirrors), then plays as
Unity plays it (zeros for a new episode, ``recurrent_out`` stored per agent and fed back, images in [0, 1],
``action_masks`` 1 = allowed) to ``predict``'s actions and memory, step by step. A GRU is written as elementary
operators (no Sentis version implements ONNX's ``GRU``); an LSTM keeps ONNX's ``LSTM``, which Sentis implements.
"""

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from test_export import HIDDEN, N_ENVS, N_STEPS, random_masks, randomise, session, side_by_side, tiny_kwargs, vec_env
from unity_loader import (
    BehaviorParameters,
    behavior_parameters,
    check_static,
    unity_failures,
    unity_rollout_feed,
)

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import export_onnx, export_spec, read_metadata

pytest.importorskip("onnxruntime")

RECURRENT_OPERATORS = {"LSTM", "GRU", "RNN", "Loop", "Scan", "If"}

# (cell, layers, policy kind, observation kind, action space, masked, dtype): both cells, the four action spaces,
# vector, Discrete, MultiDiscrete, image and Dict observations, MaskableResetPPO's masks, float16
CASES: list[tuple[str, int, str, str, spaces.Space, bool, str]] = [
    ("Lstm", 1, "Mlp", "box", spaces.Discrete(3), False, "float32"),
    ("Gru", 2, "Mlp", "box", spaces.MultiDiscrete([2, 3]), False, "float32"),
    ("Gru", 1, "Mlp", "discrete", spaces.MultiBinary(2), False, "float32"),
    ("Lstm", 2, "Mlp", "multidiscrete", spaces.Box(-1.0, 1.0, (2,)), False, "float32"),
    ("Gru", 1, "Cnn", "image", spaces.Discrete(3), False, "float32"),
    ("Lstm", 1, "Cnn", "image", spaces.Box(-1.0, 1.0, (2,)), False, "float32"),
    ("Gru", 2, "MultiInput", "dict", spaces.Box(-1.0, 1.0, (2,)), False, "float32"),
    ("Lstm", 2, "MultiInput", "dict", spaces.MultiDiscrete([3, 2]), False, "float32"),
    ("Gru", 1, "MultiInput", "dict", spaces.MultiBinary(3), False, "float32"),
    ("Gru", 2, "Mlp", "box", spaces.Discrete(4), True, "float32"),
    ("Lstm", 1, "Mlp", "box", spaces.MultiDiscrete([3, 2]), True, "float32"),
    ("Gru", 1, "Mlp", "box", spaces.Discrete(3), True, "float16"),
    ("Lstm", 1, "MultiInput", "dict", spaces.Box(-1.0, 1.0, (2,)), False, "float16"),
]


def case_id(case: tuple) -> str:
    cell, layers, kind, obs, action, masked, dtype = case
    return f"{kind}{cell}-{layers}layer-{obs}-{type(action).__name__}{'-masked' if masked else ''}-{dtype}"


def make_model(cell: str, layers: int, kind: str, obs_kind: str, action_space: spaces.Space, masked: bool) -> Any:
    algorithm = MaskableResetPPO if masked else ResetPPO
    model = algorithm(
        f"{kind}{cell}Policy",
        vec_env(obs_kind, action_space),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs(cell, layers, kind),
        seed=0,
    )
    randomise(model)
    return model


def unity_observations(obs: Any, observation_space: spaces.Space) -> list[np.ndarray]:
    """
    What Unity's sensors write, in Unity's order (a ``Dict``'s keys, the sensors named after them): images
    channel-first in [0, 1] (``ObservationWriter.WriteTexture`` divides by 255, in float32 as ``predict`` does), a
    ``Discrete`` index as one float, the rest as floats.
    """
    subspaces = dict(observation_space.spaces) if isinstance(observation_space, spaces.Dict) else {None: observation_space}
    values = []
    for key, subspace in subspaces.items():
        raw = np.asarray(obs[key] if key is not None else obs)
        if is_image_space(subspace):
            if raw.shape[1:] != subspace.shape:
                raw = raw.transpose(0, 3, 1, 2)  # the env's (N, H, W, C) -> (N, C, H, W)
            values.append(raw.astype(np.float32) / np.float32(255))
        else:
            values.append(raw.astype(np.float32).reshape(len(raw), -1))
    return values


def play_as_unity(model: Any, path: Path, obs_kind: str, action_space: spaces.Space, masked: bool) -> int:
    """
    Play ``model``'s env through the file as Unity's ModelRunner does, beside ``predict``: the memory of an agent
    starting an episode is zeros (RecurrentInputGenerator: none stored), ``recurrent_out`` is stored per agent and fed
    back (MemoryOutputApplier), masks are 1 where allowed (ActionMaskInputGenerator; all 1 without masking). Assert
    ``predict``'s actions and memory (``[h | c]``) every step.

    :return: Episode starts after the first step (the rollout crosses episodes)
    """
    sess = session(path)
    names = [output.name for output in sess.get_outputs()]
    spec = export_spec(model, "mlagents")
    env = vec_env(obs_kind, action_space, seed=11)
    obs: Any = env.reset()
    memory = np.zeros((N_ENVS, 1, spec.memory_size), np.float32)
    episode_start = np.ones(N_ENVS, dtype=bool)
    state: tuple[np.ndarray, ...] | None = None
    rng = np.random.default_rng(1)
    starts = 0
    width = spec.n_layers * HIDDEN
    for step in range(N_STEPS):
        memory[episode_start] = 0.0
        masks = None
        if spec.branches:
            masks = random_masks(rng, spec.branches, N_ENVS) if masked else np.ones((N_ENVS, spec.mask_dims), bool)
        outputs = dict(
            zip(
                names,
                sess.run(None, unity_rollout_feed(unity_observations(obs, model.observation_space), masks, memory)),
                strict=True,
            )
        )
        kwargs = {"action_masks": masks} if masked else {}
        actions, state = model.predict(obs, state, episode_start, deterministic=True, **kwargs)
        assert state is not None
        if spec.branches:
            chosen = outputs["deterministic_discrete_actions"]
            np.testing.assert_array_equal(chosen.reshape(actions.shape), actions, err_msg=f"actions differ at step {step}")
            np.testing.assert_array_equal(outputs["discrete_actions"], chosen)
        else:
            chosen = outputs["deterministic_continuous_actions"]
            np.testing.assert_allclose(chosen.reshape(actions.shape), actions, rtol=0, atol=1e-5)
        memory = outputs["recurrent_out"]
        for index, theirs in enumerate(state):
            # [h | c], each (batch, L * H) -> (batch, L, H) -> (L, batch, H)
            ours = memory[:, 0, index * width : (index + 1) * width].reshape(N_ENVS, spec.n_layers, HIDDEN).transpose(1, 0, 2)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5, err_msg=f"memory {index} differs at step {step}")
        obs, _, episode_start, _ = env.step(actions)
        starts += int(episode_start.sum()) if step < N_STEPS - 1 else 0
    return starts


@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_unity_loads_and_plays_every_mlagents_file(case: tuple, tmp_path: Path) -> None:
    cell, layers, kind, obs_kind, action_space, masked, dtype = case
    model = make_model(cell, layers, kind, obs_kind, action_space, masked)
    # The defaults: opset 15, a GRU as elementary operators, images channel-first in [0, 1]
    path = export_onnx(model, tmp_path / "unity.onnx", layout="mlagents", dtype=dtype)
    parameters = behavior_parameters(model.observation_space, model.action_space)
    assert unity_failures(path, parameters) == []
    proto = onnx.load(str(path))
    operators = {node.op_type for node in proto.graph.node}
    assert operators & RECURRENT_OPERATORS == ({"LSTM"} if cell == "Lstm" else set())
    metadata = read_metadata(path)
    assert (metadata["opset"], metadata["cell_ops"]) == ("15", "fused" if cell == "Lstm" else "elementary")
    if obs_kind in ("image", "dict"):
        assert "[0, 1]" in metadata["preprocessing"]
    if dtype == "float32":
        assert play_as_unity(model, path, obs_kind, action_space, masked) >= 2 * N_ENVS


def test_sensor_order_is_the_dict_key_order(tmp_path: Path) -> None:
    """``obs_i`` is the ``Dict``'s ``i``-th key (gymnasium sorts a dict's keys), listed in ``observation_keys``."""
    model = make_model("Gru", 1, "MultiInput", "dict", spaces.Discrete(2), False)
    path = export_onnx(model, tmp_path / "order.onnx", layout="mlagents")
    keys = read_metadata(path)["observation_keys"]
    assert keys == '["image", "vec"]'
    shapes = {value.name: value.shape for value in session(path).get_inputs()}
    assert shapes["obs_0"][1:] == list(model.observation_space["image"].shape)
    assert shapes["obs_1"][1:] == list(model.observation_space["vec"].shape)


@pytest.mark.parametrize("cell", ["Lstm", "Gru"])
def test_elementary_cells_match_predict(cell: str, tmp_path: Path) -> None:
    """``cell_ops="elementary"`` in the plain layout: no recurrent operator, the same actions and memory as predict."""
    model = make_model(cell, 2, "Mlp", "box", spaces.Discrete(3), False)
    path = export_onnx(model, tmp_path / "elementary.onnx", cell_ops="elementary")
    assert {node.op_type for node in onnx.load(str(path)).graph.node} & RECURRENT_OPERATORS == set()
    assert read_metadata(path)["cell_ops"] == "elementary"
    assert side_by_side(model, path, vec_env("box", spaces.Discrete(3), seed=4)) >= 2 * N_ENVS


def test_fused_gru_is_what_unity_refuses(tmp_path: Path) -> None:
    """The check sees ONNX's GRU, which Sentis does not import: the reason the default writes it elementary."""
    model = make_model("Gru", 1, "Mlp", "box", spaces.Discrete(3), False)
    # export_onnx says so when asked for it
    with pytest.warns(UserWarning, match="no Sentis or Inference Engine version implements"):
        path = export_onnx(model, tmp_path / "fused.onnx", layout="mlagents", cell_ops="fused")
    parameters = behavior_parameters(model.observation_space, model.action_space)
    assert check_static(path, parameters) == ["ONNXModelConverter.OnNode: GRU not supported by Sentis"]


def test_an_opset_unity_refuses_is_warned_about(tmp_path: Path) -> None:
    model = make_model("Lstm", 1, "Mlp", "box", spaces.Discrete(3), False)
    with pytest.warns(UserWarning, match=r"opset=17: Unity's Sentis imports opsets 7 to 15"):
        path = export_onnx(model, tmp_path / "opset17.onnx", layout="mlagents", opset=17)
    parameters = behavior_parameters(model.observation_space, model.action_space)
    assert check_static(path, parameters) == ["Sentis 'Import a model file': opset 17 is outside 7 to 15"]


def mutate(path: Path, out: Path, change: str) -> Path:
    """A copy of a good file with one thing Unity refuses."""
    proto = onnx.load(str(path))
    graph = proto.graph
    if change == "no version_number":
        graph.output.remove(next(value for value in graph.output if value.name == "version_number"))
    elif change == "dynamic memory width":
        recurrent_in = next(value for value in graph.input if value.name == "recurrent_in")
        recurrent_in.type.tensor_type.shape.dim[2].dim_param = "width"
    elif change == "fixed batch":
        obs = next(value for value in graph.input if value.name == "obs_0")
        obs.type.tensor_type.shape.dim[0].dim_value = 4
    elif change == "renamed input":
        for node in graph.node:
            node.input[:] = ["obs_9" if name == "obs_0" else name for name in node.input]
        next(value for value in graph.input if value.name == "obs_0").name = "obs_9"
    elif change == "opset 17":
        proto.opset_import[0].version = 17
    onnx.save(proto, str(out))
    return out


@pytest.mark.parametrize(
    ("change", "parameters", "message"),
    [
        ("no version_number", None, r"CheckExpectedTensors: required constant 'version_number'"),
        ("dynamic memory width", None, r"DynamicTensorShapeExtensions.ToArray: input 'recurrent_in'"),
        ("fixed batch", None, r"TensorUtils.ResizeTensor: input 'obs_0' \[4, 3\] has a fixed batch axis"),
        ("renamed input", None, r"CheckInputTensorPresence: no input for sensor 0"),
        ("opset 17", None, r"opset 17 is outside 7 to 15"),
        (
            None,
            BehaviorParameters(((4,),), 0, (3,)),
            r"CheckInputTensorShape: 'obs_0' is \['batch', 3\], the sensor gives \[4\]",
        ),
        (None, BehaviorParameters(((3,),), 0, (2, 2)), r"ActionMaskInputGenerator: action_masks"),
        (None, BehaviorParameters(((3,),), 2, ()), r"CheckContinuousActionOutputShape"),
    ],
    ids=["version", "dynamic-width", "fixed-batch", "renamed-input", "opset", "sensor-shape", "branches", "continuous"],
)
def test_the_checks_can_fail(change: str | None, parameters: BehaviorParameters | None, message: str, tmp_path: Path) -> None:
    """Each check sees what it should: a good file, changed in one way (or declared against other spaces), fails."""
    model = make_model("Lstm", 1, "Mlp", "box", spaces.Discrete(3), False)
    path = export_onnx(model, tmp_path / "good.onnx", layout="mlagents")
    good = behavior_parameters(model.observation_space, model.action_space)
    assert unity_failures(path, good) == []
    if change is not None:
        path = mutate(path, tmp_path / "changed.onnx", change)
    failures = unity_failures(path, parameters or good)
    assert any(re.search(message, failure) for failure in failures), failures


def test_channels_last_is_refused_for_unity(tmp_path: Path) -> None:
    model = make_model("Lstm", 1, "Cnn", "image", spaces.Discrete(3), False)
    with pytest.raises(ValueError, match=r"channels_last=True is not supported with layout='mlagents'.*\(batch, C, H, W\)"):
        export_onnx(model, tmp_path / "x.onnx", layout="mlagents", channels_last=True)
    assert not (tmp_path / "x.onnx").exists()


def test_default_opsets(tmp_path: Path) -> None:
    """15 for Unity (Sentis documents 7 to 15), 17 for the plain layout."""
    model = make_model("Lstm", 1, "Mlp", "box", spaces.Discrete(3), False)
    for layout, opset in (("mlagents", 15), ("plain", 17)):
        path = export_onnx(model, tmp_path / f"{layout}.onnx", layout=layout)
        assert onnx.load(str(path)).opset_import[0].version == opset
        assert read_metadata(path)["opset"] == str(opset)


def test_invalid_cell_ops(tmp_path: Path) -> None:
    model = make_model("Lstm", 1, "Mlp", "box", spaces.Discrete(3), False)
    with pytest.raises(ValueError, match=r"cell_ops must be one of \('auto', 'fused', 'elementary'\), got 'unrolled'"):
        export_onnx(model, tmp_path / "x.onnx", cell_ops="unrolled")
