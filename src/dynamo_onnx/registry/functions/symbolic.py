"""Arithmetic on sizes.

A model that computes with a dynamic size (``x * x.shape[0] ** 0.5``) keeps that computation
in the graph as ``torch.sym_float``, ``torch.sym_max``, ``operator.pow`` and the like on
SymInt, SymFloat and SymBool values (0-d tensors in ONNX). torch_lib has no function for the
``torch.sym_*`` ones, and its ``operator.pow`` and ``operator.floordiv`` keep an integer type
where Python gives a float or floors: these follow Python's rules, so the model computes the
same at every size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
from onnxscript import BOOL, DOUBLE, FLOAT, INT64, opset18
from onnxscript.function_libs.torch_lib.tensor_typing import TReal, TTensor

__all__ = [
    "operator_floordiv",
    "operator_pow",
    "sym_float",
    "sym_int",
    "sym_ite",
    "sym_max",
    "sym_min",
    "sym_not",
    "sym_sqrt",
    "sym_sum",
]


def _is_float(value: Any) -> bool:
    """Whether a symbolic value (or a Python number) is a float, as Python would see it."""
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.is_floating_point()


def _as_float(value: Any) -> Any:
    return opset18.Cast(value, to=FLOAT.dtype) if isinstance(value, ir.Value) else float(value)


def sym_float(self: TReal) -> FLOAT:
    """sym_float(SymInt self) -> SymFloat"""
    return opset18.Cast(self, to=FLOAT.dtype)


def sym_int(self: TReal) -> INT64:
    """sym_int(SymFloat self) -> SymInt: truncates toward zero, as ``int()`` does."""
    return opset18.Cast(self, to=INT64.dtype)


def sym_max(x: TReal, y: TReal) -> TReal:
    """sym_max(SymInt x, SymInt y) -> SymInt"""
    if _is_float(x) != _is_float(y):
        x, y = _as_float(x), _as_float(y)
    return opset18.Max(x, y)


def sym_min(x: TReal, y: TReal) -> TReal:
    """sym_min(SymInt x, SymInt y) -> SymInt"""
    if _is_float(x) != _is_float(y):
        x, y = _as_float(x), _as_float(y)
    return opset18.Min(x, y)


def sym_sqrt(self: TReal) -> FLOAT:
    """_sym_sqrt(SymInt self) -> SymFloat"""
    return opset18.Sqrt(opset18.Cast(self, to=FLOAT.dtype))


def sym_ite(b: BOOL, t: TTensor, f: TTensor) -> TTensor:
    """sym_ite(SymBool b, SymInt t, SymInt f) -> SymInt: ``t if b else f``."""
    return opset18.Where(b, t, f)


def sym_not(self: BOOL) -> BOOL:
    """sym_not(SymBool self) -> SymBool"""
    return opset18.Not(self)


def sym_sum(args: Sequence[INT64]) -> INT64:
    """sym_sum(SymInt[] args) -> SymInt"""
    values = list(args)
    if not values:
        return opset18.Constant(value_int=0)
    total = values[0]
    for value in values[1:]:
        total = opset18.Add(total, value)
    return total


def operator_pow(self: TReal, exponent: TReal) -> TReal:
    """``a ** b`` on symbolic numbers: a float when either is a float, as in Python."""
    if _is_float(self) or _is_float(exponent):
        return opset18.Pow(_as_float(self), _as_float(exponent))
    return opset18.Pow(self, exponent)


def operator_floordiv(self: TReal, other: TReal) -> TReal:
    """``a // b`` on symbolic numbers: floors (``-7 // 2 == -4``), an int for two ints."""
    quotient = opset18.Floor(
        opset18.Div(opset18.Cast(self, to=DOUBLE.dtype), opset18.Cast(other, to=DOUBLE.dtype))
        if isinstance(self, ir.Value)
        else opset18.Div(float(self), opset18.Cast(other, to=DOUBLE.dtype))
    )
    if _is_float(self) or _is_float(other):
        return opset18.Cast(quotient, to=FLOAT.dtype)
    return opset18.Cast(quotient, to=INT64.dtype)
