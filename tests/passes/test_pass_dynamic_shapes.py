"""The dynamic-shapes pass alone, on programs torch.export captured directly."""

from __future__ import annotations

import torch
from helpers import Tiny, program_state

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.dynamic_shapes import DynamicShapesPass, dimension_names

AUTO = torch.export.Dim.AUTO


def test_a_declared_dim_the_program_keeps_static_is_a_warning():
    state = program_state(
        Tiny(),
        (torch.randn(2, 4),),
        {"x": {0: AUTO, 1: AUTO}},
        requested_dims={("x", 0): 2, ("x", 1): 4},
        declared_dims=frozenset({("x", 0), ("x", 1)}),
    )
    ctx = DiagnosticContext()
    DynamicShapesPass()(ctx, state)
    (finding,) = ctx.by_rule("DO106")  # Linear(4, 3) fixes the features
    assert finding.properties["dim"] == 1 and finding.properties["value"] == 4


def test_every_dimension_dynamic_lists_the_static_ones_in_one_note():
    state = program_state(
        Tiny(),
        (torch.randn(2, 4),),
        {"x": {0: AUTO, 1: AUTO}},
        requested_dims={("x", 0): 2, ("x", 1): 4},
        all_dims_dynamic=True,
    )
    ctx = DiagnosticContext()
    DynamicShapesPass()(ctx, state)
    assert not ctx.by_rule("DO106")
    (note,) = ctx.by_rule("DO128")
    assert "`x` dimension 1 = 4" in note.message


def test_dynamic_dims_get_the_callers_names_else_input_and_index():
    ep = torch.export.export(Tiny(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: AUTO}})
    names = dimension_names(ep, {"x": {0: "batch"}})
    assert list(names.values()) == ["batch"]
    assert list(dimension_names(ep, None).values()) == ["x_dim_0"]


def test_the_pass_returns_the_names_in_a_new_state():
    state = program_state(
        Tiny(), (torch.randn(2, 4),), {"x": {0: AUTO}}, requested_dims={("x", 0): 2}
    )
    result = DynamicShapesPass()(DiagnosticContext(), state)
    assert list(result.dim_names.values()) == ["x_dim_0"] and not state.dim_names
