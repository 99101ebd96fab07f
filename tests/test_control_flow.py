"""Control flow: torch.cond -> If, while_loop -> Loop, scan/map -> Scan, others -> DO308."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

import dynamo_onnx
from conftest import line_of


class Branchy(torch.nn.Module):
    """A cond whose branches use a weight from the outer scope and return two tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        def positive(x, y):
            return self.lin(x) + y, x.sum()

        def negative(x, y):
            return x - y, x.mean()

        return torch.cond(x.sum() > 0, positive, negative, (x, y))  # the cond


def _op_types(graph):
    return [node.op_type for node in graph]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_cond_runs_both_branches_in_onnx_runtime(tmp_path, dynamic):
    model = Branchy().eval()
    x, y = torch.rand(2, 4) + 0.1, torch.randn(2, 4)
    shapes = {"x": {0: "batch"}, "y": {0: "batch"}} if dynamic else None
    program = dynamo_onnx.export(model, (x, y), dynamic_shapes=shapes)
    assert "If" in _op_types(program.model.graph)
    path = tmp_path / "branchy.onnx"
    program.save(path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    for rows in (2, 5) if dynamic else (2,):
        x, y = torch.rand(rows, 4) + 0.1, torch.randn(rows, 4)
        for sign in (1.0, -1.0):  # x.sum() > 0, then < 0: both branches
            got = program(sign * x, y)
            expected = model(sign * x, y)
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e.detach(), atol=1e-5, rtol=1e-5)
    (finding,) = [f for f in program.diagnostics.findings if f.rule.id == "DO307"]
    assert "`higher_order.cond`" in finding.message and "ONNX `If`" in finding.message
    assert finding.locations[0].path.endswith("test_control_flow.py")
    assert finding.locations[0].line == line_of(Branchy.forward, "# the cond")


def test_nested_cond_on_a_dynamic_dimension():
    class Nested(torch.nn.Module):
        def forward(self, x):
            def big(x):
                return torch.cond(x.mean() > 0.5, lambda x: x * 3, lambda x: x + 100, (x,))

            return torch.cond(x.shape[0] > 2, big, lambda x: x.cos(), (x,))

    model = Nested()
    program = dynamo_onnx.export(model, (torch.rand(4, 3),), dynamic_shapes={"x": {0: "batch"}})
    # outer If on the batch size; inner If inside its then-branch
    (outer,) = [n for n in program.model.graph if n.op_type == "If"]
    then_branch = outer.attributes["then_branch"].value
    assert "If" in _op_types(then_branch)
    for x in (torch.rand(4, 3), torch.rand(4, 3) - 1, torch.rand(2, 3), torch.rand(7, 3) + 1):
        torch.testing.assert_close(program(x)[0], model(x))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_while_loop_becomes_loop_and_counts_like_eager(dynamic):
    class Doubling(torch.nn.Module):
        def forward(self, i, x):
            return torch.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2 + 1), (i, x))

    model = Doubling()
    shapes = {"i": None, "x": {0: "n"}} if dynamic else None
    program = dynamo_onnx.export(model, (torch.tensor(0), torch.randn(3)), dynamic_shapes=shapes)
    assert "Loop" in _op_types(program.model.graph)
    for start, size in ((0, 3), (3, 6), (7, 2)):  # 5, 2 and 0 iterations
        i, x = torch.tensor(start), torch.randn(size if dynamic else 3)
        got = program(i, x)
        expected = model(i, x)
        assert int(got[0]) == int(expected[0]) == max(start, 5)
        torch.testing.assert_close(got[1], expected[1])


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_scan_becomes_scan_with_carry_and_stacked_outputs(dynamic):
    class CumSum(torch.nn.Module):
        def forward(self, init, xs):
            def step(carry, x):
                total = carry + x
                return total, total * 2

            return torch.ops.higher_order.scan(step, [init], [xs], ())

    model = CumSum()
    init, xs = torch.zeros(3), torch.randn(5, 3)
    shapes = {"init": {0: "width"}, "xs": {0: "steps", 1: "width"}} if dynamic else None
    program = dynamo_onnx.export(model, (init, xs), dynamic_shapes=shapes)
    assert "Scan" in _op_types(program.model.graph)
    for steps, width in ((5, 3), (8, 4)) if dynamic else ((5, 3),):
        init, xs = torch.zeros(width), torch.randn(steps, width)
        final, stacked = program(init, xs)
        torch.testing.assert_close(final, xs.sum(0))
        torch.testing.assert_close(stacked, xs.cumsum(0) * 2)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_map_becomes_stateless_scan_with_outer_operand(dynamic):
    class Map(torch.nn.Module):
        def forward(self, xs, b):
            return torch.ops.higher_order.map_impl(lambda x, b: x.sin() * b, [xs], [b])

    xs, b = torch.rand(4, 3), torch.rand(3)
    shapes = {"xs": {0: "n", 1: "width"}, "b": {0: "width"}} if dynamic else None
    program = dynamo_onnx.export(Map(), (xs, b), dynamic_shapes=shapes)
    for n, width in ((4, 3), (7, 5)) if dynamic else ((4, 3),):
        xs, b = torch.rand(n, width), torch.rand(width)
        torch.testing.assert_close(program(xs, b)[0], xs.sin() * b)


