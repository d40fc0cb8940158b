"""Invalid-action masking with memory: :class:`MaskableResetPPO` and its policies (evaluation: ``maskable_evaluation``)."""

import warnings
from typing import Any

from sb3_reset_ppo.common import maskable_evaluation
from sb3_reset_ppo.maskable import policies, trxl_policies
from sb3_reset_ppo.maskable.buffers import (
    MaskableAttentionWindowRolloutBuffer,
    MaskableDictAttentionWindowRolloutBuffer,
    MaskableDictWindowRolloutBuffer,
    MaskableWindowRolloutBuffer,
)
from sb3_reset_ppo.maskable.maskable_reset_ppo import MaskableResetPPO
from sb3_reset_ppo.maskable.policies import *  # noqa: F403  (their __all__, listed once there)
from sb3_reset_ppo.maskable.trxl_policies import *  # noqa: F403

__all__ = [
    "MaskableAttentionWindowRolloutBuffer",
    "MaskableDictAttentionWindowRolloutBuffer",
    "MaskableDictWindowRolloutBuffer",
    "MaskableResetPPO",
    "MaskableWindowRolloutBuffer",
    *policies.__all__,
    *trxl_policies.__all__,
]

# Deprecated aliases of sb3_reset_ppo.common.maskable_evaluation's names
_DEPRECATED = ("evaluate_policy", "MaskableEvalCallback")


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        warnings.warn(
            f"sb3_reset_ppo.maskable.{name} is deprecated: use sb3_reset_ppo.common.maskable_evaluation.{name}, "
            "the same object",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(maskable_evaluation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
