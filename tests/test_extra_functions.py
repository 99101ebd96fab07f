"""dynamo-onnx's own ONNX functions (registry/functions): each runs in ONNX Runtime and
matches eager, including the cases torch_lib gets wrong (training-mode batch norm)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import onnx_ir as ir
import pytest
import torch
import torch.nn.functional as F

import dynamo_onnx
from dynamo_onnx.diagnostics import Level


def _matches(function, *args, atol=1e-5, rtol=1e-4):
    program = dynamo_onnx.export(function, args)
    expected = function(*args)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = program(*args)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True)
    return program


@pytest.mark.parametrize(
    "moment",
    [
        lambda x: torch.var(x),
        lambda x: torch.var(x, dim=1, correction=0),
        lambda x: torch.std(x, dim=(0, 2), keepdim=True),
        lambda x: torch.var_mean(x, dim=1),
        lambda x: torch.std_mean(x, correction=2),
    ],
)
def test_variance_family(moment):
    _matches(moment, torch.randn(4, 5, 6))


def test_adaptive_average_pooling_to_sizes_that_do_not_divide():
    """VGG's AdaptiveAvgPool2d((7, 7)) on a 15x13 map: overlapping windows."""
    pool = torch.nn.AdaptiveAvgPool2d((7, 7))
    program = _matches(pool, torch.randn(2, 3, 15, 13))
    assert "MatMul" in [n.op_type for n in program.model.graph]


class StridedConvThenPool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 6, 1, stride=2)

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(self.conv(x), (2, 3)).relu()


@pytest.mark.parametrize(
    "spec",
    [
        ({2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO},),
        {"x": {2: "height", 3: "width"}},
    ],
    ids=["Dim.AUTO-tuple", "named-dict"],
)
def test_adaptive_average_pooling_of_a_dynamic_size(spec):
    """compat case 1857: the averaging matrix of a dynamic axis is computed in the graph
    from its size at run time (it was DO303: "needs static spatial sizes"; torch.onnx
    exports it). Sizes that divide, that do not, and smaller than the output (overlap)."""
    model = StridedConvThenPool().eval()
    program = dynamo_onnx.export(model, (torch.randn(2, 4, 9, 9),), dynamic_shapes=spec)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for height, width in ((9, 9), (13, 7), (4, 3), (16, 2)):
        x = torch.randn(2, 4, height, width)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_adaptive_max_pooling_values_and_indices():
    def pool(x):
        return torch.nn.functional.adaptive_max_pool2d(x, (3, 4), return_indices=True)

    _matches(pool, torch.randn(2, 3, 8, 10))


def test_adaptive_max_pooling_in_3d():
    _matches(torch.nn.AdaptiveMaxPool3d((2, 3, 2)), torch.randn(1, 2, 5, 7, 4))


def test_max_pool_gradient_goes_to_the_max_positions():
    def backward(grad, x):
        _, indices = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices
        )

    _matches(backward, torch.randn(1, 2, 3, 3), torch.randn(1, 2, 6, 6))


def test_scattered_sums_in_half_precision_run_on_onnx_runtime_cpu():
    """ONNX Runtime's CPU ScatterElements has no float16 ``add``: summed in float32."""

    def backward(grad, x):
        _, indices = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices
        )

    def mean(x, index, src):
        return x.scatter_reduce(0, index, src, "mean", include_self=False)

    half = torch.float16
    grad, x = torch.randn(1, 2, 3, 3, dtype=half), torch.randn(1, 2, 6, 6, dtype=half)
    program = _matches(backward, grad, x, atol=1e-3, rtol=1e-3)
    assert program.model.graph.outputs[0].dtype == ir.DataType.FLOAT16
    index = torch.tensor([[0, 1], [1, 0], [0, 0]])
    _matches(mean, torch.randn(2, 2, dtype=half), index, torch.randn(3, 2, dtype=half), atol=1e-3)


class TrainingNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(3)
        with torch.no_grad():
            self.norm.running_mean.fill_(5.0)  # far from the batch's: a wrong choice shows

    def forward(self, x):
        return self.norm(x)


def test_training_mode_batch_norm_normalizes_with_the_batch():
    """torch_lib's batch-norm functions force inference mode; a model exported in training
    mode (DO122 says so) must compute what training-mode eager computes."""
    x = torch.randn(4, 3, 5, 5) * 3 + 2
    program = dynamo_onnx.export(TrainingNorm().train(), (x,))
    assert program.diagnostics.by_rule("training-mode")
    torch.testing.assert_close(program(x)[0], TrainingNorm().train()(x), atol=1e-5, rtol=1e-5)


