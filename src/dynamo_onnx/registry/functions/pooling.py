"""Adaptive pooling, average pooling with ``divisor_override``, and the gradient of max
pooling, as ONNX.

torch.export keeps ``_adaptive_avg_pool2d`` and ``adaptive_max_pool2d/3d`` (core ATen
operators); torch_lib has no function for them, and torch lowers them only through its
private full decomposition table. Each output cell ``i`` of an axis of size ``n`` pooled to
``m`` covers ``[floor(i*n/m), ceil((i+1)*n/m))`` (windows may overlap when ``m`` does not
divide ``n``). With static spatial sizes both are exact:

* average pooling is separable and linear: per axis, a MatMul with a constant [m, n]
  averaging matrix (for an axis whose size is dynamic, the same matrix computed in the
  graph from the size at run time);
* max pooling is separable too (the max over a box is the max over rows of the max over
  columns): per axis, each window is a slice, an ``ArgMax`` and a gather of the values and
  of the flat indices into the pooled plane, which is what torch returns as indices.

torch_lib's ``avg_pool2d``/``avg_pool3d`` ignore ``divisor_override`` (a TODO in its
source): the model computed the mean where torch divides each window's sum by the given
number. Here such a call is the mean over the window's input elements (ONNX
``AveragePool`` without the padding) times their count, over the divisor; the count is
separable, per axis ``min(start + kernel, size) - max(start, 0)``, computed from the sizes
at run time. Without ``divisor_override`` torch_lib's function is used as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import nn as torchlib_nn
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

from dynamo_onnx.registry.functions.reductions import scatter_add

__all__ = [
    "adaptive_avg_pool",
    "adaptive_max_pool",
    "avg_pool2d",
    "avg_pool3d",
    "max_pool2d_with_indices_backward",
]


def _expanded(values: Sequence[int] | int, dims: int) -> list[int]:
    values = [values] if isinstance(values, int) else list(values)
    return values * dims if len(values) == 1 else values


def _valid_counts(
    self: TFloat, pooled: TFloat, kernel: list[int], stride: list[int], padding: list[int]
) -> TFloat:
    """How many input elements (not padding) each output window covers, shaped to broadcast
    over ``pooled``'s spatial axes: the product of the per-axis counts."""
    dims = len(kernel)
    total = None
    for axis in range(dims):
        where = len(self.shape) - dims + axis
        size = op.Shape(self, start=where, end=where + 1)
        out = op.Squeeze(op.Shape(pooled, start=where, end=where + 1))
        start = op.Sub(
            op.Mul(op.Range(op.Constant(value_int=0), out, op.Constant(value_int=1)), stride[axis]),
            padding[axis],
        )
        count = op.Sub(
            op.Min(op.Add(start, kernel[axis]), size), op.Max(start, op.Constant(value_int=0))
        )
        shape = [1] * dims
        shape[axis] = -1
        count = op.Reshape(count, op.Constant(value_ints=shape))
        total = count if total is None else op.Mul(total, count)
    return op.CastLike(total, pooled)


def _avg_pool(
    self: TFloat,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    dims: int,
) -> TFloat:
    plain = torchlib_nn.aten_avg_pool2d if dims == 2 else torchlib_nn.aten_avg_pool3d
    if divisor_override is None:
        return plain(self, kernel_size, stride, padding, ceil_mode, count_include_pad)
    kernel = _expanded(kernel_size, dims)
    strides = _expanded(stride, dims) if stride else kernel
    pads = _expanded(padding, dims)
    mean = plain(self, kernel, strides, pads, ceil_mode, False)  # over the input elements
    total = op.Mul(mean, _valid_counts(self, mean, kernel, strides, pads))
    return op.Div(total, op.CastLike(op.Constant(value_float=float(divisor_override)), total))


