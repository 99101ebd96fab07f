"""Whether a model's weights are real: fake (meta) weights cannot be saved or run. Shared by
the save and session passes."""

from __future__ import annotations

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import FakeWeightsError
from dynamo_onnx.io import onnx_file

__all__ = ["require_real_weights"]


def require_real_weights(
    ctx: DiagnosticContext, model: ir.Model, action: str, model_location: Location | None
) -> None:
    """Fail with DO403 when the model's weights are fake (meta): they cannot be saved or
    run. The finding points at the model's code, as fake weights have no line of their own."""
    fake = onnx_file.fake_weight_names(model)
    if fake:
        ctx.fail(
            "fake-weights",
            FakeWeightsError,
            model_location,
            count=len(fake),
            name=fake[0],
            action=action,
        )
