"""
:func:`export_onnx` writes one step of a policy's actor to an ONNX file, its memory (an LSTM's or GRU's state, or
attention memory) as inputs and outputs
(``python -m sb3_reset_ppo.export MODEL.zip OUT.onnx``; the ``deploy`` extra; docs/guide/deploy.md).
"""

from sb3_reset_ppo.export.actor import ExportSpec
from sb3_reset_ppo.export.mlagents import ML_AGENTS_VERSION_NUMBER
from sb3_reset_ppo.export.onnx_export import (
    SUPPORTED_ACTION_SPACES,
    SUPPORTED_OBSERVATION_SPACES,
    export_onnx,
    export_spec,
    read_metadata,
)

__all__ = [
    "ML_AGENTS_VERSION_NUMBER",
    "SUPPORTED_ACTION_SPACES",
    "SUPPORTED_OBSERVATION_SPACES",
    "ExportSpec",
    "export_onnx",
    "export_spec",
    "read_metadata",
]
