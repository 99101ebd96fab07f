"""Dispatch: choosing among an operator's ONNX functions by dtypes, and complex inputs."""

from __future__ import annotations

import torch
from conftest import line_of
from onnxscript import FLOAT, INT64
from onnxscript import opset18 as op

import dynamo_onnx
from dynamo_onnx.diagnostics import Level


@torch.library.custom_op("dxdisp::bump", mutates_args=())
def bump(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@bump.register_fake
def _(x):
    return torch.empty_like(x)


def bump_float(x: FLOAT) -> FLOAT:
    return op.Add(x, op.CastLike(op.Constant(value_float=1.0), x))


def bump_int(x: INT64) -> INT64:
    return op.Add(x, op.Constant(value_int=1))


class Bump(torch.nn.Module):
    def forward(self, x):
        return bump(x)  # marker: bump


def _registry():
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(bump_float, "dxdisp", "bump")
    registry.register_op(bump_int, "dxdisp", "bump")
    return registry


def _dispatch_note(program):
    (note,) = [f for f in program.diagnostics.by_rule("node-dispatched") if f.properties["op"] == "dxdisp::bump"]
    return note


def test_the_function_whose_signature_fits_the_dtypes_is_chosen():
    registry = _registry()
    for x, expected in ((torch.arange(4), "bump_int"), (torch.randn(4), "bump_float")):
        program = dynamo_onnx.export(Bump(), (x,), registry=registry)
        note = _dispatch_note(program)
        assert note.properties["function"] == expected
        assert note.level == Level.NONE  # a perfect match is detail, rendered at DEBUG
        assert note.properties["reason"] == "perfect match (custom function)"
        torch.testing.assert_close(program(x)[0], x + 1)
        assert not program.diagnostics.by_rule("dispatch-nearest-match")


def test_nearest_match_is_a_warning_naming_what_did_not_fit():
    x = torch.randn(4).to(torch.float64)
    program = dynamo_onnx.export(Bump(), (x,), registry=_registry())
    (warning,) = program.diagnostics.by_rule("dispatch-nearest-match")
    assert warning.level == Level.WARNING
    assert warning.properties["function"] == "bump_float"  # first of the equally near
    assert "input x is double, not one of the types" in warning.message
    assert warning.properties["candidates"] == 2
    assert warning.primary.line == line_of(Bump.forward, "marker: bump")


def test_complex_valued_model_uses_complex_functions():
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.view_as_real(torch.fft.fft(x))

    x = torch.randn(3, 8)
    program = dynamo_onnx.export(Spectrum(), (x,))
    torch.testing.assert_close(program(x)[0], Spectrum()(x), atol=1e-5, rtol=1e-5)
    notes = {f.properties["op"]: f for f in program.diagnostics.by_rule("node-dispatched")}
    registry = dynamo_onnx.OnnxRegistry()
    chosen = notes["aten::view_as_real"].properties["function"]
    (entry,) = [e for e in registry.get_op_functions("aten", "view_as_real") if e.name == chosen]
    assert entry.is_complex
