"""
ONNX export of a recurrent policy's actor, one step at a time, with the memory as explicit inputs and outputs.

The exported graph is the actor of ``policy.predict(obs, state, episode_start, deterministic=True)`` for one step:
SB3's observation preprocessing (``preprocess_obs``: images divided by 255, one-hot of ``Discrete`` and
``MultiDiscrete`` observations, a ``Dict``'s keys through the combined extractor), the episode-start reset of the
memory (``memory * (1 - episode_start)``, sb3-contrib's rule), the recurrent layer, the actor's MLP and the
deterministic action (argmax per sub-action; the Gaussian's mean clipped to the ``Box`` bounds, or unscaled from
``[-1, 1]`` with ``squash_output``, as ``predict`` does): :class:`~sb3_reset_ppo.export.actor.ActorStep`. The critic
is not exported.

A layout names the tensors (docs/guide/deploy.md), each in its own module behind
:class:`~sb3_reset_ppo.export.layout.Layout`, found in :data:`LAYOUTS` by its name:

- ``"plain"`` (:mod:`~sb3_reset_ppo.export.plain`): ``obs``, ``h``, ``c``, ``episode_start`` -> ``action``,
  ``h_out``, ``c_out``;
- ``"mlagents"`` (:mod:`~sb3_reset_ppo.export.mlagents`): Unity ML-Agents' contract (model API version 3);
- ``"godot"`` (:mod:`~sb3_reset_ppo.export.godot`): Godot RL Agents' contract, with the memory.

With ``vec_normalize`` (:mod:`sb3_reset_ppo.export.normalize`) the graph takes raw observations and normalises them
as SB3's ``VecNormalize`` does, before the preprocessing.
"""

import copy
import json
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import (
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
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
from torch import nn

from sb3_reset_ppo.export.actor import ActorStep, ElementaryRecurrent, ExportSpec
from sb3_reset_ppo.export.godot import GODOT
from sb3_reset_ppo.export.layout import DEFAULT_OPSET, ExportOptions, Graph, Layout
from sb3_reset_ppo.export.mlagents import ML_AGENTS_VERSION_NUMBER, MLAGENTS, MLAGENTS_OPSET
from sb3_reset_ppo.export.normalize import (
    load_vec_normalize,
    normalization_metadata,
    observation_normalizer,
    warn_if_unnormalized,
)
from sb3_reset_ppo.export.plain import PLAIN
from sb3_reset_ppo.version import __version__

__all__ = [
    "DEFAULT_OPSET",
    "LAYOUTS",
    "MLAGENTS_OPSET",
    "ML_AGENTS_VERSION_NUMBER",
    "SUPPORTED_ACTION_SPACES",
    "SUPPORTED_OBSERVATION_SPACES",
    "ExportSpec",
    "export_onnx",
    "export_spec",
    "layout_of",
    "read_metadata",
]

# The layouts by their public name: a new layout is a new module and one entry here
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (PLAIN, MLAGENTS, GODOT)}
DTYPES: dict[str, th.dtype] = {"float32": th.float32, "float16": th.float16}
EXPORTERS = ("torchscript", "dynamo")
# The opsets exported and tested (15 and 17 by the tests; Unity's Sentis reads opsets up to 15)
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
# The loggers of torch's dynamo exporter and onnxscript's version converter, which report a failed conversion with
# a traceback that export_onnx reports as one ValueError
_DYNAMO_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")


def layout_of(name: str) -> Layout:
    """
    The layout of a public name.

    :param name: ``"plain"``, ``"mlagents"`` or ``"godot"``
    :return: Its :class:`~sb3_reset_ppo.export.layout.Layout`
    """
    if not isinstance(name, str) or name not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {name!r}")
    return LAYOUTS[name]


def _policy_of(model: Any) -> RecurrentActorCriticPolicy:
    policy = model.policy if isinstance(model, BaseAlgorithm) else model
    if not isinstance(policy, RecurrentActorCriticPolicy):
        raise TypeError(
            f"model must be a ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its recurrent policy "
            f"(a subclass of sb3-contrib's RecurrentActorCriticPolicy: LSTM or GRU, Mlp, Cnn or MultiInput); got "
            f"{type(model).__name__} with policy {type(policy).__name__}"
        )
    return policy


