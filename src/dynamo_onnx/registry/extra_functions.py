"""ATen functions dynamo-onnx adds to torch_lib's: newer opsets, and operators it lacks.

* torch_lib writes every function against opset 18, so ``aten.gelu`` becomes five nodes
  (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``). When the export targets an opset with one
  operator for the same thing, dispatch prefers the function here: one ``Gelu`` at opset 20,
  which is also what ``torch.onnx`` emits at its default opset. Below the opset a function
  needs it is never chosen.
* Arithmetic on sizes. A model that computes with a dynamic size (``x * x.shape[0] ** 0.5``)
  keeps that computation in the graph as ``torch.sym_float``, ``torch.sym_max``,
  ``operator.pow`` and the like on SymInt, SymFloat and SymBool values (0-d tensors in ONNX).
  torch_lib has no function for the ``torch.sym_*`` ones, and its ``operator.pow`` and
  ``operator.floordiv`` keep an integer type where Python gives a float or floors: these
  follow Python's rules, so the model computes the same at every size.
* torch_lib has no function for ``aten.batch_norm``, which torch.export keeps in the graph
  for every ``BatchNorm`` layer; without one the whole program is re-traced through
  ``run_decompositions`` (0.7 s of a small CNN's 4.7 s export). With running statistics
  it is one ``BatchNormalization``; with batch statistics (``track_running_stats=False``,
  or training mode) torch_lib's reductions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import onnx_ir as ir
import onnxscript
from onnxscript import BOOL, DOUBLE, FLOAT, INT64, opset18, opset20
from onnxscript.function_libs.torch_lib.ops.core import aten_native_batch_norm
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal, TTensor

__all__ = ["EXTRA_FUNCTIONS", "DOMAIN"]

#: The domain of these functions when they are called as ONNX functions (they are traced).
DOMAIN = "pkg.dynamo_onnx"


def _aten_gelu_opset20(self: TFloat, approximate: str = "none") -> TFloat:
    """gelu(Tensor self, *, str approximate='none') -> Tensor, as ONNX ``Gelu`` (opset 20)."""
    return opset20.Gelu(self, approximate=approximate)


def _aten_batch_norm(
    input: TFloat,  # noqa: A002 - ATen's parameter name
    weight: Optional[TFloat],  # noqa: UP045 - onnxscript reads these annotations
    bias: Optional[TFloat],  # noqa: UP045
    running_mean: Optional[TFloat],  # noqa: UP045
    running_var: Optional[TFloat],  # noqa: UP045
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> TFloat:
    """batch_norm(...) -> Tensor with running statistics, as one ``BatchNormalization``."""
    del cudnn_enabled  # a CUDA implementation choice; nothing to export
    # Without running statistics (track_running_stats=False), eval mode normalizes with
    # the batch's statistics too, as training mode does.
    batch_statistics = training or running_mean is None or running_var is None
    outputs = aten_native_batch_norm(
        input, weight, bias, running_mean, running_var, batch_statistics, momentum, eps
    )
    return outputs[0]


def _is_float(value: Any) -> bool:
    """Whether a symbolic value (or a Python number) is a float, as Python would see it."""
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.is_floating_point()


def _as_float(value: Any) -> Any:
    return opset18.Cast(value, to=FLOAT.dtype) if isinstance(value, ir.Value) else float(value)


def _sym_float(self: TReal) -> FLOAT:
    """sym_float(SymInt self) -> SymFloat"""
    return opset18.Cast(self, to=FLOAT.dtype)


def _sym_int(self: TReal) -> INT64:
    """sym_int(SymFloat self) -> SymInt: truncates toward zero, as ``int()`` does."""
    return opset18.Cast(self, to=INT64.dtype)


def _sym_max(x: TReal, y: TReal) -> TReal:
    """sym_max(SymInt x, SymInt y) -> SymInt"""
    if _is_float(x) != _is_float(y):
        x, y = _as_float(x), _as_float(y)
    return opset18.Max(x, y)


def _sym_min(x: TReal, y: TReal) -> TReal:
    """sym_min(SymInt x, SymInt y) -> SymInt"""
    if _is_float(x) != _is_float(y):
        x, y = _as_float(x), _as_float(y)
    return opset18.Min(x, y)


def _sym_sqrt(self: TReal) -> FLOAT:
    """_sym_sqrt(SymInt self) -> SymFloat"""
    return opset18.Sqrt(opset18.Cast(self, to=FLOAT.dtype))


def _sym_ite(b: BOOL, t: TTensor, f: TTensor) -> TTensor:
    """sym_ite(SymBool b, SymInt t, SymInt f) -> SymInt: ``t if b else f``."""
    return opset18.Where(b, t, f)


def _sym_not(self: BOOL) -> BOOL:
    """sym_not(SymBool self) -> SymBool"""
    return opset18.Not(self)


def _sym_sum(args: Sequence[INT64]) -> INT64:
    """sym_sum(SymInt[] args) -> SymInt"""
    values = list(args)
    if not values:
        return opset18.Constant(value_int=0)
    total = values[0]
    for value in values[1:]:
        total = opset18.Add(total, value)
    return total


def _operator_pow(self: TReal, exponent: TReal) -> TReal:
    """``a ** b`` on symbolic numbers: a float when either is a float, as in Python."""
    if _is_float(self) or _is_float(exponent):
        return opset18.Pow(_as_float(self), _as_float(exponent))
    return opset18.Pow(self, exponent)


def _operator_floordiv(self: TReal, other: TReal) -> TReal:
    """``a // b`` on symbolic numbers: floors (``-7 // 2 == -4``), an int for two ints."""
    quotient = opset18.Floor(
        opset18.Div(opset18.Cast(self, to=DOUBLE.dtype), opset18.Cast(other, to=DOUBLE.dtype))
        if isinstance(self, ir.Value)
        else opset18.Div(float(self), opset18.Cast(other, to=DOUBLE.dtype))
    )
    if _is_float(self) or _is_float(other):
        return opset18.Cast(quotient, to=FLOAT.dtype)
    return opset18.Cast(quotient, to=INT64.dtype)


def _traced(function: object) -> onnxscript.values.TracedOnnxFunction:
    return onnxscript.values.TracedOnnxFunction(onnxscript.values.Opset(DOMAIN, 1), function)


#: (registry key, function, the opset its operators need)
EXTRA_FUNCTIONS: tuple[tuple[str, onnxscript.values.TracedOnnxFunction, int], ...] = (
    ("aten::gelu", _traced(_aten_gelu_opset20), 20),
    ("aten::batch_norm", _traced(_aten_batch_norm), 18),
    ("torch::sym_float", _traced(_sym_float), 18),
    ("torch::sym_int", _traced(_sym_int), 18),
    ("torch::sym_max", _traced(_sym_max), 18),
    ("torch::sym_min", _traced(_sym_min), 18),
    ("torch::_sym_sqrt", _traced(_sym_sqrt), 18),
    ("torch::sym_ite", _traced(_sym_ite), 18),
    ("torch::sym_not", _traced(_sym_not), 18),
    ("torch::sym_sum", _traced(_sym_sum), 18),
    ("_operator::pow", _traced(_operator_pow), 18),
    ("_operator::floordiv", _traced(_operator_floordiv), 18),
)
