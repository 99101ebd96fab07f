"""The names beside ``export`` that code written for ``torch.onnx`` imports from it:
``is_in_onnx_export``, ``TrainingMode``, ``OperatorExportTypes``.

``from dynamo_onnx import TrainingMode`` must give the very objects ``torch.onnx`` has, so
``training=TrainingMode.EVAL`` compares equal whichever module the caller imported it from:
they are torch.onnx's own where torch has them (every torch this project supports), and
enums of the same members only where a future torch drops them.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

__all__ = ["OperatorExportTypes", "TrainingMode", "is_in_onnx_export"]


class _TrainingMode(enum.IntEnum):
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


class _OperatorExportTypes(enum.IntEnum):
    ONNX = 0
    ONNX_ATEN = 1
    ONNX_ATEN_FALLBACK = 2
    ONNX_FALLTHROUGH = 3


TrainingMode: Any = getattr(torch.onnx, "TrainingMode", _TrainingMode)
OperatorExportTypes: Any = getattr(torch.onnx, "OperatorExportTypes", _OperatorExportTypes)


def is_in_onnx_export() -> bool:
    """Whether an ONNX export is running: ``torch.onnx.is_in_onnx_export()``, which is also
    True while dynamo-onnx exports, so model code that branches on it behaves the same
    under both exporters."""
    return torch.onnx.is_in_onnx_export()
