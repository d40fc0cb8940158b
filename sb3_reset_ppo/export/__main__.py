"""``python -m sb3_reset_ppo.export MODEL.zip OUT.onnx``: a file it cannot use is one line on stderr and exit status 2."""

import argparse
import base64
import binascii
import json
import pickletools
import zipfile
from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_reset_ppo.export.normalize import find_vec_normalize, warn_if_unnormalized
from sb3_reset_ppo.export.onnx_export import CELL_OPS, DTYPES, EXPORTERS, LAYOUTS, export_onnx, read_metadata

ALGOS = ("auto", "reset_ppo", "maskable_reset_ppo", "recurrent_ppo")
SUPPORTED = (
    "ResetPPO, MaskableResetPPO and sb3-contrib RecurrentPPO models (LSTM or GRU policies; ResetPPO's and "
    "MaskableResetPPO's attention-memory policies too)"
)
PROG = "python -m sb3_reset_ppo.export"
DESCRIPTION = (
    "Export one step of a saved recurrent policy's actor to an ONNX file, the memory as inputs and outputs: "
    f"{SUPPORTED}. See docs/guide/deploy.md for the layouts and how to run the file in an engine."
)


class ModelFileError(ValueError):
    """A model file the command line cannot export; the message is one line that says why and what is supported."""


def model_path(path: str | Path) -> Path:
    """The model's file, ``.zip`` optional as in SB3's ``load``: ``path``, or ``path`` + ``.zip`` where only that exists."""
    path = Path(path)
    zipped = path.with_name(path.name + ".zip")
    return zipped if not path.exists() and path.suffix != ".zip" and zipped.exists() else path


def policy_class_name(policy_class: object) -> str:
    """
    The qualified name of a saved model's policy class, read from pickle's opcodes without unpickling; else its module.

    :param policy_class: The ``policy_class`` entry of the model's ``data``
    :return: E.g. ``"stable_baselines3.common.policies.ActorCriticPolicy"``
    """
    if not isinstance(policy_class, dict):
        return "?"
    module = str(policy_class.get("__module__", "")) or "?"
    try:
        # A class is pickled as a reference: its module and name, the last two strings before STACK_GLOBAL
        strings = [
            argument
            for _, argument, _ in pickletools.genops(base64.b64decode(str(policy_class.get(":serialized:", ""))))
            if isinstance(argument, str)
        ]
    except (ValueError, binascii.Error):
        return module
    return ".".join(strings[-2:]) if len(strings) >= 2 and strings[-2] == module else module


def policy_alias(model: BaseAlgorithm) -> str:
    """The name under which the model's policy class is registered (``MlpLstmPolicy``, ...), else its class name."""
    from sb3_contrib import RecurrentPPO

    policy_type = type(model.policy)
    for aliases in (model.policy_aliases, RecurrentPPO.policy_aliases):
        name = next((alias for alias, cls in aliases.items() if cls is policy_type), None)
        if name is not None:
            return name
    return policy_type.__name__


def read_model_data(path: str | Path) -> dict[str, Any]:
    """The decoded ``data`` entry (JSON) of a model that ``model.save`` wrote (``.zip`` optional), read without unpickling."""
    path = model_path(path)
    if not path.exists():
        raise ModelFileError(f"{path}: no such file; give the .zip that model.save() wrote")
    if not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: not a zip archive; give the .zip that model.save() wrote")
    with zipfile.ZipFile(path) as archive:
        if "data" not in archive.namelist():
            raise ModelFileError(f"{path}: a zip without SB3's 'data' entry, not a model saved by model.save()")
        try:
            data = json.loads(archive.read("data"))
        except ValueError as error:
            raise ModelFileError(f"{path}: its 'data' entry is not SB3's JSON ({error})") from error
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: its 'data' entry is not SB3's JSON object")
    return data


