"""Reductions where torch_lib's function fails on a case: a 0-d input (``all``, ``any``,
``amax``, ``amin``: ONNX reductions reject an axis on a scalar), ``scatter_reduce`` with
``mean`` (torch_lib overwrites instead of averaging), and circular padding (ONNX
Runtime's ``Pad`` has no ``wrap`` mode on CPU: slices and a concatenation instead); and
``cumprod``, ``cummax`` and ``cummin``, which torch_lib (and so torch.onnx) has no function
for, and ONNX no operator.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import BOOL, FLOAT, INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import core as torchlib_core
from onnxscript.function_libs.torch_lib.ops import nn as torchlib_nn
from onnxscript.function_libs.torch_lib.tensor_typing import TReal, TTensor

__all__ = [
    "all_dim",
    "all_dims",
    "amax",
    "amin",
    "any_dim",
    "any_dims",
    "cummax",
    "cummin",
    "cumprod",
    "pad",
    "scatter_add",
    "scatter_reduce",
]

#: Dtypes ONNX Runtime's CPU ``ScatterElements`` cannot reduce in ("MLFloat16 data type is
#: not supported" with ``reduction="add"``).
_NO_CPU_REDUCTION = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def scatter_add(
    data: TReal, index: INT64, updates: TReal, axis: int, dtype: ir.DataType | None
) -> TReal:
    """``ScatterElements(reduction="add")`` of tensors of ``dtype`` (the caller's input's:
    intermediate values carry none), computed in float32 for float16 and bfloat16 (cast
    back after), since ONNX Runtime's CPU kernel has no such reduction in them."""
    if dtype in _NO_CPU_REDUCTION:
        summed = op.ScatterElements(
            op.Cast(data, to=FLOAT.dtype),
            index,
            op.Cast(updates, to=FLOAT.dtype),
            axis=axis,
            reduction="add",
        )
        return op.Cast(summed, to=dtype)
    return op.ScatterElements(data, index, updates, axis=axis, reduction="add")


def _scalar(self: TTensor) -> bool:
    return len(self.shape) == 0


def all_dim(self: TTensor, dim: int, keepdim: bool = False) -> BOOL:
    """all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Cast(self, to=BOOL.dtype)
    return torchlib_core.aten_all_dim(self, dim, keepdim)


def all_dims(self: TTensor, dim: Sequence[int] = (), keepdim: bool = False) -> BOOL:
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Cast(self, to=BOOL.dtype)
    return torchlib_core.aten_all_dims(self, dim, keepdim)


def any_dim(self: TTensor, dim: int, keepdim: bool = False) -> BOOL:
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Cast(self, to=BOOL.dtype)
    return torchlib_core.aten_any_dim(self, dim, keepdim)


def any_dims(self: TTensor, dim: Sequence[int] = (), keepdim: bool = False) -> BOOL:
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Cast(self, to=BOOL.dtype)
    return torchlib_core.aten_any_dims(self, dim, keepdim)


def amax(self: TReal, dim: Sequence[int] = (), keepdim: bool = False) -> TReal:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Identity(self)
    return torchlib_core.aten_amax(self, dim, keepdim)


def amin(self: TReal, dim: Sequence[int] = (), keepdim: bool = False) -> TReal:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    if _scalar(self):
        return op.Identity(self)
    return torchlib_core.aten_amin(self, dim, keepdim)


def cumprod(self: TReal, dim: int, dtype: int = -1) -> TReal:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    ONNX has ``CumSum`` but no cumulative product, and ``exp(cumsum(log(x)))`` is wrong for
    zeros and negative numbers. Exact instead: along ``dim`` (moved last), each position
    ``i`` multiplies the row of ``x`` where the positions after ``i`` are 1, a ``ReduceProd``
    of an n x n triangle (n the length along ``dim``, dynamic or not): n times the memory of
    the input, fine for the sequence lengths models take a cumulative product over."""
    rank = len(self.shape)  # the input's: a value made here has no shape yet
    if dtype not in (-1, None):
        self = op.Cast(self, to=dtype)
    if rank == 0:
        return op.Identity(self)
    last, back = _along_last(self, dim, rank)
    kept, _ = _prefixes(last)
    rows = op.Where(kept, op.Unsqueeze(last, [-2]), op.CastLike(op.Constant(value_int=1), last))
    product = op.ReduceProd(rows, [-1], keepdims=0)
    return op.Transpose(product, perm=back) if back != list(range(rank)) else product


def _along_last(self: TTensor, dim: int, rank: int) -> tuple[TTensor, list[int]]:
    """``self`` (of ``rank``) with ``dim`` moved last, and the permutation back."""
    axis = dim % rank
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = op.Transpose(self, perm=perm) if axis != rank - 1 else self
    return moved, [perm.index(d) for d in range(rank)]


def _prefixes(last: TTensor) -> tuple[BOOL, INT64]:
    """``kept[i, j]`` (position ``j`` is at or before ``i``) along the last axis, and the
    positions ``0..n-1``."""
    length = op.Squeeze(op.Shape(last, start=-1))
    positions = op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))
    return op.LessOrEqual(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1])), positions