def avg_pool2d(
    self: TFloat,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TFloat:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(
        self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2
    )


def avg_pool3d(
    self: TFloat,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0, 0),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TFloat:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(
        self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3
    )


def _windows(size: int, out: int) -> list[tuple[int, int]]:
    return [(i * size // out, math.ceil((i + 1) * size / out)) for i in range(out)]


def _static_sizes(value: Any, count: int, op_name: str) -> list[int]:
    """The last ``count`` sizes of ``value``, which must be known at export time."""
    shape = getattr(value, "shape", None)
    dims = list(shape)[-count:] if shape is not None else []
    if len(dims) != count or not all(isinstance(d, int) for d in dims):
        raise NotImplementedError(f"{op_name} needs static spatial sizes, got {shape}")
    return [int(d) for d in dims]


def _averaging_matrix(size: int, out: int, dtype: ir.DataType) -> np.ndarray:
    matrix = np.zeros((out, size), dtype=dtype.numpy())
    for row, (start, end) in enumerate(_windows(size, out)):
        matrix[row, start:end] = 1.0 / (end - start)
    return matrix


def _averaging_matrix_at_run_time(self: TFloat, axis: int, out: int) -> TFloat:
    """The [out, n] averaging matrix of ``axis``, whose size ``n`` is known only when the
    model runs: row ``i`` is ``1 / (end - start)`` on ``[start, end)``, with
    ``start = floor(i*n/out)`` and ``end = ceil((i+1)*n/out)`` (non-negative integers: ONNX's
    integer Div is the floor)."""
    n = op.Shape(self, start=axis, end=axis + 1)
    rows = op.Constant(value=ir.tensor(np.arange(out, dtype=np.int64).reshape(out, 1)))
    parts = op.Constant(value_ints=[out])
    start = op.Div(op.Mul(rows, n), parts)
    rounding = op.Constant(value_ints=[out - 1])
    end = op.Div(op.Add(op.Mul(op.Add(rows, op.Constant(value_ints=[1])), n), rounding), parts)
    zero, one = op.Constant(value_int=0), op.Constant(value_int=1)
    columns = op.Range(zero, op.Squeeze(n, op.Constant(value_ints=[0])), one)
    inside = op.And(op.GreaterOrEqual(columns, start), op.Less(columns, end))
    return op.Div(op.CastLike(inside, self), op.CastLike(op.Sub(end, start), self))


def adaptive_avg_pool(self: TFloat, output_size: Sequence[int]) -> TFloat:
    """_adaptive_avg_pool2d/3d(Tensor self, SymInt[] output_size) -> Tensor"""
    count = len(output_size)
    shape = getattr(self, "shape", None)
    sizes = list(shape)[-count:] if shape is not None else []
    if len(sizes) != count:
        raise NotImplementedError(f"adaptive average pooling needs a known rank, got {shape}")
    rank = len(self.shape)
    result = self
    for offset, (size, out) in enumerate(zip(sizes, output_size)):
        if size == out:
            continue
        axis = rank - count + offset
        if isinstance(size, int):
            matrix = _averaging_matrix(size, int(out), self.dtype)
            weights = op.Constant(value=ir.tensor(matrix))
        else:  # dynamic: the same matrix, made from the size when the model runs
            weights = _averaging_matrix_at_run_time(self, axis, int(out))
        # move the axis last, contract it with the matrix, move it back
        perm = [a for a in range(rank) if a != axis] + [axis]
        back = [perm.index(a) for a in range(rank)]
        moved = op.Transpose(result, perm=perm)
        pooled = op.MatMul(moved, op.Transpose(weights, perm=[1, 0]))
        result = op.Transpose(pooled, perm=back)
    return result if result is not self else op.Identity(self)


def adaptive_max_pool(self: TFloat, output_size: Sequence[int]) -> tuple[TFloat, INT64]:
    """adaptive_max_pool2d/3d(Tensor self, int[] output_size) -> (Tensor, Tensor)"""
    count = len(output_size)
    sizes = _static_sizes(self, count, "adaptive max pooling")
    rank = len(self.shape)
    plane = int(np.prod(sizes))
    indices = op.Constant(value=ir.tensor(np.arange(plane, dtype=np.int64).reshape(sizes)))
    values = self
    indices = op.Expand(indices, op.Shape(self))
    for offset, (size, out) in enumerate(zip(sizes, output_size)):
        axis = rank - count + offset
        value_parts, index_parts = [], []
        for start, end in _windows(size, int(out)):
            starts, ends = op.Constant(value_ints=[start]), op.Constant(value_ints=[end])
            axes = op.Constant(value_ints=[axis])
            window = op.Slice(values, starts, ends, axes)
            window_indices = op.Slice(indices, starts, ends, axes)
            best = op.ArgMax(window, axis=axis, keepdims=1)
            value_parts.append(op.GatherElements(window, best, axis=axis))
            index_parts.append(op.GatherElements(window_indices, best, axis=axis))
        values = op.Concat(*value_parts, axis=axis)
        indices = op.Concat(*index_parts, axis=axis)
    return values, indices


def max_pool2d_with_indices_backward(
    grad_output: TFloat,
    self: TFloat,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: INT64,
) -> TFloat:
    """max_pool2d_with_indices_backward(...) -> Tensor: each output gradient added at the
    input position its max came from (``indices`` are flat in each [H, W] plane)."""
    del kernel_size, stride, padding, dilation, ceil_mode  # all in ``indices``
    leading = op.Shape(self, start=0, end=-2)
    flat = op.Concat(leading, op.Constant(value_ints=[-1]), axis=0)
    zeros = op.CastLike(op.ConstantOfShape(op.Shape(op.Reshape(self, flat))), grad_output)
    summed = scatter_add(
        zeros, op.Reshape(indices, flat), op.Reshape(grad_output, flat), -1, self.dtype
    )
    return op.Reshape(summed, op.Shape(self))
