"""ATen functions that use ONNX operators newer than torch_lib's opset 18.

torch_lib writes every function against opset 18, so ``aten.gelu`` becomes five nodes
(``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``). When the export targets an opset that has a
single operator for the same thing, dispatch prefers the function here: one ``Gelu`` node
at opset 20, which is also what ``torch.onnx`` emits at its default opset. Each function
says the opset its operators need (``OPSET_FUNCTIONS``); below that opset it is never
chosen, and translation still records nodes at opset 18 that the version converter lifts.
"""

from __future__ import annotations

import onnxscript
from onnxscript import opset20
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

__all__ = ["OPSET_FUNCTIONS", "DOMAIN"]

#: The domain of these functions when they are called as ONNX functions (they are traced).
DOMAIN = "pkg.dynamo_onnx"


def _aten_gelu_opset20(self: TFloat, approximate: str = "none") -> TFloat:
    """gelu(Tensor self, *, str approximate='none') -> Tensor, as ONNX ``Gelu`` (opset 20)."""
    return opset20.Gelu(self, approximate=approximate)


def _traced(function: object) -> onnxscript.values.TracedOnnxFunction:
    return onnxscript.values.TracedOnnxFunction(onnxscript.values.Opset(DOMAIN, 1), function)


#: (registry key, function, the opset its operators need)
OPSET_FUNCTIONS: tuple[tuple[str, onnxscript.values.TracedOnnxFunction, int], ...] = (
    ("aten::gelu", _traced(_aten_gelu_opset20), 20),
)
