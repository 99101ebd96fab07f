"""Torch dtypes and tensors as onnx_ir sees them (no copies of weight data)."""

from __future__ import annotations

import onnx_ir as ir
import torch

__all__ = ["TORCH_TO_ONNX_DTYPE", "torch_tensor_to_ir"]

TORCH_TO_ONNX_DTYPE: dict[torch.dtype, ir.DataType] = {
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.bool: ir.DataType.BOOL,
    torch.complex128: ir.DataType.COMPLEX128,
    torch.complex64: ir.DataType.COMPLEX64,
    torch.float16: ir.DataType.FLOAT16,
    torch.float32: ir.DataType.FLOAT,
    torch.float64: ir.DataType.DOUBLE,
    torch.float8_e4m3fn: ir.DataType.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: ir.DataType.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: ir.DataType.FLOAT8E5M2,
    torch.float8_e5m2fnuz: ir.DataType.FLOAT8E5M2FNUZ,
    torch.int16: ir.DataType.INT16,
    torch.int32: ir.DataType.INT32,
    torch.int64: ir.DataType.INT64,
    torch.int8: ir.DataType.INT8,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
}


def torch_tensor_to_ir(tensor: torch.Tensor, name: str) -> ir.TensorProtocol:
    """Wrap a torch tensor for onnx_ir without copying; complex becomes [..., 2] floats."""
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return ir.tensor_adapters.TorchTensor(tensor.detach(), name=name)
