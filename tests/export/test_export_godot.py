"""
The Godot RL Agents layout: a recurrent policy exported with ``layout="godot"`` runs as Godot RL Agents'
plugin, patched by ``docs/deploy/godot_plugin_memory.patch``, runs it (:class:`PatchedPlugin`, the plugin's C# and
GDScript in Python: per agent, batch 1, each ``get_obs()`` key a flat float tensor, ``state_ins`` fed back from
``state_outs`` and zeroed at an episode's first step, the action read from ``output`` as ``sync.gd`` reads it), and
plays multi-episode rollouts of several agents exactly as ``predict``.
"""

import functools
import json
import re
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from export_matrix import pack
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from stable_baselines3.common.vec_env import DummyVecEnv
from test_export import randomise, session

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import export_onnx, export_spec, read_metadata

ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "docs" / "deploy" / "godot_plugin_memory.patch"
HIDDEN = 8
N_AGENTS = 3
N_STEPS = 24


class PatchedPlugin:
    """
    Godot RL Agents' plugin (edbeeching/godot_rl_agents_plugin@bf5d6a2d) with the memory patch, running one model for
    several agents, in Python:

    - ``ONNXModel.new(path, 1)`` (``sync.gd``: batch 1); ``Initialize`` returns ``output``'s dimension 1; the patch's
      ``GetStateSize`` reads ``state_ins``'s dimension 1 (0 when ``state_ins`` is ``(batch,)``);
    - ``set_action_means_only``: an all-continuous action space whose sizes add up to that output size;
    - the patch's ``_run_with_memory``: an agent's memory is zeros at its first step and when ``get_done()`` is true
      before the step, else its last ``state_outs``; ``RunInferenceWithState`` feeds each ``get_obs()`` key as a float
      tensor ``(1, len)`` named by the key and the memory as ``state_ins`` ``(1, state_size)``, and reads the float
      outputs ``output`` and ``state_outs``;
    - ``_extract_action_dict`` with ``deterministic_inference``: per action key, in order, the index of the largest
      of a discrete key's ``size`` values (the first of equal ones), or a continuous key's values clamped to
      ``[-1, 1]``.

    :param path: The ONNX file
    :param action_space: The agent's ``get_action_space()``: ``{key: {"size": n, "action_type": ...}}``
    """

    def __init__(self, path: Path, action_space: dict[str, dict[str, Any]]) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        outputs = {output.name: output for output in self.session.get_outputs()}
        inputs = {value.name: value for value in self.session.get_inputs()}
        self.action_output_size = int(outputs["output"].shape[1])
        state_dims = inputs["state_ins"].shape
        self.state_size = int(state_dims[1]) if len(state_dims) == 2 else 0
        self.action_space = action_space
        continuous = [entry["size"] for entry in action_space.values() if entry["action_type"] == "continuous"]
        self.action_means_only = len(continuous) == len(action_space) and sum(continuous) == self.action_output_size
        self.states: dict[int, list[float]] = {}

    def decide(self, agent: int, obs: dict[str, list[float]], done: bool) -> dict[str, Any]:
        """One inference step of one agent: its action dictionary, as ``sync.gd`` hands it to ``set_action``."""
        assert self.state_size > 0, "a recurrent model: the patch's path"
        if done or agent not in self.states:
            self.states[agent] = [0.0] * self.state_size
        feed = {key: np.array(values, dtype=np.float32).reshape(1, len(values)) for key, values in obs.items()}
        feed["state_ins"] = np.array(self.states[agent], dtype=np.float32).reshape(1, self.state_size)
        output, state_outs = self.session.run(["output", "state_outs"], feed)
        assert output.dtype == state_outs.dtype == np.float32
        self.states[agent] = [float(value) for value in state_outs.ravel()]
        return self._extract_action_dict([float(value) for value in output.ravel()])

    def _extract_action_dict(self, action_array: list[float]) -> dict[str, Any]:
        index = 0
        result: dict[str, Any] = {}
        for key, entry in self.action_space.items():
            size = entry["size"]
            if entry["action_type"] == "discrete":
                largest, largest_index = -np.inf, 0
                for logit_index in range(size):
                    if action_array[index + logit_index] > largest:
                        largest, largest_index = action_array[index + logit_index], logit_index
                result[key] = largest_index
                index += size
            else:
                result[key] = [min(max(value, -1.0), 1.0) for value in action_array[index : index + size]]
                index += size if self.action_means_only else 2 * size
        return result


