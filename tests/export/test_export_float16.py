"""
float16 export of every action space, with and without action masks: the masked logit is one float16
holds (sb3-contrib's -1e8 overflowed float16, so every masked float16 export raised), and the file follows
``predict`` within the tolerance the deploy pages give (1e-2 per step, fed the same memory).
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from test_export import HIDDEN, ROOT, random_masks, randomise, scientific, session, tiny_kwargs, vec_env

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import export_onnx, export_spec

pytest.importorskip("onnxruntime")

# docs/guide/deploy.md and deploy_reference.md, float16: per step within 1e-2 of predict, fed the same memory
TOLERANCE = 1e-2
BATCH = 64
ACTION_SPACES = {
    "Discrete": spaces.Discrete(5),
    "MultiDiscrete": spaces.MultiDiscrete([3, 4]),
    "MultiBinary": spaces.MultiBinary(3),
    "Box": spaces.Box(-1.0, 1.0, (2,)),
}
CASES = [(name, masked) for name in ACTION_SPACES for masked in (False, True) if not (name == "Box" and masked)]


def branch_margins(logits: np.ndarray, branches: tuple[int, ...]) -> np.ndarray:
    """Per row, the smallest gap between a sub-action's two highest logits: ``(batch,)``."""
    margins = []
    for part in np.split(logits, np.cumsum(branches)[:-1], axis=1):
        top = np.sort(part, axis=1)[:, -2:]
        margins.append(top[:, 1] - top[:, 0])
    return np.min(margins, axis=0)


@pytest.mark.parametrize(("action", "masked"), CASES, ids=[f"{name}-{'masked' if m else 'unmasked'}" for name, m in CASES])
def test_float16_matches_predict(action: str, masked: bool, tmp_path: Path) -> None:
    action_space = ACTION_SPACES[action]
    algorithm = MaskableResetPPO if masked else ResetPPO
    model = algorithm(
        "MlpLstmPolicy",
        vec_env("box", action_space),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Lstm", 2, "Mlp"),
    )
    randomise(model)
    half = session(export_onnx(model, tmp_path / "half.onnx", dtype="float16", distribution=True))
    full = session(export_onnx(model, tmp_path / "full.onnx", distribution=True))
    spec = export_spec(model)
    rng = np.random.default_rng(0)
    state = tuple(rng.normal(size=(2, BATCH, HIDDEN)).astype(np.float32) * 0.5 for _ in range(2))
    obs = rng.uniform(-5, 5, (BATCH, 3)).astype(np.float32)
    starts = rng.random(BATCH) < 0.3
    feed: dict[str, np.ndarray] = {"obs": obs, "h": state[0], "c": state[1], "episode_start": starts.astype(np.float32)}
    kwargs: dict[str, Any] = {}
    if masked:
        masks = random_masks(rng, spec.branches, BATCH)
        feed["action_masks"] = masks.astype(np.float32)
        kwargs["action_masks"] = masks
    actions, new_state = model.predict(obs, state, starts, deterministic=True, **kwargs)
    assert new_state is not None
    outputs = half.run(None, {name: value.astype(np.float16) for name, value in feed.items()})
    action_out, h, c, *parameters = outputs
    assert all(np.isfinite(value.astype(np.float32)).all() for value in (h, c, *parameters))
    np.testing.assert_allclose(h.astype(np.float32), new_state[0], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(c.astype(np.float32), new_state[1], rtol=0, atol=TOLERANCE)
    if not spec.branches:
        np.testing.assert_allclose(action_out.astype(np.float32), actions, rtol=0, atol=TOLERANCE)
        return
    (logits32,) = full.run(["logits"], feed)
    (logits16,) = parameters
    if masked:
        allowed = feed["action_masks"] > 0.5
        # The masked logit is float16's lowest finite value; the allowed ones follow the float32 file's
        assert (logits16[~allowed] == np.finfo(np.float16).min).all()
        np.testing.assert_allclose(logits16[allowed].astype(np.float32), logits32[allowed], rtol=0, atol=TOLERANCE)
        offsets = np.cumsum((0,) + spec.branches[:-1])
        chosen = action_out.reshape(BATCH, -1)
        for branch, offset in enumerate(offsets):
            assert allowed[np.arange(BATCH), offset + chosen[:, branch]].all(), "a masked action was chosen"
    else:
        np.testing.assert_allclose(logits16.astype(np.float32), logits32, rtol=0, atol=TOLERANCE)
    # predict's action wherever float32's two best logits are further apart than float16 can blur
    clear = branch_margins(logits32, spec.branches) > 2 * TOLERANCE
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(action_out.reshape(BATCH, -1)[clear], actions.reshape(BATCH, -1)[clear])


@pytest.mark.parametrize("page", ["deploy.md", "deploy_reference.md"])
def test_the_deploy_pages_state_the_tolerance_checked_here(page: str) -> None:
    text = " ".join((ROOT / "docs" / "guide" / page).read_text().split())
    assert f"within {scientific(TOLERANCE)} of `predict`" in text
