"""Custom operators with a Python implementation and no ONNX function are traced through to
ATen operators (DO204); a registered ONNX function wins; a body no trace reaches stays an
unsupported operator, with the line that stopped the trace (DO205)."""

from __future__ import annotations

import pathlib

import numpy
import pytest
import torch
from onnxscript import opset18 as op

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level
from dynamo_onnx.passes.decompose.custom_ops import python_kernel


@torch.library.custom_op("dxcustom::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: float, shift: int = 2) -> torch.Tensor:
    return torch.tanh(x) * scale + shift


@scale_shift.register_fake
def _(x, scale, shift=2):
    return torch.empty_like(x)


class ScalesTwice(torch.nn.Module):
    def forward(self, x):
        y = scale_shift(x.relu(), 3.0)  # marker: first
        return scale_shift(y, 0.5, shift=-1)  # marker: second


# A kernel registered with the older Library API, for the CPU only, with a separate shape
# function: the dispatcher's CPU kernel is still a Python function.
_LIB = torch.library.Library("dxcustom", "FRAGMENT")
_LIB.define("row_softmax(Tensor x) -> Tensor")
_LIB.impl("row_softmax", lambda x: torch.softmax(x - x.amax(-1, keepdim=True), -1), "CPU")
_LIB.impl("row_softmax", lambda x: torch.empty_like(x), "Meta")


class Softmaxes(torch.nn.Module):
    def forward(self, x):
        return torch.ops.dxcustom.row_softmax(x) + 1  # marker: softmax


def round_on_host(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(numpy.round(x.numpy(), 1))  # marker: host


host_round = torch.library.custom_op("dxcustom::host_round", mutates_args=())(round_on_host)


@host_round.register_fake
def _(x):
    return torch.empty_like(x)


class Rounds(torch.nn.Module):
    def forward(self, x):
        return host_round(x) * 2  # marker: rounds


def _shift_onnx(x, scale: float, shift: int = 2):
    return op.Add(op.Mul(op.Tanh(x), scale), op.CastLike(shift, x))


def test_the_python_body_of_a_custom_op_is_what_the_onnx_model_computes():
    model = ScalesTwice().eval()
    program = dynamo_onnx.export(
        model, (torch.randn(3, 5),), dynamic_shapes={"x": {0: "batch"}}, verify=True
    )
    ctx = program.diagnostics
    assert ctx.success
    assert [f for f in ctx.findings if f.level >= Level.WARNING] == []
    assert {n.domain for n in program.model.graph} == {""}  # ATen's operators, translated
    assert sorted({n.op_type for n in program.model.graph}) == ["Add", "Mul", "Relu", "Tanh"]
    (finding,) = ctx.by_rule("DO204")
    assert finding.level == Level.NOTE
    assert finding.properties["operator"] == "dxcustom::scale_shift"
    assert finding.properties["count"] == 2
    assert pathlib.Path(finding.primary.path).name == "test_custom_ops.py"
    assert finding.primary.line == line_of(ScalesTwice.forward, "marker: first")
    assert [r.line for r in finding.related] == [line_of(ScalesTwice.forward, "marker: second")]
    assert "traced into ATen operators" in finding.message
    x = torch.randn(7, 5)  # another batch: the dims stayed dynamic through the kernel
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_a_cpu_kernel_registered_with_library_impl_is_traced_through():
    model = Softmaxes()
    x = torch.randn(2, 6)
    program = dynamo_onnx.export(model, (x,))
    (finding,) = program.diagnostics.by_rule("DO204")
    assert finding.properties["operator"] == "dxcustom::row_softmax"
    assert finding.primary.line == line_of(Softmaxes.forward, "marker: softmax")
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_a_registered_onnx_function_wins_over_the_python_body():
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(_shift_onnx, "dxcustom", "scale_shift")
    model = ScalesTwice().eval()
    x = torch.randn(3, 5)
    program = dynamo_onnx.export(model, (x,), registry=registry)
    assert program.diagnostics.by_rule("DO204") == []
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_a_body_computed_outside_torch_stays_unsupported_with_the_line_that_stopped_it(tmp_path):
    with pytest.raises(dynamo_onnx.UnsupportedOperatorError) as info:
        dynamo_onnx.export(Rounds(), (torch.randn(2, 3),), artifacts_dir=tmp_path, report=True)
    ctx = info.value.diagnostics
    (note,) = ctx.by_rule("DO205")
    assert note.properties["operator"] == "dxcustom::host_round"
    assert note.primary.line == line_of(Rounds.forward, "marker: rounds")
    assert [r.line for r in note.related] == [line_of(round_on_host, "marker: host")]
    assert f"test_custom_ops.py:{line_of(round_on_host, 'marker: host')} stopped the trace" in (
        note.message
    )
    assert ctx.by_rule("DO204") == []
    (error,) = ctx.by_rule("DO301")
    assert error.properties["op"] == "dxcustom::host_round"
    assert "def dxcustom_host_round(x):" in error.markdown  # the stub to register
    assert "DO205" in next(tmp_path.glob("*.md")).read_text()


def test_kernels_registered_from_cpp_are_never_run_by_the_tracer():
    """``quantized::linear_dynamic`` has a C++ CPU kernel: run on the tracer's tensors it
    would read memory they do not have, so it is never offered to the decomposition."""
    cpp = torch.ops.quantized.linear_dynamic.default
    assert "qlinear_dynamic.cpp" in repr(torch.library.get_kernel(cpp, "CPU"))
    assert python_kernel(cpp) is None
    assert python_kernel(torch.ops.dxcustom.row_softmax.default) is not None
    assert python_kernel(torch.ops.quantized.relu6.default) is None  # no CPU kernel at all
