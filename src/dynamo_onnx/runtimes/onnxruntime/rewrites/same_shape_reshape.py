"""A ``Reshape`` to its input's own shape, removed: it stands between an attention and the
transposes GroupQueryAttention's pattern expects."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern

__all__ = ["SameShapeReshape"]


class SameShapeReshape(pattern.RewriteRuleClassBase):
    """A ``Reshape`` whose result has its input's shape, dimension for dimension (sizes or
    the same symbolic names), is its input. torch_lib's attention leaves one after the
    attention product (``[B, H, S, Dh]`` to ``[B, -1, S, Dh]``): it sits between the
    attention and the transposes GroupQueryAttention's pattern expects."""

    def __init__(self) -> None:
        super().__init__("SameShapeReshape")

    def pattern(self, op: Any, x: Any, shape: Any) -> Any:
        return op.Reshape(x, shape, _allow_other_attributes=True, _outputs=["reshaped"])

    def check(self, context: Any, x: ir.Value, reshaped: ir.Value, **_: Any) -> Any:
        result = pattern.MatchResult()
        before, after = x.shape, reshaped.shape
        if before is None or after is None or before.rank() != after.rank():
            return result.fail("The shapes are unknown or of different ranks.", x)
        for old, new in zip(before, after):
            if isinstance(old, int) != isinstance(new, int) or (
                not isinstance(old, int) and (old.value is None or old.value != new.value)
            ):
                return result.fail("A dimension is unknown or differs.", x)
            if isinstance(old, int) and old != new:
                return result.fail("A dimension differs.", x)
        return result

    def rewrite(self, op: Any, x: ir.Value, **_: Any) -> Any:
        return op.Identity(x)
