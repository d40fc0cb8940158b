"""Invalid-action masking with memory: :class:`MaskableResetPPO` and its maskable recurrent policies."""

from sb3_reset_ppo.common.maskable_evaluation import MaskableEvalCallback, evaluate_policy
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
    "MaskableEvalCallback",
    "MaskableMlpGruPolicy",
    "MaskableMlpLstmPolicy",
    "MaskableMultiInputGruPolicy",
    "MaskableMultiInputLstmPolicy",
    "MaskableResetPPO",
    "MaskableWindowRolloutBuffer",
    "evaluate_policy",
]
