"""ATen functions dynamo-onnx adds to torch_lib's: newer opsets, and operators it lacks.

* torch_lib writes every function against opset 18, so ``aten.gelu`` becomes five nodes
  (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``). When the export targets an opset with one
  operator for the same thing, dispatch prefers the function here: one ``Gelu`` at opset 20,
  which is also what ``torch.onnx`` emits at its default opset. Below the opset a function
  needs it is never chosen.
* torch_lib has no function for ``aten.batch_norm``, which torch.export keeps in the graph
  for every ``BatchNorm`` layer; without one the whole program is re-traced through
  ``run_decompositions`` (0.7 s of a small CNN's 4.7 s export). With running statistics
  it is one ``BatchNormalization``; with batch statistics (``track_running_stats=False``,
  or training mode) torch_lib's reductions.
"""

from __future__ import annotations

from typing import Optional

import onnxscript
from onnxscript import opset20
from onnxscript.function_libs.torch_lib.ops.core import aten_native_batch_norm
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

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


def _traced(function: object) -> onnxscript.values.TracedOnnxFunction:
    return onnxscript.values.TracedOnnxFunction(onnxscript.values.Opset(DOMAIN, 1), function)


#: (registry key, function, the opset its operators need)
EXTRA_FUNCTIONS: tuple[tuple[str, onnxscript.values.TracedOnnxFunction, int], ...] = (
    ("aten::gelu", _traced(_aten_gelu_opset20), 20),
    ("aten::batch_norm", _traced(_aten_batch_norm), 18),
)