def godot_gym_action_space(action_space: dict[str, dict[str, Any]]) -> spaces.Space:
    """
    The SB3 action space godot_rl_agents (0.8.2: ``GodotEnv`` with ``convert_action_space=True``, its
    ``ActionSpaceProcessor``) makes of an agent's action space: a ``MultiDiscrete`` of the sizes when every key is
    discrete (one key too), a ``Box(-1, 1)`` of the sizes when every key is continuous.
    """
    entries = list(action_space.values())
    if all(entry["action_type"] == "discrete" for entry in entries):
        return spaces.MultiDiscrete([entry["size"] for entry in entries])
    assert all(entry["action_type"] == "continuous" for entry in entries)
    return spaces.Box(-1.0, 1.0, (sum(entry["size"] for entry in entries),), np.float32)


def to_gym_action(action: dict[str, Any], action_space: dict[str, dict[str, Any]], gym_space: spaces.Space) -> np.ndarray:
    """The plugin's action dictionary as the SB3 action of ``gym_space``."""
    values = [np.atleast_1d(np.asarray(action[key], dtype=np.float64)) for key in action_space]
    flat = np.concatenate(values)
    if isinstance(gym_space, spaces.Discrete):
        return flat.astype(np.int64)[0]
    return flat.astype(np.int64) if isinstance(gym_space, spaces.MultiDiscrete) else flat.astype(np.float32)


def make_env(observation_space: spaces.Space, action_space: spaces.Space, seed: int) -> gym.Env:
    env = RandomEpisodeEnv(action_space, max_length=6)
    env.observation_space = observation_space
    env.reset(seed=seed)
    return env


# Godot's observation spaces: a Dict of float Boxes in [-1, 1] (godot_rl_agents' GodotEnv), or a single Box
CASES = [
    ("Lstm", 2, spaces.Dict({"obs": spaces.Box(-1.0, 1.0, (6,))}), {"move": {"size": 3, "action_type": "discrete"}}),
    # The same key with a policy trained on Discrete(3), as a hand-written env gives it (godot_rl_agents 0.8.2 gives
    # MultiDiscrete([3]), the case above)
    (
        "Gru",
        1,
        spaces.Dict({"obs": spaces.Box(-1.0, 1.0, (6,))}),
        {"move": {"size": 3, "action_type": "discrete", "gym": "Discrete"}},
    ),
    (
        "Gru",
        1,
        spaces.Box(-1.0, 1.0, (5,)),
        {"steer": {"size": 2, "action_type": "continuous"}, "gas": {"size": 1, "action_type": "continuous"}},
    ),
    (
        "Lstm",
        1,
        spaces.Dict({"obs": spaces.Box(-1.0, 1.0, (4,)), "raycast": spaces.Box(-1.0, 1.0, (3,))}),
        {"turn": {"size": 2, "action_type": "discrete"}, "jump": {"size": 3, "action_type": "discrete"}},
    ),
    ("Gru", 2, spaces.Dict({"obs": spaces.Box(-1.0, 1.0, (4,))}), {"a": {"size": 2, "action_type": "continuous"}}),
]


