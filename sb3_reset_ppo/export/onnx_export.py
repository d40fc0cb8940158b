"""ONNX export of one step of a policy's actor with its memory, under the tensor names of a layout (docs/guide/deploy.md)."""

import copy
import json
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution, MaskableMultiCategoricalDistribution
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
    StateDependentNoiseDistribution,
)
from stable_baselines3.common.vec_env import VecNormalize

from sb3_reset_ppo.export.actor import MEMORY_KINDS, ActorStep, ExportablePolicy, ExportOptions, ExportSpec
from sb3_reset_ppo.export.godot import GodotLayout
from sb3_reset_ppo.export.layout import Graph, Layout
from sb3_reset_ppo.export.mlagents import MLAGENTS_OPSET, MlAgentsLayout  # noqa: F401 (MLAGENTS_OPSET re-exported)
from sb3_reset_ppo.export.normalize import load_vec_normalize, observation_normalizer, warn_if_unnormalized
from sb3_reset_ppo.export.plain import PlainLayout
from sb3_reset_ppo.version import __version__

# The layouts by their public name: a new layout is a new module and one entry here
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (PlainLayout(), MlAgentsLayout(), GodotLayout())}
DTYPES: dict[str, th.dtype] = {"float32": th.float32, "float16": th.float16}
EXPORTERS = ("torchscript", "dynamo")
# The opsets export_onnx accepts
MIN_OPSET, MAX_OPSET = 14, 20
CELL_OPS = ("auto", "fused", "elementary")
SUPPORTED_OBSERVATION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
SUPPORTED_ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
_CONTINUOUS_DISTRIBUTIONS = (DiagGaussianDistribution, StateDependentNoiseDistribution)
_DISCRETE_DISTRIBUTIONS = (
    CategoricalDistribution,
    MultiCategoricalDistribution,
    BernoulliDistribution,
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
# The loggers of torch's dynamo exporter and onnxscript, silenced: a failed conversion is reported as one ValueError
_DYNAMO_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")


def _policy_of(model: Any) -> ExportablePolicy:
    if isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be a loaded model or its policy, got the path {os.fspath(model)!r}: load it first, "
            f"model = ResetPPO.load({os.fspath(model)!r}) (or RecurrentPPO.load, MaskableResetPPO.load), or export the "
            f"file with python -m sb3_reset_ppo.export {os.fspath(model)} OUT.onnx"
        )
    policy = model.policy if isinstance(model, BaseAlgorithm) else model
    if not any(isinstance(policy, kind.policy_class) for kind in MEMORY_KINDS):
        raise TypeError(
            f"model must be a ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its recurrent policy "
            f"(a subclass of sb3-contrib's RecurrentActorCriticPolicy: LSTM or GRU, Mlp, Cnn or MultiInput; or of "
            f"TrXLActorCriticPolicy: attention memory); got {type(model).__name__} with policy {type(policy).__name__}"
        )
    return cast(ExportablePolicy, policy)


def export_spec(model: Any, layout: str = "plain") -> ExportSpec:
    """
    Check that ``model`` can be exported and describe its exported graph.

    :param model: A ResetPPO, MaskableResetPPO or RecurrentPPO model, or its policy
    :param layout: ``"plain"``, ``"mlagents"`` or ``"godot"``
    """
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    policy = _policy_of(model)
    memory = next(kind.of(policy) for kind in MEMORY_KINDS if isinstance(policy, kind.policy_class))
    space = policy.observation_space
    supported = "Box (images included), Discrete, MultiDiscrete, MultiBinary, or a Dict of these"
    if not isinstance(space, (spaces.Dict, *SUPPORTED_OBSERVATION_SPACES)):
        raise ValueError(f"observation space {space} is not supported by export: use {supported}")
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {}
    for key, subspace in subspaces.items():
        if not isinstance(subspace, SUPPORTED_OBSERVATION_SPACES):
            raise ValueError(f"observation space key {key!r} is {subspace}, which export does not support: use {supported}")
    obs_keys = tuple(subspaces)
    action_space = policy.action_space
    if not isinstance(action_space, SUPPORTED_ACTION_SPACES):
        raise ValueError(
            f"action space {action_space} is not supported by export: use Box, Discrete, MultiDiscrete or MultiBinary"
        )
    distribution = policy.action_dist
    if not isinstance(distribution, _CONTINUOUS_DISTRIBUTIONS + _DISCRETE_DISTRIBUTIONS):
        raise ValueError(
            f"action distribution {type(distribution).__name__} is not supported by export: use SB3's DiagGaussian, "
            "StateDependentNoise, Categorical, MultiCategorical or Bernoulli distributions, or sb3-contrib's maskable ones"
        )
    maskable = hasattr(policy, "masked_action_dist")
    branches: tuple[int, ...] = ()
    if isinstance(action_space, spaces.Discrete):
        branches = (int(action_space.n),)
    elif isinstance(action_space, spaces.MultiDiscrete):
        branches = tuple(int(n) for n in np.asarray(action_space.nvec).ravel())
    elif isinstance(action_space, spaces.MultiBinary):
        branches = (2,) * int(np.prod(action_space.shape))
    with_masks = LAYOUTS[layout].with_masks(maskable, branches)
    return ExportSpec(
        memory.cell, memory.n_layers, memory.hidden_size, obs_keys, with_masks, sum(branches), branches, memory.memory_length
    )


