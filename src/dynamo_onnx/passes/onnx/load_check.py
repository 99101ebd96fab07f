"""The load-check pass: the model we hand back loads in ONNX Runtime, or the export fails
naming the ONNX node, its FX node and the user's line.

A translation bug (two types bound to one type parameter, a subgraph reusing a value name, a
bias of the wrong shape) otherwise surfaces later, at load or run time, far from its cause.
ONNX Runtime decides: a model the strict ONNX checker rejects but ONNX Runtime loads (a
declared shape the checker's inference contradicts) is handed back with a DO410 warning naming the node and
the checker's complaint. A model with nodes of a custom domain (``torch.onnx.ops.symbolic``,
reported by translation as DO310) is checked by the ONNX checker only: ONNX Runtime refuses
any node it has no kernel for, and the model is what the user asked for. The check copies no weights: the session loads the model with its
weights as graph inputs (:func:`weights_as_inputs`), so fake weights and a 7B model are
checked like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

import onnx
import onnx_ir as ir
import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_frames, exception_summary
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.fake import is_fake
from dynamo_onnx.foreign_text import UnsupportedType, read_ort_error
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.domains import custom_domain_nodes
from dynamo_onnx.passes.metadata import FX_NODE_NAME, STACK_TRACE, stack_frames
from dynamo_onnx.passes.model import eager_run, runs_eagerly

__all__ = ["LoadCheckPass", "runtime_refusal", "weights_as_inputs"]

#: Initializers up to this size stay in the checked model (shapes and axes an operator may
#: need as constants); larger ones, and fake ones, become graph inputs for the check.
_KEPT_BYTES = 1024


class LoadCheckPass:
    """onnx.checker (full) and an ONNX Runtime session on the exported model."""

    name: ClassVar[str] = PassName.LOAD_CHECK
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model = state.onnx_model
        assert model is not None
        with weights_as_inputs(model):
            proto = ir.to_proto(model)
        complaint: Exception | None = None
        try:
            onnx.checker.check_model(proto, full_check=True)
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime decides below
            complaint = exc
        if custom_domain_nodes(model):
            self._complain(ctx, model, complaint)  # ONNX Runtime would refuse the domain
            return state
        try:
            # Loading is what is checked (types, shapes, a kernel for every node); ONNX
            # Runtime's graph optimizations would only cost time (a third of the check on
            # GPT-2; the weights are inputs here, so there is nothing to fold anyway), and
            # so would a pool of threads for a session that never runs (half of the
            # session's 0.18 s on GPT-2, on a 2-core machine).
            inference_session(proto.SerializeToString(), graph_optimizations=False, threads=1)
        except Exception as exc:  # noqa: BLE001 - the finding says what failed where
            location, fields = _where(ctx, model, exc)
            if type(exc).__name__ != "NotImplemented":
                _fail_if_inputs_rejected(ctx, state, location)
                ctx.fail("model-invalid", SerializationError, location, **fields)
            # ONNX Runtime's NOT_IMPLEMENTED: a valid model, with a kernel this runtime lacks.
            ctx.record("runtime-kernel-missing", locations=[location], **fields)
            return state
        self._complain(ctx, model, complaint)
        return state

    @staticmethod
    def _complain(ctx: DiagnosticContext, model: ir.Model, complaint: Exception | None) -> None:
        """DO410 for what the strict checker said of a model that is handed back."""
        if complaint is not None:
            location, fields = _where(ctx, model, complaint)
            ctx.record("model-checker-complaint", locations=[location], **fields)


def _fail_if_inputs_rejected(
    ctx: DiagnosticContext, state: ExportState, where: Location | None
) -> None:
    """DO127 when the model itself refuses the example inputs in eager PyTorch (a float16
    input to a float32 ``Linear``): torch.export's fake tensors let such a call through,
    and blaming our ONNX function for it (DO407's fix) would send the user the wrong way.
    Run only once the model is refused, and only on a module with real weights."""
    model = state.checked.model
    if not isinstance(model, torch.nn.Module) or not runs_eagerly(model):
        return
    error = eager_run(model, tuple(state.checked.args), dict(state.checked.kwargs)).error
    if error is None:
        return
    frames = exception_frames(error)
    location = ctx.user_frame(frames) or where or ctx.call_site
    ctx.fail(
        "example-inputs-do-not-fit",
        SerializationError,
        location,
        stack=frames,
        properties={"exception": type(error).__name__},
        source=ctx.display(location) if location else "an unknown line",
        cause=exception_summary(error),
    )


def _large_or_fake(value: ir.Value) -> bool:
    tensor = value.const_value
    return tensor is None or is_fake(getattr(tensor, "raw", None)) or (tensor.nbytes > _KEPT_BYTES)


@contextlib.contextmanager
def weights_as_inputs(model: ir.Model) -> Iterator[ir.Model]:
    """While the block runs, the model's weights (initializers above 1 KiB, and fake ones)
    are graph inputs of their type and shape, not initializers: a ``ModelProto`` made then
    holds no weight, and ONNX Runtime loads it all the same (types, shapes, kernels)."""
    graph = model.graph
    original = dict(graph.initializers)  # put back in this order
    moved = [v for v in original.values() if _large_or_fake(v)]
    types = [(v.type, v.shape) for v in moved]
    for value in moved:
        tensor = value.const_value
        if value.type is None and tensor is not None:
            value.type = ir.TensorType(tensor.dtype)
        if value.shape is None and tensor is not None:
            value.shape = tensor.shape
        graph.initializers.pop(str(value.name))
    graph.inputs.extend(moved)
    try:
        yield model
    finally:
        for _ in moved:  # pop, not del: onnx_ir then unmarks each one as a graph input
            graph.inputs.pop()
        for value, (kind, shape) in zip(moved, types):
            value.type, value.shape = kind, shape
        graph.initializers.clear()
        for name, value in original.items():
            graph.initializers[name] = value


def runtime_refusal(
    ctx: DiagnosticContext, model: ir.Model
) -> tuple[Location | None, dict[str, Any]] | None:
    """Why ONNX Runtime refuses to load ``model`` (a finding's location and fields: the node
    it names, its FX node, the user's line), or None when it loads. For a pass that rewrites
    a model already checked (the runtime fusions): no checker, custom domains not expected.

    Unlike the load check, with ONNX Runtime's graph optimizations, as a user's session has
    them: they infer shapes through the com.microsoft operators again, and a fused node whose
    output has another rank than its consumer takes loads without them and fails with them.
    """
    with weights_as_inputs(model):
        proto = ir.to_proto(model)
    try:
        inference_session(proto.SerializeToString(), threads=1)
    except Exception as exc:  # noqa: BLE001 - the finding says what failed where
        return _where(ctx, model, exc)
    return None


def _where(
    ctx: DiagnosticContext, model: ir.Model, exc: Exception
) -> tuple[Location | None, dict[str, Any]]:
    """The finding's fields for the node the checker or ONNX Runtime names: that ONNX node,
    its FX node and the user's line that called it."""
    nodes = {node.name: node for node in ir.traversal.RecursiveGraphIterator(model.graph)}
    error = read_ort_error(str(exc))  # the checker's words or ONNX Runtime's
    named = next((m for m in error.nodes if m in nodes), None)
    node = nodes.get(named) if named else None
    trace = node.metadata_props.get(STACK_TRACE, "") if node is not None else ""
    frames = stack_frames(ctx, trace)
    where = ctx.user_frame(frames)
    types = (
        ", ".join(str(v.dtype.name).lower() if v and v.dtype else "?" for v in node.inputs)
        if node is not None
        else "?"
    )
    cause = exception_summary(exc)
    hint = (
        _opset_hint(error.unsupported_type, model.opset_imports.get("", 0))
        if error.unsupported_type is not None
        else None
    )
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


def _opset_hint(unsupported: UnsupportedType, opset: int) -> str | None:
    """For an operator given a type it does not take: the first opset whose operator takes
    it, or that none does (a float4 tensor can be stored, but few operators compute on it)."""
    op_type, type_name = unsupported.op_type, unsupported.type_name
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
