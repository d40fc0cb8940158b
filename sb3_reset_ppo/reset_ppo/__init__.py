from sb3_reset_ppo.reset_ppo.policies import (
    CnnGruPolicy,
    CnnLstmPolicy,
    MlpGruPolicy,
    MlpLstmPolicy,
    MultiInputGruPolicy,
    MultiInputLstmPolicy,
)
from sb3_reset_ppo.reset_ppo.reset_ppo import NonFiniteTrainingError, ResetPPO

__all__ = [
    "CnnGruPolicy",
    "CnnLstmPolicy",
    "MlpGruPolicy",
    "MlpLstmPolicy",
    "MultiInputGruPolicy",
    "MultiInputLstmPolicy",
    "NonFiniteTrainingError",
    "ResetPPO",
]
