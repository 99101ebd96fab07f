"""The opset-conversion pass: the model converted to the opset the caller asked for.

Translation writes opset 18 (torch_lib's); onnxscript's version converter takes it to the
target. The converter may leave a model unchanged instead of failing, so the result is
checked, and a failure names the operators that block it (each converted alone) and the
first one's line in the model. The conversion is an onnx_ir pass (``ConvertOpsetStep``),
followed by unique names again; each one's ``modified`` is recorded in the pass record.
"""

from __future__ import annotations

from typing import ClassVar

import onnx
import onnx.version_converter
import onnx_ir as ir
import onnxscript.optimizer
import onnxscript.version_converter

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.context import exception_summary
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.foreign_text import converter_message
from dynamo_onnx.onnx_tools.fake_weights import fake_weights_hidden
from dynamo_onnx.onnx_tools.names import ModelWideNamesStep
from dynamo_onnx.onnx_tools.older_opsets import (
    carried_over,
    drop_newer_attributes,
    hidden_from_converter,
    inferred_types,
)
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.logs import dropped
from dynamo_onnx.passes.metadata import STACK_TRACE, stack_frames
from dynamo_onnx.passes.onnx_graph.lowerings import lowerings_for
from dynamo_onnx.passes.onnx_graph.steps import report_inlined, run_steps

__all__ = ["ConvertOpsetStep", "OpsetConversionPass"]

_CONVERTER_LOGGER = "onnxscript.version_converter"


class OpsetConversionPass:
    """Convert to ``opset_version`` when it is not the opset translation wrote."""

    name: ClassVar[str] = PassName.OPSET_CONVERSION
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model, target = state.onnx_model, state.checked.opset
        assert model is not None
        if target is not None and target != model.opset_imports.get(""):
            # the converter's new nodes are named per graph: names made unique again
            run_steps(ctx, model, [ConvertOpsetStep(ctx, target), ModelWideNamesStep()])
        return state


class ConvertOpsetStep(ir.passes.InPlacePass):
    """The model converted to ``target`` with its local functions kept, as an onnx_ir pass
    (modified when the default domain's opset changed). It fails through ``ctx`` (DO402,
    with the blocking operators) and notes functions it had to inline (DO413)."""

    def __init__(self, ctx: DiagnosticContext, target: int) -> None:
        super().__init__()
        self.ctx = ctx
        self.target = target

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = model.opset_imports.get("")
        _convert_opset(self.ctx, model, self.target)
        return ir.passes.PassResult(model, modified=model.opset_imports.get("") != before)


def _try_convert(model: ir.Model, target: int) -> str | None:
    """Convert in place; None when it happened, else why not. The converter logs its
    fallback and the C API's traceback: the finding reports the cause, the log is dropped."""
    cause = "the ONNX version converter left the model unchanged"
    lowerings_for(target)(model)
    try:
        with dropped(_CONVERTER_LOGGER), hidden_from_converter(model, target):
            onnxscript.version_converter.convert_version(model, target, fallback=True)
    except Exception as exc:  # reported as the finding's cause
        cause = converter_message(exception_summary(exc))
    return None if model.opset_imports.get("") == target else cause


#: A stand-in value per attribute type, for a function's attribute parameters while its body
#: is converted (the converter refuses references; no adapter from 18 up reads these).
_STAND_INS: dict[ir.AttributeType, object] = {
    ir.AttributeType.FLOAT: 0.0,
    ir.AttributeType.INT: 0,
    ir.AttributeType.STRING: "",
    ir.AttributeType.FLOATS: [],
    ir.AttributeType.INTS: [],
    ir.AttributeType.STRINGS: [],
}


def _convert_body(function: ir.Function, target: int, ir_version: int) -> bool:
    """Convert ``function``'s body in place to ``target``; False when it cannot be.

    The body (an ``ir.Graph`` with the function's opset imports) is converted as the graph
    of a model of its own. Its references to the function's attribute parameters
    (``scale: float`` -> ``value_float=@scale``) are stand-in values meanwhile, put back
    after; a node the conversion replaced or whose attribute it changed means the
    parameter mattered to an adapter, and the function is not kept.
    """
    references = [
        (node, name, attr)
        for node in function
        for name, attr in node.attributes.items()
        if attr.is_ref()
    ]
    if any(attr.type not in _STAND_INS for _, _, attr in references):
        return False
    stand_ins = []
    for node, name, attr in references:
        stand_in = ir.Attr(name, attr.type, _STAND_INS[attr.type])
        node.attributes[name] = stand_in
        stand_ins.append(stand_in)
    _try_convert(ir.Model(function.graph, ir_version=ir_version), target)
    # (the C API's fallback, below 18, converts a copy: the body itself is then unchanged)
    converted = function.opset_imports.get("") == target
    kept = {id(node) for node in function}
    for (node, name, attr), stand_in in zip(references, stand_ins):
        if id(node) not in kept or node.attributes.get(name) is not stand_in:
            return False
        node.attributes[name] = attr
    return converted


