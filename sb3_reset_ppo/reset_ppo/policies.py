"""Policies of ResetPPO: sb3-contrib's recurrent policies, unchanged."""

from sb3_contrib.ppo_recurrent.policies import CnnLstmPolicy, MlpLstmPolicy, MultiInputLstmPolicy

__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy"]
