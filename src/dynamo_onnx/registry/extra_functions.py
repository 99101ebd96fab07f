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

import onnxscript

from dynamo_onnx.registry.functions import (
    bags,
    elementwise,
    indexing,
    linalg,
    nn,
    numeric,
    onnx_ops,
    pooling,
    random,
    reductions,
    selection,
    special,
    symbolic,
)
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
    ("aten::diff", numeric.diff, 18),
    ("aten::avg_pool2d", pooling.avg_pool2d, 18),
    ("aten::avg_pool3d", pooling.avg_pool3d, 18),
    ("aten::_adaptive_avg_pool2d", pooling.adaptive_avg_pool, 18),
    ("aten::_adaptive_avg_pool3d", pooling.adaptive_avg_pool, 18),
    ("aten::adaptive_max_pool2d", pooling.adaptive_max_pool, 18),
    ("aten::adaptive_max_pool3d", pooling.adaptive_max_pool, 18),
    ("aten::max_pool2d_with_indices_backward", pooling.max_pool2d_with_indices_backward, 18),
    ("aten::_cdist_forward", numeric.cdist, 18),
    ("aten::max.other", elementwise.max_other, 18),
    ("aten::min.other", elementwise.min_other, 18),
    ("aten::fmax", elementwise.fmax, 18),
    ("aten::fmin", elementwise.fmin, 18),
    ("aten::hypot", elementwise.hypot, 18),
    ("aten::copysign.Tensor", elementwise.copysign, 18),
    ("aten::frexp.Tensor", elementwise.frexp, 18),
    ("aten::rrelu_with_noise_functional", elementwise.rrelu_with_noise, 18),
    ("aten::sort", indexing.sort, 18),
    ("aten::sort.stable", indexing.sort_stable, 18),
    ("aten::kthvalue", indexing.kthvalue, 18),
    ("aten::searchsorted.Tensor", indexing.searchsorted, 18),
    ("aten::searchsorted.Scalar", indexing.searchsorted, 18),
    ("aten::bucketize.Tensor", indexing.bucketize, 18),
    ("aten::take", indexing.take, 18),
    ("aten::put", indexing.put, 18),
    ("aten::scatter.reduce", indexing.scatter_reduce_two, 18),
    ("aten::scatter.value_reduce", indexing.scatter_value_reduce, 18),
    ("aten::nonzero_static", indexing.nonzero_static, 18),
    ("aten::squeeze.dims", indexing.squeeze_dims, 18),
    ("aten::empty_permuted", indexing.empty_permuted, 18),
    ("aten::reshape", indexing.reshape, 18),
    ("aten::uniform", elementwise.uniform, 18),
    ("aten::all.dim", reductions.all_dim, 18),
    ("aten::all.dims", reductions.all_dims, 18),
    ("aten::any.dim", reductions.any_dim, 18),
    ("aten::any.dims", reductions.any_dims, 18),
    ("aten::amax", reductions.amax, 18),
    ("aten::amin", reductions.amin, 18),
    ("aten::scatter_reduce.two", reductions.scatter_reduce, 18),
    ("aten::pad", reductions.pad, 18),
    ("aten::cumprod", reductions.cumprod, 18),
    ("aten::cummax", reductions.cummax, 18),
    ("aten::cummin", reductions.cummin, 18),
    ("aten::lgamma", special.lgamma, 18),
    ("aten::digamma", special.digamma, 18),
    ("aten::erfinv", special.erfinv, 18),
    ("aten::i0", special.i0, 18),
    ("aten::median", selection.median, 18),
    ("aten::median.dim", selection.median_dim, 18),
    ("aten::nanmedian", selection.nanmedian, 18),
    ("aten::nanmedian.dim", selection.nanmedian_dim, 18),
    ("aten::mode", selection.mode, 18),
    ("aten::masked_select", selection.masked_select, 18),
    ("aten::index_reduce", selection.index_reduce, 18),
    ("aten::linalg_inv_ex", linalg.linalg_inv_ex, 18),
    ("aten::linalg_inv", linalg.linalg_inv, 18),
    ("aten::inverse", linalg.linalg_inv, 18),
    ("aten::linalg_tensorinv", linalg.linalg_tensorinv, 18),
    ("aten::_linalg_solve_ex", linalg.linalg_solve_ex, 18),
    ("aten::linalg_solve", linalg.linalg_solve, 18),
    ("aten::_linalg_slogdet", linalg.linalg_slogdet_full, 18),
    ("aten::linalg_slogdet", linalg.linalg_slogdet, 18),
    ("aten::slogdet", linalg.linalg_slogdet, 18),
    ("aten::linalg_cholesky_ex", linalg.linalg_cholesky_ex, 18),
    ("aten::linalg_cholesky", linalg.cholesky, 18),
    ("aten::cholesky", linalg.cholesky, 18),
    ("aten::linalg_solve_triangular", linalg.linalg_solve_triangular, 18),
    ("aten::embedding_bag", bags.embedding_bag, 18),
    ("aten::embedding_bag.padding_idx", bags.embedding_bag, 18),
    ("aten::_embedding_bag", bags.embedding_bag, 18),
    ("aten::_embedding_bag_forward_only", bags.embedding_bag, 18),
    ("aten::cauchy", random.cauchy, 18),
    ("aten::exponential", random.exponential, 18),
    ("aten::geometric", random.geometric, 18),
    ("aten::log_normal", random.log_normal, 18),
    ("onnx_symbolic::_symbolic", onnx_ops.symbolic, 18),
    ("onnx_symbolic::_symbolic_multi_out", onnx_ops.symbolic_multi_out, 18),
    ("onnx::RotaryEmbedding.opset23", onnx_ops.rotary_embedding_23, 23),
    ("onnx::Attention.opset23", onnx_ops.attention_23, 23),
)

#: (registry key, function, the opset its operators need)
EXTRA_FUNCTIONS: tuple[tuple[str, onnxscript.values.TracedOnnxFunction, int], ...] = tuple(
    (name, _traced(function), opset) for name, function, opset in _BY_NAME
)
