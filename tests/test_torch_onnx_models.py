"""Models of PyTorch's own ONNX exporter tests that torch.onnx exported and dynamo-onnx did
not: each now exports, runs in ONNX Runtime and matches eager (or fails with a finding that
says what to do, where torch.onnx hands back a model ONNX Runtime rejects)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch

import dynamo_onnx
from dynamo_onnx.diagnostics import Level

Dim = torch.export.Dim


def _check(program, model, *args):
    """ONNX Runtime matches eager on ``args`` (Python numbers in eager's result included)."""
    expected = model(*args)
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    got = program(*args)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, torch.as_tensor(e), check_dtype=isinstance(e, torch.Tensor))


class AddsAnInt(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def test_an_int_input_marked_static_next_to_a_dynamic_tensor():
    """``dynamic_shapes`` names a Dim hint for a whole int input (was: '_DimHint' object is
    not iterable): the int is specialized, the tensor's first dimension stays dynamic."""
    spec = {"x": {0: Dim("rows", min=6)}, "y": Dim.STATIC}
    program = dynamo_onnx.export(AddsAnInt(), (torch.ones(7, 5), 5), dynamic_shapes=spec)
    assert program.model.graph.inputs[0].shape[0] == "rows"
    _check(program, AddsAnInt(), torch.rand(9, 5), 5)


class NestedWhile(torch.nn.Module):
    """A while_loop whose body runs another while_loop (ONNX: a Loop inside a Loop)."""

    def forward(self, x):
        def outer_cond(i, x):
            return i < 3

        def outer_body(i, x):
            def inner_cond(j, y):
                return j < 2

            def inner_body(j, y):
                return j + 1, y * 2.0

            _, y = torch.while_loop(inner_cond, inner_body, (torch.zeros((), dtype=torch.int64), x))
            return i + 1, y + 1.0

        start = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(outer_cond, outer_body, (start, x))[1]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_nested_while_loops_run_in_onnx_runtime(dynamic):
    spec = ({0: "n"},) if dynamic else None
    program = dynamo_onnx.export(NestedWhile(), (torch.rand(3),), dynamic_shapes=spec)
    (loop,) = [n for n in program.model.graph if n.op_type == "Loop"]
    assert [n.op_type for n in loop.attributes["body"].value].count("Loop") == 1
    names = [n.name for n in ir.traversal.RecursiveGraphIterator(program.model.graph)]
    assert len(names) == len(set(names)), "each subgraph names its nodes apart (SSA)"
    _check(program, NestedWhile(), torch.rand(3))
    if dynamic:
        _check(program, NestedWhile(), torch.rand(6))


class CountsToTheSize(torch.nn.Module):
    """A while_loop carrying a Python int (a SymInt in the graph) next to a tensor."""

    def forward(self, x):
        def cond(i, x):
            return i < x.size(0)

        def body(i, x):
            return i + 1, x + 1.0

        return torch.while_loop(cond, body, (0, x))


def test_a_while_loop_carrying_an_int_counts_at_every_size():
    """The int carry is a 0-d int64 tensor in ONNX, like every symbolic size (was DO308)."""
    program = dynamo_onnx.export(CountsToTheSize(), (torch.rand(3),), dynamic_shapes=({0: "n"},))
    for size in (3, 5):
        x = torch.rand(size)
        count, y = program(x)
        assert count.dtype == torch.int64 and int(count) == size
        torch.testing.assert_close(y, x + size)
    assert not program.diagnostics.by_rule("control-flow-unsupported")


class IndexesByTheCount(torch.nn.Module):
    """The int carry indexes the tensor: a Gather whose index must be an integer."""

    def forward(self, x):
        def cond(i, x):
            return i < x.size(0)

        def body(i, x):
            return i + 1, x + x[i % x.size(0)]

        return torch.while_loop(cond, body, (0, x))


def test_a_while_loop_indexing_by_its_int_carry_gathers_by_an_integer():
    model = IndexesByTheCount()
    program = dynamo_onnx.export(model, (torch.rand(3, 2),), dynamic_shapes=({0: "n"},))
    for size in (3, 5):
        _check(program, model, torch.rand(size, 2))


class FillsPastTheRows(torch.nn.Module):
    """``x[:, rows:] = value`` after ``expand_as``: a ``slice_scatter`` whose start is a
    size (its schema's ``SymInt? start``, an integer: was cast to float, an invalid Slice)."""

    def __init__(self, value) -> None:
        super().__init__()
        self.value = value

    def forward(self, x, y):
        z = x.expand_as(y).clone()
        z[:, y.shape[0] :] = self.value
        return z


@pytest.mark.parametrize("value", [0, torch.tensor(2.5)], ids=["zero", "tensor"])
def test_a_fill_from_a_dynamic_size_after_expand_as_slices_by_an_integer(value):
    model = FillsPastTheRows(value)
    spec = ({1: "cols"}, {0: "rows", 1: "cols"})
    program = dynamo_onnx.export(model, (torch.rand(1, 6), torch.rand(2, 6)), dynamic_shapes=spec)
    assert [str(d) for d in program.model.graph.inputs[1].shape] == ["rows", "cols"]
    for rows, cols in [(2, 6), (3, 7)]:
        _check(program, model, torch.rand(1, cols), torch.rand(rows, cols))


class ViewsInPairs(torch.nn.Module):
    def forward(self, x):
        return x.view(-1, 2)


def test_a_view_of_a_dimension_of_size_zero_stays_dynamic_beside_it():
    """The example's empty dimension is kept as it is (torch specializes 0); the other
    dimension stays dynamic and the Reshape runs on an empty tensor at every size."""
    program = dynamo_onnx.export(ViewsInPairs(), (torch.rand(3, 0, 4),), dynamic_shapes=({0: "n"},))
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["n", "0", "4"]
    for n in (3, 5):
        (got,) = program(torch.rand(n, 0, 4))
        assert got.shape == (0, 2)


class ViewsBesideAnEmptyDim(torch.nn.Module):
    """Views and reshapes of a tensor with a dimension of size 0 next to a dynamic one."""

    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.spelling = spelling

    def forward(self, x):
        n = x.shape[0]
        if self.spelling == "view(n, -1, 2)":
            return x.view(n, -1, 2)
        if self.spelling == "view(n, 0, 2)":
            return x.view(n, 0, 2)
        if self.spelling == "view(n, -1)":
            return x.view(n, -1)
        if self.spelling == "reshape(-1, 2)":
            return x.reshape(-1, 2)
        return x.reshape(n, 2, -1)


@pytest.mark.parametrize("optimize", [False, True], ids=["plain", "optimized"])
@pytest.mark.parametrize(
    "spelling",
    ["view(n, -1, 2)", "view(n, 0, 2)", "view(n, -1)", "reshape(-1, 2)", "reshape(n, 2, -1)"],
)
def test_views_beside_a_dimension_of_size_zero_equal_eager(spelling, optimize):
    """A reshape to a static (0, 2) was Reshape(allowzero=0), so its 0 copied n; the
    optimizer wrote a -1 beside a static 0, a shape ONNX forbids (ONNX Runtime refused it).
    The same spellings with no empty dimension (where torch allows them) still match."""
    model = ViewsBesideAnEmptyDim(spelling)
    rests = [(0, 2), (2, 0)] + ([] if spelling == "view(n, 0, 2)" else [(4, 2)])
    for rest in rests:
        program = dynamo_onnx.export(
            model, (torch.rand(3, *rest),), dynamic_shapes=({0: "n"},), optimize=optimize
        )
        for n in (3, 5):
            x = torch.rand(n, *rest)
            (got,) = program(x)
            torch.testing.assert_close(got, model(x))


class TimeConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 4, 5))
        self.bias = torch.nn.Parameter(torch.randn(5))

    def forward(self, x):
        return torch.conv_tbc(x, self.weight, self.bias, 1)


