"""SARIF logs: the OASIS schema, GitHub code scanning's rules, and VS Code's expectations."""

from __future__ import annotations

import json
import logging
import re

import jsonschema
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel, line_of
from dynamo_onnx.reports import sarif
from dynamo_onnx.rules import catalog
from sarif_tools import ROOT, multitool_errors
from test_capture import Raises
from test_unsupported_operators import TwoCustomOps


class NanWeights(torch.nn.Module):
    """Exports fine, with a warning: one weight is NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.fc.weight[0, 0] = float("nan")

    def forward(self, x):
        return self.fc(x)


def _export(model, args, **kwargs):
    """Export; return (program or None, error or None, diagnostics)."""
    try:
        program = dynamo_onnx.export(model, args, **kwargs)
    except dynamo_onnx.OnnxExporterError as error:
        return None, error, error.diagnostics
    return program, None, program.diagnostics


@pytest.fixture(scope="module")
def logs():
    """The four logs the issue names: clean, capture failure, unsupported op, warnings-as-errors."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        waE = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)
        cases = {
            "clean": _export(MLPModel(), (torch.randn(3, 8),)),
            "capture": _export(Raises(), (torch.randn(2),)),
            "unsupported": _export(TwoCustomOps(), (torch.randn(3, 4),)),
            "warnings_as_errors": _export(
                NanWeights(), (torch.randn(3, 4),), diagnostic_options=waE
            ),
        }
        return {name: ctx.to_sarif() for name, (_, _, ctx) in cases.items()}


CASES = ["clean", "capture", "unsupported", "warnings_as_errors"]


@pytest.mark.parametrize("case", CASES)
def test_log_validates_against_the_oasis_schema(logs, case):
    sarif.validate(logs[case])  # raises on any violation
    assert logs[case]["version"] == "2.1.0"
    assert "sarif-2.1.0" in logs[case]["$schema"]


def test_the_schema_we_validate_against_is_the_oasis_draft4_schema():
    schema = sarif.schema()
    jsonschema.Draft4Validator.check_schema(schema)  # the runtime validator skips this
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
    assert schema["properties"]["version"]["enum"] == ["2.1.0"]


