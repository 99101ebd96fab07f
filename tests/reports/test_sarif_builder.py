"""The SARIF builder on a hand-made context: no export, every part of the log checked."""

from __future__ import annotations

import json

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.reports import ReportingContext, sarif


def _context(tmp_path) -> ReportingContext:
    source = tmp_path / "model.py"
    source.write_text("import torch\n\n\ndef forward(x):\n    return x.nonzero()\n")
    ctx = ReportingContext(source_root=tmp_path, subject="Hand", versions={"dynamo-onnx": "0"})
    with ctx.pass_("capture"):
        ctx.record("capture-strategy-succeeded", strategy="torch.export", nodes=3)
    with ctx.pass_("semantics"):
        ctx.record(
            "nondeterministic-operator",
            locations=[Location(str(source), 5, "forward")],
            op="aten::bernoulli",
            source="model.py:5",
        )
    return ctx


def test_a_hand_made_context_renders_a_valid_log_with_its_findings(tmp_path):
    ctx = _context(tmp_path)
    ctx.finish(None)
    log = ctx.to_sarif()
    sarif.validate(log)
    (run,) = log["runs"]
    assert run["invocations"][0]["executionSuccessful"] is True
    results = run["results"]
    warning = next(r for r in results if r["ruleId"] == "DO123")
    assert warning["level"] == "warning"
    physical = warning["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "model.py"
    assert physical["region"]["startLine"] == 5
    assert "x.nonzero()" in physical["region"]["snippet"]["text"]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert {"DO102", "DO123"} <= set(rule_ids)


def test_an_error_after_success_makes_the_log_unsuccessful(tmp_path):
    ctx = _context(tmp_path)
    ctx.finish(None)
    with ctx.pass_("save"):
        ctx.record("save-failed", path="/x", cause="disk full")
    ctx.finish(None)
    log = ctx.to_sarif()
    sarif.validate(log)
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_all_rules_is_an_argument_of_the_rendering_not_a_flag_on_the_context(tmp_path):
    """`dynamo-onnx export --all-rules` asks save_reports for every rule of the catalog; the
    context itself is not changed, so another rendering describes only the rules used."""
    from dynamo_onnx.rules import catalog

    ctx = _context(tmp_path)
    ctx.finish(None)
    sarif_path = tmp_path / "all.sarif"
    ctx.save_reports(sarif_path=sarif_path, all_rules=True)
    every = json.loads(sarif_path.read_text())["runs"][0]["tool"]["driver"]["rules"]
    assert {r["id"] for r in every} == {rule.id for rule in catalog()}
    used = ctx.to_sarif()["runs"][0]["tool"]["driver"]["rules"]
    assert {"DO102", "DO123"} <= {r["id"] for r in used} and len(used) < len(every)


def test_the_model_location_is_given_to_the_context_when_it_is_made(tmp_path):
    """The anchor of findings without a line of their own, set once, by the constructor."""
    where = Location(str(tmp_path / "model.py"), 4, "forward")
    ctx = ReportingContext(source_root=tmp_path, model_location=where)
    assert ctx.model_location == where
    assert ReportingContext(source_root=tmp_path).model_location is None