def _copy_policy(policy: ExportablePolicy) -> ExportablePolicy:
    """A deep copy of ``policy`` without its distributions' tensors of the last call (gSDE's, which deepcopy refuses)."""
    # deepcopy takes a memo's entries as the copies of those objects: None for each of these tensors
    memo: dict[int, Any] = {
        id(value): None
        for distribution in vars(policy).values()
        if isinstance(distribution, Distribution)
        for value in vars(distribution).values()
        if isinstance(value, th.Tensor | th.distributions.Distribution)
    }
    return copy.deepcopy(policy, memo)


def _metadata(
    model: Any, policy: ExportablePolicy, spec: ExportSpec, layout: Layout, options: ExportOptions, graph: Graph
) -> dict[str, str]:
    """The file's ``metadata_props`` but the normalisation's and the layout's own: strings, structured ones as JSON."""
    kind = "discrete" if spec.branches else "continuous"
    masks = "action_masks: 1 = allowed, 0 = masked" if spec.with_masks else None
    return {
        "producer": "sb3_reset_ppo.export",
        "sb3_reset_ppo_version": __version__,
        "torch_version": th.__version__,
        "algorithm": type(model).__name__ if isinstance(model, BaseAlgorithm) else "",
        "policy": type(policy).__name__,
        "layout": layout.name,
        "opset": str(options.opset),
        "dtype": str(options.dtype).removeprefix("torch."),
        "exporter": options.exporter,
        "observation_space": repr(policy.observation_space),
        "action_space": repr(policy.action_space),
        "observation_keys": json.dumps(list(spec.obs_keys)),
        "channels_last": json.dumps(options.channels_last),
        "preprocessing": (
            f"in the graph: SB3's preprocess_obs ({layout.images_metadata(policy)}, one-hot of Discrete/MultiDiscrete, "
            "Dict keys through the combined extractor)"
        ),
        "memory": json.dumps(layout.memory_metadata(spec)),
        "action": json.dumps({"kind": kind, "branches": list(spec.branches), "deterministic": True, "masks": masks}),
        "inputs": json.dumps({name: list(shape) for name, shape in graph.inputs.items()}),
        "outputs": json.dumps(list(graph.outputs)),
        "cell_ops": "elementary" if options.elementary else "fused",
    }