def _converted_functions(model: ir.Model, target: int) -> list[ir.Function] | None:
    """Copies of the model's local functions with their bodies converted to ``target``, or
    None when the converter cannot convert one (below opset 18, or an adapter that needs an
    attribute parameter's value): onnxscript's ``convert_version`` inlines every function
    before converting a model, although its converter converts a function's body as it
    converts a graph."""
    copies = [
        ir.serde.deserialize_function(ir.serde.serialize_function(f))
        for f in model.functions.values()
    ]
    if all(_convert_body(f, target, model.ir_version) for f in copies):
        return copies
    return None


def _convert_opset(ctx: DiagnosticContext, model: ir.Model, target: int) -> None:
    """Convert to ``target`` with the model's local functions kept (DO413 where they
    cannot be: below opset 18)."""
    functions = _converted_functions(model, target) if model.functions else []
    if functions is None:
        before = set(model.functions)
        _convert_graph(ctx, model, target)
        report_inlined(
            ctx,
            before,
            model,
            f"ONNX's version converter cannot take a function's body to opset {target}",
        )
        return
    model.functions.clear()
    try:
        _convert_graph(ctx, model, target)
    finally:
        for function in functions:
            model.functions[function.identifier()] = function


def _convert_graph(ctx: DiagnosticContext, model: ir.Model, target: int) -> None:
    """Convert to ``target`` and check it happened: the converter may leave the model as is.

    Going down past opset 18, operators whose axes became inputs (ReduceMean, ReduceMax...)
    convert only when the axes are constants; torch_lib computes them with a small chain of
    constant nodes, so a first failure is retried once those are folded.
    """
    source = model.opset_imports.get("", 0)
    cause = _try_convert(model, target)
    if cause is None:
        drop_newer_attributes(model, target)
        return
    with fake_weights_hidden(model):
        onnxscript.optimizer.fold_constants(model)
    cause = _try_convert(model, target) or ""
    if not cause:
        drop_newer_attributes(model, target)
        return
    blockers = _blocking_nodes(model, source, target)
    if blockers:
        cause = "blocked by " + "; ".join(
            f"{op_type} ({count} node(s): {reason})"
            for op_type, (count, reason, _) in blockers.items()
        )
    first = next(iter(blockers.values()), None)
    frames = stack_frames(ctx, first[2]) if first else ()
    ctx.fail(
        "opset-conversion-failed",
        SerializationError,
        ctx.user_frame(frames),
        stack=frames,
        properties={"blocking_ops": sorted(blockers)},
        source=source,
        target=target,
        cause=cause,
    )


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
        node.op_type,
        names,
        [f"out{i}" for i in range(len(node.outputs))],
        domain=node.domain,
    )
    copy.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
    outputs = [
        onnx.helper.make_empty_tensor_value_info(f"out{i}") for i in range(len(node.outputs))
    ]
    graph = onnx.helper.make_graph([copy], "probe", inputs, outputs, initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", source)])


def _blocking_nodes(model: ir.Model, source: int, target: int) -> dict[str, tuple[int, str, str]]:
    """Operator type -> (how many nodes, why, the first one's stack trace) for every
    operator that the ONNX version converter cannot take from ``source`` to ``target``."""
    tried: dict[str, int] = {}
    blockers: dict[str, tuple[int, str, str]] = {}
    types = inferred_types(model) if target < 18 else {}
    for node in model.graph:
        if node.domain not in ("", "ai.onnx") or carried_over(node, target, types):
            continue  # (a carried node has no adapter, and needs none)
        op_type = node.op_type
        if op_type in blockers:
            count, reason, trace = blockers[op_type]
            blockers[op_type] = (count + 1, reason, trace)
            continue
        if tried.get(op_type, 0) >= _PROBES_PER_OP:
            continue
        tried[op_type] = tried.get(op_type, 0) + 1
        probe = _probe_model(node, source)
        try:
            onnx.version_converter.convert_version(probe, target)
        except Exception as exc:  # the reason is the finding
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            reason = converter_message(reason.split("failed: ", 1)[-1])
            oldest = _oldest_opset(probe, target, source)
            trace = node.metadata_props.get(STACK_TRACE, "")
            blockers[op_type] = (1, f"{reason}; the oldest opset that takes it: {oldest}", trace)
    return blockers


def _oldest_opset(probe: onnx.ModelProto, target: int, source: int) -> int:
    """The oldest opset above ``target`` that the one-node ``probe`` converts to as a
    model does (lowered, carried over or converted; at worst ``source``, where it was
    written)."""
    for opset in range(target + 1, source):
        if _try_convert(ir.from_proto(probe), opset) is None:
            return opset
    return source
