"""The save pass: the ONNX model written to a file, atomically, as its own pass in the log.

A destination that cannot be written fails before anything is written (DO406); fake weights
cannot be saved (DO403) unless the initializers are left out.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import FakeWeightsError, OnnxExporterError, SaveError, SerializationError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.passes.base import PassName

__all__ = ["SavePass", "SaveRequest", "require_real_weights"]


def require_real_weights(ctx: DiagnosticContext, model: ir.Model, action: str) -> None:
    """Fail with DO403 when the model's weights are fake (meta): they cannot be saved or run."""
    fake = onnx_file.fake_weight_names(model)
    if fake:
        ctx.fail(
            "fake-weights",
            FakeWeightsError,
            ctx.model_location,
            count=len(fake),
            name=fake[0],
            action=action,
        )


@dataclasses.dataclass(frozen=True)
class SaveRequest:
    """Where and how to save ``model`` (the arguments of ``ONNXProgram.save``)."""

    model: ir.Model
    destination: str | os.PathLike[str]
    include_initializers: bool = True
    keep_initializers_as_inputs: bool = False
    external_data: bool | None = None


class SavePass:
    """Write the model; the request comes back unchanged."""

    name: ClassVar[str] = PassName.SAVE
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError

    def __call__(self, ctx: DiagnosticContext, request: SaveRequest) -> SaveRequest:
        if request.include_initializers:
            require_real_weights(ctx, request.model, "save")
        path = os.fspath(request.destination)
        cause = onnx_file.unwritable(path)
        if cause is None:
            try:
                onnx_file.save(
                    request.model,
                    path,
                    include_initializers=request.include_initializers,
                    keep_initializers_as_inputs=request.keep_initializers_as_inputs,
                    external_data=request.external_data,
                )
                return request
            except OSError as exc:
                cause = exc.strerror or str(exc)
        ctx.fail("save-failed", SaveError, path=path, cause=cause)
