"""Opset-18 nodes in a model of an older opset: attributes taken out, nodes carried over.

ONNX's version converter leaves some attributes on the nodes it converts down, and
onnxscript's optimizer writes ``Split(num_outputs=...)`` whatever the model's opset: both
the opset conversion and the optimization passes call :func:`drop_newer_attributes` after
them. The converter also has no adapter down from 18 for some operators whose opset-18 form,
as torch_lib writes it, means what the older one does: :func:`hidden_from_converter` carries
those over unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx_ir as ir

__all__ = ["carried_over", "drop_newer_attributes", "hidden_from_converter"]

#: A domain the version converter leaves alone, for the nodes it must not look at.
_HIDDEN = "dynamo_onnx.hidden"


#: Reductions that took ``noop_with_empty_axes`` with their axes input in opset 18.
_REDUCTIONS_18 = frozenset(
    {
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSumSquare",
    }
)


def drop_newer_attributes(model: ir.Model, target: int) -> None:
    """Attributes of opset 18 that the converter leaves, or the optimizer writes, on the
    nodes of a model of an older opset ``target``, which ONNX Runtime rejects
    ("Unrecognized attribute").

    A reduction's ``noop_with_empty_axes`` (the converter moves the axes back to an
    attribute but keeps it): at its default (0) it says nothing and is dropped (at 1 it is
    kept: the checker then names the node). ``Split``'s ``num_outputs`` (GPT-2's attention
    splits its fused projection in three): the sizes become the ``split`` input when the
    axis is static; on a dynamic axis the attribute goes, and ``Split`` without sizes
    makes as many equal parts as it has outputs, as ``num_outputs`` did for a divisible
    size.
    """
    if target >= 18:
        return
    graphs = [model.graph, *model.functions.values()]
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in _REDUCTIONS_18:
                attr = node.attributes.get("noop_with_empty_axes")
                if attr is not None and attr.value == 0:
                    del node.attributes["noop_with_empty_axes"]
            elif node.op_type == "Split" and "num_outputs" in node.attributes:
                _split_sizes_as_input(node)


#: The oldest opset whose version of the operator reads its opset-18 form (without what 18
#: added) the same: ``Pad`` took its pads as an input from 11, ``Split`` its sizes from 13.
_SAME_SINCE = {"Pad": 11, "Split": 13, "LpPool": 11}


def _same_below_18(node: ir.Node, target: int) -> bool:
    """An opset-18 node that reads as its version at ``target`` (the converter has no
    adapter between them): a ``Pad`` without the ``axes`` input 18 added, a ``Split``
    without ``num_outputs``, an ``LpPool`` without ``ceil_mode``."""
    if node.domain not in ("", "ai.onnx") or target < _SAME_SINCE.get(node.op_type, 18):
        return False
    if node.op_type == "Pad":
        return len(node.inputs) < 4 or node.inputs[3] is None
    if node.op_type == "Split":
        return "num_outputs" not in node.attributes
    if node.op_type == "LpPool":
        ceil = node.attributes.get("ceil_mode")
        return ceil is None or ceil.value == 0
    return False


def carried_over(node: ir.Node, target: int) -> bool:
    """Whether ``node`` passes the conversion down to ``target`` unchanged
    (:func:`hidden_from_converter` carries it): never what blocks a conversion."""
    return target < 18 and _same_below_18(node, target)


@contextlib.contextmanager
def hidden_from_converter(model: ir.Model, target: int) -> Iterator[None]:
    """While converting ``model`` down to ``target`` (< 18), the nodes that mean the same
    at ``target`` sit in a domain of their own, so the converter neither refuses the model
    ("No Adapter To Version 17 for Pad": a ``LocalResponseNorm`` at opset 17) nor touches
    them; they are put back after, converted or not. torch.onnx keeps such a model at
    opset 18 when the user asked 17."""
    hidden = False
    if target < 18:
        for node in _nodes(model):
            if carried_over(node, target):
                node.domain = _HIDDEN
                hidden = True
    if hidden:
        model.opset_imports[_HIDDEN] = 1
    try:
        yield
    finally:
        # found again: the C API's fallback converts a copy, whose nodes replace these
        for node in _nodes(model) if hidden else ():
            if node.domain == _HIDDEN:
                node.domain = ""
        model.opset_imports.pop(_HIDDEN, None)
        for function in model.functions.values():
            function.opset_imports.pop(_HIDDEN, None)


def _nodes(model: ir.Model) -> list[ir.Node]:
    return [
        node
        for graph in [model.graph, *model.functions.values()]
        for node in ir.traversal.RecursiveGraphIterator(graph)
    ]


def _split_sizes_as_input(node: ir.Node) -> None:
    """Replace ``Split``'s ``num_outputs`` by the sizes, when its input's axis is static."""
    parts = node.attributes.pop("num_outputs").value
    data = node.inputs[0]
    axis = node.attributes["axis"].value if "axis" in node.attributes else 0
    shape = data.shape if data is not None else None
    size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
    if not isinstance(size, int) or len(node.inputs) > 1:
        return
    chunk = -(-size // parts)  # ceil: the last part is smaller, as in opset 18
    sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
    if len(sizes) != len(node.outputs):
        return
    constant = ir.node(
        "Constant", [], attributes={"value": ir.tensor(sizes, dtype=ir.DataType.INT64)}
    )
    constant.outputs[0].name = f"{node.name}_sizes"
    node.graph.insert_before(node, constant)
    node.resize_inputs(2)
    node.replace_input_with(1, constant.outputs[0])
