"""The numbers of a value that is a constant (an initializer or a ``Constant`` node's
output), as a rewrite rule's check reads them."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["ints", "scalar"]


def ints(value: ir.Value | None) -> list[int] | None:
    """The integers of a constant ``value``, flattened; None when it is not a constant."""
    constant = None if value is None else ir.convenience.get_const_tensor(value)
    return None if constant is None else [int(v) for v in constant.numpy().reshape(-1)]


def scalar(value: ir.Value | None) -> float | None:
    """The one number of a constant ``value`` of one element; None otherwise."""
    constant = None if value is None else ir.convenience.get_const_tensor(value)
    if constant is None or constant.size != 1:
        return None
    return float(constant.numpy().reshape(-1)[0])
