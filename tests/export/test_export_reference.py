"""
A second, independent runtime: ONNX's reference evaluator (``onnx.reference.ReferenceEvaluator``, numpy
written from the operator specifications, LSTM and GRU included) runs the step-by-step equivalence of
``tests/export/test_export.py`` on a sample of its cases, and of the other layouts and options, so that no result rests on
one runtime's quirks (onnxruntime's fused kernels). The reference evaluator is slow: a few small cases.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from export_matrix import OPTIONS, Combination, build, feed, parse, vec_env
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecNormalize
from test_export import CASES, case_id, random_masks, randomise, side_by_side, tiny_kwargs
from test_export import vec_env as export_vec_env

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import export_onnx, export_spec

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

N_STEPS = 12


class ReferenceSession:
    """onnxruntime's ``run(names, feed)`` over ONNX's reference evaluator (``names=None``: every output)."""

    def __init__(self, path: Path) -> None:
        self.evaluator = ReferenceEvaluator(onnx.load(str(path)))
        self.output_names = [output.name for output in onnx.load(str(path)).graph.output]

    def run(self, names: list[str] | None, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.evaluator.run(names, feed))


# Every policy kind, both cells, both opsets, the three action kinds, one and two layers
SAMPLE = [CASES[index] for index in (0, 1, 3, 5, 9)]


@pytest.mark.parametrize("case", SAMPLE, ids=[case_id(case) for case in SAMPLE])
def test_step_by_step_matches_predict_in_the_reference_evaluator(case: tuple, tmp_path: Path) -> None:
    cell, layers, kind, obs_kind, action_space, opset = case
    model = ResetPPO(
        f"{kind}{cell}Policy",
        export_vec_env(obs_kind, action_space),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs(cell, layers, kind),
        seed=0,
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "policy.onnx", opset=opset, channels_last=kind == "Cnn")
    env = export_vec_env(obs_kind, action_space, seed=10)
    starts = side_by_side(model, path, env, transpose_images=kind == "MultiInput", n_steps=N_STEPS, runtime=ReferenceSession)
    assert starts >= 3


def test_random_masks_in_the_reference_evaluator(tmp_path: Path) -> None:
    model = MaskableResetPPO(
        "MlpGruPolicy",
        export_vec_env("box", spaces.MultiDiscrete([3, 2])),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Gru", 2, "Mlp"),
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "maskable.onnx")
    env = export_vec_env("box", spaces.MultiDiscrete([3, 2]), seed=7)
    side_by_side(model, path, env, masks_seed=1, n_steps=N_STEPS, runtime=ReferenceSession)


@pytest.mark.parametrize(
    "values",
    [
        # ML-Agents: a GRU as elementary operators (its default there), masks, a Dict under VecNormalize
        {"cell": "Gru", "n_layers": 2, "observation": "dict", "action": "multidiscrete", "masks": True},
        # Godot: an LSTM's [h | c], Box observations under VecNormalize
        {"cell": "Lstm", "n_layers": 2, "observation": "box", "action": "box", "masks": False},
    ],
    ids=["mlagents-Gru-elementary-dict-masks-vecnormalize", "godot-Lstm-box-vecnormalize"],
)
def test_engine_layouts_in_the_reference_evaluator(values: dict[str, Any], tmp_path: Path) -> None:
    layout = "mlagents" if values["masks"] else "godot"
    chosen = {**values, "vec_normalize": True, "layout": layout, "dtype": "float32", "opset": 15}
    chosen.update(exporter="torchscript", cell_ops="auto")
    combination = Combination(tuple(chosen[name] for name in OPTIONS))
    model = build(combination)
    path = export_onnx(
        model, tmp_path / "engine.onnx", vec_normalize=model.get_vec_normalize_env(), **combination.export_kwargs()
    )
    reference = ReferenceSession(path)
    spec = export_spec(model, layout)
    env = vec_env(combination, seed=10)
    assert isinstance(env, VecNormalize)
    obs: Any = env.reset()
    memory = [np.zeros((spec.n_layers, env.num_envs, spec.hidden_size), np.float32) for _ in range(spec.n_memory)]
    state: tuple[np.ndarray, ...] | None = None
    episode_start = np.ones(env.num_envs, dtype=bool)
    rng = np.random.default_rng(0)
    for step in range(N_STEPS):
        masks = random_masks(rng, spec.branches, env.num_envs) if values["masks"] else None
        kwargs = {"action_masks": masks} if masks is not None else {}
        actions, state = model.predict(obs, state, episode_start, deterministic=True, **kwargs)
        assert state is not None
        inputs = feed(layout, spec, model.observation_space, env.get_original_obs(), memory, episode_start, masks)
        outputs = dict(zip(reference.output_names, reference.run(None, inputs), strict=True))
        action, memory = parse(layout, spec, outputs, actions.shape)
        np.testing.assert_allclose(action, actions, rtol=0, atol=1e-5, err_msg=f"step {step}")
        for ours, theirs in zip(memory, state, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5, err_msg=f"step {step}")
        obs, _, episode_start, _ = env.step(actions)