@pytest.mark.parametrize(
    ("cell", "layers", "observation_space", "godot_actions"),
    CASES,
    ids=[
        "Lstm-2layer-one-discrete-key",
        "Gru-1layer-discrete",
        "Gru-1layer-box-obs-continuous",
        "Lstm-1layer-two-keys-multidiscrete",
        "Gru-2layer-box",
    ],
)
def test_patched_plugin_plays_as_predict(
    cell: str, layers: int, observation_space: spaces.Space, godot_actions: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    action_space = godot_gym_action_space(godot_actions)
    if any(entry.get("gym") == "Discrete" for entry in godot_actions.values()):
        action_space = spaces.Discrete(next(iter(godot_actions.values()))["size"])
    kind = "MultiInput" if isinstance(observation_space, spaces.Dict) else "Mlp"
    envs = DummyVecEnv([functools.partial(make_env, observation_space, action_space, seed) for seed in range(N_AGENTS)])
    model = ResetPPO(
        f"{kind}{cell}Policy",
        envs,
        n_steps=16,
        batch_size=16,
        policy_kwargs={"lstm_hidden_size": HIDDEN, "n_lstm_layers": layers, "net_arch": [8]},
        seed=0,
    )
    randomise(model)
    path = export_onnx(model, tmp_path / "godot.onnx", layout="godot")
    plugin = PatchedPlugin(path, godot_actions)
    spec = export_spec(model, "godot")
    assert plugin.state_size == spec.memory_size == (2 if cell == "Lstm" else 1) * layers * HIDDEN
    env = DummyVecEnv([functools.partial(make_env, observation_space, action_space, 100 + seed) for seed in range(N_AGENTS)])
    obs: Any = env.reset()
    state: tuple[np.ndarray, ...] | None = None
    dones = np.ones(N_AGENTS, dtype=bool)
    starts = 0
    for step in range(N_STEPS):
        # What each agent's get_obs() gives the plugin: a Dictionary of float Arrays
        per_agent = [
            {
                key: [float(v) for v in np.ravel(values[agent])]
                for key, values in (obs.items() if isinstance(obs, dict) else [("obs", obs)])
            }
            for agent in range(N_AGENTS)
        ]
        actions = [
            to_gym_action(plugin.decide(agent, per_agent[agent], bool(dones[agent])), godot_actions, action_space)
            for agent in range(N_AGENTS)
        ]
        expected, state = model.predict(obs, state, dones, deterministic=True)
        assert state is not None
        played = np.stack(actions)
        if isinstance(action_space, spaces.Box):
            np.testing.assert_allclose(played, expected, rtol=0, atol=1e-5, err_msg=f"step {step}")
        else:
            np.testing.assert_array_equal(played, expected, err_msg=f"step {step}")
        # The memory the plugin keeps is predict's, [h | c]
        np.testing.assert_allclose(np.array([plugin.states[a] for a in range(N_AGENTS)]), pack(list(state)), atol=1e-5)
        obs, _, dones, _ = env.step(played)
        starts += int(dones.sum()) if step < N_STEPS - 1 else 0
    assert starts >= N_AGENTS


def test_names_shapes_dtypes_and_metadata(tmp_path: Path) -> None:
    """Godot's names (a Dict's keys, ``state_ins``; ``output``, ``state_outs``), float32 throughout, the metadata."""
    observation_space = spaces.Dict(
        {"obs": spaces.Box(-1.0, 1.0, (6,)), "camera_2d": spaces.Box(0, 255, (36, 36, 1), np.uint8)}
    )
    model = MaskableResetPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([lambda: make_env(observation_space, spaces.MultiBinary(2), 0)]),
        n_steps=16,
        batch_size=16,
        policy_kwargs={
            "lstm_hidden_size": HIDDEN,
            "n_lstm_layers": 2,
            "net_arch": [8],
            "features_extractor_kwargs": {"cnn_output_dim": 8},
        },
    )
    path = export_onnx(model, tmp_path / "godot.onnx", layout="godot")
    sess = session(path)
    # The image flat (SB3's (C, H, W) order: channels_last=True takes Godot's (H, W, C)); no action_masks (the plugin
    # feeds none)
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        ("camera_2d", ["batch", 36 * 36], "tensor(float)"),
        ("obs", ["batch", 6], "tensor(float)"),
        ("state_ins", ["batch", 4 * HIDDEN], "tensor(float)"),
    ]
    # MultiBinary: (0, logit) per entry, a discrete key of size 2 each for the plugin
    assert [(o.name, o.shape, o.type) for o in sess.get_outputs()] == [
        ("output", ["batch", 4], "tensor(float)"),
        ("state_outs", ["batch", 4 * HIDDEN], "tensor(float)"),
    ]
    metadata = read_metadata(path)
    assert metadata["layout"] == "godot"
    memory = json.loads(metadata["memory"])
    assert (memory["tensors"], memory["parts"], memory["shape"], memory["memory_size"]) == (
        ["state_ins"],
        ["h", "c"],
        ["batch", "memory_size"],
        4 * HIDDEN,
    )
    assert json.loads(metadata["godot"])["plugin_patch"] == "docs/deploy/godot_plugin_memory.patch"
    assert json.loads(metadata["inputs"])["state_ins"] == ["batch", 4 * HIDDEN]


