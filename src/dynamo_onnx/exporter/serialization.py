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
import onnx.version_converter
import onnx_ir as ir
import onnxscript.version_converter
import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.context import exception_summary, mark_recorded
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.exporter import functions, protowriter
from dynamo_onnx.exporter.errors import SaveError, SerializationError, format_message
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
    _check_destination(destination)
    if external_data is None:
        external_data = include_initializers and weights_nbytes(model) >= TWO_GB
    try:
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
            elif all(protowriter.streamable(v) for v in model.graph.initializers.values()):
                with open(staged, "wb") as file:
                    protowriter.write_model(model, file)
            else:
                ir.save(model, staged)
            os.replace(staged, destination)
    except SaveError:
        raise
    except OSError as exc:
        raise save_error(destination, exc.strerror or str(exc)) from exc


def save_error(destination: pathlib.Path, cause: str) -> SaveError:
    rule = get_rule("save-failed")
    fields = {"path": str(destination), "cause": cause}
    error = SaveError(
        format_message(rule.id, rule.name, rule.format_message(**fields), rule.fix),
        rule_id=rule.id,
    )
    error.fields = fields  # type: ignore[attr-defined]
    return error


def _check_destination(destination: pathlib.Path) -> None:
    """Refuse paths that cannot be written before writing anything."""
    directory = destination.parent
    if destination.is_dir():
        raise save_error(destination, "it is a directory; give a file path such as model.onnx")
    if not directory.is_dir():
        raise save_error(destination, f"its directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise save_error(destination, f"its directory {directory} is not writable")


def run(
    ctx: DiagnosticContext,
    model: ir.Model,
    opset_version: int | None = None,
    module_functions: bool = False,
) -> ir.Model:
    """Convert to the requested opset, group modules into functions if asked, and describe
    the model (inputs, outputs, size) for the reports."""
    if opset_version is not None and opset_version != model.opset_imports.get(""):
        _convert_opset(ctx, model, opset_version)
    if module_functions:
        before = len(model.functions)
        skipped = functions.group_modules(model)
        ctx.record(
            "module-functions",
            properties={"skipped_modules": skipped},
            count=len(model.functions) - before,
            skipped=f"; left inline: {', '.join(skipped)}" if skipped else "",
        )
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
    blockers = _blocking_nodes(model, source, target)
    if blockers:
        cause = "blocked by " + "; ".join(
            f"{op_type} ({count} node(s): {reason})" for op_type, (count, reason, _) in blockers.items()
        )
    rule = get_rule("opset-conversion-failed")
    first = next(iter(blockers.values()), None)
    frames = parse_stack_trace(first[2]) if first else ()
    ctx.record(
        rule,
        locations=[ctx.user_frame(frames)],
        stack=frames,
        properties={"blocking_ops": sorted(blockers)},
        source=source,
        target=target,
        cause=cause,
    )
    error = SerializationError(
        format_message(
            rule.id, rule.name,
            rule.format_message(source=source, target=target, cause=cause), rule.fix,
        ),
        rule_id=rule.id,
    )
    mark_recorded(error)
    raise error


#: Nodes tried per operator type when looking for what blocks a conversion.
_PROBES_PER_OP = 3


def _probe_model(node: ir.Node, source: int) -> onnx.ModelProto:
    """A model of one node: constant inputs as initializers, others as typed inputs."""
    inputs, initializers = [], []
    for i, value in enumerate(node.inputs):
        if value is None:
            continue
        name = f"in{i}"
        producer = value.producer()
        constant = value.const_value
        if constant is None and producer is not None and producer.op_type == "Constant":
            attr = producer.attributes.get("value")
            constant = attr.value if attr is not None else None
        if constant is not None:
            initializers.append(onnx.numpy_helper.from_array(constant.numpy(), name))
            continue
        dtype = value.dtype.value if value.dtype is not None else onnx.TensorProto.FLOAT
        inputs.append(onnx.helper.make_tensor_value_info(name, dtype, None))
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(node.inputs)]
    copy = onnx.helper.make_node(
        node.op_type, names, [f"out{i}" for i in range(len(node.outputs))],
        domain=node.domain,
    )
    copy.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
    outputs = [onnx.helper.make_empty_tensor_value_info(f"out{i}") for i in range(len(node.outputs))]
    graph = onnx.helper.make_graph([copy], "probe", inputs, outputs, initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", source)])


def _blocking_nodes(
    model: ir.Model, source: int, target: int
) -> dict[str, tuple[int, str, str]]:
    """Operator type -> (how many nodes, why, the first one's stack trace) for every
    operator that the ONNX version converter cannot take from ``source`` to ``target``."""
    tried: dict[str, int] = {}
    blockers: dict[str, tuple[int, str, str]] = {}
    for node in model.graph:
        if node.domain not in ("", "ai.onnx"):
            continue
        op_type = node.op_type
        if op_type in blockers:
            count, reason, trace = blockers[op_type]
            blockers[op_type] = (count + 1, reason, trace)
            continue
        if tried.get(op_type, 0) >= _PROBES_PER_OP:
            continue
        tried[op_type] = tried.get(op_type, 0) + 1
        try:
            onnx.version_converter.convert_version(_probe_model(node, source), target)
        except Exception as exc:  # noqa: BLE001 - the reason is the finding
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            reason = reason.split("failed: ", 1)[-1]
            trace = node.metadata_props.get("pkg.dynamo_onnx.stack_trace", "")
            blockers[op_type] = (1, reason, trace)
    return blockers


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


def _describe(value: ir.Value) -> dict[str, str]:
    dims = [str(d) for d in value.shape] if value.shape is not None else ["?"]
    dtype = value.dtype.name.lower() if value.dtype is not None else "?"
    return {"name": value.name or "", "dtype": dtype, "shape": "[" + ", ".join(dims) + "]"}
