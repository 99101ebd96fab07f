"""Order statistics and data-dependent selections torch_lib has not written.

* ``median``/``nanmedian``: the lower middle of the sorted axis (``TopK`` over all of it),
  NaN when the axis holds one (``median``), or of its numbers (``nanmedian``: NaN sorted
  last, as +inf with a larger index; NaN only where every element is).
* ``mode``: the most frequent value, the smallest of equally frequent ones, and its last
  position, as torch computes on CPU: counts from an all-pairs comparison of the axis.
* ``masked_select``: ``Compress`` of the flattened broadcast tensor by the mask, an
  output whose size is the mask's count at run time.
* ``index_reduce``: ``ScatterElements`` with its reductions (``mul``, ``max``, ``min``;
  ``mean`` as a sum over a count); without ``include_self`` the indexed rows first hold
  the neutral value (or one of their sources, for ``amax``/``amin``).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import BOOL, INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TReal, TTensor

__all__ = [
    "index_reduce",
    "masked_select",
    "median",
    "median_dim",
    "mode",
    "nanmedian",
    "nanmedian_dim",
]


def _sorted_axis(self: TReal, dim: int) -> tuple[TReal, INT64]:
    """The axis ``dim`` sorted ascending (values, original positions)."""
    length = op.Shape(self, start=dim, end=dim + 1) if dim != -1 else op.Shape(self, start=-1)
    return op.TopK(self, length, axis=dim, largest=0, sorted=1)


def _middle(self: TReal, dim: int, keepdim: bool, ignore_nan: bool) -> tuple[TReal, INT64]:
    """(lower median, its position) along ``dim`` of a tensor of rank >= 1."""
    nan = op.IsNaN(self)
    keys = op.Where(nan, op.CastLike(float("inf"), self), self) if ignore_nan else self
    values, positions = _sorted_axis(keys, dim)
    axes = op.Constant(value_ints=[dim])
    one = op.Constant(value_int=1)
    if ignore_nan:
        count = op.ReduceSum(op.Cast(op.Not(nan), to=INT64.dtype), axes, keepdims=1)
    else:
        count = op.Shape(self, start=dim, end=dim + 1) if dim != -1 else op.Shape(self, start=-1)
    middle = op.Div(op.Max(op.Sub(count, one), op.Constant(value_int=0)), op.Constant(value_int=2))
    if ignore_nan:
        index = middle
    else:
        index = op.Reshape(middle, op.Constant(value_ints=[1]))
        index = op.Expand(index, op.Shape(op.ReduceMin(values, axes, keepdims=1)))
    value = op.GatherElements(values, index, axis=dim)
    position = op.GatherElements(positions, index, axis=dim)
    any_nan = op.Cast(op.ReduceMax(op.Cast(nan, to=INT64.dtype), axes, keepdims=1), to=BOOL.dtype)
    if ignore_nan:
        value = op.Where(
            op.Equal(count, op.Constant(value_int=0)), op.CastLike(float("nan"), self), value
        )
    else:
        first_nan = op.ArgMax(op.Cast(nan, to=INT64.dtype), axis=dim, keepdims=1)
        value = op.Where(any_nan, op.CastLike(float("nan"), self), value)
        position = op.Where(any_nan, first_nan, position)
    if not keepdim:
        value, position = op.Squeeze(value, axes), op.Squeeze(position, axes)
    return value, position


def median_dim(self: TReal, dim: int, keepdim: bool = False) -> tuple[TReal, INT64]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    return _middle(self, dim, keepdim, ignore_nan=False)


def nanmedian_dim(self: TReal, dim: int, keepdim: bool = False) -> tuple[TReal, INT64]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (values, indices)"""
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    return _middle(self, dim, keepdim, ignore_nan=True)


def median(self: TReal) -> TReal:
    """median(Tensor self) -> Tensor: of every element."""
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    value, _ = _middle(flat, 0, False, ignore_nan=False)
    return value


def nanmedian(self: TReal) -> TReal:
    """nanmedian(Tensor self) -> Tensor: of every element that is a number."""
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    value, _ = _middle(flat, 0, False, ignore_nan=True)
    return value


