"""FX values as onnx_ir sees them: the type and shape of an ONNX value from ``meta["val"]``."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from dynamo_onnx.tensors import onnx_dtype, onnx_shape

__all__ = ["set_type_and_shape"]


def _symbolic_dim(dim: Any) -> int | str:
    """A SymInt as an ONNX dim: its name, or its value when torch specialized it."""
    text = str(dim)
    return int(text) if text.lstrip("-").isdigit() else text


def set_type_and_shape(value: ir.Value, meta: Any) -> None:
    """Type and shape an ONNX value from an FX ``meta["val"]`` (complex -> [..., 2] floats)."""
    if isinstance(meta, torch.Tensor):
        dims: list[int | str] = [d if isinstance(d, int) else _symbolic_dim(d) for d in meta.shape]
        dims = onnx_shape(meta.dtype, dims)
        dtype = meta.dtype
        if dtype.is_complex:
            dtype = dtype.to_real()
            dims.append(2)
        value.dtype = onnx_dtype(dtype)
        value.shape = ir.Shape(dims)
    elif isinstance(meta, (bool, torch.SymBool)):
        value.dtype, value.shape = ir.DataType.BOOL, ir.Shape([])
    elif isinstance(meta, (int, torch.SymInt)):
        value.dtype, value.shape = ir.DataType.INT64, ir.Shape([])
    elif isinstance(meta, (float, torch.SymFloat)):
        value.dtype, value.shape = ir.DataType.FLOAT, ir.Shape([])
