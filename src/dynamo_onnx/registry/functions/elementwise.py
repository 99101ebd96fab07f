"""Element-wise operators torch_lib has not written: ``max.other``/``min.other`` (torch's
``torch.max(a, b)``, which torch_lib has as ``maximum``/``minimum`` only: without them a
model calling it is re-traced with torch's decompositions), ``fmax``/``fmin`` (NaN-ignoring),
``hypot``, ``copysign`` (the sign of -0.0 included), ``frexp``, ``uniform``, and
``rrelu_with_noise_functional`` (RReLU: the mean slope in evaluation mode)."""

from __future__ import annotations

from onnxscript import BOOL, FLOAT, INT32
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal

__all__ = [
    "copysign",
    "fmax",
    "fmin",
    "frexp",
    "hypot",
    "max_other",
    "min_other",
    "rrelu_with_noise",
    "uniform",
]


def max_other(self: TReal, other: TReal) -> TReal:
    """max.other(Tensor self, Tensor other) -> Tensor: ``maximum``, as torch_lib writes it."""
    if self.dtype == BOOL.dtype:
        return op.Or(self, other)
    return op.Max(self, other)


def min_other(self: TReal, other: TReal) -> TReal:
    """min.other(Tensor self, Tensor other) -> Tensor: ``minimum``, as torch_lib writes it."""
    if self.dtype == BOOL.dtype:
        return op.And(self, other)
    return op.Min(self, other)


def _nan_ignoring(self: TFloat, other: TFloat, chosen: TFloat) -> TFloat:
    """``chosen``, except where one side is NaN: then the other side. Integers have no NaN."""
    if not self.dtype.is_floating_point():
        return chosen
    return op.Where(op.IsNaN(self), other, op.Where(op.IsNaN(other), self, chosen))


def fmax(self: TReal, other: TReal) -> TReal:
    """fmax(Tensor self, Tensor other) -> Tensor: the larger, or the one that is not NaN."""
    if self.dtype == BOOL.dtype:
        return op.Or(self, other)
    return _nan_ignoring(self, other, op.Max(self, other))


def fmin(self: TReal, other: TReal) -> TReal:
    """fmin(Tensor self, Tensor other) -> Tensor: the smaller, or the one that is not NaN."""
    if self.dtype == BOOL.dtype:
        return op.And(self, other)
    return _nan_ignoring(self, other, op.Min(self, other))


def hypot(self: TFloat, other: TFloat) -> TFloat:
    """hypot(Tensor self, Tensor other) -> Tensor"""
    return op.Sqrt(op.Add(op.Mul(self, self), op.Mul(other, other)))


def copysign(self: TFloat, other: TFloat) -> TFloat:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor: |self| with other's sign bit
    (so -0.0 counts as negative: 1 / -0.0 is -inf)."""
    zero = op.CastLike(0.0, other)
    negative = op.Or(
        op.Less(other, zero),
        op.And(op.Equal(other, zero), op.Less(op.Div(op.CastLike(1.0, other), other), zero)),
    )
    magnitude = op.Abs(self)
    return op.Where(negative, op.Neg(magnitude), magnitude)


def frexp(self: TFloat) -> tuple[TFloat, INT32]:
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent): self = m * 2**e with
    0.5 <= |m| < 1; zero, inf and NaN have exponent 0 and are their own mantissa."""
    magnitude = op.Abs(self)
    finite = op.And(op.Not(op.IsInf(self)), op.Not(op.IsNaN(self)))
    regular = op.And(finite, op.Greater(magnitude, op.CastLike(0.0, self)))
    safe = op.Where(regular, magnitude, op.CastLike(1.0, self))
    exponent = op.Add(
        op.Floor(op.Div(op.Log(safe), op.CastLike(0.6931471805599453, self))),
        op.CastLike(1.0, self),
    )
    mantissa = op.Div(self, op.Pow(op.CastLike(2.0, self), exponent))
    # log rounding can be one off at powers of two: bring |m| into [0.5, 1)
    too_big = op.GreaterOrEqual(op.Abs(mantissa), op.CastLike(1.0, self))
    too_small = op.Less(op.Abs(mantissa), op.CastLike(0.5, self))
    shift = op.Sub(op.CastLike(too_big, self), op.CastLike(too_small, self))
    exponent = op.Add(exponent, shift)
    mantissa = op.Div(self, op.Pow(op.CastLike(2.0, self), exponent))
    mantissa = op.Where(regular, mantissa, self)
    exponent = op.Where(regular, exponent, op.CastLike(0.0, self))
    return mantissa, op.Cast(exponent, to=INT32.dtype)


def uniform(self: TFloat, from_: float = 0.0, to: float = 1.0, generator: None = None) -> TFloat:
    """uniform(Tensor self, float from=0, float to=1, *, Generator? generator=None)"""
    del generator
    draws = op.RandomUniformLike(self, dtype=FLOAT.dtype, low=float(from_), high=float(to))
    return op.CastLike(draws, self)


def rrelu_with_noise(
    self: TFloat,
    noise: TFloat,
    lower: float = 0.125,
    upper: float = 0.3333333333333333,
    training: bool = False,
    generator: None = None,
) -> tuple[TFloat, TFloat]:
    """rrelu_with_noise_functional(...) -> (Tensor, Tensor noise_out): negative inputs are
    scaled by a random slope in [lower, upper] in training, by their mean otherwise."""
    del generator
    zero = op.CastLike(0.0, self)
    if training:
        slopes = op.CastLike(
            op.RandomUniformLike(self, dtype=FLOAT.dtype, low=float(lower), high=float(upper)),
            self,
        )
        negative = op.Less(self, zero)
        noise_out = op.Where(negative, slopes, op.CastLike(1.0, self))
        return op.Mul(self, noise_out), noise_out
    slope = op.CastLike((float(lower) + float(upper)) / 2.0, self)
    return op.Where(op.GreaterOrEqual(self, zero), self, op.Mul(self, slope)), noise
