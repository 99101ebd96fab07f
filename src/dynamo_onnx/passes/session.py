"""The session pass: an ONNX Runtime session for the model, as its own pass in the log.

Running the program and verifying it both start here, so a model that cannot run (fake
weights: DO403; a session ONNX Runtime refuses: DO600) fails inside a pass and the log
says the work after the export failed.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from typing import Any, ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, VerificationError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.options import ONNXRuntimeOptions
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.real_weights import require_real_weights

__all__ = ["SessionPass", "SessionRequest", "default_session"]


def default_session(model: str | bytes, options: ONNXRuntimeOptions | None = None) -> Any:
    """A session configured by ``options`` (providers, session options), on the CPU
    otherwise: :func:`dynamo_onnx.io.sessions.inference_session`'s policy."""
    return inference_session(model, options)


@dataclasses.dataclass(frozen=True)
class SessionRequest:
    """The model to run and how to make its session; ``session`` once the pass ran."""

    model: ir.Model
    initializer: Callable[[str | bytes], Any] = default_session
    model_location: Location | None = None
    session: Any = None


class SessionPass:
    """Create the session: from the serialized model, or from a file when the weights are
    too large for one protobuf (written with this pass's own save, not the save pass)."""

    name: ClassVar[str] = PassName.SESSION
    error_type: ClassVar[type[OnnxExporterError]] = VerificationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: SessionRequest) -> SessionRequest:
        model = request.model
        require_real_weights(ctx, model, "run", request.model_location)
        if onnx_file.weights_nbytes(model) < onnx_file.TWO_GB // 2:
            proto = onnx_file.to_proto(model).SerializeToString()
            return dataclasses.replace(request, session=request.initializer(proto))
        with tempfile.TemporaryDirectory(prefix="dynamo_onnx_session_") as tmp:
            path = os.path.join(tmp, "model.onnx")
            onnx_file.save(model, path, external_data=True)
            return dataclasses.replace(request, session=request.initializer(path))