def _check_observation_space(space: spaces.Space) -> tuple[str, ...]:
    """The ``Dict`` keys in input order (``()`` for a single observation); a ``ValueError`` for other spaces."""
    supported = "Box (images included), Discrete, MultiDiscrete, MultiBinary, or a Dict of these"
    if isinstance(space, spaces.Dict):
        for key, subspace in space.spaces.items():
            if not isinstance(subspace, SUPPORTED_OBSERVATION_SPACES):
                raise ValueError(
                    f"observation space key {key!r} is {subspace}, which export does not support: use {supported}"
                )
        return tuple(space.spaces)
    if not isinstance(space, SUPPORTED_OBSERVATION_SPACES):
        raise ValueError(f"observation space {space} is not supported by export: use {supported}")
    return ()


def export_spec(model: Any, layout: str = "plain") -> ExportSpec:
    """
    Check that ``model`` can be exported and describe its exported graph.

    :param model: A ResetPPO, MaskableResetPPO or RecurrentPPO model, or its policy
    :param layout: ``"plain"``, ``"mlagents"`` or ``"godot"``
    :return: The export's description
    """
    return _export_spec(model, layout_of(layout))


def _export_spec(model: Any, layout: Layout) -> ExportSpec:
    policy = _policy_of(model)
    rnn = policy.lstm_actor
    if isinstance(rnn, nn.LSTM):
        if rnn.proj_size:
            raise ValueError(f"an LSTM with proj_size={rnn.proj_size} is not supported by export: use proj_size=0")
        cell = "LSTM"
    elif isinstance(rnn, nn.GRU):
        cell = "GRU"
    else:
        raise TypeError(f"the actor's recurrent layer must be nn.LSTM or nn.GRU, got {type(rnn).__name__}")
    if rnn.batch_first or rnn.bidirectional:
        raise ValueError("recurrent layers with batch_first=True or bidirectional=True are not supported by export")
    obs_keys = _check_observation_space(policy.observation_space)
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
    with_masks = layout.with_masks(maskable, branches)
    return ExportSpec(
        cell=cell,
        n_layers=rnn.num_layers,
        hidden_size=rnn.hidden_size,
        obs_keys=obs_keys,
        with_masks=with_masks,
        mask_dims=sum(branches),
        branches=branches,
    )


def _copy_policy(policy: RecurrentActorCriticPolicy) -> RecurrentActorCriticPolicy:
    """
    A deep copy of ``policy`` (the export casts and moves it), without the state its distributions keep from the
    last call: gSDE's exploration matrices are not graph leaves, which ``copy.deepcopy`` refuses. The export does
    not read that state.
    """
    distributions = [value for value in vars(policy).values() if isinstance(value, Distribution)]
    saved = [dict(vars(distribution)) for distribution in distributions]
    try:
        for distribution, attributes in zip(distributions, saved, strict=True):
            for name, value in attributes.items():
                if isinstance(value, th.Tensor | th.distributions.Distribution):
                    setattr(distribution, name, None)
        return copy.deepcopy(policy)
    finally:
        for distribution, attributes in zip(distributions, saved, strict=True):
            vars(distribution).update(attributes)


