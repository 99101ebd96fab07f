"""Element-wise and reduction operators torch_lib lacks or leaves unregistered.

* ``var``/``std``/``var_mean``/``std_mean`` in all overloads: torch_lib writes them
  (``aten_var_correction``...) but leaves them unregistered, expecting torch's private full
  decomposition table to lower them; torch.export's public default table keeps
  ``var.correction``.
* ``dist``, ``ldexp`` and ``special_entr``, which torch_lib has not written.
"""

from __future__ import annotations

import math

from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import core as torchlib_core
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal

__all__ = ["MOMENTS", "dist", "ldexp", "special_entr"]

#: (ATen overload, torch_lib's function) for the variance family.
MOMENTS = tuple(
    (f"aten::{name}{overload}", getattr(torchlib_core, f"aten_{name}{suffix}"))
    for name in ("var", "std", "var_mean", "std_mean")
    for overload, suffix in (("", ""), (".dim", "_dim"), (".correction", "_correction"))
)


def dist(self: TFloat, other: TFloat, p: float = 2.0) -> TFloat:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor: the p-norm of the difference."""
    difference = op.Abs(op.Sub(self, other))
    p = float(p)
    if p == math.inf:
        return op.ReduceMax(difference, keepdims=0)
    if p == -math.inf:
        return op.ReduceMin(difference, keepdims=0)
    if p == 0.0:
        nonzero = op.CastLike(op.Not(op.Equal(difference, op.CastLike(0.0, self))), self)
        return op.ReduceSum(nonzero, keepdims=0)
    powered = op.Pow(difference, op.CastLike(p, self))
    return op.Pow(op.ReduceSum(powered, keepdims=0), op.CastLike(1.0 / p, self))


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
