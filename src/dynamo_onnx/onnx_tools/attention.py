"""ONNX Runtime's ``GroupQueryAttention`` as the fusions, the fused model's checks and a
model family's conventions see it: its sliding window, and whether a value is the present
of a windowed one (the one predicate for it: a windowed GQA keeps the whole cache and masks
by its window, so its present holds every token)."""

from __future__ import annotations

import onnx_ir as ir

from dynamo_onnx.onnx_tools.constants import ints

__all__ = ["GQA", "keeps_last", "local_window", "windowed_present"]

#: ONNX Runtime's operator and its domain.
GQA = ("GroupQueryAttention", "com.microsoft")


def local_window(node: ir.Node | None) -> int | None:
    """The ``local_window_size`` of a ``GroupQueryAttention`` node that has one (> 0);
    None for another node or a GQA without a window."""
    if node is None or (node.op_type, node.domain) != GQA:
        return None
    window = node.attributes.get_int("local_window_size", -1)
    return window if window > 0 else None


def windowed_present(value: ir.Value) -> bool:
    """Whether ``value`` is a windowed ``GroupQueryAttention``'s present key or value
    (outputs 1 and 2): the whole cache, past and new tokens."""
    return local_window(value.producer()) is not None and value.index() in (1, 2)


def keeps_last(node: ir.Node, count: int) -> bool:
    """Whether ``node`` is a ``Slice`` keeping the last ``count`` positions of axis 2 of a
    ``[batch, heads, positions, head_size]`` tensor (``x[:, :, -count:, :]``)."""
    if node.op_type != "Slice" or node.domain != "" or len(node.inputs) < 3:
        return False
    starts, ends = ints(node.inputs[1]), ints(node.inputs[2])
    axes = ints(node.inputs[3]) if len(node.inputs) > 3 else [0]  # Slice's default
    steps = ints(node.inputs[4]) if len(node.inputs) > 4 else None
    return (
        starts == [-count]
        and ends is not None
        and len(ends) == 1
        and ends[0] >= 2**31 - 1
        and axes in ([2], [-2])
        and steps in (None, [1])
    )