def _cumulative_extreme(self: TReal, dim: int, largest: bool) -> tuple[TReal, INT64]:
    """cummax/cummin: over each prefix (an n x n triangle, as :func:`cumprod`), the extreme
    and the last position holding it (torch's choice on ties). Positions after ``i`` are
    filled with the first element, which every prefix holds: no sentinel of the dtype."""
    rank = len(self.shape)
    if rank == 0:
        return op.Identity(self), op.Constant(value_int=0)
    if self.dtype == BOOL.dtype:  # ONNX Runtime has no Where or ReduceMax on bool
        values, indices = _extremes(op.Cast(self, to=INT64.dtype), dim, largest, rank, False)
        return op.Cast(values, to=BOOL.dtype), indices
    floating = self.dtype is not None and self.dtype.is_floating_point()
    return _extremes(self, dim, largest, rank, floating)


def _extremes(
    self: TReal, dim: int, largest: bool, rank: int, floating: bool
) -> tuple[TReal, INT64]:
    last, back = _along_last(self, dim, rank)
    kept, positions = _prefixes(last)
    first = op.Unsqueeze(op.Slice(last, [0], [1], [-1]), [-1])  # [..., 1, 1]
    rows = op.Where(kept, op.Unsqueeze(last, [-2]), first)
    reduce = op.ReduceMax if largest else op.ReduceMin
    values = reduce(rows, [-1], keepdims=1)
    missing = op.Constant(value_int=-1)
    hits = op.And(kept, op.Equal(rows, values))
    indices = op.ReduceMax(op.Where(hits, positions, missing), [-1], keepdims=0)
    values = op.Squeeze(values, [-1])
    if floating:
        # torch: a NaN wins from where it is on, at the last NaN's position (ONNX Runtime's
        # ReduceMax/ReduceMin skip NaNs)
        nans = op.ReduceMax(
            op.Where(op.And(kept, op.IsNaN(rows)), positions, missing), [-1], keepdims=0
        )
        seen = op.GreaterOrEqual(nans, op.Constant(value_int=0))
        values = op.Where(seen, op.CastLike(op.Constant(value_float=float("nan")), values), values)
        indices = op.Where(seen, nans, indices)
    if back != list(range(rank)):
        values, indices = op.Transpose(values, perm=back), op.Transpose(indices, perm=back)
    return values, indices


def cummax(self: TReal, dim: int) -> tuple[TReal, INT64]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(self, dim, largest=True)


def cummin(self: TReal, dim: int) -> tuple[TReal, INT64]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(self, dim, largest=False)


def scatter_reduce(
    self: TReal, dim: int, index: INT64, src: TReal, reduce: str, include_self: bool = True
) -> TReal:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *,
    bool include_self=True): ``mean`` is the scattered sum over the scattered count (self
    counted once when included); the other reductions are torch_lib's."""
    if reduce != "mean":
        return torchlib_core.aten_scatter_reduce(self, dim, index, src, reduce, include_self)
    zeros, ones = (
        op.Mul(src, op.CastLike(0, src)),
        op.Add(op.Mul(src, op.CastLike(0, src)), op.CastLike(1, src)),
    )
    base = self
    counted = op.Add(op.Mul(self, op.CastLike(0, self)), op.CastLike(1, self))
    if not include_self:  # the scattered positions start from nothing
        base = op.ScatterElements(base, index, zeros, axis=dim)
        counted = op.ScatterElements(counted, index, zeros, axis=dim)
    total = scatter_add(base, index, src, dim, self.dtype)
    count = scatter_add(counted, index, ones, dim, self.dtype)
    count = op.Max(count, op.CastLike(1, count))
    return op.Div(total, count)


def pad(
    self: TTensor, pad: Sequence[INT64], mode: str = "constant", value: float | None = None
) -> TTensor:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor:
    ``circular`` wraps around with slices (a negative amount crops); other modes are
    torch_lib's ``Pad``."""
    if mode != "circular":
        return torchlib_nn.aten_pad(self, pad, mode, value)
    rank = len(self.shape)
    result = self
    for pair in range(len(pad) // 2):
        axis = rank - 1 - pair
        before, after = int(pad[2 * pair]), int(pad[2 * pair + 1])
        axes = op.Constant(value_ints=[axis])
        parts = []
        if before > 0:
            parts.append(
                op.Slice(
                    result, op.Constant(value_ints=[-before]), op.Constant(value_ints=[2**62]), axes
                )
            )
        start = -before if before < 0 else 0
        end = after if after < 0 else 2**62
        parts.append(
            op.Slice(result, op.Constant(value_ints=[start]), op.Constant(value_ints=[end]), axes)
        )
        if after > 0:
            parts.append(
                op.Slice(result, op.Constant(value_ints=[0]), op.Constant(value_ints=[after]), axes)
            )
        result = op.Concat(*parts, axis=axis) if len(parts) > 1 else parts[0]
    return result