def test_what_the_plugin_cannot_run(tmp_path: Path) -> None:
    def model(key: str) -> ResetPPO:
        observation_space = spaces.Dict({key: spaces.Box(-1.0, 1.0, (2,))})
        env = DummyVecEnv([lambda: make_env(observation_space, spaces.Box(-2.0, 2.0, (2,)), 0)])
        return ResetPPO("MultiInputLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs={"lstm_hidden_size": HIDDEN})

    with pytest.raises(ValueError, match=r"dtype must be 'float32' with layout='godot'.*got torch.float16"):
        export_onnx(model("obs"), tmp_path / "x.onnx", layout="godot", dtype="float16")
    with pytest.raises(ValueError, match=r"observation key 'state_ins' is the Godot layout's memory input"):
        export_onnx(model("state_ins"), tmp_path / "x.onnx", layout="godot")
    with pytest.warns(UserWarning, match=r"clamps continuous actions to \[-1, 1\]"):
        export_onnx(model("obs"), tmp_path / "x.onnx", layout="godot")


def test_a_box_of_godot_rl_agents_warns_about_mixed_action_keys(tmp_path: Path) -> None:
    """godot_rl_agents (0.8.2) trains an agent that mixes continuous keys and a discrete key of size 2 on a Box(-1, 1)
    with one value per discrete key, where the plugin reads 2 logits: its Box is refused nothing, but warned about."""
    observation_space = spaces.Dict({"obs": spaces.Box(-1.0, 1.0, (2,))})

    def model(action_space: spaces.Space) -> ResetPPO:
        env = DummyVecEnv([lambda: make_env(observation_space, action_space, 0)])
        return ResetPPO("MultiInputLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs={"lstm_hidden_size": HIDDEN})

    with pytest.warns(UserWarning, match=r"mixes continuous keys with a discrete key.*reads 2 logits.*does not fit"):
        export_onnx(
            model(godot_gym_action_space({"move": {"size": 2, "action_type": "continuous"}})),
            tmp_path / "x.onnx",
            layout="godot",
        )
    for action_space in (spaces.Box(-0.5, 0.5, (3,)), spaces.MultiDiscrete([2, 3])):
        other = model(action_space)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            export_onnx(other, tmp_path / "x.onnx", layout="godot")


def test_the_patch_names_its_upstream_commit_and_is_well_formed() -> None:
    """The patch says which plugin commit it was written against, touches the plugin's three files, and every hunk's
    line counts match its header (a hand edit that breaks it fails here, not in a user's ``git apply``)."""
    text = PATCH.read_text()
    assert "bf5d6a2d7374c65ecb23cd8cdc425cac25399ec4" in text.split("diff --git")[0]
    files = re.findall(r"^diff --git a/(\S+) b/\1$", text, flags=re.MULTILINE)
    assert files == [
        "addons/godot_rl_agents/onnx/csharp/ONNXInference.cs",
        "addons/godot_rl_agents/onnx/wrapper/ONNX_wrapper.gd",
        "addons/godot_rl_agents/sync.gd",
    ]
    lines = text.splitlines()
    hunks = 0
    for index, line in enumerate(lines):
        header = re.match(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
        if not header:
            continue
        hunks += 1
        old, new = int(header.group(1) or 1), int(header.group(2) or 1)
        body = index + 1
        while old or new:
            kind = lines[body][:1]
            assert kind in (" ", "-", "+"), (line, lines[body])
            old -= kind in (" ", "-")
            new -= kind in (" ", "+")
            body += 1
        assert old == new == 0, line
    assert hunks >= 3
    # The patch feeds the memory back and zeroes it at an episode's end
    assert 'result["state_outs"]' in text and "agent.get_done()" in text and "GetStateSize" in text
