"""Serialization: the onnx_ir model as a ModelProto or a file, written atomically.

Every write goes to a temporary file in the destination's directory and is renamed over the
destination only when complete, so a failed or interrupted save never leaves a half-written
file and never destroys an earlier one.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator

import onnx
import onnx_ir as ir
import onnxscript.version_converter
import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.context import exception_summary, mark_recorded
from dynamo_onnx.exporter.errors import SerializationError, format_message
from dynamo_onnx.rules import get_rule

__all__ = ["run", "to_proto", "save", "TWO_GB"]

#: Protobuf cannot hold more than this; larger models must use external data.
TWO_GB = 2**31


def weights_nbytes(model: ir.Model) -> int:
    """Bytes of initializer data (fake or missing weights count as zero)."""
    total = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None:
            total += tensor.nbytes
    return total


@contextlib.contextmanager
def initializers_layout(
    model: ir.Model, *, include_initializers: bool, keep_initializers_as_inputs: bool
) -> Iterator[ir.Model]:
    """Temporarily lay the initializers out as the four ``save`` combinations ask."""
    graph = model.graph
    saved_inputs = list(graph.inputs)
    saved_initializers = dict(graph.initializers)
    try:
        if keep_initializers_as_inputs:
            present = {id(v) for v in graph.inputs}
            graph.inputs.extend(v for v in saved_initializers.values() if id(v) not in present)
        if not include_initializers:
            graph.initializers.clear()
        yield model
    finally:
        graph.inputs.clear()
        graph.inputs.extend(saved_inputs)
        graph.initializers.clear()
        for name, value in saved_initializers.items():
            graph.initializers[name] = value


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as an ``onnx.ModelProto`` (weights are copied into it)."""
    return ir.to_proto(model)


def save(
    model: ir.Model,
    destination: str | os.PathLike[str],
    *,
    include_initializers: bool = True,
    keep_initializers_as_inputs: bool = False,
    external_data: bool | None = None,
) -> None:
    """Write the model to ``destination`` atomically.

    With external data (asked for, or automatic above 2 GB of weights) the weights go to
    ``<destination>.data`` beside it, written and renamed the same way.
    """
    destination = pathlib.Path(os.fspath(destination))
    directory = destination.parent
    if external_data is None:
        external_data = include_initializers and weights_nbytes(model) >= TWO_GB
    with initializers_layout(
        model,
        include_initializers=include_initializers,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
    ), tempfile.TemporaryDirectory(dir=directory, prefix=f".{destination.name}.") as tmp:
        staged = pathlib.Path(tmp) / destination.name
        if external_data:
            data_name = f"{destination.name}.data"
            ir.save(model, staged, external_data=data_name)
            os.replace(pathlib.Path(tmp) / data_name, directory / data_name)
        else:
            ir.save(model, staged)
        os.replace(staged, destination)


def run(ctx: DiagnosticContext, model: ir.Model, opset_version: int | None = None) -> ir.Model:
    """Convert to the requested opset, and describe the model (inputs, outputs, size)."""
    if opset_version is not None and opset_version != model.opset_imports.get(""):
        _convert_opset(ctx, model, opset_version)
    graph = model.graph
    _check_weights(ctx, model)
    ctx.summary["model"] = {
        "nodes": len(graph),
        "initializers": len(graph.initializers),
        "weights_bytes": weights_nbytes(model),
        "functions": len(model.functions),
        "opsets": dict(sorted(model.opset_imports.items())),
    }
    ctx.summary["inputs"] = [_describe(v) for v in graph.inputs]
    ctx.summary["outputs"] = [_describe(v) for v in graph.outputs]
    return model


def _convert_opset(ctx: DiagnosticContext, model: ir.Model, target: int) -> None:
    """Convert to ``target`` and check it happened: the converter may leave the model as is."""
    source = model.opset_imports.get("", 0)
    cause = "the ONNX version converter left the model unchanged"
    try:
        onnxscript.version_converter.convert_version(model, target, fallback=True)
    except Exception as exc:  # noqa: BLE001 - reported as the finding's cause
        cause = exception_summary(exc)
    if model.opset_imports.get("") == target:
        return
    rule = get_rule("opset-conversion-failed")
    ctx.record(rule, source=source, target=target, cause=cause)
    error = SerializationError(
        format_message(
            rule.id, rule.name,
            rule.format_message(source=source, target=target, cause=cause), rule.fix,
        ),
        rule_id=rule.id,
    )
    mark_recorded(error)
    raise error


def _check_weights(ctx: DiagnosticContext, model: ir.Model) -> None:
    """A warning for every weight holding NaN or inf (fake and meta weights are skipped)."""
    for name, value in model.graph.initializers.items():
        tensor = getattr(value.const_value, "raw", None)
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        if tensor.device.type == "meta":
            continue
        try:
            bad = int((~torch.isfinite(tensor)).sum())
        except (RuntimeError, TypeError):  # fake tensors hold no values
            continue
        if bad:
            ctx.record("non-finite-weights", name=name, count=bad, total=tensor.numel())


def _describe(value: ir.Value) -> dict[str, str]:
    dims = [str(d) for d in value.shape] if value.shape is not None else ["?"]
    dtype = value.dtype.name.lower() if value.dtype is not None else "?"
    return {"name": value.name or "", "dtype": dtype, "shape": "[" + ", ".join(dims) + "]"}
