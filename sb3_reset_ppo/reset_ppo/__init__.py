"""
ResetPPO; its recurrent policies are in :mod:`sb3_reset_ppo.reset_ppo.policies`, its attention policies in
:mod:`sb3_reset_ppo.reset_ppo.trxl_policies`.
"""

from sb3_reset_ppo.reset_ppo.reset_ppo import NonFiniteTrainingError, ResetPPO

__all__ = ["NonFiniteTrainingError", "ResetPPO"]
