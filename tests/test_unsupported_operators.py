"""Operators with no ONNX function: every one is reported, with the line that called it."""

from __future__ import annotations

import pathlib

import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level


# The operators compute with NumPy, as operators wrapping another library do: no trace reaches
# inside them (DO205), so only a registered ONNX function can translate them. An operator
# whose Python body calls torch is traced through instead (test_custom_ops).
@torch.library.custom_op("dxtest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() * 2)


@twice.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("dxtest::plus_one", mutates_args=())
def plus_one(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() + 1)


@plus_one.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("dxtest::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: float, shift: int = 2) -> torch.Tensor:
    return torch.from_numpy(x.numpy() * scale + shift)


@scale_shift.register_fake
def _(x, scale, shift=2):
    return torch.empty_like(x)


class ScaleShift(torch.nn.Module):
    def forward(self, x):
        return scale_shift(x, 0.5)


class OneCustomOp(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return twice(y)  # marker: one


class TwoCustomOps(torch.nn.Module):
    def forward(self, x):
        y = twice(torch.relu(x))  # marker: first
        return plus_one(y) * 3  # marker: second


def _export_failure(model):
    with pytest.raises(dynamo_onnx.UnsupportedOperatorError) as info:
        dynamo_onnx.export(model, (torch.randn(3, 4),))
    return info.value


def test_one_unsupported_operator_names_op_and_line():
    error = _export_failure(OneCustomOp())
    line = line_of(OneCustomOp.forward, "marker: one")
    text = str(error)
    assert text.startswith("[DO301 unsupported-operator]")
    assert f"dxtest::twice at tests/test_unsupported_operators.py:{line}" in text
    assert "register_op" in text  # the fix
    (finding,) = error.diagnostics.by_rule("DO301")
    assert finding.level == Level.ERROR
    assert finding.properties["op"] == "dxtest::twice"
    assert pathlib.Path(finding.primary.path).name == "test_unsupported_operators.py"
    assert finding.primary.line == line
    assert finding.primary.function == "forward"


def test_every_unsupported_operator_is_collected_before_failing():
    error = _export_failure(TwoCustomOps())
    first = line_of(TwoCustomOps.forward, "marker: first")
    second = line_of(TwoCustomOps.forward, "marker: second")
    found = {(f.properties["op"], f.primary.line) for f in error.diagnostics.by_rule("DO301")}
    assert found == {("dxtest::twice", first), ("dxtest::plus_one", second)}
    text = str(error)
    assert f"dxtest::twice at tests/test_unsupported_operators.py:{first}" in text
    assert f"dxtest::plus_one at tests/test_unsupported_operators.py:{second}" in text
    (coverage,) = error.diagnostics.by_rule("operator-coverage")
    # relu, mul and the two custom ops: 2 of 4 translated
    assert (coverage.properties["translated"], coverage.properties["total"]) == (2, 4)
    assert error.diagnostics.success is False
    failed = [p for p in error.diagnostics.passes if p.outcome == "failed"]
    assert [p.name for p in failed] == ["translation"]


def test_unsupported_finding_says_whether_torch_decomposes_it_and_how_to_register():
    error = _export_failure(OneCustomOp())
    (finding,) = error.diagnostics.by_rule("DO301")
    assert finding.properties["has_decomposition"] is False
    assert finding.message.endswith("torch has no decomposition for it.")
    assert "registry.register_op(dxtest_twice, 'dxtest', 'twice')" in finding.markdown
    namespace = {}
    code = finding.markdown.split("```python\n")[1].split("```")[0]
    code = code.replace("program = dynamo_onnx.export(model, args, registry=registry)\n", "")
    exec(compile(code, "<finding>", "exec"), namespace)  # it really is ready to paste
    program = dynamo_onnx.export(
        OneCustomOp(), (torch.randn(3, 4),), registry=namespace["registry"]
    )
    assert program.diagnostics.success


def test_the_registration_example_takes_every_argument_of_the_operator():
    """The stub's parameters are the schema's: the tensor and the numbers the translator
    passes (a stub of the tensors alone fails when called with ``scale``)."""
    error = _export_failure(ScaleShift())
    (finding,) = error.diagnostics.by_rule("DO301")
    assert "def dxtest_scale_shift(x, scale: float, shift: int = 2):" in finding.markdown
    assert "return op.Identity(x)" in finding.markdown
    namespace = {}
    code = finding.markdown.split("```python\n")[1].split("```")[0]
    code = code.replace("program = dynamo_onnx.export(model, args, registry=registry)\n", "")
    exec(compile(code, "<finding>", "exec"), namespace)
    program = dynamo_onnx.export(ScaleShift(), (torch.randn(3, 4),), registry=namespace["registry"])
    assert [n.op_type for n in program.model.graph] == ["Identity"]
