"""
The export matrix: every combination of a covering array of the model's and ``export_onnx``'s settings
(``tests/oracles/export_matrix.py``: every pair of values in ``make test``, every triple in ``make test-matrix``) is exported
and played through onnxruntime beside ``model.predict(..., deterministic=True)`` over multi-episode rollouts of 2
envs, each layout fed as its engine feeds it (raw observations where the graph holds the ``VecNormalize``); every
``mlagents`` file first passes Unity's loader checks (``tests/oracles/unity_loader.py``):

- float32: the file runs on its own memory, never copied from ``predict``; every step the same actions (continuous
  within 1e-5) and the same memory (within 1e-5; an attention memory's count, and its positions of the episode,
  those attended to: an engine zeroes the others at an episode start, ``predict`` masks them);
- float16: every step is fed ``predict``'s memory (the differences would otherwise feed back), the memory and a
  continuous action within 2e-2, and each discrete sub-action one whose logit (a float32 file's, fed the same)
  is within 5e-2 of the largest.
"""

import inspect
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from export_matrix import (
    EXPORT_OPTIONS,
    OPTIONS,
    Combination,
    allowed,
    attended_memory,
    build,
    combinations,
    feed,
    initial_memory,
    parse,
    vec_env,
)
from matrix import uncovered_pairs
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from test_export import ROOT, random_masks, scientific, session
from unity_loader import behavior_parameters, unity_failures

from sb3_reset_ppo.export import export_onnx, export_spec, read_metadata
from sb3_reset_ppo.export.onnx_export import MLAGENTS_OPSET

# torch's own notes while its dynamo exporter traces nn.LSTM/nn.GRU (deprecations inside torch, its flat weights)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore:The tensor attributes:UserWarning")

COMBINATIONS = combinations()
N_STEPS = 12
# float16 (see the module's docstring)
HALF_ATOL = 2e-2
HALF_LOGIT_ATOL = 5e-2


def raw_obs(env: VecEnv, obs: Any) -> Any:
    """The observation before the ``VecNormalize``: what the engine gives a file that holds the normalisation."""
    return env.get_original_obs() if isinstance(env, VecNormalize) else obs


def near_argmax(action: np.ndarray, logits: np.ndarray, branches: tuple[int, ...]) -> None:
    """Each sub-action's logit is within ``HALF_LOGIT_ATOL`` of its branch's largest (``logits``: float32's)."""
    chosen = action.reshape(len(action), -1)
    offsets = np.cumsum((0, *branches))
    rows = np.arange(len(action))
    for branch, (start, end) in enumerate(itertools.pairwise(offsets)):
        part = logits[:, start:end]
        assert (part[rows, chosen[:, branch]] >= part.max(axis=1) - HALF_LOGIT_ATOL).all(), (part, chosen[:, branch])


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[combination.id for combination in COMBINATIONS])
def test_combination_plays_as_predict(combination: Combination, tmp_path: Path) -> None:
    check_combination(combination, tmp_path)


def test_dynamo_writes_opset_15_with_two_layers(tmp_path: Path) -> None:
    """
    Cells of the whole matrix that the pairs miss: two layers' flat memory (ML-Agents' and Godot's, one code) through
    torch's dynamo exporter at opset 15, the ML-Agents layout's default (refused before: the memory's reshaped copies
    were Identity nodes, which the exporter's conversion from opset 18 cannot take below 16).
    """
    values = {**dict(zip(OPTIONS, COMBINATIONS[0].values, strict=True)), "cell": "Lstm", "n_layers": 2, "observation": "box"}
    values.update(layout="mlagents", dtype="float32", opset=15, exporter="dynamo", cell_ops="fused", vec_normalize=False)
    check_combination(Combination(tuple(values[name] for name in OPTIONS)), tmp_path)


def test_masked_attention_plays_as_predict_with_its_masks_in_float32(tmp_path: Path) -> None:
    """
    A cell of the whole matrix that the pairs miss: a maskable attention policy fed its masks in float32, so its
    actions are compared exactly (the pairs hold masked attention in float16 and in Godot's layout, which takes none).
    """
    values = {**dict(zip(OPTIONS, COMBINATIONS[0].values, strict=True)), "cell": "TrXL", "n_layers": 2, "masks": True}
    values.update(observation="box", action="multidiscrete", layout="mlagents", dtype="float32", opset=15)
    values.update(exporter="torchscript", cell_ops="elementary", vec_normalize=False)
    combination = Combination(tuple(values[name] for name in OPTIONS))
    assert allowed(dict(zip(OPTIONS, combination.values, strict=True)))
    check_combination(combination, tmp_path)