def load_model(path: str | Path, algo: str = "auto") -> BaseAlgorithm:
    """
    Load a saved model on the CPU, refusing one without memory (read from its zip without unpickling it).

    :param algo: One of ``ALGOS``, ``"auto"`` to read it from the zip
    """
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    path = model_path(path)
    data = read_model_data(path)
    policy_class = data.get("policy_class", {})
    module = str(policy_class.get("__module__", "")) if isinstance(policy_class, dict) else ""
    class_name = policy_class_name(policy_class)
    if module.startswith(("sb3_reset_ppo.", "sb3_contrib.common.recurrent.")):
        recurrent: bool | None = True
    elif module.startswith(("stable_baselines3.", "sb3_contrib.")):
        recurrent = False
    else:
        recurrent = None  # a policy of the user's own
    if algo != "auto" and recurrent is False:
        raise ModelFileError(
            f"{path}: its policy {class_name} has no memory, so it cannot be loaded as {algo}; export supports {SUPPORTED}"
        )
    if algo == "auto":
        if "window_size" in data:  # ResetPPO saves its window settings, which RecurrentPPO lacks
            algo = "maskable_reset_ppo" if "maskable" in module else "reset_ppo"
        elif recurrent is None:
            raise ModelFileError(
                f"{path}: its policy class comes from {module or 'an unnamed module'}, not one export knows; export "
                f"supports {SUPPORTED}; for a recurrent policy of your own, name the algorithm with --algo"
            )
        elif not recurrent:
            raise ModelFileError(
                f"{path}: its policy {class_name} has no memory, as PPO's, MaskablePPO's or another feed-forward "
                f"algorithm's; export supports {SUPPORTED}"
            )
        else:
            algo = "recurrent_ppo"
    from sb3_contrib import RecurrentPPO

    from sb3_reset_ppo import MaskableResetPPO, ResetPPO

    algorithms: dict[str, type[BaseAlgorithm]] = {
        "recurrent_ppo": RecurrentPPO,
        "maskable_reset_ppo": MaskableResetPPO,
        "reset_ppo": ResetPPO,
    }
    try:
        return algorithms[algo].load(path, device="cpu")
    except Exception as error:  # any failure of SB3's load: the command line says it in one line
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ModelFileError(f"{path}: could not be loaded as {algo}: {type(error).__name__}: {message}") from error


def build_parser() -> argparse.ArgumentParser:
    """The command line's arguments, each with its help."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("model", help="the saved model, the .zip that model.save() wrote (.zip optional, as in load)")
    parser.add_argument("output", help="the ONNX file to write")
    parser.add_argument("--algo", choices=ALGOS, default="auto", help="the model's algorithm (default: read from the zip)")
    parser.add_argument(
        "--layout",
        choices=tuple(LAYOUTS),
        default="plain",
        help="the tensor names: plain (the default), mlagents (Unity ML-Agents') or godot (Godot RL Agents')",
    )
    parser.add_argument("--opset", type=int, help="the ONNX opset, 14 to 20 (default: 15 with --layout mlagents, else 17)")
    parser.add_argument(
        "--dtype", choices=tuple(DTYPES), default="float32", help="the float type (float16 follows predict within 1e-2)"
    )
    parser.add_argument(
        "--exporter",
        choices=EXPORTERS,
        default="torchscript",
        help="torch's exporter: torchscript (the default) or dynamo (torch.export-based; needs onnxscript)",
    )
    parser.add_argument(
        "--cell-ops",
        choices=CELL_OPS,
        default="auto",
        help="the LSTM or GRU as ONNX's operator (fused) or as elementary operators (attention memory: always); auto: "
        "those the layout's engine runs",
    )
    parser.add_argument("--distribution", action="store_true", help="also output the distribution's parameters (plain layout)")
    parser.add_argument("--channels-last", action="store_true", help="take images as (batch, H, W, C), as the env gives them")
    normalization = parser.add_mutually_exclusive_group()
    normalization.add_argument(
        "--vec-normalize",
        metavar="PATH",
        help="the VecNormalize pickle to normalise raw observations with (default: the RL Zoo's one beside the model)",
    )
    normalization.add_argument(
        "--no-vec-normalize", action="store_true", help="export without a VecNormalize, even where one lies beside the model"
    )
    return parser


def main(argv: list[str] | None = None) -> Path:
    """Run the command line on ``argv`` (by default ``sys.argv``) and return the ONNX file written."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        model = load_model(args.model, args.algo)
        # The RL Zoo's statistics beside the model unless a file is given or none is wanted
        vec_normalize = None if args.vec_normalize is None else Path(args.vec_normalize)
        if vec_normalize is None and not args.no_vec_normalize:
            model_file = model_path(args.model)
            vec_normalize = find_vec_normalize(model_file)
            if vec_normalize is None:
                warn_if_unnormalized(model, model_file)
        options = ("layout", "opset", "dtype", "distribution", "channels_last", "exporter", "cell_ops")
        path = export_onnx(model, args.output, vec_normalize=vec_normalize, **{name: getattr(args, name) for name in options})
    except (ValueError, TypeError, OSError) as error:  # ModelFileError, export_onnx's checks, an unwritable output
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    opset = read_metadata(path)["opset"]
    normalised = f", VecNormalize {vec_normalize} in the graph" if vec_normalize is not None else ""
    print(f"{type(model).__name__} ({policy_alias(model)}) -> {path} (layout {args.layout}, opset {opset}{normalised})")
    return path


if __name__ == "__main__":
    main()
