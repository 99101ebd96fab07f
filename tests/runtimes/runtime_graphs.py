"""What the hand-built graphs of the runtime's rule tests share."""

from __future__ import annotations

import onnx_ir as ir

FLOAT = ir.DataType.FLOAT


def count(model: ir.Model, op_type: str) -> int:
    """The nodes of ``op_type`` in the main graph."""
    return sum(node.op_type == op_type for node in model.graph)
