"""
The export matrix: every setting of a model and of ``export_onnx`` that changes the exported graph, with
the values worth telling apart, and the combinations the tests run (``tests/export/test_export_matrix.py``).

The combinations are a covering array built as the settings matrix's (``tests/oracles/matrix.py``): every pair of option
values in ``make test``, every triple in ``make test-matrix`` (``SB3_RESET_PPO_MATRIX=full``), among those the
constraints allow. :data:`EXPORT_OPTIONS` are ``export_onnx``'s keyword arguments, each value passed as it is:
adding a value, or another argument of ``export_onnx``, is one line there.

This module also holds what every layout's check needs: the model and env of a combination
(:func:`build`), and the layouts' feeds and outputs in ``predict``'s terms (:func:`feed`, :func:`parse`).
"""

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from matrix import Row, covering_array
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize
from test_export import randomise

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.export import ExportSpec

# The model's side; the first value of each is the most common setting
MODEL_OPTIONS: dict[str, list[Any]] = {
    # TrXL: attention memory (memory_length 3, shorter and longer than the envs' episodes of 1 to 4 steps)
    "cell": ["Lstm", "Gru", "TrXL"],
    "n_layers": [1, 2],
    # Box (3,) float; uint8 image (36, 36, 1), transposed by SB3; float image (1, 36, 36) in [0, 1]
    # (normalize_images=False); Dict of a uint8 image and a Box; Discrete(5); MultiBinary(4)
    "observation": ["box", "image", "image_float", "dict", "discrete", "multibinary"],
    "action": ["discrete", "box", "multidiscrete", "multibinary"],
    # MaskableResetPPO with new random masks every step (the Godot layout takes none: predict without masks)
    "masks": [False, True],
    # The env under a VecNormalize (statistics set, clip_obs 2 so that clipping happens) exported into the graph
    "vec_normalize": [False, True],
}
# export_onnx's keyword arguments, each value passed as it is
EXPORT_OPTIONS: dict[str, list[Any]] = {
    "layout": ["plain", "mlagents", "godot"],
    "dtype": ["float32", "float16"],
    "opset": [17, 15],
    "exporter": ["torchscript", "dynamo"],
    # "auto": elementary operators for a GRU in the ML-Agents layout (Unity has no GRU operator), else ONNX's cells
    "cell_ops": ["auto", "fused", "elementary"],
}
OPTIONS: dict[str, list[Any]] = {**MODEL_OPTIONS, **EXPORT_OPTIONS}

ACTIONS: dict[str, spaces.Space] = {
    "discrete": spaces.Discrete(3),
    "box": spaces.Box(-1.0, 1.0, shape=(2,)),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
}
# Observations VecNormalize can normalise (a Box, or a Dict's Box keys: its norm_obs_keys)
NORMALISABLE = ("box", "image_float", "dict")
HIDDEN = 4
N_ENVS = 2
MEMORY_LENGTH = 3


def allowed(given: dict[str, Any]) -> bool:
    """The constraints between options, on a (possibly partial) combination."""
    # Masks need a discrete action
    if given.get("masks") and given.get("action") == "box":
        return False
    # VecNormalize normalises Box observations only (a uint8 image would become a float Box: the image_float case)
    if given.get("vec_normalize") and given.get("observation") not in (None, *NORMALISABLE):
        return False
    # Attention memory has no ONNX operator (export_onnx refuses cell_ops="fused"), and torch's dynamo exporter
    # writes it at opset 18 and above only (refused at the matrix's opsets)
    if given.get("cell") == "TrXL" and (given.get("cell_ops") == "fused" or given.get("exporter") == "dynamo"):
        return False
    # Godot RL Agents' plugin feeds float32 tensors (export_onnx refuses float16 there)
    return not (given.get("layout") == "godot" and given.get("dtype") == "float16")


_CONSTRAINTS = [
    {"operator": "fn", "requires": ["masks", "action"], "evaluate": allowed},
    {"operator": "fn", "requires": ["vec_normalize", "observation"], "evaluate": allowed},
    {"operator": "fn", "requires": ["cell", "cell_ops"], "evaluate": allowed},
    {"operator": "fn", "requires": ["cell", "exporter"], "evaluate": allowed},
    {"operator": "fn", "requires": ["layout", "dtype"], "evaluate": allowed},
]


class Combination(Row):
    """One combination of the export matrix: each option's value (see :data:`OPTIONS`)."""

    options = OPTIONS

    def export_kwargs(self) -> dict[str, Any]:
        """``export_onnx``'s keyword arguments of the combination (``vec_normalize`` apart)."""
        return {name: self[name] for name in EXPORT_OPTIONS}


def combinations(strength: int | None = None) -> list[Combination]:
    """
    The combinations to run (see :func:`matrix.covering_array`: pairs, or triples under ``SB3_RESET_PPO_MATRIX=full``).

    :param strength: Every tuple of this many option values appears in some combination
    :return: The combinations
    """
    return [Combination(values) for values in covering_array(OPTIONS, _CONSTRAINTS, strength)]


