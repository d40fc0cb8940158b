"""sb3-reset-ppo: sliding-window recurrent PPO with reset-and-continue for Stable-Baselines3."""

from sb3_reset_ppo.common.buffers import DictWindowRolloutBuffer, WindowRolloutBuffer
from sb3_reset_ppo.common.windows import WindowSettings, window_weights
from sb3_reset_ppo.maskable import MaskableResetPPO
from sb3_reset_ppo.reset_ppo import NonFiniteTrainingError, ResetPPO
from sb3_reset_ppo.reset_ppo.policies import (
    CnnGruPolicy,
    CnnLstmPolicy,
    MlpGruPolicy,
    MlpLstmPolicy,
    MultiInputGruPolicy,
    MultiInputLstmPolicy,
)
from sb3_reset_ppo.reset_ppo.trxl_policies import CnnTrXLPolicy, MlpTrXLPolicy, MultiInputTrXLPolicy
from sb3_reset_ppo.version import __version__

__all__ = [
    "CnnGruPolicy",
    "CnnLstmPolicy",
    "CnnTrXLPolicy",
    "DictWindowRolloutBuffer",
    "MaskableResetPPO",
    "MlpGruPolicy",
    "MlpLstmPolicy",
    "MlpTrXLPolicy",
    "MultiInputGruPolicy",
    "MultiInputLstmPolicy",
    "MultiInputTrXLPolicy",
    "NonFiniteTrainingError",
    "ResetPPO",
    "WindowRolloutBuffer",
    "WindowSettings",
    "__version__",
    "window_weights",
]
