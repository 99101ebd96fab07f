"""Dispatch: choosing among an operator's ONNX functions by dtypes, and complex inputs."""

from __future__ import annotations

import torch
from onnxscript import FLOAT, INT64
from onnxscript import opset18 as op

import dynamo_onnx
from conftest import line_of
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
    (note,) = [
        f
        for f in program.diagnostics.by_rule("node-dispatched")
        if f.properties["op"] == "dxdisp::bump"
    ]
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


class TwoGelus(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) + torch.nn.functional.gelu(2 * x, approximate="tanh")


def _op_types(program):
    return [n.op_type for n in program.model.graph]


def test_gelu_is_one_onnx_gelu_from_opset_20_and_torch_lib_nodes_below():
    x = torch.randn(3, 5)
    for opset, expected_gelus in ((18, 0), (19, 0), (20, 2), (23, 2)):
        program = dynamo_onnx.export(TwoGelus(), (x,), opset_version=opset)
        ops = _op_types(program)
        assert ops.count("Gelu") == expected_gelus, (opset, ops)
        if expected_gelus == 0:
            assert "Erf" in ops and "Tanh" in ops  # torch_lib's opset-18 decomposition
        assert program.model_proto.opset_import[0].version == opset
        torch.testing.assert_close(program(x)[0], TwoGelus()(x), atol=1e-6, rtol=1e-5)
        notes = [
            f
            for f in program.diagnostics.by_rule("node-dispatched")
            if f.properties["op"] == "aten::gelu"
        ]
        reasons = {f.properties["reason"] for f in notes}
        if expected_gelus:
            assert reasons == {"perfect match (dynamo-onnx function for opset 20)"}
        else:
            assert reasons == {"perfect match (torch_lib function)"}


def test_newer_opset_functions_are_listed_but_offered_only_from_their_opset():
    registry = dynamo_onnx.OnnxRegistry()
    entries = registry.get_op_functions("aten", "gelu")
    assert sorted(e.opset_introduced for e in entries) == [18, 20]
    assert [e.opset_introduced for e in registry.functions_for("aten::gelu")] == [18]
    assert [e.opset_introduced for e in registry.functions_for("aten::gelu", 17)] == [18]
    assert [e.opset_introduced for e in registry.functions_for("aten::gelu", 21)] == [20, 18]


def test_a_custom_gelu_still_wins_at_opset_20():
    def my_gelu(x: FLOAT, approximate: str = "none") -> FLOAT:
        return op.Mul(x, op.Sigmoid(op.Mul(x, op.CastLike(op.Constant(value_float=1.702), x))))

    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(my_gelu, "aten", "gelu")
    program = dynamo_onnx.export(
        TwoGelus(), (torch.randn(2, 3),), registry=registry, opset_version=20
    )
    assert "Gelu" not in _op_types(program)
    assert _op_types(program).count("Sigmoid") == 2