def make_env_fn(observation: str, action_space: spaces.Space, seed: int) -> Any:
    """A ``RandomEpisodeEnv`` factory (episodes of 1 to 4 steps) for an observation kind of :data:`MODEL_OPTIONS`."""

    def make() -> gym.Env:
        env = RandomEpisodeEnv(action_space, observation if observation in ("box", "image", "dict") else "box", max_length=4)
        if observation == "image_float":
            env.observation_space = spaces.Box(0.0, 1.0, (1, 36, 36), np.float32)
        elif observation == "discrete":
            env.observation_space = spaces.Discrete(5)
        elif observation == "multibinary":
            env.observation_space = spaces.MultiBinary(4)
        env.reset(seed=seed)
        return env

    return make


def vec_env(combination: Combination, seed: int) -> VecEnv:
    """The combination's envs; under a ``VecNormalize`` (not training, rewards left alone) with set statistics."""
    observation = combination["observation"]
    env: VecEnv = DummyVecEnv(
        [make_env_fn(observation, ACTIONS[combination["action"]], seed + index) for index in range(N_ENVS)]
    )
    if not combination["vec_normalize"]:
        return env
    keys = ["vec"] if observation == "dict" else None
    normalised = VecNormalize(env, training=False, norm_reward=False, clip_obs=2.0, norm_obs_keys=keys)
    rng = np.random.default_rng(1)
    for rms in normalised.obs_rms.values() if isinstance(normalised.obs_rms, dict) else [normalised.obs_rms]:
        rms.mean = rng.normal(size=rms.mean.shape)
        rms.var = rng.uniform(0.05, 4.0, size=rms.var.shape)
    return normalised


def build(combination: Combination) -> ResetPPO:
    """The combination's model (tiny, random weights), on its env."""
    observation = combination["observation"]
    kind = {"image": "Cnn", "image_float": "Cnn", "dict": "MultiInput"}.get(observation, "Mlp")
    policy_kwargs: dict[str, Any] = {"lstm_hidden_size": HIDDEN, "n_lstm_layers": combination["n_layers"], "net_arch": [8]}
    if combination["cell"] == "TrXL":
        policy_kwargs = {
            "trxl_dim": HIDDEN,
            "n_trxl_layers": combination["n_layers"],
            "n_attention_heads": 2,
            "memory_length": MEMORY_LENGTH,
            "net_arch": [8],
        }
    if kind == "Cnn":
        policy_kwargs["features_extractor_kwargs"] = {"features_dim": 8}
    if kind == "MultiInput":
        policy_kwargs["features_extractor_kwargs"] = {"cnn_output_dim": 8}
    if observation == "image_float":
        policy_kwargs["normalize_images"] = False
    model_class = MaskableResetPPO if combination["masks"] else ResetPPO
    model = model_class(
        f"{kind}{combination['cell']}Policy",
        vec_env(combination, seed=0),
        n_steps=8,
        batch_size=8,
        policy_kwargs=policy_kwargs,
        seed=0,
    )
    randomise(model)
    return model


# ---------------------------------------------------------------------------------------------- the layouts' tensors