class Prefix(torch.nn.Module):
    def forward(self, xs):
        return torch.ops.higher_order.associative_scan(lambda a, b: a + b, [xs], ())  # no ONNX


def test_unsupported_higher_order_operator_is_a_finding_with_its_line(tmp_path):
    with pytest.raises(dynamo_onnx.TranslationError) as info:
        dynamo_onnx.export(Prefix(), (torch.rand(4, 3),), report=True, artifacts_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("[DO308 control-flow-unsupported]")
    assert "higher_order.associative_scan" in message and "torch.cond" in message
    line = line_of(Prefix.forward, "# no ONNX")
    log = json.loads((tmp_path / "Prefix.sarif").read_text())
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DO308"]
    assert result["level"] == "error"
    region = result["locations"][0]["physicalLocation"]
    assert region["artifactLocation"]["uri"].endswith("tests/test_control_flow.py")
    assert region["region"]["startLine"] == line
    report = (tmp_path / "Prefix.md").read_text()
    assert "DO308" in report and f"test_control_flow.py:{line}" in report
    assert not list(tmp_path.glob("*.onnx"))


class LoopsOverLinear(torch.nn.Module):
    """A while_loop whose body runs another while_loop through a Linear, indexes the input
    by its counter, and a Linear after the loop: the bodies and the main graph each name
    their intermediate values (``val_6``...) and ONNX Runtime refused the repeated names."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)
        self.outer = torch.nn.Linear(3, 3)

    def forward(self, x):
        x = self.outer(x).softmax(-1)

        def body(i, acc):
            def inner_body(j, y):
                return j + 1, self.inner(y).relu()

            start = torch.zeros((), dtype=torch.int64)
            _, y = torch.while_loop(lambda j, y: j < 2, inner_body, (start, acc))
            row = x.index_select(0, i.reshape(1))[0]
            return i + 1, y + self.inner(row).softmax(-1)

        start = torch.zeros((), dtype=torch.int64)
        _, acc = torch.while_loop(lambda i, acc: i < x.shape[0], body, (start, x[0]))
        return self.outer(acc).softmax(-1)


@pytest.mark.parametrize(
    ("dynamic", "optimize", "module_functions"),
    [(False, False, False), (True, False, False), (False, True, False), (True, True, False)]
    + [(True, True, True)],
    ids=["static", "dynamic", "static-optimized", "dynamic-optimized", "module-functions"],
)
def test_loop_bodies_name_their_values_apart_from_the_main_graph(
    tmp_path, dynamic, optimize, module_functions
):
    import onnxruntime as ort

    model = LoopsOverLinear().eval()
    spec = ({0: "n"},) if dynamic else None
    program = dynamo_onnx.export(
        model,
        (torch.randn(4, 3),),
        dynamic_shapes=spec,
        optimize=optimize,
        module_functions=module_functions,
    )
    graphs = [program.model.graph]
    names = []
    while graphs:
        graph = graphs.pop()
        names += [v.name for v in (*graph.inputs, *graph.initializers.values())]
        for node in graph:
            names += [v.name for v in node.outputs]
            graphs += [
                a.value for a in node.attributes.values() if a.type == onnx.AttributeProto.GRAPH
            ]
    assert len(names) == len(set(names)), "a name is used once in the whole model"
    path = tmp_path / "loops.onnx"
    program.save(path)
    ort.InferenceSession(str(path))  # ONNX Runtime loads it (was: not in SSA form)
    for rows in (4, 6) if dynamic else (4,):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(program(x)[0], model(x))


class WhileInCond(torch.nn.Module):
    def forward(self, i, x):
        def loop(i, x):
            return torch.while_loop(
                lambda i, x: i < 3, lambda i, x: (i + 1, x.softmax(-1)), (i, x)
            )[1]

        return torch.cond(x.sum() > 0, loop, lambda i, x: x.log_softmax(-1), (i, x)).softmax(-1)


class CondInWhile(torch.nn.Module):
    def forward(self, i, x):
        def body(i, x):
            y = torch.cond(
                x.sum() > 0,
                lambda x: x.softmax(-1) - 1,
                lambda x: x - x.var(-1, keepdim=True),
                (x,),
            )
            return i + 1, y

        return torch.while_loop(lambda i, x: i < 4, body, (i, x))[1].softmax(-1)


class ScanInWhile(torch.nn.Module):
    def forward(self, i, xs):
        from torch._higher_order_ops.scan import scan

        def body(i, xs):
            def step(carry, x):
                return carry + x.softmax(-1), carry * 2

            carry, ys = scan(step, torch.zeros_like(xs[0]), xs)
            return i + 1, ys.softmax(-1) + carry

        return torch.while_loop(lambda i, xs: i < 2, body, (i, xs))[1].softmax(-1)


@pytest.mark.parametrize("model", [WhileInCond, CondInWhile, ScanInWhile])
def test_control_flow_inside_control_flow_names_values_once(model):
    program = dynamo_onnx.export(
        model(), (torch.tensor(0), torch.randn(4, 3)), dynamic_shapes=({}, {0: "n"})
    )
    graphs, names = [program.model.graph], []
    while graphs:
        graph = graphs.pop()
        names += [v.name for v in (*graph.inputs, *graph.initializers.values())]
        for node in graph:
            names += [v.name for v in node.outputs]
            graphs += [
                a.value for a in node.attributes.values() if a.type == onnx.AttributeProto.GRAPH
            ]
    assert len(names) == len(set(names))
    for rows in (4, 6):
        for sign in (1.0, -1.0):
            i, x = torch.tensor(0), sign * (torch.rand(rows, 3) + 0.1)
            torch.testing.assert_close(program(i, x)[0], model()(i, x))


class NestedLoopConstant(torch.nn.Module):
    """A while_loop in a while_loop's body adding a constant (issue 46): the inner
    body's constant stays a ``get_attr`` whose meta value is a FakeTensor; it was DO400
    ("Cannot take content out from the FakeTensor")."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def forward(self, i, j, x):
        from torch._higher_order_ops.while_loop import while_loop

        def outer_cond(i, j, x):
            return i < 3

        def inner_cond(j, x):
            if self.where == "cond":
                return (x.sum() + torch.tensor([0.5, 0.5, 0.5]).sum()) < 50 + j * 0
            return j < 3

        def inner_body(j, x):
            if self.where == "cond-branch":
                step = torch.cond(
                    x.sum() > 5,
                    lambda v: v + torch.tensor([1.0, 2.0, 3.0]),
                    lambda v: v - torch.tensor([3.0, 2.0, 1.0]),
                    (x,),
                )
                return j + 1, step
            return j + 1, x + torch.tensor([1.0, 2.0, 3.0])

        def outer_body(i, j, x):
            j, x = while_loop(inner_cond, inner_body, (j, x))
            return i + 1, j - j, x * 1.0

        return while_loop(outer_cond, outer_body, (i, j, x))


@pytest.mark.parametrize("where", ["body", "cond", "cond-branch"])
def test_a_constant_in_a_nested_while_loop_is_its_value(where):
    model = NestedLoopConstant(where)
    args = (torch.tensor(0), torch.tensor(0), torch.zeros(3))
    program = dynamo_onnx.export(model, args)
    for got, want in zip(program(*args), model(*args)):
        torch.testing.assert_close(got, want)
    start = (torch.tensor(1), torch.tensor(0), torch.ones(3))
    for got, want in zip(program(*start), model(*start)):
        torch.testing.assert_close(got, want)