def test_batch_norm_with_update_returns_updated_running_statistics():
    def step(x, weight, bias, mean, var):
        return torch.ops.aten._batch_norm_with_update_functional(
            x, weight, bias, mean, var, 0.1, 1e-5
        )

    args = (torch.randn(3, 2, 4), torch.randn(2), torch.randn(2), torch.randn(2), torch.rand(2) + 1)
    _matches(step, *args)


@pytest.mark.parametrize(
    "copy",
    [
        lambda x: torch.permute_copy(x, (2, 0, 1)),
        lambda x: torch.narrow_copy(x, 1, 1, 2),
        lambda x: torch.unbind_copy(x, 0),
        lambda x: torch.as_strided_copy(x, (2, 2), (1, 2)),
    ],
)
def test_copies_of_views_translate_as_the_views(copy):
    _matches(copy, torch.randn(2, 4, 3))


def test_dist_ldexp_and_entropy():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for p in (2.0, 1.0, 0.0, math.inf, -math.inf, 3.5):
        _matches(lambda a, b, p=p: torch.dist(a, b, p), x, y)
    _matches(torch.ldexp, x, torch.randint(-3, 4, (3, 4)))
    special = torch.tensor([0.5, 0.0, -1.0, float("nan"), 2.0, 1e-30])
    _matches(torch.special.entr, special)


@pytest.mark.parametrize(
    ("draw", "check"),
    [
        (lambda x: x.clone().cauchy_(), lambda y: torch.isfinite(y).all()),
        (lambda x: x.clone().exponential_(2.0), lambda y: (y >= 0).all()),
        (lambda x: x.clone().geometric_(0.3), lambda y: (y >= 1).all() and (y == y.round()).all()),
        (lambda x: x.clone().log_normal_(), lambda y: (y > 0).all()),
    ],
)
def test_random_distributions_have_their_support_and_are_reported(draw, check):
    x = torch.zeros(1000)
    program = dynamo_onnx.export(draw, (x,))
    (y,) = program(x)
    assert y.shape == x.shape and y.dtype == x.dtype and check(y)
    assert program.diagnostics.by_rule("nondeterministic-operator")


def test_bfloat16_and_float8_outputs_come_back_as_torch_tensors():
    x = torch.rand(3)
    _matches(lambda t: (t * 2).bfloat16(), x)
    _matches(lambda t: t.to(torch.float8_e4m3fn), x, atol=0.0, rtol=0.0)


def test_nan_ignoring_minimum_maximum_hypot_and_copysign():
    a = torch.tensor([1.0, float("nan"), -2.0, float("nan"), 0.0])
    b = torch.tensor([0.5, 3.0, float("nan"), float("nan"), -0.0])
    _matches(torch.fmax, a, b)
    _matches(torch.fmin, a, b)
    _matches(torch.hypot, torch.randn(4), torch.randn(4))
    signs = torch.tensor([-1.0, 2.0, -0.0, 0.0, float("-inf")])
    _matches(torch.copysign, torch.randn(5), signs)


def test_frexp_splits_into_mantissa_and_exponent():
    x = torch.tensor([0.0, 1.0, -3.5, 1024.0, 1e-20, 0.75, float("inf")])
    program = _matches(torch.frexp, x)
    assert program(x)[1].dtype == torch.int32


def test_sort_is_stable_and_kthvalue_picks_the_kth_smallest():
    x = torch.tensor([[3.0, 1.0, 2.0, 1.0], [0.0, -1.0, 0.0, 5.0]])
    _matches(lambda t: torch.sort(t, dim=1, stable=True), x)
    _matches(lambda t: torch.sort(t, dim=0, descending=True, stable=True), x)
    _matches(lambda t: torch.argsort(t, dim=-1, stable=True), x)
    _matches(lambda t: torch.kthvalue(t, 2, dim=1), x)
    _matches(lambda t: torch.kthvalue(t, 1, dim=0, keepdim=True), x)


