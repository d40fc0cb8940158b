"""
Invalid-action masking with memory: :class:`MaskableResetPPO` and its maskable recurrent policies. The masked
evaluation is :mod:`sb3_reset_ppo.common.maskable_evaluation` (as sb3-contrib's is ``sb3_contrib.common.maskable``'s).
"""

import warnings
from typing import Any

from sb3_reset_ppo.common import maskable_evaluation
from sb3_reset_ppo.maskable.buffers import MaskableDictWindowRolloutBuffer, MaskableWindowRolloutBuffer
from sb3_reset_ppo.maskable.maskable_reset_ppo import MaskableResetPPO
from sb3_reset_ppo.maskable.policies import (
    MaskableCnnGruPolicy,
    MaskableCnnLstmPolicy,
    MaskableMlpGruPolicy,
    MaskableMlpLstmPolicy,
    MaskableMultiInputGruPolicy,
    MaskableMultiInputLstmPolicy,
)

__all__ = [
    "MaskableCnnGruPolicy",
    "MaskableCnnLstmPolicy",
    "MaskableDictWindowRolloutBuffer",
    "MaskableMlpGruPolicy",
    "MaskableMlpLstmPolicy",
    "MaskableMultiInputGruPolicy",
    "MaskableMultiInputLstmPolicy",
    "MaskableResetPPO",
    "MaskableWindowRolloutBuffer",
]

# Names this package also gave the masked evaluation, kept as deprecated aliases of the documented ones
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
