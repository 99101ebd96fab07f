"""Work after the export (apply_weights, running, optimize, verify, save) runs as passes of
the export's context: a failure there is a failed pass, and the log says the work failed;
the reports describe the model as it is after the last pass that changed it."""

from __future__ import annotations

import json

import pytest
import torch

import dynamo_onnx
from conftest import MLPModel


def _fake_mlp(report_dir=None):
    with dynamo_onnx.enable_fake_mode():
        model = MLPModel()
        x = torch.randn(3, 8)
    if report_dir is None:
        return dynamo_onnx.export(model, (x,), optimize=False)
    return dynamo_onnx.export(model, (x,), optimize=False, report=True, artifacts_dir=report_dir)


class Centered(torch.nn.Module):
    """torch_lib computes ``mean``'s axes with constant nodes, which the optimizer folds."""

    def forward(self, x):
        return x - x.mean(dim=-1, keepdim=True)


def _invocation(program):
    return program.diagnostics.to_sarif()["runs"][0]["invocations"][0]


def test_a_weights_mismatch_from_apply_weights_makes_the_log_unsuccessful(tmp_path):
    program = _fake_mlp(tmp_path)
    assert _invocation(program)["executionSuccessful"] is True
    with pytest.raises(dynamo_onnx.WeightsMismatchError) as info:
        program.apply_weights({"fc9.weight": torch.zeros(2)})
    assert info.value.rule_id == "DO404"
    invocation = _invocation(program)
    assert invocation["executionSuccessful"] is False
    passes = [(p.name, p.outcome) for p in program.diagnostics.passes]
    assert passes[-1] == ("apply-weights", "failed")
    (finding,) = program.diagnostics.by_rule("DO404")
    assert finding.pass_name == "apply-weights"
    assert finding.primary is not None and finding.primary.path.endswith("examples/mlp.py")
    # the reports export wrote are rewritten with the failure
    log = json.loads((tmp_path / "MLPModel.sarif").read_text())
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert "DO404" in {r["ruleId"] for r in log["runs"][0]["results"]}


def test_running_fake_weights_is_a_failed_session_pass_in_the_log():
    program = _fake_mlp()
    with pytest.raises(dynamo_onnx.FakeWeightsError) as info:
        program(torch.randn(3, 8))
    assert info.value.rule_id == "DO403"
    assert _invocation(program)["executionSuccessful"] is False
    assert [(p.name, p.outcome) for p in program.diagnostics.passes][-1] == ("session", "failed")


def test_applying_the_weights_then_running_succeeds_again():
    program = _fake_mlp()
    real = MLPModel()
    program.apply_weights(real.state_dict())
    x = torch.randn(3, 8)
    torch.testing.assert_close(program(x)[0], real(x), atol=1e-5, rtol=1e-5)
    assert _invocation(program)["executionSuccessful"] is True
    names = [p.name for p in program.diagnostics.passes]
    assert names[-2:] == ["apply-weights", "session"]


def test_the_report_of_an_optimized_export_describes_the_optimized_model(tmp_path):
    program = dynamo_onnx.export(
        Centered(), (torch.randn(3, 8),), report=True, artifacts_dir=tmp_path
    )
    optimized = len(program.model.graph)
    (note,) = program.diagnostics.by_rule("DO501")
    assert note.properties["after"] == optimized < note.properties["before"]
    assert program.diagnostics.summary.model.nodes == optimized
    log = json.loads((tmp_path / "Centered.sarif").read_text())
    assert log["runs"][0]["properties"]["model"]["nodes"] == optimized
    markdown = (tmp_path / "Centered.md").read_text()
    assert f"The ONNX model has {optimized} nodes" in markdown


def test_optimizing_later_describes_the_model_again():
    program = dynamo_onnx.export(Centered(), (torch.randn(3, 8),), optimize=False)
    before = program.diagnostics.summary.model.nodes
    assert before == len(program.model.graph)
    program.optimize()
    assert program.diagnostics.summary.model.nodes == len(program.model.graph) < before


def test_verification_runs_a_session_of_its_own_pass_and_does_not_save(tmp_path, monkeypatch):
    """Verification gets a runner from the session pass; nothing is saved on the way (the
    session of a model too large for one protobuf writes its own temporary file)."""
    program = dynamo_onnx.export(MLPModel(), (torch.randn(3, 8),))
    monkeypatch.chdir(tmp_path)
    comparisons = program.verify((torch.randn(3, 8),))
    assert comparisons and all(c.ok for c in comparisons)
    names = [p.name for p in program.diagnostics.passes]
    assert names[-2:] == ["session", "verification"] and "save" not in names
    assert not list(tmp_path.iterdir())
