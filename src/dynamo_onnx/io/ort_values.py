"""Torch tensors in and out of ONNX Runtime, also for the types numpy lacks.

numpy has no bfloat16, float8 or float4: ONNX Runtime takes them as the unsigned integers of
the same size with their ONNX type given, and hands them back through DLPack (float4, which
DLPack lacks, as the bytes of its buffer). Complex tensors
are [..., 2] reals in the exported model (as ``torch.view_as_real``) and are converted on
the way in; the caller converts outputs back (it knows which ones eager returns complex).
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import torch

from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE

__all__ = ["from_ort_value", "to_ort_value"]

#: torch dtypes numpy cannot hold, by the unsigned type of the same size.
_BITS = {
    torch.bfloat16: torch.uint16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e4m3fnuz: torch.uint8,
    torch.float8_e5m2: torch.uint8,
    torch.float8_e5m2fnuz: torch.uint8,
    torch.float8_e8m0fnu: torch.uint8,
}


#: Their ONNX types, which come back from ONNX Runtime through DLPack.
_THROUGH_DLPACK = frozenset(TORCH_TO_ONNX_DTYPE[d] for d in _BITS)


def to_ort_value(tensor: torch.Tensor) -> ort.OrtValue:
    """A CPU tensor as an OrtValue (complex as its reals, bfloat16/float8 by their bits)."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    bits = _BITS.get(tensor.dtype)
    if bits is not None:
        onnx_type = TORCH_TO_ONNX_DTYPE[tensor.dtype]
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            tensor.view(bits).numpy(), onnx_type.value
        )
    return ort.OrtValue.ortvalue_from_numpy(tensor.numpy())


def _float4_pairs(value: ort.OrtValue) -> torch.Tensor:
    """A float4 OrtValue as torch's float4 pairs: its packed bytes (read from its buffer:
    DLPack has no float4 and ``numpy()`` reads one byte per value, past the end)."""
    shape = list(value.shape())
    pairs = [*shape[:-1], shape[-1] // 2] if shape else []
    data = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
    return (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        .view(torch.float4_e2m1fn_x2)
        .reshape(pairs)
    )


def from_ort_value(value: ort.OrtValue) -> torch.Tensor:
    """An output OrtValue as a tensor; the types numpy lacks come through DLPack."""
    if value.element_type() == ir.DataType.FLOAT4E2M1.value:
        return _float4_pairs(value)
    if ir.DataType(value.element_type()) in _THROUGH_DLPACK:
        return torch.from_dlpack(value._get_c_value())  # ORT's DLPack exit
    array = value.numpy()
    if array.dtype.kind in "iu" and array.dtype.char in "Qq":
        # uint64/int64 spelled ``ulonglong``/``longlong``, which torch.from_numpy refuses
        array = array.view(np.dtype(f"{array.dtype.kind}8"))
    return torch.from_numpy(array)
