"""Whether ONNX Runtime loads a model, checked without copying its weights.

The load check (a pass) and the runtime fusions (a runtime pass, on a model already checked)
both ask ONNX Runtime whether it loads a model; the answer is the exception it raised, and
what that exception means for the user (the node, its FX node, the line) is the caller's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from dynamo_onnx.fake import is_fake
from dynamo_onnx.io.sessions import inference_session

__all__ = ["load_refusal", "node_metadata_left_out", "opset_hint", "weights_as_inputs"]

#: Initializers up to this size stay in the checked model (shapes and axes an operator may
#: need as constants); larger ones, and fake ones, become graph inputs for the check.
_KEPT_BYTES = 1024


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


@contextlib.contextmanager
def node_metadata_left_out(model: ir.Model) -> Iterator[ir.Model]:
    """While the block runs, no node has metadata (the FX node, the stack, the module each
    came from: most of a weightless model's bytes). Neither the ONNX checker nor ONNX
    Runtime reads a node's ``metadata_props`` (the checker checks the model's own, which
    stay), so a model serialized for them can leave them out."""
    saved = []
    nodes = (
        node
        for graph in (model.graph, *model.functions.values())
        for node in ir.traversal.RecursiveGraphIterator(graph)
    )
    for node in nodes:
        if node.metadata_props:
            saved.append((node, dict(node.metadata_props)))
            node.metadata_props.clear()
    try:
        yield model
    finally:
        for node, props in saved:
            node.metadata_props.update(props)


def load_refusal(
    proto: onnx.ModelProto | bytes, *, graph_optimizations: bool = True
) -> Exception | None:
    """The exception ONNX Runtime raises loading ``proto`` (made under
    :func:`weights_as_inputs`; or its serialized bytes, when the caller has them already),
    or None when it loads. One thread: the session never runs.

    With ``graph_optimizations`` (as a user's session has them) ONNX Runtime infers shapes
    through the com.microsoft operators again, so a fused node whose output has another rank
    than its consumer takes fails here as it would for the user; without them only loading
    is checked (types, shapes, a kernel for every node), which is all a freshly exported model
    needs and costs less."""
    try:
        data = proto if isinstance(proto, bytes) else proto.SerializeToString()
        inference_session(data, graph_optimizations=graph_optimizations, threads=1)
    except Exception as exc:  # the caller says what failed where
        return exc
    return None


def opset_hint(op_type: str, type_name: str, opset: int) -> str | None:
    """For an operator given a type it does not take: the first opset whose operator takes
    it, or that none does (a float4 tensor can be stored, but few operators compute on it)."""
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
