"""Checks on checkpoint files before SB3 unpacks them."""

import io
import json
import pathlib
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

from stable_baselines3.common.save_util import open_path

_REQUIRED_MEMBERS = ("data", "policy.pth")  # what every SB3 checkpoint holds

# Settings that ResetPPO checkpoints have stored from the first one on: a checkpoint holding them is ResetPPO's
_RESET_PPO_SETTINGS = ("window_size", "boundary", "weighting")

# Settings a ResetPPO checkpoint may lack, each with the value that reproduces how such a checkpoint trained: fully
# shuffled windows, inside the rollout only, starting from the memory recorded during the rollout
LEGACY_SETTINGS: dict[str, Any] = {"consecutive_windows": 1, "memory_refresh": 0, "burn_in": 0, "window_coverage": "inside"}


def check_checkpoint(path: str | pathlib.Path | io.BufferedIOBase) -> None:
    """
    Raise a ``ValueError`` with a clear reason when ``path`` is not an intact SB3 checkpoint.

    Checks every member's CRC, so that a truncated or corrupt file is reported here. It does not make a file safe: SB3
    unpickles checkpoints; load only files you trust (docs/guide/reliability.md).

    :param path: Path (``.zip`` may be omitted, as with SB3's ``load``) or an open binary file
    """
    if isinstance(path, (str, pathlib.Path)):
        # Where SB3's load looks: the path, then the path with ".zip" appended
        candidates = [pathlib.Path(path), pathlib.Path(f"{path}.zip")]
        if not any(candidate.is_file() for candidate in candidates):
            named = candidates[:1] if pathlib.Path(path).suffix == ".zip" else candidates
            raise FileNotFoundError(f"cannot load checkpoint: no file {' or '.join(str(c) for c in named)}")
    file = open_path(path, "r", verbose=0, suffix="zip")
    try:
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            corrupt = archive.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as error:
        raise ValueError(
            f"cannot load checkpoint {path}: it is not a readable zip archive ({error}); the file may be truncated "
            "or corrupt, or not a Stable-Baselines3 checkpoint"
        ) from error
    finally:
        if isinstance(path, (str, pathlib.Path)):
            file.close()
        else:
            file.seek(0)
    if corrupt is not None:
        raise ValueError(
            f"cannot load checkpoint {path}: its member {corrupt!r} is corrupt (CRC mismatch); the file is damaged"
        )
    missing = [name for name in _REQUIRED_MEMBERS if name not in names]
    if missing and any(name.endswith("data.pkl") for name in names):
        # The file's end is cut off, and zip found the directory of an archive nested inside it (torch's policy.pth)
        raise ValueError(
            f"cannot load checkpoint {path}: the file is truncated or corrupt: its zip directory, at the end, is missing, "
            "and what remains readable is a torch archive nested inside it (not the checkpoint's members); save it again "
            "or restore a copy"
        )
    if missing:
        raise ValueError(
            f"cannot load checkpoint {path}: the zip archive lacks {missing}, so it is truncated or corrupt, or not a "
            f"Stable-Baselines3 checkpoint (members: {names})"
        )


def _saved_attributes(path: str | pathlib.Path | io.BufferedIOBase) -> set[str]:
    """The names of the attributes a checkpoint stores (the keys of its ``data`` member, SB3's JSON)."""
    file = open_path(path, "r", verbose=0, suffix="zip")
    try:
        with zipfile.ZipFile(file) as archive:
            data = json.loads(archive.read("data").decode("utf-8"))
    finally:
        if isinstance(path, (str, pathlib.Path)):
            file.close()
        else:
            file.seek(0)
    return set(data)


def legacy_settings(path: str | pathlib.Path | io.BufferedIOBase) -> dict[str, Any]:
    """
    The settings a ``ResetPPO`` checkpoint lacks, each with the value it trained with (:data:`LEGACY_SETTINGS`); empty
    for another algorithm's checkpoint and for one that stores them all.

    :param path: A checkpoint that :func:`check_checkpoint` accepted (a path or an open binary file, left at its start)
    """
    saved = _saved_attributes(path)
    if not saved.issuperset(_RESET_PPO_SETTINGS):
        return {}
    return {name: value for name, value in LEGACY_SETTINGS.items() if name not in saved}


# The policies of each kind of memory, as errors name them
_MEMORY_POLICIES = {
    "LSTM": "MlpLstmPolicy, CnnLstmPolicy or MultiInputLstmPolicy",
    "GRU": "MlpGruPolicy, CnnGruPolicy or MultiInputGruPolicy",
    "attention": "MlpTrXLPolicy, CnnTrXLPolicy or MultiInputTrXLPolicy",
}


def memory_kind(policy_state: Mapping[str, Any]) -> str | None:
    """
    The memory whose parameters a policy's ``state_dict()`` (or a checkpoint's ``policy`` member) holds, from their names:
    ``"LSTM"``, ``"GRU"``, ``"attention"``, or ``None`` for a policy without memory.
    """
    if any(key.startswith("trxl_actor.") for key in policy_state):
        return "attention"
    weight = policy_state.get("lstm_actor.weight_hh_l0")
    if weight is None:
        return None
    # (gates * hidden, hidden): an LSTM has 4 gates, a GRU 3
    return "LSTM" if weight.shape[0] == 4 * weight.shape[1] else "GRU"


def check_memory_kind(policy_state: Mapping[str, Any], policy_name: str, saved: Mapping[str, Any], source: str) -> None:
    """
    Raise a ``ValueError`` naming both policies when parameters of attention memory are loaded into a recurrent
    (LSTM, GRU) policy or the reverse: their parameters do not correspond, and SB3 would report missing keys.

    :param policy_state: The receiving policy's ``state_dict()``; ``policy_name``, its name
    :param saved: The parameters to load into it (a checkpoint's ``policy`` member)
    :param source: Where they come from, for the message (``"a RecurrentPPO checkpoint"``, ...)
    """
    target, origin = memory_kind(policy_state), memory_kind(saved)
    if target is None or origin is None or (target == "attention") == (origin == "attention"):
        return
    raise ValueError(
        f"cannot load {source} of {'an' if origin in ('LSTM', 'attention') else 'a'} {origin} policy "
        f"({_MEMORY_POLICIES[origin]}) into this model's {policy_name} ({target} memory): the parameters of attention "
        "memory and of a recurrent (LSTM, GRU) memory do not correspond. Load the checkpoint as the model it is "
        "(ResetPPO.load), or train a model of the same policy"
    )


def checkpoint_algorithm(path: str | pathlib.Path | io.BufferedIOBase) -> str:
    """``"ResetPPO"`` for a checkpoint that stores ResetPPO's window settings, else ``"RecurrentPPO"``."""
    return "ResetPPO" if _saved_attributes(path).issuperset(_RESET_PPO_SETTINGS) else "RecurrentPPO"
