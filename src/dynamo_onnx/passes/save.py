"""The save pass: the ONNX model written to a file path, atomically, or to a binary file
object, as its own pass in the log.

A destination that cannot be written fails before anything is written (DO406); fake weights
cannot be saved (DO403) unless the initializers are left out; a file object holds one file,
so weights that need external data fail (DO412); a model saved without its weights says so
and what loads it (DO411).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, SaveError, SerializationError
from dynamo_onnx.files import atomic_write_bytes, atomic_write_text
from dynamo_onnx.io import onnx_file
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.real_weights import require_real_weights

__all__ = ["SavePass", "SaveRequest"]


@dataclasses.dataclass(frozen=True)
class SaveRequest:
    """Where and how to save ``model`` (the arguments of ``ONNXProgram.save``)."""

    model: ir.Model
    destination: Any  # a path (str, os.PathLike) or a binary file object
    include_initializers: bool = True
    keep_initializers_as_inputs: bool = False
    external_data: bool | None = None
    model_location: Location | None = None
    #: Files written beside the model once it is saved (name -> text or bytes): its
    #: family's (a runtime's configuration of the folder, a tokenizer).
    beside: Mapping[str, str | bytes] = dataclasses.field(default_factory=dict)
    #: Files the family would write beside a model of this kind but cannot for this one
    #: (name -> why not): a note each (DO511).
    not_beside: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _tensors_written(
    ctx: DiagnosticContext, done: int, total: int, done_bytes: int, total_bytes: int
) -> None:
    ctx.progress(done, total, unit="tensors", done_bytes=done_bytes, total_bytes=total_bytes)


def _describe(destination: Any) -> str:
    return (
        os.fspath(destination)
        if isinstance(destination, (str, os.PathLike))
        else f"a {type(destination).__name__}"
    )


def _report_left_out_weights(ctx: DiagnosticContext, request: SaveRequest) -> None:
    """DO411 when the weights were left out: where they are (graph inputs or nowhere)."""
    count = len(request.model.graph.initializers)
    if request.include_initializers or not count:
        return
    if request.keep_initializers_as_inputs:
        where = "they are graph inputs of the same names, fed at run time"
    else:
        where = (
            "they are neither in the file nor graph inputs, so onnx.checker and ONNX Runtime "
            "reject the file until the weights are attached (as torch.onnx saves it)"
        )
    ctx.record(
        "weights-not-saved",
        locations=[request.model_location],
        path=_describe(request.destination),
        count=count,
        where=where,
    )


class SavePass:
    """Write the model; the request comes back unchanged."""

    name: ClassVar[str] = PassName.SAVE
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: SaveRequest) -> SaveRequest:
        if request.include_initializers:
            require_real_weights(ctx, request.model, "save", request.model_location)
        if onnx_file.is_file_object(request.destination):
            self._write(ctx, request)
        else:
            self._save(ctx, request)
        _report_left_out_weights(ctx, request)
        for name, reason in request.not_beside.items():
            ctx.record(
                "file-not-written-beside",
                locations=[request.model_location],
                file=name,
                path=_describe(request.destination),
                reason=reason,
            )
        return request

    def _write(self, ctx: DiagnosticContext, request: SaveRequest) -> None:
        """To a file object: one file, so the weights are inline and must fit in it."""
        nbytes = onnx_file.weights_nbytes(request.model) if request.include_initializers else 0
        if request.external_data or nbytes >= onnx_file.TWO_GB:
            reason = (
                "external_data=True asks for a second file"
                if request.external_data
                else f"its {nbytes / 2**30:.1f} GiB of weights exceed protobuf's 2 GiB limit, "
                "so they must go to a .data file beside the model"
            )
            ctx.fail(
                "file-object-cannot-hold-model",
                SaveError,
                request.model_location,
                destination=_describe(request.destination),
                reason=reason,
            )
        onnx_file.write(
            request.model,
            request.destination,
            include_initializers=request.include_initializers,
            keep_initializers_as_inputs=request.keep_initializers_as_inputs,
        )

    def _save(self, ctx: DiagnosticContext, request: SaveRequest) -> None:
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
                    progress=functools.partial(_tensors_written, ctx),
                )
                directory = os.path.dirname(os.path.abspath(path))
                for name, content in request.beside.items():
                    if isinstance(content, bytes):
                        atomic_write_bytes(os.path.join(directory, name), content)
                    else:
                        atomic_write_text(os.path.join(directory, name), content)
                return
            except OSError as exc:
                cause = exc.strerror or str(exc)
        ctx.fail("save-failed", SaveError, path=path, cause=cause)
