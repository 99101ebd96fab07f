"""Random distributions torch_lib lacks: the functional forms of ``Tensor.cauchy_``,
``exponential_``, ``geometric_`` and ``log_normal_``, drawn from ONNX's uniform and normal
generators by the inverse of each distribution's CDF (in float32, then cast to the tensor's
dtype, so integer tensors work as in eager). Like every random operator they never equal
eager's numbers (DO123 says so); their shape, dtype and distribution do.
"""

from __future__ import annotations

import math

from onnxscript import FLOAT
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TReal

__all__ = ["cauchy", "exponential", "geometric", "log_normal"]


def _uniform(self: TReal) -> FLOAT:
    """Uniform draws in [0, 1) shaped like ``self``."""
    return op.RandomUniformLike(self, dtype=FLOAT.dtype, low=0.0, high=1.0)


def _one_minus_uniform(self: TReal) -> FLOAT:
    """Draws in (0, 1]: safe under a logarithm."""
    return op.Sub(op.Constant(value_float=1.0), _uniform(self))


def cauchy(self: TReal, median: float = 0.0, sigma: float = 1.0, generator: None = None) -> TReal:
    """cauchy(Tensor self, float median=0, float sigma=1, *, Generator? generator=None)"""
    del generator
    angle = op.Mul(
        op.Sub(_uniform(self), op.Constant(value_float=0.5)), op.Constant(value_float=math.pi)
    )
    draws = op.Add(
        op.Constant(value_float=median), op.Mul(op.Constant(value_float=sigma), op.Tan(angle))
    )
    return op.CastLike(draws, self)


def exponential(self: TReal, lambd: float = 1.0, generator: None = None) -> TReal:
    """exponential(Tensor self, float lambd=1, *, Generator? generator=None)"""
    del generator
    draws = op.Div(op.Neg(op.Log(_one_minus_uniform(self))), op.Constant(value_float=lambd))
    return op.CastLike(draws, self)


def geometric(self: TReal, p: float, generator: None = None) -> TReal:
    """geometric(Tensor self, float p, *, Generator? generator=None): trials to a success."""
    del generator
    trials = op.Ceil(
        op.Div(op.Log(_one_minus_uniform(self)), op.Constant(value_float=math.log1p(-p)))
    )
    return op.CastLike(op.Max(trials, op.Constant(value_float=1.0)), self)  # at least one


def log_normal(self: TReal, mean: float = 1.0, std: float = 2.0, generator: None = None) -> TReal:
    """log_normal(Tensor self, float mean=1, float std=2, *, Generator? generator=None)"""
    del generator
    normal = op.RandomNormalLike(self, dtype=FLOAT.dtype, mean=float(mean), scale=float(std))
    return op.CastLike(op.Exp(normal), self)
