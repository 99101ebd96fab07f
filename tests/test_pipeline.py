"""The pipeline: passes named for what they do, work after export as passes that recompute
success, options that fail one way, and the caller's objects never changed."""

from __future__ import annotations

import json
import logging
import pathlib

import pytest
import torch

import dynamo_onnx
from conftest import MLPModel
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.onnx_graph import optimize as optimize_pass
from dynamo_onnx.registry import torchlib


class Masked(torch.nn.Module):
    def forward(self, x):
        return (x.to(torch.float64) > 0) & (x > 1)


def _targets(ep: torch.export.ExportedProgram) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_export_never_rewrites_the_callers_exported_program():
    ep = torch.export.export(Masked(), (torch.randn(3, 4),))
    before = _targets(ep)
    assert "aten.__and__.Tensor" in before and "aten.to.dtype" in before
    program = dynamo_onnx.export(ep, (torch.randn(3, 4),))
    assert _targets(ep) == before  # the caller's graph is as it was
    assert "aten.__and__.Tensor" not in _targets(program.exported_program)
    x = torch.randn(3, 4)
    assert torch.equal(program(x)[0], ep.module()(x))


def test_the_passes_of_an_export_are_named_for_what_they_do(tmp_path):
    program = dynamo_onnx.export(MLPModel(), (torch.randn(97, 8),))
    names = [p.name for p in program.diagnostics.passes]
    assert names == [
        "validate", "capture", "dynamic-shapes", "decomposition", "semantics", "translation",
        "finalize", "opset-conversion", "module-functions", "weight-check", "load-check", "optimization",
    ]  # fmt: skip
    assert set(names) <= set(PassName.all())
    program.save(tmp_path / "m.onnx")
    assert program.diagnostics.passes[-1].name == "save"
    assert program.diagnostics.passes[-1].outcome == "ok"
    log = program.diagnostics.to_sarif()
    logged = [p["name"] for p in log["runs"][0]["invocations"][0]["properties"]["passes"]]
    assert logged[-1] == "save"


def test_a_failed_optimize_after_a_successful_export_is_a_failure_in_both_reports(
    tmp_path, monkeypatch
):
    program = dynamo_onnx.export(
        MLPModel(), (torch.randn(97, 8),), report=True, artifacts_dir=tmp_path
    )
    first = json.loads((tmp_path / "MLPModel.sarif").read_text())
    assert first["runs"][0]["invocations"][0]["executionSuccessful"] is True

    def broken(model, *args, **kwargs):
        raise RuntimeError("optimizer exploded")

    monkeypatch.setattr(optimize_pass, "run_optimizer", broken)
    with pytest.raises(dynamo_onnx.OptimizationError) as info:
        program.optimize()
    assert str(info.value).startswith("[DO500 optimization-failed]")
    assert "optimizer exploded" in str(info.value)
    log = program.diagnostics.to_sarif()
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert any(r["ruleId"] == "DO500" and r["level"] == "error" for r in log["runs"][0]["results"])
    assert "succeeded" not in program.diagnostics.to_markdown().splitlines()[0]
    # the reports export wrote are rewritten with the failure
    rewritten = json.loads((tmp_path / "MLPModel.sarif").read_text())
    assert rewritten["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert "failed" in (tmp_path / "MLPModel.md").read_text().splitlines()[0]


def test_a_successful_pass_after_export_keeps_success(tmp_path):
    program = dynamo_onnx.export(MLPModel(), (torch.randn(97, 8),))
    program.optimize()
    assert program.diagnostics.success is True
    assert program.diagnostics.passes[-1].name == "optimization"


OPTION_CASES = {
    "DiagnosticOptions(verbosity_level=5)": lambda: dynamo_onnx.DiagnosticOptions(
        verbosity_level=5
    ),
    "export(diagnostic_options='bad')": lambda: dynamo_onnx.export(
        MLPModel(), (torch.randn(2, 8),), diagnostic_options="bad"
    ),
    "dynamo_export(export_options='bad')": lambda: dynamo_onnx.dynamo_export(
        MLPModel(), torch.randn(2, 8), export_options="bad"
    ),
    "ExportOptions(diagnostic_options=...)": lambda: dynamo_onnx.ExportOptions(
        diagnostic_options={"verbosity_level": logging.INFO}
    ),
    "export(opset_version='18')": lambda: dynamo_onnx.export(
        MLPModel(), (torch.randn(2, 8),), opset_version="18"
    ),
}


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_a_bad_option_fails_the_same_way_wherever_it_is_given(case):
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        OPTION_CASES[case]()
    error = info.value
    message = str(error)
    assert message.startswith("[DO109 invalid-option] ")
    assert "\nFix: Use one of the allowed values" in message
    assert isinstance(error, (TypeError, ValueError))  # what the standard library would raise
    assert error.rule_id == "DO109"
    if error.diagnostics is not None:  # given to an export: also a finding at the call
        (finding,) = error.diagnostics.by_rule("DO109")
        assert finding.primary.path == __file__


def test_wrong_types_are_type_errors_and_wrong_values_value_errors():
    with pytest.raises(TypeError):
        dynamo_onnx.dynamo_export(MLPModel(), torch.randn(2, 8), export_options="bad")
    with pytest.raises(ValueError):
        dynamo_onnx.DiagnosticOptions(verbosity_level=5)


def test_torchlib_is_read_in_one_place_with_a_clear_error_if_it_moves():
    with pytest.raises(torchlib.TorchLibUnavailableError) as info:
        torchlib.torchlib_ops("onnxscript.function_libs.torch_lib.registration_9_99")
    message = str(info.value)
    assert "onnxscript.function_libs.torch_lib.registration_9_99.default_registry" in message
    assert torchlib.CHECKED_ONNXSCRIPT in message
    assert "pip install" in message


def test_the_installed_onnxscript_is_in_the_checked_range():
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    assert version("onnxscript") in SpecifierSet(torchlib.CHECKED_ONNXSCRIPT)
    pyproject = (pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"onnxscript{torchlib.CHECKED_ONNXSCRIPT}"' in pyproject
    assert len(torchlib.torchlib_ops()) > 300
