"""Small helpers with no window logic."""

import os
import sys
import warnings
from pathlib import Path

import sb3_contrib
import stable_baselines3

# Code in these folders is library code: a warning points at the first frame outside them
_LIBRARY_DIRS = tuple(
    str(directory) + os.sep
    for directory in (
        Path(__file__).resolve().parent.parent,
        *(Path(str(module.__file__)).resolve().parent for module in (stable_baselines3, sb3_contrib)),
    )
)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """
    Issue a warning attributed to the caller's own code: the first frame outside sb3-reset-ppo, SB3 and
    sb3-contrib (so that ``ResetPPO(...)`` and ``ResetPPO.load(...)`` warnings point at the user's line).

    :param message: The warning
    :param category: The warning class
    """
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_LIBRARY_DIRS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