def export_onnx(
    model: Any,
    path: str | Path,
    *,
    layout: str = "plain",
    opset: int | None = None,
    dtype: str = "float32",
    distribution: bool = False,
    channels_last: bool = False,
    exporter: str = "torchscript",
    cell_ops: str = "auto",
    vec_normalize: VecNormalize | str | Path | None = None,
) -> Path:
    """
    Export one step of a policy's actor to an ONNX file, the memory as inputs and outputs. A failed or
    refused export leaves an existing file at ``path`` as it was.

    :param model: A ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its policy (LSTM, GRU or attention)
    :param path: The ONNX file to write, its missing folders made
    :param layout: The tensor names: ``"plain"``, ``"mlagents"`` (Unity ML-Agents') or ``"godot"`` (Godot RL Agents')
    :param opset: The ONNX opset, 14 to 20; by default 15 for ``"mlagents"`` (Unity's Sentis), else 17
    :param dtype: The float type of the weights, inputs and outputs: ``"float32"`` or ``"float16"``
    :param distribution: Whether to also output the distribution's parameters (``"plain"`` layout only)
    :param channels_last: Whether to take image observations as ``(batch, H, W, C)``, as the env gives them
    :param exporter: ``"torchscript"`` (torch's TorchScript-based exporter) or ``"dynamo"`` (needs ``onnxscript``)
    :param cell_ops: ``"fused"`` (ONNX's LSTM or GRU), ``"elementary"`` or ``"auto"`` (what the layout's engine runs;
        attention memory is always elementary)
    :param vec_normalize: The ``VecNormalize`` the model was trained with, or its pickle, to normalise in the graph
    :return: ``path``
    """
    spec = export_spec(model, layout)
    chosen = LAYOUTS[layout]
    opset = chosen.default_opset if opset is None else opset
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an integer from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    if cell_ops not in CELL_OPS:
        raise ValueError(f"cell_ops must be one of {CELL_OPS}, got {cell_ops!r}")
    elementary = spec.memory.elementary(cell_ops, chosen.fused_cells, exporter, opset)
    options = ExportOptions(DTYPES[dtype], opset, channels_last, distribution, elementary, exporter)
    trained = _policy_of(model)
    chosen.check(trained, spec, options)
    normalizer = None
    if vec_normalize is None:
        warn_if_unnormalized(model)
    else:
        normalizer = observation_normalizer(load_vec_normalize(vec_normalize), trained.observation_space)
    policy = _copy_policy(trained).to(device="cpu", dtype=options.dtype)
    policy.set_training_mode(False)
    normalize_images = policy.normalize_images and not chosen.images_in_unit_range
    actor = ActorStep(policy, spec, options, normalizer, normalize_images).eval()
    graph = chosen.graph(actor, options)
    metadata = _metadata(model, policy, spec, chosen, options, graph)
    source = "object" if isinstance(vec_normalize, VecNormalize) else str(vec_normalize)
    metadata["vec_normalize"] = json.dumps({"in_graph": False} if normalizer is None else normalizer.metadata(source))
    metadata.update(chosen.extra_metadata(spec))
    path = Path(path)
    with _replacing(path) as temporary:
        _write(graph, temporary, options, metadata)
    return path


def _write(graph: Graph, path: Path, options: ExportOptions, metadata: dict[str, str]) -> None:
    """Export ``graph`` to ``path``, check its opset, add the metadata and check the file."""
    import onnx

    dynamic_axes = graph.dynamic_axes
    input_names = list(graph.inputs)
    arguments: dict[str, Any] = {"input_names": input_names, "output_names": list(graph.outputs)}
    if options.exporter == "torchscript":
        arguments.update(dynamic_axes=dynamic_axes, do_constant_folding=True, dynamo=False)
    else:
        # torch.export's form of dynamic_axes: one {axis: Dim} per positional input
        shapes = tuple(dict.fromkeys(dynamic_axes[name], th.export.Dim.DYNAMIC) for name in input_names)
        arguments.update(dynamic_shapes=(shapes,), dynamo=True, external_data=False, verbose=False)
    loggers = [logging.getLogger(name) for name in _DYNAMO_LOGGERS]
    levels = [logger.level for logger in loggers]
    # The exporters' deprecation notices and notes on the trace concern torch, not the user's model
    with warnings.catch_warnings(), th.no_grad():
        warnings.simplefilter("ignore")
        try:
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            th.onnx.export(graph.module, graph.example(), str(path), opset_version=options.opset, **arguments)
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
    proto = onnx.load(str(path))
    written = next(entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx"))
    if written != options.opset:
        raise ValueError(
            f"exporter={options.exporter!r} wrote opset {written}, not the opset={options.opset} asked for (torch's "
            "dynamo exporter builds opset 18 and converts down, which fails for some graphs): use exporter='torchscript' "
            "or another opset; nothing was written"
        )
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.doc_string = "One step of a recurrent policy's actor, exported by sb3_reset_ppo.export (docs/guide/deploy.md)"
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """
    A temporary file beside ``path`` for the block to write, moved onto ``path`` when the block succeeds, else
    removed with the folders made for it; an ``OSError`` naming ``path`` where it cannot be written.
    """
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give the path of the ONNX file to write, such as {path / 'policy.onnx'}")
    missing = []
    folder = path.parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(f"cannot write {path}: {folder} is a file, not a folder")
    made: list[Path] = []
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            for new in reversed(missing):
                new.mkdir()
                made.append(new)
            temporary.open("wb").close()
        except OSError as error:
            raise type(error)(f"cannot write {path}: {error.strerror or error} ({error.filename or path.parent})") from error
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        for new in reversed(made):
            new.rmdir()
        raise


def read_metadata(path: str | Path) -> dict[str, str]:
    """The ``metadata_props`` of an exported ONNX file, as strings."""
    import onnx

    return {entry.key: entry.value for entry in onnx.load(str(path)).metadata_props}
