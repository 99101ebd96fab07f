"""The ATen functions dynamo-onnx adds to torch_lib's, each with the opset it needs.

Functions here come before torch_lib's at the same opset (they complete or correct it), and
are never chosen below the opset they need. What each group is for is said in its module:

* ``functions.nn``: one ``Gelu`` at opset 20, ``batch_norm`` without a re-trace and every
  batch-norm form in training mode (torch_lib's force inference mode), ``conv_tbc``;
* ``functions.symbolic``: arithmetic on SymInt/SymFloat/SymBool sizes (``torch.sym_*``,
  ``operator.pow``/``floordiv``) by Python's rules;
* ``functions.numeric``: the variance family torch_lib leaves unregistered, ``dist``,
  ``ldexp``, ``special_entr``;
* ``functions.pooling``: adaptive average and max pooling, max pooling's gradient;
* ``functions.random``: ``cauchy``, ``exponential``, ``geometric``, ``log_normal``;
* ``functions.copies``: the ``*_copy`` forms of views, mapped to the views' functions by the
  registry (:data:`COPY_OF_VIEW`).
"""

from __future__ import annotations

import onnxscript

from dynamo_onnx.registry.functions import nn, numeric, pooling, random, symbolic
from dynamo_onnx.registry.functions.copies import COPY_OF_VIEW

__all__ = ["COPY_OF_VIEW", "DOMAIN", "EXTRA_FUNCTIONS"]

#: The domain of these functions when they are called as ONNX functions (they are traced).
DOMAIN = "pkg.dynamo_onnx"


def _traced(function: object) -> onnxscript.values.TracedOnnxFunction:
    return onnxscript.values.TracedOnnxFunction(onnxscript.values.Opset(DOMAIN, 1), function)


_BY_NAME: tuple[tuple[str, object, int], ...] = (
    ("aten::gelu", nn.aten_gelu_opset20, 20),
    ("aten::batch_norm", nn.aten_batch_norm, 18),
    ("aten::native_batch_norm", nn.native_batch_norm, 18),
    ("aten::_native_batch_norm_legit", nn.native_batch_norm, 18),
    ("aten::_native_batch_norm_legit.no_stats", nn.native_batch_norm_no_stats, 18),
    ("aten::_native_batch_norm_legit_functional", nn.native_batch_norm_functional, 18),
    ("aten::_batch_norm_with_update_functional", nn.batch_norm_with_update, 18),
    ("aten::conv_tbc", nn.aten_conv_tbc, 18),
    ("torch::sym_float", symbolic.sym_float, 18),
    ("torch::sym_int", symbolic.sym_int, 18),
    ("torch::sym_max", symbolic.sym_max, 18),
    ("torch::sym_min", symbolic.sym_min, 18),
    ("torch::_sym_sqrt", symbolic.sym_sqrt, 18),
    ("torch::sym_ite", symbolic.sym_ite, 18),
    ("torch::sym_not", symbolic.sym_not, 18),
    ("torch::sym_sum", symbolic.sym_sum, 18),
    ("_operator::pow", symbolic.operator_pow, 18),
    ("_operator::floordiv", symbolic.operator_floordiv, 18),
    *((name, function, 18) for name, function in numeric.MOMENTS),
    ("aten::dist", numeric.dist, 18),
    ("aten::ldexp.Tensor", numeric.ldexp, 18),
    ("aten::special_entr", numeric.special_entr, 18),
    ("aten::_adaptive_avg_pool2d", pooling.adaptive_avg_pool, 18),
    ("aten::_adaptive_avg_pool3d", pooling.adaptive_avg_pool, 18),
    ("aten::adaptive_max_pool2d", pooling.adaptive_max_pool, 18),
    ("aten::adaptive_max_pool3d", pooling.adaptive_max_pool, 18),
    ("aten::max_pool2d_with_indices_backward", pooling.max_pool2d_with_indices_backward, 18),
    ("aten::cauchy", random.cauchy, 18),
    ("aten::exponential", random.exponential, 18),
    ("aten::geometric", random.geometric, 18),
    ("aten::log_normal", random.log_normal, 18),
)

#: (registry key, function, the opset its operators need)
EXTRA_FUNCTIONS: tuple[tuple[str, onnxscript.values.TracedOnnxFunction, int], ...] = tuple(
    (name, _traced(function), opset) for name, function, opset in _BY_NAME
)
