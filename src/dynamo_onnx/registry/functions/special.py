"""Special functions ONNX has no operator for and torch_lib has not written.

Each is computed in float64 (ONNX Runtime's Exp, Log, Sin, Cos, Sqrt take it) and cast
back, so that the approximation, not float32 rounding, bounds the error:

* ``lgamma``: Lanczos' approximation (g = 7, 9 terms; relative error near 1e-15) for
  x >= 1/2, the reflection formula below; ``inf`` at the poles and at both infinities.
* ``digamma``: the recurrence up to x + 6, then the asymptotic series (to the x^-10
  term), the reflection formula below 1/2; -inf at +0, +inf at -0, NaN at the other poles.
* ``erfinv``: Giles' single-precision approximation ("Approximating the erfinv function",
  2010), then two Newton steps on ``Erf`` (in float32: ONNX Runtime's Erf takes no
  float64); +-inf at +-1, NaN outside.
* ``i0``: Abramowitz and Stegun 9.8.1 and 9.8.2 (relative error below 2e-7).
"""

from __future__ import annotations

import math

from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

__all__ = ["digamma", "erfinv", "i0", "lgamma"]

_DOUBLE = 11  # ONNX's DOUBLE
_FLOAT = 1  # ONNX's FLOAT

#: Lanczos' coefficients for g = 7 (Numerical Recipes' and Boost's choice).
_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


def _const(value: float, like: TFloat) -> TFloat:
    return op.CastLike(value, like)


def _polynomial(x: TFloat, coefficients: tuple[float, ...]) -> TFloat:
    """Horner's rule, highest power first."""
    result = _const(coefficients[0], x)
    for c in coefficients[1:]:
        result = op.Add(op.Mul(result, x), _const(c, x))
    return result


def _lgamma_right(z: TFloat) -> TFloat:
    """ln Gamma(z) for z >= 1/2 (Lanczos)."""
    shifted = op.Sub(z, _const(1.0, z))
    series = _const(_LANCZOS[0], z)
    for i, c in enumerate(_LANCZOS[1:], start=1):
        series = op.Add(series, op.Div(_const(c, z), op.Add(shifted, _const(float(i), z))))
    t = op.Add(shifted, _const(7.5, z))
    half_log_two_pi = _const(0.5 * math.log(2 * math.pi), z)
    power = op.Mul(op.Add(shifted, _const(0.5, z)), op.Log(t))
    return op.Add(op.Add(half_log_two_pi, op.Sub(power, t)), op.Log(series))


def lgamma(self: TFloat) -> TFloat:
    """lgamma(Tensor self) -> Tensor: ln |Gamma(x)|."""
    x = op.Cast(self, to=_DOUBLE)
    half = _const(0.5, x)
    left = op.Less(x, half)
    z = op.Where(left, op.Sub(_const(1.0, x), x), x)
    right = _lgamma_right(z)
    sine = op.Abs(op.Sin(op.Mul(_const(math.pi, x), x)))
    reflected = op.Sub(op.Sub(_const(math.log(math.pi), x), op.Log(sine)), right)
    result = op.Where(left, reflected, right)
    pole = op.And(op.LessOrEqual(x, _const(0.0, x)), op.Equal(op.Floor(x), x))
    result = op.Where(op.Or(pole, op.IsInf(x)), _const(math.inf, x), result)
    return op.CastLike(result, self)


#: Coefficients of the asymptotic series of digamma in 1/y^2, highest power first:
#: -1/132 y^-10 + 1/240 y^-8 - 1/252 y^-6 + 1/120 y^-4 - 1/12 y^-2.
_DIGAMMA_SERIES = (-1.0 / 132, 1.0 / 240, -1.0 / 252, 1.0 / 120, -1.0 / 12, 0.0)


