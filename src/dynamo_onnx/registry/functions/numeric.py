"""Element-wise and reduction operators torch_lib lacks or leaves unregistered.

* ``var``/``std``/``var_mean``/``std_mean`` in all overloads: torch_lib writes them
  (``aten_var_correction``...) but leaves them unregistered, expecting torch's private full
  decomposition table to lower them; torch.export's public default table keeps
  ``var.correction``. ``extra_functions`` registers torch_lib's own functions for them.
* ``dist``, ``ldexp``, ``special_entr`` and ``diff``, which torch_lib has not written
  (transformers' masks call ``diff``: without a function it is decomposed alone, a small
  export of its own on every export of a model that uses it).
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal, TTensor

__all__ = ["cdist", "diff", "dist", "ldexp", "special_entr"]


def _p_norm(difference: TFloat, p: float, axes: TFloat | None) -> TFloat:
    """The p-norm of ``difference`` (absolute values) over ``axes`` (all when None)."""
    reduce_axes = () if axes is None else (axes,)
    if p == math.inf:
        return op.ReduceMax(difference, *reduce_axes, keepdims=0)
    if p == -math.inf:
        return op.ReduceMin(difference, *reduce_axes, keepdims=0)
    if p == 0.0:
        zero = op.CastLike(0.0, difference)
        nonzero = op.CastLike(op.Not(op.Equal(difference, zero)), difference)
        return op.ReduceSum(nonzero, *reduce_axes, keepdims=0)
    powered = op.Pow(difference, op.CastLike(p, difference))
    summed = op.ReduceSum(powered, *reduce_axes, keepdims=0)
    return op.Pow(summed, op.CastLike(1.0 / p, difference))


def dist(self: TFloat, other: TFloat, p: float = 2.0) -> TFloat:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor: the p-norm of the difference."""
    return _p_norm(op.Abs(op.Sub(self, other)), float(p), None)


def cdist(x1: TFloat, x2: TFloat, p: float = 2.0, compute_mode: int | None = None) -> TFloat:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor: the
    p-norm distance of every row of x1 [.., P, M] to every row of x2 [.., R, M]."""
    del compute_mode  # a choice of algorithm (matrix product or not) for the same result
    rows = op.Unsqueeze(x1, op.Constant(value_ints=[-2]))
    columns = op.Unsqueeze(x2, op.Constant(value_ints=[-3]))
    difference = op.Abs(op.Sub(rows, columns))
    return _p_norm(difference, float(p), op.Constant(value_ints=[-1]))


def ldexp(self: TFloat, other: TReal) -> TFloat:
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor: ``self * 2 ** other``."""
    return op.Mul(self, op.Pow(op.CastLike(2.0, self), op.CastLike(other, self)))


def special_entr(self: TFloat) -> TFloat:
    """special_entr(Tensor self) -> Tensor: ``-x ln x`` for x > 0, 0 at 0, -inf below, NaN
    kept (torch_lib's function raises NotImplementedError)."""
    zero = op.CastLike(0.0, self)
    positive = op.Neg(op.Mul(self, op.Log(self)))
    elsewhere = op.Where(op.Equal(self, zero), zero, op.CastLike(-math.inf, self))
    result = op.Where(op.Greater(self, zero), positive, elsewhere)
    return op.Where(op.IsNaN(self), self, result)


def diff(
    self: TTensor,
    n: int = 1,
    dim: int = -1,
    prepend: TTensor | None = None,
    append: TTensor | None = None,
) -> TTensor:
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None):
    each element minus the one before it along ``dim``, ``n`` times (``xor`` on bool, as
    torch computes it), after ``prepend`` and ``append`` are concatenated."""
    parts = [part for part in (prepend, self, append) if part is not None]
    result = op.Concat(*parts, axis=dim) if len(parts) > 1 else self
    axes = op.Constant(value_ints=[dim])
    for _ in range(n):
        later = op.Slice(result, op.Constant(value_ints=[1]), op.Constant(value_ints=[2**62]), axes)
        earlier = op.Slice(result, op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]), axes)
        if self.dtype == ir.DataType.BOOL:
            result = op.Xor(later, earlier)
        else:
            result = op.Sub(later, earlier)
    return result
