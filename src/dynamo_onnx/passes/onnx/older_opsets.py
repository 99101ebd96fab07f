"""Opset-18 attributes on the nodes of a model of an older opset, taken out.

ONNX's version converter leaves some on the nodes it converts down, and onnxscript's
optimizer writes ``Split(num_outputs=...)`` whatever the model's opset: both the opset
conversion and the optimization passes call :func:`drop_newer_attributes` after them.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["drop_newer_attributes"]


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
