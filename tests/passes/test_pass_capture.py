"""The capture pass alone, on a validated state: the program, and its failures."""

from __future__ import annotations

import pytest
import torch
from helpers import Tiny, validated

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.passes.base import ExportRequest, ExportState
from dynamo_onnx.passes.capture import CapturePass
from dynamo_onnx.passes.validate import ValidatePass


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


class BranchesOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x + 1
        return x - 1


def test_capture_returns_its_record_and_leaves_the_checked_request_alone():
    """torch's suggested fixes (Dim("batch") narrowed to min=5) are the capture record's
    spec; the checked request keeps the caller's."""
    batch = torch.export.Dim("batch")
    state = validated(BranchesOnSize(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: batch}})
    ctx = DiagnosticContext()
    captured = CapturePass()(ctx, state)
    assert captured.checked is state.checked and state.capture is None
    assert state.checked.shapes.spec == {"x": {0: batch}}
    record = captured.capture
    assert record.strategy == "torch.export.export(strict=False)"
    (refined,) = ctx.by_rule("dynamic-shapes-refined")
    assert record.shapes.spec != state.checked.shapes.spec
    assert record.shapes.spec["x"][0].min == 5  # torch's fix: x.shape[0] > 4
    assert record.shapes.asked_range("x", 0) == (5, None)  # what the dynamic-shapes pass reads
    assert record.shapes.requested == state.checked.shapes.requested
    assert record.shape_log  # torch's symbolic-shape records of this capture


def test_the_record_of_a_plain_capture_keeps_the_checked_spec():
    state = validated(Tiny(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: "batch"}})
    captured = CapturePass()(DiagnosticContext(), state)
    assert captured.capture.shapes is state.checked.shapes
    given = torch.export.export(Tiny(), (torch.randn(2, 4),))
    record = CapturePass()(DiagnosticContext(), validated(given)).capture
    assert record.strategy == "the given ExportedProgram" and record.shape_log == ()


class FixesTwo(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, -1) if x.shape[0] == 2 else x


def test_findings_about_the_request_point_at_the_line_that_wrote_it():
    """DO129 (an example of size 1 traced at 2) and DO105 (one that cannot be) are at the
    request's line, as validation read it, not at whatever the capture's context holds."""
    where = Location(__file__, 7, "main")
    for model, rule in ((Tiny(), "DO129"), (FixesTwo(), "DO105")):
        state = ValidatePass()(
            DiagnosticContext(call_site=where),
            ExportState(
                ExportRequest(model, (torch.randn(1, 4),), dynamic_shapes={"x": {0: "batch"}})
            ),
        )
        assert state.checked.shapes.location == where
        ctx = DiagnosticContext()
        CapturePass()(ctx, state)
        (finding,) = ctx.by_rule(rule)
        assert finding.primary == where, rule
