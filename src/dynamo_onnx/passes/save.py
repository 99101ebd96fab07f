"""The save pass: the ONNX model written to a file, atomically, as its own pass in the log.

A destination that cannot be written fails before anything is written (DO406); fake weights
cannot be saved (DO403) unless the initializers are left out.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, SaveError, SerializationError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.genai import write_atomically
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.real_weights import require_real_weights

__all__ = ["SavePass", "SaveRequest"]


@dataclasses.dataclass(frozen=True)
class SaveRequest:
    """Where and how to save ``model`` (the arguments of ``ONNXProgram.save``)."""

    model: ir.Model
    destination: str | os.PathLike[str]
    include_initializers: bool = True
    keep_initializers_as_inputs: bool = False
    external_data: bool | None = None
    model_location: Location | None = None
    #: Files written beside the model once it is saved (name -> text): ``genai_config.json``.
    beside: Mapping[str, str] = dataclasses.field(default_factory=dict)


class SavePass:
    """Write the model; the request comes back unchanged."""

    name: ClassVar[str] = PassName.SAVE
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: SaveRequest) -> SaveRequest:
        if request.include_initializers:
            require_real_weights(ctx, request.model, "save", request.model_location)
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
                directory = os.path.dirname(os.path.abspath(path))
                for name, text in request.beside.items():
                    write_atomically(os.path.join(directory, name), text)
                return request
            except OSError as exc:
                cause = exc.strerror or str(exc)
        ctx.fail("save-failed", SaveError, path=path, cause=cause)