def test_searchsorted_and_bucketize_on_both_sides():
    boundaries = torch.tensor([1.0, 3.0, 5.0, 7.0])
    values = torch.tensor([[0.0, 3.0, 6.0], [7.0, 8.0, 1.0]])
    for right in (False, True):
        _matches(lambda s, v, r=right: torch.searchsorted(s, v, right=r), boundaries, values)
        _matches(lambda v, b, r=right: torch.bucketize(v, b, right=r), values, boundaries)
    batched = torch.sort(torch.randn(2, 5), dim=-1).values
    _matches(lambda s, v: torch.searchsorted(s, v, out_int32=True), batched, torch.randn(2, 3))


def test_take_put_scatter_reduce_nonzero_static_and_squeeze_dims():
    x = torch.randn(3, 4)
    index = torch.tensor([[0, -1], [5, 11]])
    _matches(torch.take, x, index)
    _matches(
        lambda t, i, s: t.put(i, s, accumulate=True), x, torch.tensor([0, 5, 0]), torch.ones(3)
    )
    _matches(
        lambda t, i, s: t.scatter(0, i, s, reduce="multiply"),
        x,
        torch.tensor([[0, 1, 2, 0]]),
        torch.full((1, 4), 2.0),
    )
    sparse = torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 3.0]])
    _matches(lambda t: torch.nonzero_static(t, size=5), sparse)
    _matches(lambda t: torch.nonzero_static(t, size=2, fill_value=7), sparse)
    _matches(lambda t: torch.squeeze(t, (0, 2, 3)), torch.randn(1, 3, 1, 2))


def test_cdist_for_several_norms():
    x1, x2 = torch.randn(2, 4, 3), torch.randn(2, 5, 3)
    for p in (2.0, 1.0, 0.0, math.inf):
        _matches(lambda a, b, p=p: torch.cdist(a, b, p=p), x1, x2, atol=1e-4)


def test_rrelu_in_evaluation_mode_uses_the_mean_slope():
    x = torch.randn(20)
    _matches(lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training=False), x)


def test_uniform_fills_within_its_bounds():
    x = torch.zeros(500)
    program = dynamo_onnx.export(lambda t: t.clone().uniform_(-2.0, 3.0), (x,))
    (y,) = program(x)
    assert y.shape == x.shape and (y >= -2).all() and (y < 3).all() and y.std() > 0.5


