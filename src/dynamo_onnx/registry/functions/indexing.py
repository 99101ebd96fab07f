"""Sorting, searching and indexing operators torch_lib has not written.

* ``sort.stable`` and ``kthvalue`` are ONNX ``TopK`` over the whole axis: ONNX specifies
  that equal elements keep their order (the lower index first), which is what "stable" asks.
* ``searchsorted``/``bucketize`` count the boundaries below each value (``<`` for the left
  side, ``<=`` for the right), a comparison broadcast over the last axis.
* ``take``/``put`` index the flattened tensor; ``scatter`` with ``reduce`` is
  ``ScatterElements`` with a reduction; ``nonzero_static`` pads ``NonZero`` to its size;
  ``squeeze.dims`` squeezes the listed dimensions that have size one; ``empty_permuted``
  is zeros (its memory layout means nothing in ONNX).
* ``reshape`` is ``Reshape`` with ``allowzero=1``, as torch_lib's ``view`` is: a size of 0
  in torch is an empty dimension, never ONNX's "copy the input's dimension" (torch_lib's
  ``reshape`` made ``x.reshape(-1, 2)`` of an (n, 0, 2) tensor, whose static result
  shape (0, 2) the decompose pass writes in, a Reshape to (n, 2)). torch refuses a 0
  beside a -1, as ONNX does with ``allowzero``.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import BOOL, INT32, INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import common as common_ops
from onnxscript.function_libs.torch_lib.ops.core import aten_empty
from onnxscript.function_libs.torch_lib.tensor_typing import TReal, TTensor

__all__ = [
    "bucketize",
    "empty_permuted",
    "kthvalue",
    "nonzero_static",
    "put",
    "reshape",
    "scatter_reduce_two",
    "scatter_value_reduce",
    "searchsorted",
    "sort",
    "sort_stable",
    "squeeze_dims",
    "take",
]

_REDUCTIONS = {"add": "add", "multiply": "mul"}


def _axis_length(self: TTensor, dim: int) -> INT64:
    rank = len(self.shape)
    dim = dim % rank
    return op.Shape(self, start=dim, end=dim + 1)


def sort_stable(
    self: TReal, stable: bool | None = None, dim: int = -1, descending: bool = False
) -> tuple[TReal, INT64]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False)"""
    del stable  # TopK keeps equal elements in order either way
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    keys = op.Cast(self, to=INT32.dtype) if self.dtype == BOOL.dtype else self  # TopK: numbers
    values, indices = op.TopK(
        keys, _axis_length(self, dim), axis=dim, largest=int(descending), sorted=1
    )
    return op.CastLike(values, self), indices


def sort(self: TReal, dim: int = -1, descending: bool = False) -> tuple[TReal, INT64]:
    """sort(Tensor self, int dim=-1, bool descending=False): as sort.stable (torch_lib's
    has no bool)."""
    return sort_stable(self, None, dim, descending)


def kthvalue(self: TReal, k: int, dim: int = -1, keepdim: bool = False) -> tuple[TReal, INT64]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False): the k-th smallest."""
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    values, indices = op.TopK(
        self,
        op.Reshape(op.CastLike(k, op.Constant(value_int=0)), op.Constant(value_ints=[1])),
        axis=dim,
        largest=0,
        sorted=1,
    )
    last = op.Constant(value_ints=[-1])
    values = op.Gather(values, last, axis=dim)
    indices = op.Gather(indices, last, axis=dim)
    if not keepdim:
        axes = op.Constant(value_ints=[dim])
        values, indices = op.Squeeze(values, axes), op.Squeeze(indices, axes)
    return values, indices


def _count_below(sequence: TReal, values: TReal, right: bool, out_int32: bool) -> INT64:
    """For each value, how many entries of ``sequence`` (sorted on its last axis) are below
    it (``<``), or not above it (``<=``) when ``right``."""
    values = op.Unsqueeze(values, op.Constant(value_ints=[-1]))
    if len(sequence.shape) > 1:
        sequence = op.Unsqueeze(sequence, op.Constant(value_ints=[-2]))
    below = op.LessOrEqual(sequence, values) if right else op.Less(sequence, values)
    counts = op.ReduceSum(op.Cast(below, to=INT64.dtype), op.Constant(value_ints=[-1]), keepdims=0)
    return op.Cast(counts, to=INT32.dtype) if out_int32 else counts


def searchsorted(
    sorted_sequence: TReal,
    self: TReal,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: INT64 | None = None,
) -> INT64:
    """searchsorted.Tensor/.Scalar(Tensor sorted_sequence, Tensor self, *, ...)"""
    if sorter is not None:
        sorted_sequence = op.GatherElements(sorted_sequence, sorter, axis=-1)
    if not hasattr(self, "shape"):  # the Scalar overload
        self = op.CastLike(self, sorted_sequence)
    return _count_below(sorted_sequence, self, right or side == "right", out_int32)


def bucketize(
    self: TReal, boundaries: TReal, out_int32: bool = False, right: bool = False
) -> INT64:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False)"""
    return _count_below(boundaries, self, right, out_int32)


