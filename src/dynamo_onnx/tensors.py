"""Torch dtypes and tensors as onnx_ir sees them (no copies of weight data)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import torch

__all__ = [
    "ONNX_TO_TORCH_DTYPE",
    "TORCH_TO_ONNX_DTYPE",
    "DtypeNotInOnnx",
    "TensorSubclassWeight",
    "has_onnx_dtype",
    "is_wrapper_subclass",
    "onnx_dtype",
    "onnx_shape",
    "torch_tensor_to_ir",
    "transposed",
    "widens_exactly",
]

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
    torch.float8_e8m0fnu: ir.DataType.FLOAT8E8M0,
    # Two float4 values packed in each byte; ONNX counts the values: [..., n] -> [..., 2n].
    torch.float4_e2m1fn_x2: ir.DataType.FLOAT4E2M1,
    torch.int16: ir.DataType.INT16,
    torch.int32: ir.DataType.INT32,
    torch.int64: ir.DataType.INT64,
    torch.int8: ir.DataType.INT8,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
    # torch's sub-byte integers hold one value per byte; ONNX packs them when saving.
    torch.int4: ir.DataType.INT4,
    torch.uint4: ir.DataType.UINT4,
    torch.int2: ir.DataType.INT2,
    torch.uint2: ir.DataType.UINT2,
}

#: Stored by numpy through an unsigned integer of the same size (numpy lacks the type).
_VIEWED_AS_UINT8 = {
    ir.DataType.FLOAT8E4M3FN,
    ir.DataType.FLOAT8E4M3FNUZ,
    ir.DataType.FLOAT8E5M2,
    ir.DataType.FLOAT8E5M2FNUZ,
    ir.DataType.FLOAT8E8M0,
    ir.DataType.INT4,
    ir.DataType.UINT4,
    ir.DataType.INT2,
    ir.DataType.UINT2,
}


class DtypeNotInOnnx(TypeError):
    """A torch dtype no ONNX type can hold (quantized, bit-packed and odd-width integers)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(f"torch.{str(dtype).removeprefix('torch.')} has no ONNX type")
        self.dtype = dtype


class TensorSubclassWeight(TypeError):
    """A tensor subclass that wraps other tensors reached the ONNX model as a weight.

    Such a tensor (``TwoTensor``, quantized and distributed tensors) has no storage of its
    own: its bytes are those of the tensors it holds, and reading its data pointer reads
    unrelated memory (a segmentation fault while serializing, before any report is
    written). torch.export's decompositions take it apart into its plain tensors first.
    """

    def __init__(self, name: str, tensor: torch.Tensor) -> None:
        super().__init__(
            f"weight `{name}` is a {type(tensor).__name__}, a tensor subclass that holds "
            "other tensors and has no data of its own"
        )
        self.name = name
        self.type_name = type(tensor).__name__


#: The torch dtype of an ONNX tensor type whose elements torch holds one per element (float4,
#: two to a byte in torch, excepted).
ONNX_TO_TORCH_DTYPE: dict[ir.DataType, torch.dtype] = {
    onnx: dtype for dtype, onnx in TORCH_TO_ONNX_DTYPE.items() if dtype != torch.float4_e2m1fn_x2
}

#: float dtypes each of whose values the wider ones hold exactly (NaN and inf included).
_EXACT_WIDENINGS: dict[torch.dtype, frozenset[torch.dtype]] = {
    torch.bfloat16: frozenset({torch.float32, torch.float64}),
    torch.float16: frozenset({torch.float32, torch.float64}),
    torch.float32: frozenset({torch.float64}),
}


def widens_exactly(source: torch.dtype, target: torch.dtype) -> bool:
    """Whether converting ``source`` values to ``target`` changes none (the same dtype, or
    a float dtype to a wider one): moving them before converting gives the same bytes."""
    return source == target or target in _EXACT_WIDENINGS.get(source, frozenset())


def is_wrapper_subclass(tensor: object) -> bool:
    """Whether ``tensor`` is a tensor subclass that wraps other tensors: it implements
    the ``__tensor_flatten__`` protocol torch.export uses to take it apart."""
    return isinstance(tensor, torch.Tensor) and hasattr(tensor, "__tensor_flatten__")


def has_onnx_dtype(dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` can be an ONNX value; complex tensors are exported as
    their [..., 2] reals, so complex32 (which ONNX lacks) is [..., 2] float16."""
    return (dtype.to_real() if dtype.is_complex else dtype) in TORCH_TO_ONNX_DTYPE


def onnx_dtype(dtype: torch.dtype) -> ir.DataType:
    """The ONNX type of a torch dtype; :class:`DtypeNotInOnnx` when there is none."""
    try:
        return TORCH_TO_ONNX_DTYPE[dtype]
    except KeyError:
        raise DtypeNotInOnnx(dtype) from None


def onnx_shape(dtype: torch.dtype, dims: list[Any]) -> list[Any]:
    """The ONNX shape of a torch tensor's ``dims`` (float4 pairs are two values each)."""
    if dtype == torch.float4_e2m1fn_x2 and dims:
        return [*dims[:-1], dims[-1] * 2]
    return dims


class _TorchTensor(ir.tensor_adapters.TorchTensor):
    """onnx_ir's adapter, plus the dtypes it has no numpy view for (float4 pairs, int4)."""

    def __init__(self, tensor: torch.Tensor, name: str) -> None:
        dtype = onnx_dtype(tensor.dtype)
        shape = ir.Shape(onnx_shape(tensor.dtype, list(tensor.shape)))
        ir.Tensor.__init__(self, tensor, dtype=dtype, shape=shape, name=name)

    def numpy(self) -> np.ndarray:
        raw: torch.Tensor = self.raw
        if self.dtype == ir.DataType.FLOAT4E2M1:
            packed = raw.view(torch.uint8).numpy(force=True)
            unpacked = np.stack([packed & 0x0F, packed >> 4], axis=-1)
            return unpacked.reshape(self.shape.numpy()).view(self.dtype.numpy())
        if self.dtype in _VIEWED_AS_UINT8:
            return raw.view(torch.uint8).numpy(force=True).view(self.dtype.numpy())
        return super().numpy()

    def tobytes(self) -> bytes:
        if self.dtype in (ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT2, ir.DataType.UINT2):
            return ir.Tensor(self.numpy(), dtype=self.dtype).tobytes()  # packed as ONNX stores
        return super().tobytes()


def torch_tensor_to_ir(tensor: torch.Tensor, name: str) -> ir.TensorProtocol:
    """Wrap a torch tensor for onnx_ir without copying; complex becomes [..., 2] floats.

    A tensor subclass that wraps others is refused (:class:`TensorSubclassWeight`): its
    data pointer is not its data, and serializing it would crash the process.
    """
    if is_wrapper_subclass(tensor):
        raise TensorSubclassWeight(name, tensor)
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return _TorchTensor(tensor.detach(), name=name)


def transposed(array: np.ndarray) -> np.ndarray:
    """A 2-D array's transpose, contiguous. torch copies it in cache-sized blocks, several
    times faster than NumPy's strided copy (``np.ascontiguousarray(a.T)``) on an LM head's
    size (docs/performance.md); dtypes torch has no NumPy view of (bfloat16 from
    ml_dtypes) are copied by NumPy."""
    try:
        source = torch.from_numpy(array)
    except TypeError:
        return np.ascontiguousarray(array.T)
    return source.T.contiguous().numpy()
