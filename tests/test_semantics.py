"""Exports that succeed but differ from eager are loud: mutation of inputs and buffers,
training mode, random operators, and TorchScript modules, each at the user's line."""

from __future__ import annotations

import json

import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level

#: Every finding here is the same, at the same line, however the caller configured logging.
pytestmark = pytest.mark.usefixtures("caller_logging")


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)  # marker: input
        return x * 2


class CountsCalls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)  # marker: buffer
        return x * self.calls


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)  # marker: random


class Trains(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        x = self.bn(x)  # marker: bn
        return self.drop(x)  # marker: drop


def _only(program, rule):
    (finding,) = program.diagnostics.by_rule(rule)
    return finding


def _at(finding, function, marker):
    assert (finding.primary.path, finding.primary.line) == (__file__, line_of(function, marker))


def test_an_input_changed_in_place_is_a_warning_at_its_line(tmp_path):
    x = torch.randn(2, 3)
    program = dynamo_onnx.export(MutatesInput(), (x.clone(),), report=True, artifacts_dir=tmp_path)
    finding = _only(program, "input-mutated")
    assert finding.level.name == "WARNING"
    assert "input `x`" in finding.message and "caller's input is not changed" in finding.message
    _at(finding, MutatesInput.forward, "marker: input")
    # what the ONNX model does instead: the right output, the caller's tensor untouched
    given = x.clone()
    (out,) = program(given)
    torch.testing.assert_close(out, (x + 1) * 2)
    torch.testing.assert_close(given, x)
    log = json.loads((tmp_path / "MutatesInput.sarif").read_text())
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DO120"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == line_of(MutatesInput.forward, "marker: input")


def test_a_buffer_update_is_a_warning_saying_the_onnx_model_keeps_no_state():
    model = CountsCalls()
    x = torch.randn(3)
    program = dynamo_onnx.export(model, (x,))
    finding = _only(program, "buffer-mutated")
    assert "buffer `calls`" in finding.message and "exported value" in finding.message
    _at(finding, CountsCalls.forward, "marker: buffer")
    fresh = CountsCalls()
    first, second = fresh(x), fresh(x)
    assert torch.equal(program(x)[0], program(x)[0])  # no state between runs
    assert not torch.equal(first, second)  # eager keeps it


def test_random_operators_are_a_warning_at_their_line():
    program = dynamo_onnx.export(Noisy(), (torch.randn(3),))
    finding = _only(program, "nondeterministic-operator")
    assert "`aten::rand_like`" in finding.message
    _at(finding, Noisy.forward, "marker: random")


def test_training_mode_names_each_module_that_behaves_differently():
    model = Trains().train()
    program = dynamo_onnx.export(model, (torch.randn(8, 4),))
    findings = {f.properties["module"]: f for f in program.diagnostics.by_rule("training-mode")}
    assert set(findings) == {"drop", "bn"}
    assert "Dropout: drops values at random" in findings["drop"].message
    assert "BatchNorm1d" in findings["bn"].message
    _at(findings["drop"], Trains.forward, "marker: drop")
    _at(findings["bn"], Trains.forward, "marker: bn")
    # One cause, one finding: the dropout's random draws and the batch norm's statistics
    # are what training mode means, said by DO122 (whose fix, model.eval(), comes first).
    assert not program.diagnostics.by_rule("nondeterministic-operator")
    assert not program.diagnostics.by_rule("buffer-mutated")
    warnings = [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    assert warnings[0].rule.name == "training-mode"
    quiet = dynamo_onnx.export(Trains().eval(), (torch.randn(8, 4),))
    assert not quiet.diagnostics.by_rule("training-mode")
    assert not quiet.diagnostics.by_rule("nondeterministic-operator")


def test_warnings_as_errors_fails_an_export_that_differs(tmp_path):
    options = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)
    with pytest.raises(dynamo_onnx.WarningsAsErrorsError) as info:
        dynamo_onnx.export(Noisy(), (torch.randn(3),), diagnostic_options=options)
    assert str(info.value).startswith("[DO123 nondeterministic-operator]")


def test_a_torchscript_module_is_its_own_error_with_the_fix():
    scripted = torch.jit.script(torch.nn.Linear(3, 2))
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(scripted, (torch.randn(2, 3),))
    message = str(info.value)
    assert message.startswith("[DO113 torchscript-model] The model is a RecursiveScriptModule")
    assert "Pass the original torch.nn.Module" in message
    assert "_CachedForward" not in message