def _metadata(
    *,
    model: Any,
    policy: RecurrentActorCriticPolicy,
    spec: ExportSpec,
    layout: Layout,
    options: ExportOptions,
    dtype: str,
    exporter: str,
    graph: Graph,
) -> dict[str, str]:
    """The file's ``metadata_props``: strings, structured ones as JSON."""
    return {
        "producer": "sb3_reset_ppo.export",
        "sb3_reset_ppo_version": __version__,
        "torch_version": th.__version__,
        "algorithm": type(model).__name__ if isinstance(model, BaseAlgorithm) else "",
        "policy": type(policy).__name__,
        "layout": layout.name,
        "opset": str(options.opset),
        "dtype": dtype,
        "exporter": exporter,
        "observation_space": repr(policy.observation_space),
        "action_space": repr(policy.action_space),
        "observation_keys": json.dumps(list(spec.obs_keys)),
        "channels_last": json.dumps(options.channels_last),
        "preprocessing": (
            f"in the graph: SB3's preprocess_obs ({layout.images_metadata(policy)}, one-hot of Discrete/MultiDiscrete, "
            "Dict keys through the combined extractor)"
        ),
        "memory": json.dumps(layout.memory_metadata(spec)),
        "action": json.dumps(
            {
                "kind": "discrete" if spec.branches else "continuous",
                "branches": list(spec.branches),
                "deterministic": True,
                "masks": "action_masks: 1 = allowed, 0 = masked" if spec.with_masks else None,
            }
        ),
        "inputs": json.dumps(dict(zip(graph.input_names, [list(shape) for shape in graph.input_shapes], strict=True))),
        "outputs": json.dumps(graph.output_names),
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
    Export one step of a recurrent policy's actor to an ONNX file, the memory as inputs and outputs.

    The file is written beside ``path`` under a temporary name and moved onto ``path`` once complete: an export that
    fails or is refused leaves an existing file at ``path`` as it was, and removes the folders it made.

    :param model: A ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model, or its recurrent policy
    :param path: The ONNX file to write (replaced if it exists); its folders are made as needed
    :param layout: ``"plain"`` (``obs``, ``h``, ``c``, ``episode_start`` -> ``action``, ``h_out``, ``c_out``),
        ``"mlagents"`` (Unity ML-Agents' tensor names and constants) or ``"godot"`` (Godot RL Agents'); see the
        module's docstring
    :param opset: The ONNX opset, 14 to 20 (15 and 17 are tested); default: 15 for ``"mlagents"`` (Unity's Sentis
        documents opsets 7 to 15), else 17
    :param dtype: ``"float32"`` or ``"float16"`` (weights, float inputs and outputs; see docs/guide/deploy.md for
        the tolerance)
    :param distribution: Also output the distribution's parameters (``plain`` layout): the (masked) ``logits`` of
        a discrete action, or the Gaussian's ``mean`` and ``log_std`` (before clipping or squashing)
    :param channels_last: Take image observations as ``(batch, H, W, C)``, as the env gives them before SB3's
        ``VecTransposeImage`` (the graph transposes them); default: the policy's ``(batch, C, H, W)``. Not with
        ``"mlagents"``: Unity feeds ``(batch, C, H, W)``
    :param exporter: ``"torchscript"`` (``torch.onnx.export(..., dynamo=False)``, the default: see
        docs/guide/deploy.md) or ``"dynamo"`` (torch's ``torch.export``-based exporter; needs ``onnxscript``). An
        exporter that cannot write ``opset`` (the dynamo exporter at 14 writes 18) is a ``ValueError``
    :param cell_ops: How the recurrent layer is written: ``"fused"`` (ONNX's ``LSTM`` or ``GRU`` operator),
        ``"elementary"`` (matrix products and pointwise operations, for engines without those operators) or
        ``"auto"``: elementary for a GRU in the ``"mlagents"`` layout (Unity has no ``GRU`` operator), else fused
    :param vec_normalize: The ``VecNormalize`` the model was trained with, or the path of its pickle (the RL Zoo's
        ``vecnormalize.pkl``): the graph then takes raw observations and normalises them as it does (clipped to
        ``clip_obs``; a ``Dict``'s ``norm_obs_keys``); the metadata's ``vec_normalize`` says so. ``None``: the graph
        takes observations as the policy sees them (a warning when the model's env is a ``VecNormalize``)
    :return: ``path``
    """
    chosen = layout_of(layout)
    spec = _export_spec(model, chosen)
    if opset is None:
        opset = chosen.default_opset
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an integer from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    if cell_ops not in CELL_OPS:
        raise ValueError(f"cell_ops must be one of {CELL_OPS}, got {cell_ops!r}")
    elementary = cell_ops == "elementary" or (cell_ops == "auto" and chosen.elementary_by_default(spec))
    options = ExportOptions(DTYPES[dtype], opset, channels_last, distribution, elementary)
    chosen.check(_policy_of(model), spec, options)
    normalizer = None
    if vec_normalize is None:
        warn_if_unnormalized(model)
    else:
        normalizer = observation_normalizer(load_vec_normalize(vec_normalize), _policy_of(model).observation_space)
    policy = _copy_policy(_policy_of(model)).to(device="cpu", dtype=options.dtype)
    policy.set_training_mode(False)
    if elementary:
        policy.add_module("lstm_actor", ElementaryRecurrent(policy.lstm_actor))
    normalize_images = policy.normalize_images and not chosen.images_in_unit_range
    actor = ActorStep(policy, spec, options.dtype, channels_last, distribution, normalizer, normalize_images).eval()
    graph = chosen.graph(actor, options, batch=2)
    metadata = _metadata(
        model=model, policy=policy, spec=spec, layout=chosen, options=options, dtype=dtype, exporter=exporter, graph=graph
    )
    source = "" if vec_normalize is None else "object" if isinstance(vec_normalize, VecNormalize) else str(vec_normalize)
    metadata.update(normalization_metadata(normalizer, source))
    metadata.update(chosen.extra_metadata(spec))
    path = Path(path)
    with _replacing(path) as temporary:
        _write(graph, temporary, exporter, opset, metadata)
    return path


def _write(graph: Graph, path: Path, exporter: str, opset: int, metadata: dict[str, str]) -> None:
    """Export ``graph`` to ``path``, check its opset, add the metadata and check the file."""
    import onnx

    with th.no_grad():
        _export(graph, path, exporter, opset)
    proto = onnx.load(str(path))
    written = next(entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx"))
    if written != opset:
        raise ValueError(
            f"exporter={exporter!r} wrote opset {written}, not the opset={opset} asked for (torch's dynamo exporter "
            "builds opset 18 and converts down, which fails for some graphs): use exporter='torchscript' or another "
            "opset; nothing was written"
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
    A temporary file beside ``path`` for the block to write, moved onto ``path`` (``os.replace``) when the block
    succeeds; else removed, with the folders made for it, and ``path`` left as it was. A ``path`` that cannot be
    written is an ``OSError`` naming it: ``IsADirectoryError``, ``NotADirectoryError``, ``PermissionError``, ...
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


def _export(graph: Graph, path: Path, exporter: str, opset: int) -> None:
    """
    ``torch.onnx.export`` with its warnings silenced: the TorchScript-based exporter's deprecation notice and the
    tracer's notes on nn.LSTM/nn.GRU's own shape checks (constant for a given model) and on GRU exports with a batch
    other than 1 (the memory's batch axis is dynamic here); the dynamo exporter's notes on the graph and its log
    records below CRITICAL, among them the traceback of a failed conversion to ``opset`` (checked after, as one error).
    """
    dynamic_axes = graph.dynamic_axes
    arguments: dict[str, Any] = {"input_names": graph.input_names, "output_names": graph.output_names, "opset_version": opset}
    if exporter == "torchscript":
        arguments.update(dynamic_axes=dynamic_axes, do_constant_folding=True, dynamo=False)
    else:
        # torch.export's form of dynamic_axes: one {axis: Dim} per positional input
        shapes = tuple(dict.fromkeys(dynamic_axes[name], th.export.Dim.DYNAMIC) for name in graph.input_names)
        arguments.update(dynamic_shapes=(shapes,), dynamo=True, external_data=False, verbose=False)
    loggers = [logging.getLogger(name) for name in _DYNAMO_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            th.onnx.export(graph.module, tuple(graph.example), str(path), **arguments)
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def read_metadata(path: str | Path) -> dict[str, str]:
    """
    The ``metadata_props`` of an exported file (onnx only; the torch-free example reads them with onnxruntime).

    :param path: The ONNX file
    :return: Its metadata as strings
    """
    import onnx

    return {entry.key: entry.value for entry in onnx.load(str(path)).metadata_props}
