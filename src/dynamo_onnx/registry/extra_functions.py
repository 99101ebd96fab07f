"""The ATen functions dynamo-onnx adds to torch_lib's, each with the opset it needs.

Functions here come before torch_lib's at the same opset (they complete or correct it), and
are never chosen below the opset they need. What each group is for is said in its module:

* ``functions.nn``: one ``Gelu`` at opset 20, ``batch_norm`` without a re-trace and every
  batch-norm form in training mode (torch_lib's force inference mode), ``conv_tbc``;
* ``functions.symbolic``: arithmetic on SymInt/SymFloat/SymBool sizes (``torch.sym_*``,
  ``operator.pow``/``floordiv``) by Python's rules;
* ``functions.numeric``: the variance family torch_lib leaves unregistered, ``dist``,
  ``cdist``, ``ldexp``, ``special_entr``;
* ``functions.pooling``: adaptive average and max pooling, average pooling with
  ``divisor_override`` (torch_lib ignores it), max pooling's gradient;
* ``functions.elementwise``: ``max.other``/``min.other``, ``fmax``/``fmin``, ``hypot``, ``copysign``, ``frexp``,
  ``uniform``, RReLU;
* ``functions.indexing``: ``sort``, ``kthvalue``, ``searchsorted``/``bucketize``,
  ``take``/``put``, ``scatter`` with ``reduce``, ``nonzero_static``, ``squeeze.dims``,
  ``empty_permuted``, ``reshape`` (a size of 0 is empty, as in ``view``);
* ``functions.reductions``: torch_lib's ``all``/``any``/``amax``/``amin`` on 0-d inputs,
  ``scatter_reduce`` with ``mean``, circular ``pad``, ``cumprod``, ``cummax``, ``cummin`` (torch_lib has none);
* ``functions.special``: ``lgamma``, ``digamma``, ``erfinv``, ``i0`` (series and
  approximations in float64);
* ``functions.selection``: ``median``/``nanmedian``, ``mode``, ``masked_select``,
  ``index_reduce``;
* ``functions.linalg``: ``linalg.inv``/``solve``/``slogdet``/``cholesky``/
  ``solve_triangular`` unrolled over a static matrix size (LU with partial pivoting,
  Cholesky, substitution);
* ``functions.bags``: ``embedding_bag`` without torch_lib's loop over the bags (ONNX
  Runtime crashes running it when the indices' shape is static);
* ``functions.random``: ``cauchy``, ``exponential``, ``geometric``, ``log_normal``;
* ``functions.onnx_ops``: ``torch.onnx.ops``: the node ``symbolic``/``symbolic_multi_out``
  name (any domain), ``RotaryEmbedding`` and ``Attention`` from opset 23;
* ``functions.copies``: the ``*_copy`` forms of views, mapped to the views' functions by the
  registry (:data:`COPY_OF_VIEW`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any

from dynamo_onnx.registry.functions.copies import COPY_OF_VIEW

__all__ = ["COPY_OF_VIEW", "DOMAIN", "EXTRA_FUNCTIONS", "DeferredFunction"]

#: The domain of these functions when they are called as ONNX functions (they are traced).
DOMAIN = "pkg.dynamo_onnx"

_OURS = "dynamo_onnx.registry.functions"
_TORCHLIB_CORE = "onnxscript.function_libs.torch_lib.ops.core"


@functools.cache
def _traced(module: str, attribute: str) -> Any:
    """The onnxscript function of ``module.attribute``, traced in :data:`DOMAIN`; built once
    per process."""
    import onnxscript

    function = getattr(importlib.import_module(module), attribute)
    return onnxscript.values.TracedOnnxFunction(onnxscript.values.Opset(DOMAIN, 1), function)


@dataclasses.dataclass(frozen=True)
class DeferredFunction:
    """One of these functions, imported and traced when dispatch first looks at it.

    onnxscript types a traced function's signature when it is made, and most exports call
    none of these operators: the registry lists them by name, and an export pays for the
    modules and signatures of the ones its graph dispatches to (docs/performance.md). It
    answers what dispatch and translation ask of a function (``name``, ``op_signature``,
    a call) by loading it; the registry hands its users the loaded function
    (:meth:`load`).
    """

    module: str
    attribute: str

    def load(self) -> Any:
        """The ``onnxscript.values.TracedOnnxFunction``."""
        return _traced(self.module, self.attribute)

    @property
    def name(self) -> str:
        return str(self.load().name)

    @property
    def op_signature(self) -> Any:
        return self.load().op_signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)


_BY_NAME: tuple[tuple[str, str, str, int], ...] = (
    ("aten::gelu", f"{_OURS}.nn", "aten_gelu_opset20", 20),
    ("aten::batch_norm", f"{_OURS}.nn", "aten_batch_norm", 18),
    ("aten::native_batch_norm", f"{_OURS}.nn", "native_batch_norm", 18),
    ("aten::_native_batch_norm_legit", f"{_OURS}.nn", "native_batch_norm", 18),
    ("aten::_native_batch_norm_legit.no_stats", f"{_OURS}.nn", "native_batch_norm_no_stats", 18),
    (
        "aten::_native_batch_norm_legit_functional",
        f"{_OURS}.nn",
        "native_batch_norm_functional",
        18,
    ),
    ("aten::_batch_norm_with_update_functional", f"{_OURS}.nn", "batch_norm_with_update", 18),
    ("aten::conv_tbc", f"{_OURS}.nn", "aten_conv_tbc", 18),
    ("torch::sym_float", f"{_OURS}.symbolic", "sym_float", 18),
    ("torch::sym_int", f"{_OURS}.symbolic", "sym_int", 18),
    ("torch::sym_max", f"{_OURS}.symbolic", "sym_max", 18),
    ("torch::sym_min", f"{_OURS}.symbolic", "sym_min", 18),
    ("torch::_sym_sqrt", f"{_OURS}.symbolic", "sym_sqrt", 18),
    ("torch::sym_ite", f"{_OURS}.symbolic", "sym_ite", 18),
    ("torch::sym_not", f"{_OURS}.symbolic", "sym_not", 18),
    ("torch::sym_sum", f"{_OURS}.symbolic", "sym_sum", 18),
    ("_operator::pow", f"{_OURS}.symbolic", "operator_pow", 18),
    ("_operator::floordiv", f"{_OURS}.symbolic", "operator_floordiv", 18),
    *(
        (f"aten::{name}{overload}", _TORCHLIB_CORE, f"aten_{name}{suffix}", 18)
        for name in ("var", "std", "var_mean", "std_mean")
        for overload, suffix in (("", ""), (".dim", "_dim"), (".correction", "_correction"))
    ),
    ("aten::dist", f"{_OURS}.numeric", "dist", 18),
    ("aten::ldexp.Tensor", f"{_OURS}.numeric", "ldexp", 18),
    ("aten::special_entr", f"{_OURS}.numeric", "special_entr", 18),
    ("aten::diff", f"{_OURS}.numeric", "diff", 18),
    ("aten::avg_pool2d", f"{_OURS}.pooling", "avg_pool2d", 18),
    ("aten::avg_pool3d", f"{_OURS}.pooling", "avg_pool3d", 18),
    ("aten::_adaptive_avg_pool2d", f"{_OURS}.pooling", "adaptive_avg_pool", 18),
    ("aten::_adaptive_avg_pool3d", f"{_OURS}.pooling", "adaptive_avg_pool", 18),
    ("aten::adaptive_max_pool2d", f"{_OURS}.pooling", "adaptive_max_pool", 18),
    ("aten::adaptive_max_pool3d", f"{_OURS}.pooling", "adaptive_max_pool", 18),
    (
        "aten::max_pool2d_with_indices_backward",
        f"{_OURS}.pooling",
        "max_pool2d_with_indices_backward",
        18,
    ),
    ("aten::_cdist_forward", f"{_OURS}.numeric", "cdist", 18),
    ("aten::max.other", f"{_OURS}.elementwise", "max_other", 18),
    ("aten::min.other", f"{_OURS}.elementwise", "min_other", 18),
    ("aten::fmax", f"{_OURS}.elementwise", "fmax", 18),
    ("aten::fmin", f"{_OURS}.elementwise", "fmin", 18),
    ("aten::hypot", f"{_OURS}.elementwise", "hypot", 18),
    ("aten::copysign.Tensor", f"{_OURS}.elementwise", "copysign", 18),
    ("aten::frexp.Tensor", f"{_OURS}.elementwise", "frexp", 18),
    ("aten::rrelu_with_noise_functional", f"{_OURS}.elementwise", "rrelu_with_noise", 18),
    ("aten::sort", f"{_OURS}.indexing", "sort", 18),
    ("aten::sort.stable", f"{_OURS}.indexing", "sort_stable", 18),
    ("aten::kthvalue", f"{_OURS}.indexing", "kthvalue", 18),
    ("aten::searchsorted.Tensor", f"{_OURS}.indexing", "searchsorted", 18),
    ("aten::searchsorted.Scalar", f"{_OURS}.indexing", "searchsorted", 18),
    ("aten::bucketize.Tensor", f"{_OURS}.indexing", "bucketize", 18),
    ("aten::take", f"{_OURS}.indexing", "take", 18),
    ("aten::put", f"{_OURS}.indexing", "put", 18),
    ("aten::scatter.reduce", f"{_OURS}.indexing", "scatter_reduce_two", 18),
    ("aten::scatter.value_reduce", f"{_OURS}.indexing", "scatter_value_reduce", 18),
    ("aten::nonzero_static", f"{_OURS}.indexing", "nonzero_static", 18),
    ("aten::squeeze.dims", f"{_OURS}.indexing", "squeeze_dims", 18),
    ("aten::empty_permuted", f"{_OURS}.indexing", "empty_permuted", 18),
    ("aten::reshape", f"{_OURS}.indexing", "reshape", 18),
    ("aten::uniform", f"{_OURS}.elementwise", "uniform", 18),
    ("aten::all.dim", f"{_OURS}.reductions", "all_dim", 18),
    ("aten::all.dims", f"{_OURS}.reductions", "all_dims", 18),
    ("aten::any.dim", f"{_OURS}.reductions", "any_dim", 18),
    ("aten::any.dims", f"{_OURS}.reductions", "any_dims", 18),
    ("aten::amax", f"{_OURS}.reductions", "amax", 18),
    ("aten::amin", f"{_OURS}.reductions", "amin", 18),
    ("aten::scatter_reduce.two", f"{_OURS}.reductions", "scatter_reduce", 18),
    ("aten::pad", f"{_OURS}.reductions", "pad", 18),
    ("aten::cumprod", f"{_OURS}.reductions", "cumprod", 18),
    ("aten::cummax", f"{_OURS}.reductions", "cummax", 18),
    ("aten::cummin", f"{_OURS}.reductions", "cummin", 18),
    ("aten::lgamma", f"{_OURS}.special", "lgamma", 18),
    ("aten::digamma", f"{_OURS}.special", "digamma", 18),
    ("aten::erfinv", f"{_OURS}.special", "erfinv", 18),
    ("aten::i0", f"{_OURS}.special", "i0", 18),
    ("aten::median", f"{_OURS}.selection", "median", 18),
    ("aten::median.dim", f"{_OURS}.selection", "median_dim", 18),
    ("aten::nanmedian", f"{_OURS}.selection", "nanmedian", 18),
    ("aten::nanmedian.dim", f"{_OURS}.selection", "nanmedian_dim", 18),
    ("aten::mode", f"{_OURS}.selection", "mode", 18),
    ("aten::masked_select", f"{_OURS}.selection", "masked_select", 18),
    ("aten::index_reduce", f"{_OURS}.selection", "index_reduce", 18),
    ("aten::linalg_inv_ex", f"{_OURS}.linalg", "linalg_inv_ex", 18),
    ("aten::linalg_inv", f"{_OURS}.linalg", "linalg_inv", 18),
    ("aten::inverse", f"{_OURS}.linalg", "linalg_inv", 18),
    ("aten::linalg_tensorinv", f"{_OURS}.linalg", "linalg_tensorinv", 18),
    ("aten::_linalg_solve_ex", f"{_OURS}.linalg", "linalg_solve_ex", 18),
    ("aten::linalg_solve", f"{_OURS}.linalg", "linalg_solve", 18),
    ("aten::_linalg_slogdet", f"{_OURS}.linalg", "linalg_slogdet_full", 18),
    ("aten::linalg_slogdet", f"{_OURS}.linalg", "linalg_slogdet", 18),
    ("aten::slogdet", f"{_OURS}.linalg", "linalg_slogdet", 18),
    ("aten::linalg_cholesky_ex", f"{_OURS}.linalg", "linalg_cholesky_ex", 18),
    ("aten::linalg_cholesky", f"{_OURS}.linalg", "cholesky", 18),
    ("aten::cholesky", f"{_OURS}.linalg", "cholesky", 18),
    ("aten::linalg_solve_triangular", f"{_OURS}.linalg", "linalg_solve_triangular", 18),
    ("aten::embedding_bag", f"{_OURS}.bags", "embedding_bag", 18),
    ("aten::embedding_bag.padding_idx", f"{_OURS}.bags", "embedding_bag", 18),
    ("aten::_embedding_bag", f"{_OURS}.bags", "embedding_bag", 18),
    ("aten::_embedding_bag_forward_only", f"{_OURS}.bags", "embedding_bag", 18),
    ("aten::cauchy", f"{_OURS}.random", "cauchy", 18),
    ("aten::exponential", f"{_OURS}.random", "exponential", 18),
    ("aten::geometric", f"{_OURS}.random", "geometric", 18),
    ("aten::log_normal", f"{_OURS}.random", "log_normal", 18),
    ("onnx_symbolic::_symbolic", f"{_OURS}.onnx_ops", "symbolic", 18),
    ("onnx_symbolic::_symbolic_multi_out", f"{_OURS}.onnx_ops", "symbolic_multi_out", 18),
    ("onnx::RotaryEmbedding.opset23", f"{_OURS}.onnx_ops", "rotary_embedding_23", 23),
    ("onnx::Attention.opset23", f"{_OURS}.onnx_ops", "attention_23", 23),
)

#: (registry key, function, the opset its operators need); the variance family is torch_lib's
#: functions, which torch_lib leaves unregistered.
EXTRA_FUNCTIONS: tuple[tuple[str, DeferredFunction, int], ...] = tuple(
    (name, DeferredFunction(module, attribute), opset)
    for name, module, attribute, opset in _BY_NAME
)
