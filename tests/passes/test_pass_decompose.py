"""The decompose pass and its FX rewrites, on hand-built graphs and a tiny program."""

from __future__ import annotations

import operator

import torch
import torch.fx
from helpers import program_state

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.decompose import DecomposePass
from dynamo_onnx.passes.decompose.rewrites import (
    bypass_lifted_copies,
    cast_symbolic_operands,
    rewrite_views,
)

aten = torch.ops.aten
AUTO = torch.export.Dim.AUTO


class Viewed(torch.nn.Module):
    def forward(self, x):
        return x.view(2, 6) * 2


def test_a_translatable_functional_graph_is_not_retraced_and_the_plan_says_so():
    state = program_state(Viewed(), (torch.randn(3, 4),))
    ctx = DiagnosticContext()
    result = DecomposePass()(ctx, state)
    assert result.exported_program is not None
    (plan,) = ctx.by_rule("DO203")
    assert plan.level.name == "NOTE" and plan.properties["retraced"] is False
    assert "not re-traced" in plan.message


def test_rewrite_views_counts_what_it_changed():
    ep = torch.export.export(Viewed(), (torch.randn(3, 4),))
    assert rewrite_views(ep) == 1
    assert rewrite_views(ep) == 0


class NarrowTimesSize(torch.nn.Module):
    """``x.narrow(1, 0, n // 2) * n``: ``n // 2`` is a SymInt index, ``n`` a SymInt scalar."""

    def forward(self, x):
        n = x.shape[0]
        return x.narrow(1, 0, n // 2) * n


def _symbolic_graph():
    x = torch.randn(4, 6)
    ep = torch.export.export(NarrowTimesSize(), (x,), dynamic_shapes={"x": {0: AUTO}})
    return ep.graph_module


def test_a_symbolic_scalar_is_cast_but_a_symbolic_index_stays_an_integer():
    gm = _symbolic_graph()
    assert cast_symbolic_operands(gm) == 1  # the multiplier only
    narrow = next(n for n in gm.graph.nodes if n.target is aten.narrow.default)
    length = narrow.args[3]
    assert length.target is operator.floordiv  # not a cast to float
    mul = next(n for n in gm.graph.nodes if n.target is aten.mul.Tensor)
    assert mul.args[1].target is torch.ops.prims.convert_element_type.default


class Mutates(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y.add_(1)
        return y


def test_a_graph_with_an_in_place_operator_is_retraced_to_a_functional_one():
    state = program_state(Mutates(), (torch.randn(3),))
    ctx = DiagnosticContext()
    result = DecomposePass()(ctx, state)
    assert ctx.by_rule("DO203")[0].properties["retraced"] is True
    targets = {n.target for n in result.exported_program.graph.nodes if n.op == "call_function"}
    assert aten.add_.Tensor not in targets


class FreshEmpty(torch.nn.Module):
    """transformers starts a cache layer from ``torch.tensor([])``: a lifted constant, copied
    fresh and detached in place."""

    def forward(self, x):
        empty = torch.tensor([], dtype=x.dtype)
        empty.detach_()
        return torch.cat([empty, x], dim=-1)


def test_a_lifted_constants_fresh_copy_and_detach_read_the_constant():
    ep = torch.export.export(FreshEmpty(), (torch.randn(3),))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert aten.lift_fresh_copy.default in targets and aten.detach_.default in targets
    assert bypass_lifted_copies(ep) == 3
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [aten.cat.default]
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), x)


class ThreeRewrites(torch.nn.Module):
    """An ``aten.to`` that changes nothing, an int-times-float product (type promotion) and a
    view to ``-1`` of a static shape: three rewrites of one graph."""

    def forward(self, x, n):
        y = x.to(torch.float32).view(2, -1)
        return y * n, y.sum()


def test_the_pass_generates_the_graphs_code_once_and_it_is_the_graphs(monkeypatch):
    x, n = torch.randn(3, 4), torch.arange(12).reshape(2, 6)
    state = program_state(ThreeRewrites(), (x, n))
    made = []
    original = torch.fx.GraphModule.recompile

    def counted(self):
        made.append(self)
        return original(self)

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counted)
    ctx = DiagnosticContext()
    result = DecomposePass()(ctx, state)
    assert ctx.by_rule("DO203")[0].properties["retraced"] is False
    (cast,) = ctx.by_rule("type-promotion-inserted")
    ep = result.exported_program
    assert len(made) == 1  # each rewrite recompiled the whole model's code
    gm = ep.graph_module
    assert gm.code == gm.graph.python_code("self").src  # the code is the rewritten graph's
    assert "[2, 6]" in gm.code and "-1" not in gm.code and "convert_element_type" in gm.code
    for got, expected in zip(ep.module()(x, n), ThreeRewrites()(x, n)):
        torch.testing.assert_close(got, expected)
