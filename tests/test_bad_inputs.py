"""The bad-input catalogue: every case is a rule-coded OnnxExporterError with both reports."""

from __future__ import annotations

import json
import logging
import pathlib

import pytest
import torch

import dynamo_onnx
from dynamo_onnx.io import protowriter


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


class Raises(torch.nn.Module):
    def forward(self, x):
        raise ValueError("boom in forward")


class ReturnsText(torch.nn.Module):
    def forward(self, x):
        return "hello"


class ReturnsSize(torch.nn.Module):
    def forward(self, x):
        return x.shape[0]


X = torch.randn(2, 4)

#: name -> (call, error class, rule id, words the message must contain)
CASES = {
    "model is an int": (
        lambda **r: dynamo_onnx.export(42, (X,), **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO107",
        ["an int (42)", "instantiate"],
    ),
    "model is a class": (
        lambda **r: dynamo_onnx.export(Linear, (X,), **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO107",
        ["the class Linear"],
    ),
    "args is a list": (
        lambda **r: dynamo_onnx.export(Linear(), [X], **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO108",
        ["`args` must be a tuple", "(x,)"],
    ),
    "kwargs is a list": (
        lambda **r: dynamo_onnx.export(Linear(), (X,), kwargs=[X], **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO108",
        ["`kwargs` must be a dict"],
    ),
    "wrong number of args": (
        lambda **r: dynamo_onnx.export(Linear(), (X, X), **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO103",
        ["too many positional arguments"],
    ),
    "input of unsupported type": (
        lambda **r: dynamo_onnx.export(Linear(), (object(),), **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO108",
        ["an object", "register_dataclass"],
    ),
    "forward raises": (
        lambda **r: dynamo_onnx.export(Raises(), (X,), **r),
        dynamo_onnx.CaptureError,
        "DO127",
        ["in PyTorch itself", "ValueError: boom in forward"],
    ),
    "output is a string": (
        lambda **r: dynamo_onnx.export(ReturnsText(), (X,), **r),
        dynamo_onnx.CaptureError,
        "DO110",
        ["Output 0", "a str ('hello')"],
    ),
    "output is a constant int": (
        lambda **r: dynamo_onnx.export(ReturnsSize(), (X,), **r),
        dynamo_onnx.CaptureError,
        "DO110",
        ["an int (2)", "torch.tensor"],
    ),
    "f is not a path": (
        lambda **r: dynamo_onnx.export(Linear(), (X,), [X], **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO109",
        ["`f` is a list", "file path"],
    ),
    "opset too high": (
        lambda **r: dynamo_onnx.export(Linear(), (X,), opset_version=99, **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO109",
        ["`opset_version` is 99", "from 7 to"],
    ),
    "opset not an int": (
        lambda **r: dynamo_onnx.export(Linear(), (X,), opset_version="18", **r),
        dynamo_onnx.InvalidExportOptionsError,
        "DO109",
        ["`opset_version` is '18'"],
    ),
    "diagnostic_options of the wrong type": (
        lambda **r: dynamo_onnx.export(
            Linear(), (X,), diagnostic_options={"verbosity_level": 10}, **r
        ),
        dynamo_onnx.InvalidExportOptionsError,
        "DO109",
        ["`diagnostic_options` is a dict"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_a_rule_coded_error_with_both_reports(case, tmp_path):
    call, error_type, rule_id, words = CASES[case]
    with pytest.raises(error_type) as info:
        call(report=True, artifacts_dir=tmp_path)
    error = info.value
    message = str(error)
    assert message.startswith(f"[{rule_id} ")
    assert "\nFix: " in message  # the cause, then the fix
    for word in words:
        assert word in message
    assert error.rule_id == rule_id
    sarif_path, markdown_path = error.report_paths
    log = json.loads(pathlib.Path(sarif_path).read_text())  # schema-validated when written
    results = log["runs"][0]["results"]
    assert any(r["ruleId"] == rule_id and r["level"] == "error" for r in results)
    assert rule_id in pathlib.Path(markdown_path).read_text()
    assert not list(tmp_path.glob("*.onnx"))


@pytest.mark.parametrize(
    ("kwargs", "error_type", "words"),
    [
        ({"verbosity_level": 7}, ValueError, "`DiagnosticOptions.verbosity_level` is 7"),
        ({"verbosity_level": True}, ValueError, "is True"),
        ({"warnings_as_errors": "yes"}, TypeError, "warnings_as_errors` is a str"),
    ],
)
def test_invalid_diagnostic_options_name_the_rule(kwargs, error_type, words):
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.DiagnosticOptions(**kwargs)
    assert isinstance(info.value, error_type)  # still what the standard library would raise
    assert str(info.value).startswith("[DO109 invalid-option]")
    assert words in str(info.value)


def test_nan_weights_are_a_warning_and_the_export_goes_on(tmp_path):
    model = Linear()
    with torch.no_grad():
        model.lin.weight[0, 0] = float("nan")
        model.lin.bias[1] = float("inf")
    program = dynamo_onnx.export(model, (X,), report=True, artifacts_dir=tmp_path)
    findings = program.diagnostics.by_rule("non-finite-weights")
    assert {f.properties["name"] for f in findings} == {"lin.weight", "lin.bias"}
    assert all(f.level == logging.WARNING for f in findings)
    assert "DO401" in (tmp_path / "Linear.md").read_text()


@pytest.fixture(scope="module")
def program():
    return dynamo_onnx.export(Linear(), (X,))


@pytest.mark.parametrize(
    ("where", "cause"),
    [
        (lambda tmp: tmp / "missing" / "m.onnx", "does not exist"),
        (lambda tmp: tmp, "it is a directory"),
        (lambda tmp: pathlib.Path("/proc/m.onnx"), "/proc/m.onnx"),  # read-only, even for root
    ],
    ids=["missing directory", "a directory", "read-only directory"],
)
def test_save_to_a_bad_path_is_a_save_error(program, tmp_path, where, cause):
    destination = where(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(dynamo_onnx.SaveError) as info:
        program.save(destination)
    assert isinstance(info.value, OSError)
    assert str(info.value).startswith("[DO406 save-failed]")
    assert cause in str(info.value)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
    assert program.diagnostics.by_rule("save-failed")


def test_failed_save_rewrites_the_reports_of_the_export(tmp_path):
    program = dynamo_onnx.export(Linear(), (X,), report=True, artifacts_dir=tmp_path)
    with pytest.raises(dynamo_onnx.SaveError) as info:
        program.save(tmp_path / "missing" / "m.onnx")
    sarif_path, _ = info.value.report_paths
    log = json.loads(pathlib.Path(sarif_path).read_text())
    assert any(r["ruleId"] == "DO406" for r in log["runs"][0]["results"])


def test_interrupted_save_keeps_the_earlier_file(program, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    program.save(path)
    before = path.read_bytes()

    def interrupted(model, file):
        file.write(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(protowriter, "write_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        program.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_reports_that_cannot_be_written_do_not_cost_the_export():
    model = Linear()
    with pytest.warns(RuntimeWarning, match="DO901"):
        program = dynamo_onnx.export(model, (X,), report=True, artifacts_dir="/proc/reports")
    (finding,) = program.diagnostics.by_rule("reports-not-written")
    assert "/proc/reports" in finding.message
    torch.testing.assert_close(program(X)[0], model(X), atol=1e-5, rtol=1e-5)
