"""
``python -m sb3_reset_ppo.export MODEL.zip OUT.onnx [--layout mlagents] [--opset N] [--algo ...]``: export a saved
ResetPPO, MaskableResetPPO or sb3-contrib RecurrentPPO model's actor to ONNX (see :func:`export_onnx`).
"""

import argparse
import json
import zipfile
from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_reset_ppo.export.onnx_export import DTYPES, EXPORTERS, LAYOUTS, export_onnx

ALGOS = ("auto", "reset_ppo", "maskable_reset_ppo", "recurrent_ppo")


def detect_algo(path: str | Path) -> str:
    """
    The algorithm of a saved model, read from its zip's ``data`` (JSON; nothing is unpickled): ResetPPO's window
    settings (``window_size``) tell it from RecurrentPPO, the policy's module tells MaskableResetPPO.

    :param path: The model's zip
    :return: ``"reset_ppo"``, ``"maskable_reset_ppo"`` or ``"recurrent_ppo"``
    """
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data"))
    policy_module = str(data.get("policy_class", {}).get("__module__", ""))
    if "window_size" not in data:
        return "recurrent_ppo"
    return "maskable_reset_ppo" if "maskable" in policy_module else "reset_ppo"


def load_model(path: str | Path, algo: str = "auto") -> BaseAlgorithm:
    """
    Load a saved model on the CPU.

    :param path: The model's zip
    :param algo: One of ``ALGOS``; ``"auto"``: :func:`detect_algo`
    :return: The model
    """
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    if algo == "auto":
        algo = detect_algo(path)
    if algo == "recurrent_ppo":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO.load(path, device="cpu")
    if algo == "maskable_reset_ppo":
        from sb3_reset_ppo import MaskableResetPPO

        return MaskableResetPPO.load(path, device="cpu")
    from sb3_reset_ppo import ResetPPO

    return ResetPPO.load(path, device="cpu")


def main(argv: list[str] | None = None) -> Path:
    """
    The command line.

    :param argv: Arguments (``None``: ``sys.argv``)
    :return: The ONNX file written
    """
    parser = argparse.ArgumentParser(prog="python -m sb3_reset_ppo.export", description=__doc__.strip().splitlines()[0])
    parser.add_argument("model", help="the saved model (.zip)")
    parser.add_argument("output", help="the ONNX file to write")
    parser.add_argument("--algo", choices=ALGOS, default="auto", help="the model's algorithm (default: read from the zip)")
    parser.add_argument("--layout", choices=LAYOUTS, default="plain", help="tensor names: plain (default) or Unity ML-Agents'")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset, 14 to 20 (default 17; Unity's Sentis: 15)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    parser.add_argument("--exporter", choices=EXPORTERS, default="torchscript")
    parser.add_argument("--distribution", action="store_true", help="also output the distribution's parameters (plain)")
    parser.add_argument("--channels-last", action="store_true", help="take images as (batch, H, W, C), as the env gives them")
    args = parser.parse_args(argv)
    model = load_model(args.model, args.algo)
    path = export_onnx(
        model,
        args.output,
        layout=args.layout,
        opset=args.opset,
        dtype=args.dtype,
        distribution=args.distribution,
        channels_last=args.channels_last,
        exporter=args.exporter,
    )
    print(f"{type(model).__name__} ({type(model.policy).__name__}) -> {path} (layout {args.layout}, opset {args.opset})")
    return path


if __name__ == "__main__":
    main()