def policy_arrays(obs: Any, observation_space: spaces.Space) -> dict[str, np.ndarray]:
    """
    Each observation input's array as the policy's space holds it (``""`` for a single observation): an env's
    ``(N, H, W, C)`` image transposed to the space's ``(N, C, H, W)``, as SB3's ``VecTransposeImage`` does.
    """
    items = obs.items() if isinstance(obs, dict) else [("", obs)]
    subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"": observation_space}
    arrays = {}
    for key, value in items:
        array = np.asarray(value)
        shape = tuple(subspaces[key].shape or ())
        if array.ndim == 4 and array.shape[1:] != shape:
            array = array.transpose(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        arrays[key] = array
    return arrays


def initial_memory(spec: ExportSpec, n_envs: int) -> list[np.ndarray]:
    """The memory entering the first step as ``predict`` holds it: zeros (a TrXL's count int64)."""
    return [
        np.zeros([n_envs if size == "batch" else int(size) for size in shape], np.int64 if name == "n_valid" else np.float32)
        for name, shape in zip(spec.memory_names, spec.memory_shapes, strict=True)
    ]


def attended_memory(memory: Any, spec: ExportSpec) -> list[np.ndarray]:
    """
    The memory that decides the next steps: an LSTM's or GRU's as it is; a TrXL's positions zeroed but the last
    ``n_valid`` (those of the episode), which alone are attended to. Where an engine zeroes the memory at an episode
    start, and ``predict`` keeps it masked, only these agree.
    """
    if not spec.memory_length:
        return list(memory)
    positions, n_valid = memory
    # (K, 1) >= (1, N) -> (K, N, 1, 1): the positions of each env's episode
    kept = (np.arange(spec.memory_length)[:, None] >= spec.memory_length - n_valid)[:, :, None, None]
    return [np.where(kept, positions, 0.0), n_valid]


def pack(memory: list[np.ndarray]) -> np.ndarray:
    """
    ``[h | c]``, each ``(L, N, H)`` -> ``(N, L * H)``, side by side: ``(N, memory_size)``; a TrXL's ``[memory |
    n_valid]``, ``(K, N, L, D)`` -> ``(N, K * L * D)`` and ``(1, N)`` -> ``(N, 1)``.
    """
    return np.concatenate([np.moveaxis(part, 1, 0).reshape(part.shape[1], -1) for part in memory], axis=1)


def unpack(flat: np.ndarray, spec: ExportSpec) -> list[np.ndarray]:
    """:func:`pack`'s inverse: ``(N, memory_size)`` -> each ``(L, N, H)``; a TrXL's ``(K, N, L, D)`` and ``(1, N)``."""
    if spec.memory_length:
        shape = (-1, spec.memory_length, spec.n_layers, spec.hidden_size)
        # The positions, then the count in the last column
        positions = flat[:, :-1].reshape(shape).transpose(1, 0, 2, 3)
        return [positions, np.rint(flat[:, -1:].T).astype(np.int64)]
    width = spec.n_layers * spec.hidden_size
    return [
        flat[:, index * width : (index + 1) * width].reshape(-1, spec.n_layers, spec.hidden_size).transpose(1, 0, 2)
        for index in range(spec.n_memory)
    ]


def feed(
    layout: str,
    spec: ExportSpec,
    observation_space: spaces.Space,
    obs: Any,
    memory: list[np.ndarray],
    episode_start: np.ndarray,
    masks: np.ndarray | None,
    dtype: type = np.float32,
) -> dict[str, np.ndarray]:
    """
    A layout's inputs for one step: the observation (raw, as the env gives it), the memory entering the step (each
    ``(L, N, H)``, a TrXL's as :func:`initial_memory`; zeroed here at episode starts where the layout has no
    ``episode_start``) and the masks.
    """
    arrays: dict[str, np.ndarray] = {key: value.astype(dtype) for key, value in policy_arrays(obs, observation_space).items()}
    if layout == "mlagents":
        # Unity's sensors give images in [0, 1]
        subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"": observation_space}
        arrays = {key: value / 255 if is_image_space(subspaces[key]) else value for key, value in arrays.items()}
    n_envs = len(episode_start)
    if layout == "plain":
        inputs = {f"obs_{key}" if key else "obs": value for key, value in arrays.items()}
        # A TrXL's count stays predict's int64
        for name, part in zip(spec.memory_names, memory, strict=True):
            inputs[name] = part if name == "n_valid" else part.astype(dtype)
        inputs["episode_start"] = episode_start.astype(dtype)
        if spec.with_masks:
            inputs["action_masks"] = (masks if masks is not None else np.ones((n_envs, spec.mask_dims))).astype(dtype)
        return inputs
    # The engine's side: an agent starting an episode starts from zeros
    keep = (1.0 - episode_start.astype(np.float32)).reshape(-1, 1)
    flat: np.ndarray = (pack(memory) * keep).astype(dtype)
    if layout == "mlagents":
        # A Discrete index as (N, 1)
        inputs = {
            f"obs_{index}": value.reshape(n_envs, 1) if value.ndim == 1 else value
            for index, value in enumerate(arrays.values())
        }
        if spec.with_masks:
            inputs["action_masks"] = (masks if masks is not None else np.ones((n_envs, spec.mask_dims))).astype(dtype)
        inputs["recurrent_in"] = flat[:, None, :]
        return inputs
    # godot: every key flat, named as the key ("obs" for a single observation)
    inputs = {key or "obs": value.reshape(n_envs, -1) for key, value in arrays.items()}
    inputs["state_ins"] = flat
    return inputs


def parse(
    layout: str, spec: ExportSpec, outputs: dict[str, np.ndarray], action_shape: tuple[int, ...]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """
    A layout's outputs in ``predict``'s terms: the action, shaped as ``predict``'s (``action_shape``), and the memory
    after the step, each ``(L, N, H)``, float32 (a TrXL's as :func:`initial_memory`).
    """
    if layout == "plain":
        action = outputs["action"]
        memory = [outputs[f"{name}_out"] for name in spec.memory_names]
    elif layout == "mlagents":
        kind = "discrete" if spec.branches else "continuous"
        action = outputs[f"deterministic_{kind}_actions"]
        memory = unpack(outputs["recurrent_out"][:, 0], spec)
    else:
        output = outputs["output"]
        if spec.branches:
            # The plugin's argmax per sub-action (the first of equal logits, as sync.gd's strict comparison)
            offsets = np.cumsum((0, *spec.branches))
            action = np.stack([output[:, a:b].argmax(axis=1) for a, b in itertools.pairwise(offsets)], axis=1)
        else:
            action = output
        memory = unpack(outputs["state_outs"], spec)
    floats = [part if part.dtype == np.int64 else part.astype(np.float32) for part in memory]
    return action.reshape(action_shape), floats
