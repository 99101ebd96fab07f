"""Markdown reports: what a person reads when an export fails, at each verbosity."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import pytest
import torch
from test_sarif import NanWeights

import dynamo_onnx
from conftest import MLPModel
from sarif_tools import ROOT
from test_unsupported_operators import TwoCustomOps


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _failure(model, args, **kwargs):
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export(model, args, **kwargs)
    return info.value


def _assert_reads_well(text):
    assert "\x1b[" not in text, "no ANSI codes"
    assert not re.search(r"<[\w.]+ object at 0x", text), "no raw reprs"
    assert "None" not in text.replace("`None`", "")


def test_failed_export_report():
    error = _failure(TwoCustomOps(), (torch.randn(3, 4),))
    text = error.diagnostics.to_markdown()
    _assert_reads_well(text)
    assert text.startswith("# ❌ dynamo-onnx export of `TwoCustomOps`: failed")
    assert "| translation |" in text and "❌ failed" in text  # the pass table
    assert "### ❌ Errors (2)" in text
    assert "#### DO301 `unsupported-operator`" in text
    assert "`tests/test_unsupported_operators.py:" in text and "in `forward`" in text
    assert "return plus_one(y) * 3  # marker: second" in text  # the source line
    assert "**Fix:** Register an ONNX function for each operator" in text
    assert "| `dxtest::twice` | 1 | **missing** |" in text
    assert "| `aten::relu` | 1 | `aten_relu` |" in text
    assert "2 of 4 distinct operators translated." in text
    for package in ("torch", "onnx", "onnxscript", "onnxruntime"):
        assert f"| {package} |" in text


def test_successful_export_report_lists_inputs_and_outputs():
    program = dynamo_onnx.export(MLPModel(), (torch.randn(5, 8),))
    text = program.diagnostics.to_markdown()
    _assert_reads_well(text)
    assert text.startswith("# ✅ dynamo-onnx export of `MLPModel`: succeeded")
    assert "| input | `tensor_x` | float | [5, 8] |" in text
    assert re.search(r"\| output \| `\w+` \| float \| \[5, 2\] \|", text)
    assert "No findings" not in text


@pytest.mark.parametrize(
    ("level", "present", "absent"),
    [
        (logging.WARNING, ["DO401"], ["## Passes", "DO102", "DO304"]),
        (logging.INFO, ["DO401", "## Passes", "DO102"], ["DO304"]),
        (
            logging.DEBUG,
            ["DO401", "## Passes", "DO102", "DO304", "dispatched to `aten_linear`"],
            [],
        ),
    ],
)
def test_verbosity_filters_the_report(level, present, absent):
    options = dynamo_onnx.DiagnosticOptions(verbosity_level=level)
    program = dynamo_onnx.export(NanWeights(), (torch.randn(3, 4),), diagnostic_options=options)
    text = program.diagnostics.to_markdown()
    for needle in present:
        assert needle in text, needle
    for needle in absent:
        assert needle not in text, needle


def test_warnings_as_errors_raises_after_writing_both_reports(tmp_path):
    options = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)
    error = _failure(
        NanWeights(),
        (torch.randn(3, 4),),
        diagnostic_options=options,
        report=True,
        artifacts_dir=tmp_path,
    )
    assert isinstance(error, dynamo_onnx.WarningsAsErrorsError)
    assert str(error).startswith("[DO401 non-finite-weights]")
    sarif_path, md_path = tmp_path / "NanWeights.sarif", tmp_path / "NanWeights.md"
    assert str(sarif_path) in str(error) and str(md_path) in str(error)
    text = md_path.read_text()
    assert text.startswith("# ❌")
    assert "### ❌ Errors (1)" in text and "#### DO401 `non-finite-weights`" in text
    assert "warnings as errors" in text
    log = json.loads(sarif_path.read_text())
    assert [r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "DO401"] == ["error"]
    # The program itself is still usable.
    assert error.program(torch.randn(3, 4))[0].shape == (3, 2)


def test_without_warnings_as_errors_the_warning_is_a_warning():
    program = dynamo_onnx.export(NanWeights(), (torch.randn(3, 4),))
    text = program.diagnostics.to_markdown()
    assert "### ⚠️ Warnings (1)" in text
    assert program.diagnostics.to_sarif()["runs"][0]["invocations"][0]["executionSuccessful"]


def test_report_true_writes_both_files_on_success_and_failure(tmp_path):
    dynamo_onnx.export(MLPModel(), (torch.randn(2, 8),), report=True, artifacts_dir=tmp_path / "ok")
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["MLPModel.md", "MLPModel.sarif"]
    error = _failure(
        TwoCustomOps(), (torch.randn(3, 4),), report=True, artifacts_dir=tmp_path / "ko"
    )
    paths = [tmp_path / "ko" / "TwoCustomOps.sarif", tmp_path / "ko" / "TwoCustomOps.md"]
    assert all(p.exists() for p in paths)
    assert f"Reports: {paths[0]}, {paths[1]}" in str(error)
    assert not [p for p in (tmp_path / "ko").iterdir() if p.name.startswith(".")], "no temp files"


def test_report_command_renders_the_same_markdown_from_the_saved_log(tmp_path):
    error = _failure(TwoCustomOps(), (torch.randn(3, 4),))
    sarif_path = tmp_path / "x.sarif"
    error.diagnostics.save_sarif(sarif_path)
    out = tmp_path / "x.md"
    proc = subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", "report", str(sarif_path), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == error.diagnostics.to_markdown()


def test_program_save_diagnostics_writes_sarif(tmp_path):
    program = dynamo_onnx.export(MLPModel(), (torch.randn(2, 8),))
    program.save_diagnostics(tmp_path / "d.sarif")
    log = json.loads((tmp_path / "d.sarif").read_text())
    assert log["runs"][0]["tool"]["driver"]["name"] == "dynamo-onnx"


def test_rules_page_is_current():
    from dynamo_onnx.rules import docs

    page = (ROOT / "docs" / "rules.md").read_text()
    assert page == docs.render(), "docs/rules.md is stale: run `make docs`"
