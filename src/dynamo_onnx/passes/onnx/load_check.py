"""The load-check pass: the model we hand back passes the ONNX checker and loads in ONNX
Runtime, or the export fails naming the ONNX node, its FX node and the user's line.

A translation bug (two types bound to one type parameter, a subgraph reusing a value name, a
bias of the wrong shape) otherwise surfaces later, at load or run time, far from its cause.
Fake weights cannot be loaded, and a model above :data:`MAX_CHECKED_BYTES` is not copied
for the check: both are a note saying so.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import onnx
import onnx_ir as ir
import onnxruntime as ort

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_summary
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.metadata import FX_NODE_NAME, STACK_TRACE

__all__ = ["MAX_CHECKED_BYTES", "LoadCheckPass"]

#: Weights above this are not copied into a ModelProto for the check (it would double the
#: export's peak memory); the structure is still checked.
MAX_CHECKED_BYTES = 256 * 2**20

#: How the checker ("node name: add_n0", "in 'add_n0 : value'") and ONNX Runtime ("in node
#: (add_n0)", "node with name 'add_n0'") name a node.
_NODE = re.compile(
    r"node name: ([\w./-]+)|node \(([\w./-]+)\)|node with name '([\w./-]+)'|"
    r"in '([\w./-]+) : ",
    re.IGNORECASE,
)


def quiet_session_options() -> ort.SessionOptions:
    """A session of our own logs errors only: ONNX Runtime's warnings while it loads the
    model ("can't constant fold CastLike") are its optimizer's business, not the user's."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return options


class LoadCheckPass:
    """onnx.checker (full) and an ONNX Runtime session on the exported model."""

    name: ClassVar[str] = PassName.LOAD_CHECK
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model = state.onnx_model
        assert model is not None
        if onnx_file.fake_weight_names(model):
            ctx.record(
                "model-load-check-skipped",
                reason="its weights are fake (meta) until apply_weights",
            )
            return state
        if onnx_file.weights_nbytes(model) > MAX_CHECKED_BYTES:
            ctx.record(
                "model-load-check-skipped",
                reason=f"its weights are above {MAX_CHECKED_BYTES >> 20} MiB, too large to copy "
                "for the check",
            )
            return state
        proto = ir.to_proto(model)
        try:
            onnx.checker.check_model(proto, full_check=True)
            ort.InferenceSession(
                proto.SerializeToString(), quiet_session_options(), ["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - the finding says what failed where
            location, fields = _where(ctx, model, exc)
            if type(exc).__name__ != "NotImplemented":
                ctx.fail("model-invalid", SerializationError, location, **fields)
            # ONNX Runtime's NOT_IMPLEMENTED: a valid model, with a kernel this runtime lacks.
            ctx.record("runtime-kernel-missing", locations=[location], **fields)
        return state


def _where(
    ctx: DiagnosticContext, model: ir.Model, exc: Exception
) -> tuple[Location | None, dict[str, Any]]:
    """The finding's fields for the node the checker or ONNX Runtime names: that ONNX node,
    its FX node and the user's line that called it."""
    nodes = {node.name: node for node in ir.traversal.RecursiveGraphIterator(model.graph)}
    candidates = [next(filter(None, groups)) for groups in _NODE.findall(str(exc))]
    named = next((m for m in candidates if m in nodes), None)
    node = nodes.get(named) if named else None
    trace = node.metadata_props.get(STACK_TRACE, "") if node is not None else ""
    frames = parse_stack_trace(trace)
    where = ctx.user_frame(frames)
    types = (
        ", ".join(str(v.dtype.name).lower() if v and v.dtype else "?" for v in node.inputs)
        if node is not None
        else "?"
    )
    cause = exception_summary(exc)
    hint = _opset_hint(str(exc), model.opset_imports.get("", 0))
    return where, {
        "stack": frames,
        "node": named or "unknown",
        "op_type": node.op_type if node is not None else "?",
        "types": types,
        "fx_node": node.metadata_props.get(FX_NODE_NAME, "unknown")
        if node is not None
        else "unknown",
        "source": ctx.display(where) if where else "an unknown line",
        "cause": f"{cause}; {hint}" if hint else cause,
    }


_UNSUPPORTED_TYPE = re.compile(r"op_type:(\w+).*unsupported type:? tensor\((\w+)\)")


def _opset_hint(message: str, opset: int) -> str | None:
    """For "op_type:X ... unsupported type tensor(T)": the first opset whose X takes T, or
    that none does (a float4 tensor can be stored, but few operators compute on it)."""
    found = _UNSUPPORTED_TYPE.search(message)
    if found is None:
        return None
    op_type, type_name = found.groups()
    latest = onnx.defs.onnx_opset_version()
    for version in range(opset + 1, latest + 1):
        try:
            schema = onnx.defs.get_schema(op_type, version)
        except onnx.defs.SchemaError:
            return None
        allowed = {t for c in schema.type_constraints for t in c.allowed_type_strs}
        if f"tensor({type_name})" in allowed:
            return f"ONNX `{op_type}` takes {type_name} from opset {version}: export with opset_version={version}"
    return (
        f"no ONNX opset (up to {latest}) has `{op_type}` on {type_name}: convert the tensor "
        "to a type ONNX computes with before this call"
    )
