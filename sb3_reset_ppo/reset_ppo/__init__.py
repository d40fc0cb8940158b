"""ResetPPO; its recurrent policies are in :mod:`sb3_reset_ppo.reset_ppo.policies`."""

from sb3_reset_ppo.reset_ppo.reset_ppo import NonFiniteTrainingError, ResetPPO

__all__ = ["NonFiniteTrainingError", "ResetPPO"]