def mode(self: TReal, dim: int = -1, keepdim: bool = False) -> tuple[TReal, INT64]:
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    rank = len(self.shape)
    dim = dim % rank
    last = op.Constant(value_ints=[-1])
    moved = self
    if dim != rank - 1:
        perm = [*(i for i in range(rank) if i != dim), dim]
        moved = op.Transpose(self, perm=perm)
    rows = op.Unsqueeze(moved, last)  # [..., n, 1]
    columns = op.Unsqueeze(moved, op.Constant(value_ints=[-2]))  # [..., 1, n]
    counts = op.ReduceSum(op.Cast(op.Equal(rows, columns), to=INT64.dtype), last, keepdims=0)
    most = op.ReduceMax(counts, last, keepdims=1)
    largest = op.ReduceMax(moved, last, keepdims=1)
    value = op.ReduceMin(op.Where(op.Equal(counts, most), moved, largest), last, keepdims=1)
    length = op.Shape(moved, start=-1)
    positions = op.Range(op.Constant(value_int=0), op.Squeeze(length), op.Constant(value_int=1))
    at = op.Where(op.Equal(moved, value), positions, op.Constant(value_int=-1))
    position = op.ReduceMax(at, last, keepdims=1)
    if keepdim:
        if dim != rank - 1:
            back = [*range(dim), rank - 1, *range(dim, rank - 1)]
            value, position = op.Transpose(value, perm=back), op.Transpose(position, perm=back)
        return value, position
    return op.Squeeze(value, last), op.Squeeze(position, last)


def masked_select(self: TTensor, mask: BOOL) -> TTensor:
    """masked_select(Tensor self, Tensor mask) -> Tensor: the elements where the mask,
    broadcast with ``self``, is true, flattened."""
    both = op.Where(mask, self, self)  # self broadcast to the shape of the two
    flat_mask = op.Reshape(op.Expand(mask, op.Shape(both)), op.Constant(value_ints=[-1]))
    return op.Compress(op.Reshape(both, op.Constant(value_ints=[-1])), flat_mask, axis=0)


_SCATTER = {"prod": "mul", "amax": "max", "amin": "min", "mean": "add"}


def index_reduce(
    self: TReal,
    dim: int,
    index: INT64,
    source: TReal,
    reduce: str,
    include_self: bool = True,
) -> TReal:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *,
    bool include_self=True) -> Tensor"""
    rank, integer = len(self.shape), self.dtype in _INTEGERS
    scalar = rank == 0
    if scalar:  # a 0-d tensor indexed as a vector of one
        one = op.Constant(value_ints=[1])
        self, source, rank, dim = op.Reshape(self, one), op.Reshape(source, one), 1, 0
    dim = dim % rank
    shape = [1] * rank
    shape[dim] = -1
    spread = op.Expand(op.Reshape(index, op.Constant(value_ints=shape)), op.Shape(source))
    base = self
    if not include_self:
        if reduce in ("amax", "amin"):
            base = op.ScatterElements(self, spread, source, axis=dim)
        else:
            neutral = 1.0 if reduce == "prod" else 0.0
            filler = op.Expand(op.CastLike(neutral, self), op.Shape(source))
            base = op.ScatterElements(self, spread, filler, axis=dim)
    result = op.ScatterElements(base, spread, source, axis=dim, reduction=_SCATTER[reduce])
    if reduce == "mean":
        ones = op.Expand(op.CastLike(1.0, self), op.Shape(source))
        zeros = op.Expand(op.CastLike(0.0, self), op.Shape(self))
        counts = op.ScatterElements(zeros, spread, ones, axis=dim, reduction="add")
        total = op.Add(counts, op.CastLike(1.0, self)) if include_self else counts
        total = op.Max(total, op.CastLike(1.0, self))
        if integer:  # torch floors an integer mean
            floored = op.Floor(op.Div(op.Cast(result, to=_DOUBLE), op.Cast(total, to=_DOUBLE)))
            quotient = op.CastLike(floored, self)
        else:
            quotient = op.Div(result, total)
        result = op.Where(op.Greater(counts, op.CastLike(0.0, self)), quotient, self)
    return op.Squeeze(result) if scalar else result


_DOUBLE = ir.DataType.DOUBLE
_INTEGERS = frozenset(
    {ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8}
)