def take(self: TTensor, index: INT64) -> TTensor:
    """take(Tensor self, Tensor index) -> Tensor: indices into the flattened tensor."""
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    size = op.Size(self)
    index = op.Where(op.Less(index, op.Constant(value_int=0)), op.Add(index, size), index)
    return op.Gather(flat, index, axis=0)


def put(self: TTensor, index: INT64, source: TTensor, accumulate: bool = False) -> TTensor:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor"""
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    index = op.Reshape(index, op.Constant(value_ints=[-1, 1]))
    index = op.Where(op.Less(index, op.Constant(value_int=0)), op.Add(index, op.Size(self)), index)
    source = op.Reshape(source, op.Constant(value_ints=[-1]))
    reduction = "add" if accumulate else "none"
    return op.Reshape(op.ScatterND(flat, index, source, reduction=reduction), op.Shape(self))


def scatter_reduce_two(self: TTensor, dim: int, index: INT64, src: TTensor, reduce: str) -> TTensor:
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce)"""
    return op.ScatterElements(self, index, src, axis=dim, reduction=_REDUCTIONS[reduce])


def scatter_value_reduce(
    self: TTensor, dim: int, index: INT64, value: float, reduce: str
) -> TTensor:
    """scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce)"""
    src = op.Expand(op.CastLike(value, self), op.Shape(index))
    return op.ScatterElements(self, index, src, axis=dim, reduction=_REDUCTIONS[reduce])


def nonzero_static(self: TTensor, size: int, fill_value: int = -1) -> INT64:
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1): the first ``size``
    indices of nonzero elements, padded with ``fill_value``."""
    rank = len(self.shape)
    if rank == 0:  # torch: [size, 0], no coordinates to give
        return op.ConstantOfShape(
            op.Constant(value_ints=[int(size), 0]),
            value=ir.tensor([fill_value], dtype=ir.DataType.INT64),
        )
    found = op.Transpose(op.NonZero(self), perm=[1, 0])
    padding = op.Expand(
        op.Constant(value_int=fill_value), op.Constant(value_ints=[int(size), rank])
    )
    both = op.Concat(found, padding, axis=0)
    return op.Slice(both, op.Constant(value_ints=[0]), op.Constant(value_ints=[int(size)]))


def squeeze_dims(self: TTensor, dim: Sequence[int]) -> TTensor:
    """squeeze.dims(Tensor self, int[] dim): the listed dimensions of size one go; others
    stay, as in torch."""
    shape = list(self.shape)
    rank = len(shape)
    axes = sorted({d % rank for d in dim if rank and shape[d % rank] == 1}) if rank else []
    if not axes:
        return op.Identity(self)
    return op.Squeeze(self, op.Constant(value_ints=axes))


def empty_permuted(
    size: Sequence[INT64],
    physical_layout: Sequence[int],
    dtype: int = -1,
    layout: str = "",
    device: str = "",
    pin_memory: bool = False,
) -> TTensor:
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, ...)"""
    del physical_layout, layout, device, pin_memory
    return aten_empty(size, dtype)


def reshape(self: TTensor, shape: Sequence[INT64]) -> TTensor:
    """reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a), a 0 being a 0."""
    return op.Reshape(self, common_ops.merge_dims(shape), allowzero=True)
