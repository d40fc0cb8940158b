from sb3_reset_ppo.reset_ppo.policies import CnnLstmPolicy, MlpLstmPolicy, MultiInputLstmPolicy
from sb3_reset_ppo.reset_ppo.reset_ppo import NonFiniteTrainingError, ResetPPO

__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy", "NonFiniteTrainingError", "ResetPPO"]