def _digamma_right(x: TFloat) -> TFloat:
    """psi(x) for x >= 1/2: six steps of psi(x) = psi(x + 1) - 1/x, then the series."""
    correction = _const(0.0, x)
    y = x
    one = _const(1.0, x)
    for _ in range(6):
        correction = op.Add(correction, op.Div(one, y))
        y = op.Add(y, one)
    inverse_square = op.Div(one, op.Mul(y, y))
    series = _polynomial(inverse_square, _DIGAMMA_SERIES)
    asymptotic = op.Sub(op.Sub(op.Log(y), op.Div(_const(0.5, y), y)), op.Neg(series))
    return op.Sub(asymptotic, correction)


def digamma(self: TFloat) -> TFloat:
    """digamma(Tensor self) -> Tensor: the logarithmic derivative of Gamma."""
    x = op.Cast(self, to=_DOUBLE)
    left = op.Less(x, _const(0.5, x))
    right = _digamma_right(op.Where(left, op.Sub(_const(1.0, x), x), x))
    pi = _const(math.pi, x)
    angle = op.Mul(pi, x)  # pi / tan(pi x); ONNX Runtime's Tan takes no float64
    reflected = op.Sub(right, op.Div(op.Mul(pi, op.Cos(angle)), op.Sin(angle)))
    result = op.Where(left, reflected, right)
    zero = _const(0.0, x)
    is_zero = op.Equal(x, zero)
    # +0 -> -inf, -0 -> +inf (the sign of 1/x); other non-positive integers -> NaN
    signed_infinity = op.Neg(op.Div(_const(1.0, x), x))
    pole = op.And(op.LessOrEqual(x, zero), op.Equal(op.Floor(x), x))
    result = op.Where(pole, _const(math.nan, x), result)
    result = op.Where(is_zero, signed_infinity, result)
    result = op.Where(op.IsInf(x, detect_negative=0), x, result)
    return op.CastLike(result, self)


_ERFINV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_ERFINV_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def erfinv(self: TFloat) -> TFloat:
    """erfinv(Tensor self) -> Tensor: the x with erf(x) = self."""
    y = op.Cast(self, to=_DOUBLE)
    one = _const(1.0, y)
    w = op.Neg(op.Log(op.Mul(op.Sub(one, y), op.Add(one, y))))
    central = _polynomial(op.Sub(w, _const(2.5, y)), _ERFINV_CENTRAL)
    tail = _polynomial(op.Sub(op.Sqrt(w), _const(3.0, y)), _ERFINV_TAIL)
    x = op.Mul(op.Where(op.Less(w, _const(5.0, y)), central, tail), y)
    scale = _const(2.0 / math.sqrt(math.pi), y)
    for _ in range(2):  # Newton on erf(x) - y; Erf in float32 (ONNX Runtime's only)
        error = op.Sub(op.Cast(op.Erf(op.Cast(x, to=_FLOAT)), to=_DOUBLE), y)
        slope = op.Mul(scale, op.Exp(op.Neg(op.Mul(x, x))))
        x = op.Sub(x, op.Div(error, slope))
    edge = op.Equal(op.Abs(y), one)
    x = op.Where(edge, op.Mul(y, _const(math.inf, y)), x)
    x = op.Where(op.Greater(op.Abs(y), one), _const(math.nan, y), x)
    return op.CastLike(x, self)


_I0_SMALL = (0.0045813, 0.0360768, 0.2659732, 1.2067492, 3.0899424, 3.5156229, 1.0)
_I0_LARGE = (
    0.00392377,
    -0.01647633,
    0.02635537,
    -0.02057706,
    0.00916281,
    -0.00157565,
    0.00225319,
    0.01328592,
    0.39894228,
)


def i0(self: TFloat) -> TFloat:
    """i0(Tensor self) -> Tensor: the modified Bessel function of the first kind, order 0."""
    x = op.Abs(op.Cast(self, to=_DOUBLE))
    limit = _const(3.75, x)
    ratio = op.Div(x, limit)
    small = _polynomial(op.Mul(ratio, ratio), _I0_SMALL)
    safe = op.Max(x, limit)  # (the large branch is computed everywhere: no 1/0)
    large = op.Mul(op.Div(op.Exp(safe), op.Sqrt(safe)), _polynomial(op.Div(limit, safe), _I0_LARGE))
    return op.CastLike(op.Where(op.LessOrEqual(x, limit), small, large), self)