def test_conv_tbc_is_a_conv_over_time():
    """torch_lib has no conv_tbc and torch does not decompose it: our own function."""
    model = TimeConv().eval()
    program = dynamo_onnx.export(model, (torch.randn(7, 2, 4),))
    assert "Conv" in [n.op_type for n in program.model.graph]
    _check(program, model, torch.randn(7, 2, 4))


class ItemPlusTensor(torch.nn.Module):
    def forward(self, x, y):
        return x.item() + y


def test_a_float_item_added_to_an_int_tensor_is_a_float():
    program = dynamo_onnx.export(ItemPlusTensor(), (torch.tensor(2.5), torch.tensor([1, 2])))
    _check(program, ItemPlusTensor(), torch.tensor(-1.25), torch.tensor([4, 5]))


class TimesComplex(torch.nn.Module):
    def forward(self, x):
        return torch.ops.aten.mul(x, 2 + 3j)


def test_complex_inputs_and_outputs_are_complex_for_the_caller():
    """ONNX holds complex tensors as [..., 2] reals; ONNXProgram takes and returns complex."""
    x = torch.tensor([[1.0 + 2.0j, 3.0 + 4.0j]], dtype=torch.complex64)
    program = dynamo_onnx.export(TimesComplex(), (x,))
    assert list(program.model.graph.inputs[0].shape) == [1, 2, 2]
    (got,) = program(x)
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got, TimesComplex()(x))
    dynamic = dynamo_onnx.export(TimesComplex(), (x,), dynamic_shapes={"x": {0: "a", 1: "b"}})
    assert [str(d) for d in dynamic.model.graph.inputs[0].shape] == ["a", "b", "2"]
    for shape in ((1, 2), (3, 5)):
        x = torch.randn(*shape, dtype=torch.complex64)
        torch.testing.assert_close(dynamic(x)[0], TimesComplex()(x))


class EmptyFloat4(torch.nn.Module):
    def forward(self):
        return torch.empty([1], dtype=torch.float4_e2m1fn_x2)  # marker: float4


@pytest.mark.parametrize("dtype", [torch.float4_e2m1fn_x2, torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_tensor_of_constants_in_a_storage_only_dtype_is_an_initializer(dtype):
    """torch_lib makes ``empty`` an ``Expand`` of a constant, which ONNX Runtime has no
    kernel for in float4 or float8: a tensor that depends on no input is computed at export
    and saved as a weight (zeros for ``empty``), as torch.onnx's optimizer folds it."""

    class Empty(torch.nn.Module):
        def forward(self):
            return torch.empty([2, 3], dtype=dtype)

    for optimize in (False, True):
        program = dynamo_onnx.export(Empty(), (), optimize=optimize)
        (got,) = program()
        assert (got.dtype, got.shape) == (dtype, (2, 3))
        assert not got.view(torch.uint8).any()
        assert list(program.model.graph.initializers) == ["empty"]
        assert [f for f in program.diagnostics.findings if f.level >= Level.WARNING] == []
    # the model of torch.onnx's tests, by its own line
    (got,) = dynamo_onnx.export(EmptyFloat4(), ())()
    assert (got.dtype, got.shape) == (torch.float4_e2m1fn_x2, (1,))
