"""The dynamic-shapes pass alone, on programs torch.export captured directly."""

from __future__ import annotations

import json
import pathlib

import torch
from helpers import Tiny, program_state

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.base import CaptureRecord, ShapeLogRecord
from dynamo_onnx.passes.dynamic_shapes import DynamicShapesPass, dimension_names
from dynamo_onnx.specs import ShapeRequest, Spelling

AUTO = torch.export.Dim.AUTO
Dim = torch.export.Dim


def test_a_declared_dim_the_program_keeps_static_is_a_warning():
    state = program_state(
        Tiny(),
        (torch.randn(2, 4),),
        {"x": {0: AUTO, 1: AUTO}},
        requested={("x", 0): 2, ("x", 1): 4},
        declared=frozenset({("x", 0), ("x", 1)}),
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
        requested={("x", 0): 2, ("x", 1): 4},
        spelling=Spelling.EVERY_DIM,
    )
    ctx = DiagnosticContext()
    DynamicShapesPass()(ctx, state)
    assert not ctx.by_rule("DO106")
    (note,) = ctx.by_rule("DO128")
    assert "`x` dimension 1 = 4" in note.message


def test_dynamic_dims_get_the_callers_names_else_input_and_index():
    ep = torch.export.export(Tiny(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: AUTO}})
    x = torch.randn(2, 4)
    for spelled in ({"x": {0: "batch"}}, {"x": ["batch", None]}, ({0: Dim("batch")},)):
        names = dimension_names(ep, ShapeRequest.build(spelled, {"x": x}).names())
        assert list(names.values()) == ["batch"], spelled
    assert list(dimension_names(ep, ShapeRequest().names()).values()) == ["x_dim_0"]


def test_the_pass_returns_the_names_in_a_new_state():
    state = program_state(Tiny(), (torch.randn(2, 4),), {"x": {0: AUTO}}, requested={("x", 0): 2})
    result = DynamicShapesPass()(DiagnosticContext(), state)
    assert list(result.dim_names.values()) == ["x_dim_0"] and not state.dim_names


class Specialized(torch.nn.Module):
    def forward(self, x):
        return x + torch.ones(8)


def _do106(messages: list[str]) -> str:
    state = program_state(
        Specialized(),
        (torch.randn(8),),
        {"x": {0: AUTO}},
        requested={("x", 0): 8},
        declared=frozenset({("x", 0)}),
    )
    state = state.replace(
        capture=CaptureRecord(
            "recorded", state.checked.shapes, tuple(ShapeLogRecord(m) for m in messages)
        )
    )
    ctx = DiagnosticContext()
    DynamicShapesPass()(ctx, state)
    (finding,) = ctx.by_rule("DO106")
    return finding.message


def test_a_reworded_torch_log_makes_the_finding_quote_it_not_go_quiet():
    """DO106 on a dimension torch specialized, fed torch 2.13's recorded log of the same
    model (tests/foreign_text): the finding names the guard. The same log reworded
    gives a finding that says it could not read torch's message and quotes it, so a torch
    release that rewords its log does not silently make the finding vaguer."""
    fixtures = pathlib.Path(__file__).resolve().parents[1] / "foreign_text"
    recorded = json.loads((fixtures / "torch-2.13" / "shape_log.json").read_text())
    messages = recorded["cases"]["specialized"]
    message = _do106(messages)
    assert "became the constant 8 because of the guard `Eq(s77, 8)`" in message
    assert "could not read" not in message
    message = _do106([m.replace("eval ", "evaluated: ", 1) for m in messages])
    assert "because of the guard `unknown` at an unknown line" in message
    assert "dynamo-onnx could not read torch's message" in message
    assert '"evaluated: Eq(s77, 8) [guard added]' in message
