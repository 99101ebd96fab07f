"""Explanations that are right (issue 46): torch's cause kept whole, the cause decided
before the blame, and fixes that name the real remedy, each at the user's line."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx
from conftest import line_of


class AliasingCond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x[:1], lambda x: x, (x,))  # marker: cond


def test_a_graph_break_keeps_torchs_cause_in_every_capture_finding():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(AliasingCond(), (torch.randn(3, 4),))
    diagnostics = info.value.diagnostics
    line = line_of(AliasingCond.forward, "marker: cond")
    findings = diagnostics.by_rule("DO101") + diagnostics.by_rule("DO100")
    assert len(findings) == 3
    for finding in findings:
        assert finding.primary.line == line
        assert "Got graph break/error: Encountered aliasing during higher order op" in (
            finding.message
        )
        assert "Replace `return input` with `return input.clone()`" in finding.message
    assert "Replace `return input` with `return input.clone()`" in str(info.value)