def test_one_build_writes_the_same_reports_as_two(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    program = dynamo_onnx.export(model, torch.randn(2, 4))
    ctx = program.diagnostics
    ctx.save_reports(tmp_path / "both.sarif", tmp_path / "both.md")
    ctx.save_sarif(tmp_path / "one.sarif")
    ctx.save_markdown(tmp_path / "one.md")
    assert (tmp_path / "both.sarif").read_text() == (tmp_path / "one.sarif").read_text()
    assert (tmp_path / "both.md").read_text() == (tmp_path / "one.md").read_text()
    assert json.loads((tmp_path / "both.sarif").read_text())["runs"][0]["results"]


def test_schema_validation_can_fail(logs):
    broken = json.loads(json.dumps(logs["clean"]))
    broken["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(ValueError, match="schema errors"):
        sarif.validate(broken)


def test_past_the_results_validated_one_by_one_a_new_structure_is_still_validated(logs):
    """A log of thousands of results: the first VALIDATED_RESULTS one by one, then one of each
    structure; a result unlike those before it (a column of 0) is checked and fails."""
    log = json.loads(json.dumps(logs["clean"]))
    (run,) = log["runs"]
    result = run["results"][0]
    run["results"] = [json.loads(json.dumps(result)) for _ in range(sarif.VALIDATED_RESULTS + 5)]
    sarif.validate(log)
    odd = run["results"][-1]["locations"][0]["physicalLocation"]["region"]
    odd["startColumn"] = 0  # the schema's minimum is 1
    last = len(run["results"]) - 1  # named by its index in the log
    with pytest.raises(ValueError, match=f"runs/0/results/{last}/locations/0/"):
        sarif.validate(log)


def test_every_log_passes_the_multitool_with_github_rules(logs, tmp_path):
    paths = []
    for case in CASES:  # one run of the tool for all: its errors name their file
        paths.append(tmp_path / f"{case}.sarif")
        paths[-1].write_text(json.dumps(logs[case]))
    assert multitool_errors(paths, tmp_path) == []


@pytest.mark.parametrize("case", CASES)
def test_every_result_is_complete(logs, case):
    (run,) = logs[case]["runs"]
    rules = run["tool"]["driver"]["rules"]
    bases = run["originalUriBaseIds"]
    assert run["automationDetails"]["id"].startswith("dynamo-onnx/")
    assert all(base["uri"].endswith("/") for base in bases.values())
    assert run["results"], "a log is never empty"
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("none", "note", "warning", "error")
        assert result["message"]["text"].strip() and result["message"]["markdown"].strip()
        assert "`" not in result["message"]["text"]  # plain text; markdown keeps the code
        rule_kind = catalog().get(result["ruleId"]).kind
        if result["level"] in ("warning", "error"):
            assert result["kind"] == "fail"
        else:  # SARIF 2.1.0 section 3.27.10: a result that is not "fail" has level "none"
            assert result["kind"] == rule_kind
            assert (result["level"] == "none") == (rule_kind != "fail")
            if rule_kind != "fail":
                assert result["properties"]["findingLevel"] == catalog().get(result["ruleId"]).level
        rule = rules[result["ruleIndex"]]
        if result["level"] in ("warning", "error"):  # VS Code shows no rules[].help
            assert result["message"]["markdown"].endswith(
                f"**Fix:** {catalog().get(rule['id']).fix}"
            )
        assert all(v not in ("", None, [], {}) for v in result.get("properties", {}).values())
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"]["uriBaseId"] in bases
        assert not physical["artifactLocation"]["uri"].startswith(("/", "file:"))
        assert physical["region"]["startLine"] >= 1
        assert set(result["partialFingerprints"]) == {sarif.FINGERPRINT_KEY}
        for stack in result.get("stacks", []):
            assert stack["message"]["text"]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["help"]["text"] and rule["help"]["markdown"]
        assert "helpUri" not in rule  # the project declares no address for its rules page
        prose = rule["fullDescription"]["markdown"].split("```")[0]
        assert not re.search(r"[^\n]\n[^\n]", prose.strip()), prose  # paragraphs unwrapped
        assert rule["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
    assert "primaryLocationLineHash" not in json.dumps(logs[case])
    assert "informationUri" not in run["tool"]["driver"]
    used = {r["ruleId"] for r in run["results"]}
    assert {rule["id"] for rule in rules} == used  # only the rules the results use


@pytest.mark.parametrize("case", ["capture", "unsupported", "warnings_as_errors"])
def test_failure_logs_say_so(logs, case):
    invocation = logs[case]["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["exception"]["kind"].endswith("Error")
    assert notification["associatedRule"]["id"].startswith("DO")
    assert any(r["level"] == "error" for r in logs[case]["runs"][0]["results"])


def test_clean_log_invocation(logs):
    invocation = logs["clean"]["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert "toolExecutionNotifications" not in invocation
    versions = invocation["properties"]["versions"]
    assert {"torch", "onnx", "onnxscript", "onnxruntime", "dynamo-onnx"} <= set(versions)


def test_unsupported_op_points_at_the_forward_line(logs):
    results = [r for r in logs["unsupported"]["runs"][0]["results"] if r["ruleId"] == "DO301"]
    first = line_of(TwoCustomOps.forward, "marker: first")
    second = line_of(TwoCustomOps.forward, "marker: second")
    found = {
        (
            r["properties"]["op"],
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in results
    }
    assert found == {
        ("dxtest::twice", "tests/test_unsupported_operators.py", first),
        ("dxtest::plus_one", "tests/test_unsupported_operators.py", second),
    }
    snippet = results[0]["locations"][0]["physicalLocation"]["region"]["snippet"]["text"]
    assert "marker:" in snippet
    frames = results[0]["stacks"][0]["frames"]
    assert frames[0]["location"]["message"]["text"] == "forward"


def test_findings_without_a_user_frame_are_anchored_at_the_export_call(logs):
    (note,) = [r for r in logs["clean"]["runs"][0]["results"] if r["ruleId"] == "DO302"]
    location = note["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "tests/reports/test_sarif.py"
    assert "dynamo_onnx.export(" in location["region"]["snippet"]["text"]
    assert note["properties"]["anchor"] == "call-site"


def test_warnings_as_errors_renders_warnings_as_errors(logs):
    results = logs["warnings_as_errors"]["runs"][0]["results"]
    (nan,) = [r for r in results if r["ruleId"] == "DO401"]
    assert nan["level"] == "error"
    assert nan["properties"]["originalLevel"] == "warning"
    assert "fc.weight" in nan["message"]["text"]


def test_verbosity_filters_sarif_results():
    model, args = NanWeights(), (torch.randn(3, 4),)
    per_level = {}
    for level in (logging.DEBUG, logging.INFO, logging.WARNING):
        options = dynamo_onnx.DiagnosticOptions(verbosity_level=level)
        program = dynamo_onnx.export(model, args, diagnostic_options=options)
        per_level[level] = {
            r["ruleId"] for r in program.diagnostics.to_sarif()["runs"][0]["results"]
        }
        assert len(program.diagnostics.findings) >= 4  # recorded regardless of verbosity
    assert per_level[logging.WARNING] == {"DO401"}
    assert {"DO401", "DO102", "DO302"} <= per_level[logging.INFO]
    assert "DO304" not in per_level[logging.INFO]
    assert "DO304" in per_level[logging.DEBUG]  # per-node dispatch detail


MODEL_SOURCE = """
import torch
import test_unsupported_operators  # registers dxtest::twice


class Moving(torch.nn.Module):
    def forward(self, x):
        return torch.ops.dxtest.twice(x) + 1
"""


def _fingerprints_of(tmp_path, name, source):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _, _, ctx = _export(module.Moving(), (torch.randn(2),), source_root=tmp_path)
    (result,) = [r for r in ctx.to_sarif()["runs"][0]["results"] if r["ruleId"] == "DO301"]
    region = result["locations"][0]["physicalLocation"]["region"]["startLine"]
    return result["partialFingerprints"][sarif.FINGERPRINT_KEY], region


def test_fingerprints_are_stable_when_lines_move(tmp_path):
    before, line_before = _fingerprints_of(tmp_path, "model_v1", MODEL_SOURCE)
    moved = MODEL_SOURCE.replace("class Moving", "# a comment\n\n\nclass Moving")
    after, line_after = _fingerprints_of(tmp_path, "model_v1", moved)
    assert line_after == line_before + 3
    assert after == before
    edited = MODEL_SOURCE.replace("twice(x) + 1", "twice(x) + 2")
    assert _fingerprints_of(tmp_path, "model_v1", edited)[0] != before


def test_writing_reports_restores_the_garbage_collector(tmp_path):
    import gc

    program = dynamo_onnx.export(torch.nn.Linear(2, 2), torch.randn(1, 2))
    assert gc.isenabled()
    program.diagnostics.save_reports(tmp_path / "a.sarif", tmp_path / "a.md")
    assert gc.isenabled()
    gc.disable()
    try:
        program.diagnostics.save_reports(tmp_path / "b.sarif")
        assert not gc.isenabled()  # a caller's choice to keep it off is kept
    finally:
        gc.enable()
    with pytest.raises(OSError):
        program.diagnostics.save_reports(tmp_path / "missing" / "c.sarif")
    assert gc.isenabled()


def test_successes_pass_records_inform_and_problems_fail():
    """VS Code's SARIF viewer shows each result's kind: a success is not "Kind: fail"."""
    x = torch.randn(4, 8)
    program = dynamo_onnx.export(MLPModel().eval(), (x,), verify=True, profile=True)
    log = program.diagnostics.to_sarif()
    sarif.validate(log)
    by_rule = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    expected = {
        "DO501": ("pass", "none"),  # Optimized the model
        "DO602": ("pass", "none"),  # All outputs match eager
        "DO102": ("pass", "none"),  # Captured the model
        "DO302": ("informational", "none"),  # 8 of 8 distinct operators translated
        "DO203": ("informational", "none"),
        "DO111": ("fail", "note"),  # profile=True has no effect: remove it
    }
    assert {rule: (by_rule[rule]["kind"], by_rule[rule]["level"]) for rule in expected} == expected
    assert by_rule["DO501"]["properties"]["findingLevel"] == "note"
    assert "findingLevel" not in by_rule["DO111"]["properties"]
    # the markdown report, rendered from the log, still lists them as notes
    text = program.diagnostics.to_markdown()
    notes = text.split("Notes", 1)[1]
    assert "DO501" in notes and "DO602" in notes and "DO111" in notes


def test_a_warning_rule_cannot_be_a_pass():
    from dynamo_onnx.rules import _parse

    entry = """
[[rule]]
id = "DO999"
name = "x"
level = "{level}"
kind = "pass"
pass = "validate"
short = "x"
full = "x"
message = "x"
fix = "Nothing."
help = "x"
"""
    assert _parse(entry.format(level="note")).get("DO999").kind == "pass"
    with pytest.raises(ValueError, match="'fail' for a warning"):
        _parse(entry.format(level="warning"))
