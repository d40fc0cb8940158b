"""Invalid-action masking with memory: :class:`MaskableResetPPO` and its policies (evaluation: ``maskable_evaluation``)."""

import warnings
from typing import Any

from sb3_reset_ppo.common import maskable_evaluation
from sb3_reset_ppo.maskable.buffers import (
    MaskableAttentionWindowRolloutBuffer,
    MaskableDictAttentionWindowRolloutBuffer,
    MaskableDictWindowRolloutBuffer,
    MaskableWindowRolloutBuffer,
)
from sb3_reset_ppo.maskable.maskable_reset_ppo import MaskableResetPPO
from sb3_reset_ppo.maskable.policies import (
    MaskableCnnGruPolicy,
    MaskableCnnLstmPolicy,
    MaskableCnnTrXLPolicy,
    MaskableMlpGruPolicy,
    MaskableMlpLstmPolicy,
    MaskableMlpTrXLPolicy,
    MaskableMultiInputGruPolicy,
    MaskableMultiInputLstmPolicy,
    MaskableMultiInputTrXLPolicy,
)

__all__ = [
    "MaskableAttentionWindowRolloutBuffer",
    "MaskableCnnGruPolicy",
    "MaskableCnnLstmPolicy",
    "MaskableCnnTrXLPolicy",
    "MaskableDictAttentionWindowRolloutBuffer",
    "MaskableDictWindowRolloutBuffer",
    "MaskableMlpGruPolicy",
    "MaskableMlpLstmPolicy",
    "MaskableMlpTrXLPolicy",
    "MaskableMultiInputGruPolicy",
    "MaskableMultiInputLstmPolicy",
    "MaskableMultiInputTrXLPolicy",
    "MaskableResetPPO",
    "MaskableWindowRolloutBuffer",
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
