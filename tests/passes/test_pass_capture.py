"""The capture pass alone, on a validated state: the program, and its failures."""

from __future__ import annotations

import pytest
import torch
from helpers import Tiny, validated

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.capture import CapturePass


class ReturnsANumber(torch.nn.Module):
    def forward(self, x):
        return x + 1, 3


def test_capture_gives_a_program_and_leaves_the_callers_model_alone():
    model = Tiny()
    state = validated(model, (torch.randn(2, 4),))
    ctx = DiagnosticContext()
    captured = CapturePass()(ctx, state)
    ep = captured.exported_program
    assert ep is not None and state.exported_program is None  # a new state
    assert {n.target for n in ep.graph.nodes if n.op == "call_function"} >= {
        torch.ops.aten.linear.default,
        torch.ops.aten.relu.default,
    }
    assert [f.rule.id for f in ctx.findings] == ["DO102"]


def test_a_given_exported_program_is_copied_not_rewritten():
    ep = torch.export.export(Tiny(), (torch.randn(2, 4),))
    captured = CapturePass()(DiagnosticContext(), validated(ep))
    assert captured.exported_program is not ep
    assert captured.exported_program.graph_module is not ep.graph_module


def test_a_number_among_the_outputs_fails_at_the_models_code():
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        CapturePass()(ctx, validated(ReturnsANumber(), (torch.randn(2),)))
    assert info.value.rule_id == "DO110"
    (finding,) = ctx.by_rule("DO110")
    assert finding.primary is not None and finding.primary.function == "forward"