def test_native_batch_norm_in_inference_mode_saves_no_statistics():
    """Eager returns empty save_mean/save_invstd in inference mode; so does the ONNX model."""

    def norm(x, weight, bias, mean, var):
        return torch.ops.aten._native_batch_norm_legit(x, weight, bias, mean, var, False, 0.1, 1e-5)

    args = (torch.randn(3, 2, 4), torch.randn(2), torch.randn(2), torch.randn(2), torch.rand(2) + 1)
    program = _matches(norm, *args)
    assert [tuple(t.shape) for t in program(*args)] == [(3, 2, 4), (0,), (0,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_diff_with_orders_and_ends(dtype):
    """transformers' masks call ``diff``: an ONNX function, no per-node decomposition."""
    x = (torch.randn(4, 6) * 10).to(dtype)
    before, after = (torch.randn(4, 2) * 10).to(dtype), (torch.randn(4, 1) * 10).to(dtype)
    program = _matches(lambda x: torch.diff(x, n=2), x)
    assert not program.diagnostics.by_rule("decomposition-fallback")
    _matches(lambda x: torch.diff(x, dim=0), x)
    _matches(lambda x, a, b: torch.diff(x, dim=1, prepend=a, append=b), x, before, after)


class Clamped(torch.nn.Module):
    """``torch.max(a, b)`` / ``torch.min(a, b)`` (``max.other``, T5's attention clamp):
    torch_lib has them as ``maximum``/``minimum`` only."""

    def forward(self, a, b, mask):
        return torch.max(a, b), torch.min(a, b), torch.max(mask, mask.logical_not())


def test_elementwise_max_and_min_of_two_tensors_translate_without_a_retrace():
    a = torch.tensor([[1.0, float("nan"), -2.0], [0.0, 5.0, -1.0]])
    b = torch.tensor([0.5, 3.0, float("nan")])  # broadcast, NaN on both sides
    mask = torch.tensor([True, False, True])
    program = dynamo_onnx.export(Clamped(), (a, b, mask), dynamic_shapes=({0: "rows"}, None, None))
    (plan,) = program.diagnostics.by_rule("decomposition-plan")
    assert plan.properties["retraced"] is False  # was: "`aten::max.other` has no ONNX function"
    for args in ((a, b, mask), (torch.randn(4, 3), b, mask)):  # NaN propagates, as in torch
        for got, want in zip(program(*args), Clamped()(*args), strict=True):
            torch.testing.assert_close(got, want, equal_nan=True)
    ints = (torch.tensor([3, -1, 7]), torch.tensor([2, 2, 2]))
    _matches(torch.max, *ints, atol=0, rtol=0)
    _matches(torch.min, *ints, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("product", "x"),
    [
        (lambda x: torch.cumprod(x, 1), torch.randn(3, 5)),
        (lambda x: torch.cumprod(x, 0), torch.tensor([[2.0, 0.0, -1.0], [3.0, -2.0, 4.0]])),
        (lambda x: x.cumprod(-1), torch.randint(-3, 4, (2, 3, 4))),  # int64
        (lambda x: torch.cumprod(x, 1, dtype=torch.float64), torch.randn(2, 4)),
        (lambda x: torch.cumprod(x, 0), torch.tensor(3.0)),  # 0-d
    ],
)
def test_cumprod_is_exact_with_zeros_negatives_and_integers(product, x):
    """torch_lib has no cumprod (torch.onnx fails on it, DO301 here before): the product of
    a triangle of the row, exact where exp(cumsum(log)) is not (zeros, negatives)."""
    program = _matches(product, x)
    assert program(x)[0].dtype == product(x).dtype
    (plan,) = program.diagnostics.by_rule("decomposition-plan")
    assert plan.properties["retraced"] is False


def test_cumprod_along_a_dynamic_length():
    class Running(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(1 + x.sigmoid(), dim=1)

    program = dynamo_onnx.export(Running(), (torch.randn(2, 5),), dynamic_shapes=({1: "n"},))
    for length in (3, 9):
        x = torch.randn(2, length)
        torch.testing.assert_close(program(x)[0], Running()(x))


NAN = float("nan")


@pytest.mark.parametrize("extreme", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
@pytest.mark.parametrize(
    ("x", "dim"),
    [
        (torch.tensor([1.0, 3.0, 3.0, 2.0, 5.0, 0.0]), 0),  # ties: the last position
        (torch.randn(3, 6), 1),
        (torch.randint(-3, 4, (5, 3)), 0),  # int64, many ties
        (torch.tensor([1.0, NAN, 0.0, NAN, -1.0, 2.0]), 0),  # NaN wins, at the last NaN
        (torch.tensor([[False, True, False], [True, False, True]]), 1),  # bool
        (torch.tensor(3.0), 0),
    ],
)
def test_cummax_and_cummin_values_and_indices_as_torch(extreme, x, dim):
    program = _matches(lambda t: extreme(t, dim), x)
    assert program(x)[1].tolist() == extreme(x, dim).indices.tolist()


@pytest.mark.parametrize(
    ("pool", "shape"),
    [
        (lambda x: F.avg_pool2d(x, 3, 1, 1, True, False, 2), (1, 3, 9, 9)),  # OpInfo's
        (lambda x: F.avg_pool2d(x, (6, 6), (3, 3), (2, 3), True, True, 2), (1, 3, 9, 9)),
        (lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5), (2, 2, 7, 8)),
        (torch.nn.AvgPool2d(2, divisor_override=1), (1, 4, 6, 6)),  # a sum pooling
        (lambda x: F.avg_pool3d(x, 3, 2, 1, True, False, 3), (1, 2, 5, 6, 7)),
    ],
)
def test_average_pooling_divides_by_the_divisor_override(pool, shape):
    """torch_lib ignores divisor_override (the mean came out): the window's sum over it."""
    _matches(pool, torch.randn(*shape))


def test_average_pooling_with_a_divisor_at_dynamic_sizes():
    class SumPool(torch.nn.Module):
        def forward(self, x):
            return F.avg_pool2d(x, 3, 2, 1, divisor_override=4)

    program = dynamo_onnx.export(
        SumPool(), (torch.randn(1, 2, 9, 9),), dynamic_shapes=({2: "h", 3: "w"},)
    )
    for size in ((9, 9), (12, 7)):
        x = torch.randn(1, 2, *size)
        torch.testing.assert_close(program(x)[0], SumPool()(x))


# -- issue 46: operators with no ONNX function that real models use -------------------------

_SPECIAL_POINTS = torch.cat(
    [
        torch.linspace(-6.3, 6.3, 37),
        torch.tensor([0.5, 1.0, 2.0, 1e-3, -1e-3, 30.7, 100.0, -2.0, 0.0, -0.0]),
        torch.tensor([math.inf, -math.inf, math.nan]),
    ]
)


@pytest.mark.parametrize(
    "function",
    [torch.lgamma, torch.digamma, torch.special.digamma, torch.i0, torch.special.i0],
    ids=["lgamma", "digamma", "special.digamma", "i0", "special.i0"],
)
def test_special_functions_match_eager_with_poles_and_infinities(function):
    _matches(function, _SPECIAL_POINTS)


def test_erfinv_matches_eager_to_the_ends_of_its_domain():
    y = torch.cat([torch.linspace(-0.9999, 0.9999, 61), torch.tensor([1.0, -1.0, 0.0, 1.5])])
    _matches(torch.erfinv, y)
    _matches(torch.special.erfinv, y)


def _with_nans(*shape):
    x = torch.randn(*shape)
    x[1, 2] = math.nan
    return x


@pytest.mark.parametrize(
    "function",
    [
        lambda x: torch.median(x),
        lambda x: torch.median(x, 1),
        lambda x: torch.median(x, dim=0, keepdim=True),
        lambda x: x.median(-1),
        lambda x: torch.nanmedian(x),
        lambda x: torch.nanmedian(x, 1),
        lambda x: x.nanmedian(0, keepdim=True),
    ],
)
def test_median_and_nanmedian_values_and_positions(function):
    _matches(function, torch.randn(5, 6))
    _matches(function, _with_nans(5, 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_mode_is_the_smallest_most_frequent_value_at_its_last_position(dtype):
    x = torch.randint(0, 3, (4, 7)).to(dtype)
    _matches(lambda t: torch.mode(t), x)
    _matches(lambda t: torch.mode(t, 0, keepdim=True), x)
    _matches(lambda t: t.mode(dim=1), x)


def test_masked_select_has_the_size_of_the_mask_at_run_time():
    x, mask = torch.randn(3, 4), torch.tensor([True, False, True, True])
    program = _matches(torch.masked_select, x, mask)  # the mask broadcast over rows
    other = torch.tensor([False, False, False, True])
    torch.testing.assert_close(program(x, other)[0], torch.masked_select(x, other))
    _matches(lambda t: t[t > 0], torch.randn(4, 5))  # the spelling that decomposes to it


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_with_repeated_indices(reduce, include_self):
    x, index, source = torch.randn(3, 4), torch.tensor([0, 2, 0, 1, 2]), torch.randn(5, 4)
    _matches(
        lambda t, i, s: t.index_reduce(0, i, s, reduce, include_self=include_self), x, index, source
    )
    _matches(
        lambda t, i, s: t.index_reduce(1, i, s.T, reduce, include_self=include_self),
        x.T,
        index,
        source,
    )


@pytest.mark.parametrize("reduce", ["prod", "mean"])
def test_index_reduce_of_a_0d_tensor(reduce):
    x, source = torch.tensor(2.0), torch.tensor(3.0)
    _matches(lambda t, i, s: t.index_reduce(0, i, s, reduce), x, torch.tensor([0]), source)


def test_index_reduce_mean_of_integers_floors():
    x, source = torch.randint(-9, 9, (2, 3)), torch.randint(-9, 9, (2, 3))
    _matches(lambda t, i, s: t.index_reduce(1, i, s, "mean"), x, torch.tensor([0, 2, 2]), source)


_MATRICES = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(4))
_SPD = _MATRICES @ _MATRICES.mT + torch.eye(4)


@pytest.mark.parametrize(
    ("function", "args"),
    [
        (torch.linalg.inv, (_MATRICES,)),
        (torch.inverse, (_MATRICES[0],)),
        (torch.linalg.inv_ex, (_MATRICES,)),
        (torch.linalg.solve, (_MATRICES, torch.randn(2, 4, 3))),
        (torch.linalg.solve, (_MATRICES, torch.randn(2, 4))),
        (lambda a, b: torch.linalg.solve(a, b, left=False), (_MATRICES, torch.randn(2, 3, 4))),
        (torch.linalg.solve_ex, (_MATRICES, torch.randn(4, 2))),
        (torch.linalg.slogdet, (_MATRICES,)),
        (torch.slogdet, (_MATRICES[1],)),
        (torch.ops.aten._linalg_slogdet, (_MATRICES,)),
        (torch.linalg.cholesky, (_SPD,)),
        (lambda a: torch.linalg.cholesky(a, upper=True), (_SPD,)),
        (torch.linalg.cholesky_ex, (_SPD,)),
        (torch.cholesky, (_SPD[0],)),
        (
            lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
            (_MATRICES.triu() + 3 * torch.eye(4), torch.randn(2, 4, 3)),
        ),
        (
            lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
            (_MATRICES.tril(), torch.randn(2, 4, 3)),
        ),
        (
            lambda a, b: torch.linalg.solve_triangular(a, b, upper=True, left=False),
            (_MATRICES.triu() + 3 * torch.eye(4), torch.randn(2, 3, 4)),
        ),
        (torch.linalg.inv, (torch.randn(3, 1, 1),)),
        (lambda a: torch.linalg.tensorinv(a, ind=3), (torch.randn(2, 2, 3, 12, 1),)),
        (torch.linalg.inv_ex, (torch.randn(0, 0),)),  # empty matrices (OpInfo's samples)
        (torch.linalg.slogdet, (torch.randn(2, 0, 0),)),
        (torch.linalg.cholesky_ex, (torch.randn(0, 0),)),
        (torch.linalg.solve_ex, (_MATRICES[0], torch.randn(4))),  # a 0-d info
    ],
)
def test_linear_algebra_unrolled_over_a_static_size_matches_eager(function, args):
    """LU with partial pivoting (the LU and pivots LAPACK returns), Cholesky and
    substitution: values, and every output the operator has."""
    _matches(function, *args, atol=1e-4, rtol=1e-4)


_DISPATCHED_ONLY = """
import json, sys
import onnxscript
import torch
import dynamo_onnx
from dynamo_onnx.registry import OnnxRegistry

class Inverse(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.inv(x) * 2  # marker: inverse

registry = OnnxRegistry()  # the table of every function is built
ours = "dynamo_onnx.registry.functions."
lookups = {}
for module, lookup in (
    ("special", lambda: registry.get_op_functions("aten", "i0")[0]),
    ("random", lambda: registry.functions_for("aten::cauchy", 18)[0]),
    ("selection", lambda: registry.copy().get_op_functions("aten", "median", "dim")[0]),
):
    before = ours + module in sys.modules
    entry = lookup()
    lookups[module] = [
        before,
        ours + module in sys.modules,
        entry.is_extra and isinstance(entry.function, onnxscript.values.TracedOnnxFunction),
        bool(entry.signature.params),
    ]
before = ours + "linalg" in sys.modules
x = torch.eye(3) * 2 + torch.rand(3, 3)
program = dynamo_onnx.export(Inverse(), (x,), optimize=False)
(note,) = [f for f in program.diagnostics.by_rule("node-dispatched")
           if f.properties["op"] == "aten::linalg_inv"]
print(json.dumps({
    "lookups": lookups,
    "imported_before": before,
    "imported_after": ours + "linalg" in sys.modules,
    "difference": float((program(x)[0] - Inverse()(x)).abs().max()),
    "function": note.properties["function"],
    "reason": note.properties["reason"],
    "path": note.primary.path,
    "line": note.primary.line,
}))
"""


def test_an_extra_function_is_imported_and_typed_when_first_dispatched(tmp_path):
    """Building the registry lists dynamo-onnx's functions by name; the module of one is
    imported when an export dispatches to it (or the registry is asked for it, in each of
    its spellings: the typed onnxscript function comes back, never the name), and it then
    translates as before, with its note on the user's line. A fresh process: this one has
    imported them all."""
    script = tmp_path / "inverse_model.py"
    script.write_text(_DISPATCHED_ONLY)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=600
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # (imported before the lookup, after it, a TracedOnnxFunction, typed parameters)
    for module in ("special", "random", "selection"):
        assert result["lookups"][module] == [False, True, True, True], module
    assert result["imported_before"] is False
    assert result["imported_after"] is True
    assert result["difference"] < 1e-5
    assert result["function"] == "linalg_inv"
    assert result["reason"] == "perfect match (dynamo-onnx function for opset 18)"
    assert pathlib.Path(result["path"]).resolve() == script.resolve()
    marker = _DISPATCHED_ONLY.splitlines().index(
        "        return torch.linalg.inv(x) * 2  # marker: inverse"
    )
    assert result["line"] == marker + 1