def check_combination(combination: Combination, tmp_path: Path) -> None:
    """Export ``combination`` and play it beside ``predict`` (see the module's docstring)."""
    model = build(combination)
    layout, half = combination["layout"], combination["dtype"] == "float16"
    vec_normalize = model.get_vec_normalize_env() if combination["vec_normalize"] else None
    path = export_onnx(model, tmp_path / "model.onnx", vec_normalize=vec_normalize, **combination.export_kwargs())
    assert json.loads(read_metadata(path)["vec_normalize"])["in_graph"] == combination["vec_normalize"]
    if layout == "mlagents":
        # Every ML-Agents file passes Unity's loader checks (tests/oracles/unity_loader.py, each naming its C# check),
        # but where the combination asks for what Unity cannot load (export_onnx warns then): an opset above 15, ONNX's
        # GRU
        failures = unity_failures(path, behavior_parameters(model.observation_space, model.action_space))
        refused = {
            "opset": combination["opset"] > MLAGENTS_OPSET,
            "GRU not supported": combination["cell"] == "Gru" and combination["cell_ops"] == "fused",
        }
        for what, expected in refused.items():
            assert any(what in failure for failure in failures) == expected, (what, failures)
        assert len(failures) == sum(refused.values()), failures
    spec = export_spec(model, layout)
    sess = session(path)
    names = [output.name for output in sess.get_outputs()]
    reference = None
    if half and spec.branches:
        # float32 logits, fed the same, for the float16 file's discrete actions
        reference_path = export_onnx(model, tmp_path / "reference.onnx", distribution=True, vec_normalize=vec_normalize)
        reference = session(reference_path)
    masked = combination["masks"] and layout != "godot"
    env = vec_env(combination, seed=10)
    obs: Any = env.reset()
    n_envs = env.num_envs
    memory = initial_memory(spec, n_envs)
    state: tuple[np.ndarray, ...] | None = None
    episode_start = np.ones(n_envs, dtype=bool)
    rng = np.random.default_rng(3)
    starts = 0
    for step in range(N_STEPS):
        masks = random_masks(rng, spec.branches, n_envs) if masked else None
        kwargs = {"action_masks": masks} if masks is not None else {}
        # float16: predict's memory entering the step (zeros at the first)
        entering = [part.copy() for part in state] if half and state is not None else memory
        if half and state is None:
            entering = [np.zeros_like(part) for part in memory]
        actions, state = model.predict(obs, state, episode_start, deterministic=True, **kwargs)
        assert state is not None
        raw = raw_obs(env, obs)
        inputs = feed(
            layout, spec, model.observation_space, raw, entering, episode_start, masks, np.float16 if half else np.float32
        )
        action, memory = parse(layout, spec, dict(zip(names, sess.run(None, inputs), strict=True)), actions.shape)
        message = f"step {step}"
        if not half:
            if spec.branches:
                np.testing.assert_array_equal(action, actions, err_msg=message)
            else:
                np.testing.assert_allclose(action, actions, rtol=0, atol=1e-5, err_msg=message)
            for ours, theirs in zip(attended_memory(memory, spec), attended_memory(state, spec), strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5, err_msg=message)
        else:
            for ours, theirs in zip(attended_memory(memory, spec), attended_memory(state, spec), strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=0, atol=HALF_ATOL, err_msg=message)
            if reference is None:
                np.testing.assert_allclose(action.astype(np.float32), actions, rtol=0, atol=HALF_ATOL, err_msg=message)
            else:
                plain = export_spec(model)
                (logits,) = reference.run(
                    ["logits"], feed("plain", plain, model.observation_space, raw, entering, episode_start, masks)
                )
                near_argmax(action, logits, spec.branches)
        obs, _, dones, _ = env.step(actions)
        episode_start = dones
        starts += int(dones.sum()) if step < N_STEPS - 1 else 0
    # Episodes started inside the rollout, with memory to clear
    assert starts >= n_envs
    assert np.abs(memory[0]).max() > 1e-3


def test_export_options_are_export_onnx_arguments() -> None:
    # Each value of EXPORT_OPTIONS is passed to export_onnx as it is: a new value (or argument) is one line
    assert set(EXPORT_OPTIONS) <= set(inspect.signature(export_onnx).parameters)


def test_the_export_matrix_covers_every_allowed_pair() -> None:
    # The covering array's promise, by brute force: every pair of values of two options that the constraints allow
    assert uncovered_pairs(OPTIONS, COMBINATIONS, allowed) == []
    assert all(allowed(dict(zip(OPTIONS, c.values, strict=True))) for c in COMBINATIONS)


def test_the_docs_state_the_export_matrix_as_it_is() -> None:
    # docs/guide/reliability.md states the number of combinations of each strength
    root = Path(__file__).resolve().parents[2]
    text = " ".join((root / "docs" / "guide" / "reliability.md").read_text().split())
    assert f"{len(combinations(2))} combinations in `make test`, {len(combinations(3))} in `make test-matrix`" in text


def test_the_internals_page_states_the_float16_tolerances_checked_here() -> None:
    text = " ".join((ROOT / "docs" / "guide" / "deploy_internals.md").read_text().split())
    stated = f"within {scientific(HALF_ATOL)}, each discrete sub-action within {scientific(HALF_LOGIT_ATOL)} of the largest"
    assert stated in text
