"""Verification: ONNX Runtime against eager, per output, with explicit tolerances."""

from __future__ import annotations

import pytest
import torch
from onnxscript import opset18 as op

import dynamo_onnx
from conftest import MLPModel, line_of
from dynamo_onnx.diagnostics import Level


def wrong_sigmoid(x):
    return op.Relu(x)  # deliberately not a sigmoid


def _wrong_registry():
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(wrong_sigmoid, "aten", "sigmoid")
    return registry


def test_export_verify_records_a_match_with_figures():
    program = dynamo_onnx.export(MLPModel(), (torch.randn(5, 8),), verify=True)
    (note,) = program.diagnostics.by_rule("outputs-match")
    assert note.level == Level.NOTE
    assert note.properties["count"] == 1 and note.properties["max_abs"] < 1e-6
    assert [p.name for p in program.diagnostics.passes][-1] == "verification"


def test_a_wrong_translation_is_a_warning_per_output_with_differences():
    model, x = MLPModel(), torch.randn(5, 8)
    program = dynamo_onnx.export(model, (x,), registry=_wrong_registry())
    results = program.verify((x,), atol=1e-5, rtol=1e-5)
    assert len(results) == 1 and not results[0].ok
    (warning,) = program.diagnostics.by_rule("output-mismatch")
    assert warning.level == Level.WARNING
    assert warning.properties["max_abs"] == pytest.approx(results[0].max_abs)
    assert warning.properties["max_abs"] > 1e-3
    assert "max rel diff" in warning.message and "atol 1e-05, rtol 1e-05" in warning.message


def test_find_divergence_names_the_first_fx_node_and_its_line():
    model, x = MLPModel(), torch.randn(5, 8)
    program = dynamo_onnx.export(model, (x,), registry=_wrong_registry())
    program.verify((x,), find_divergence=True)
    (finding,) = program.diagnostics.by_rule("first-divergence")
    assert finding.properties["fx_node"] == "sigmoid"
    assert finding.properties["op"] == "aten::sigmoid"
    assert finding.primary.line == line_of(MLPModel.forward, "tensor_x = torch.sigmoid(tensor_x)")


def test_loose_tolerances_are_explicit_and_respected():
    model, x = MLPModel(), torch.randn(5, 8)
    program = dynamo_onnx.export(model, (x,), registry=_wrong_registry())
    results = program.verify((x,), atol=10.0, rtol=0.0)
    assert results[0].ok
    assert program.diagnostics.by_rule("outputs-match")


def test_mismatch_under_warnings_as_errors_fails_the_export():
    options = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)
    with pytest.raises(dynamo_onnx.WarningsAsErrorsError) as info:
        dynamo_onnx.export(
            MLPModel(),
            (torch.randn(5, 8),),
            registry=_wrong_registry(),
            verify=True,
            diagnostic_options=options,
        )
    assert str(info.value).startswith("[DO601 output-mismatch]")
    log = info.value.diagnostics.to_sarif()
    assert [r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "DO601"] == ["error"]


def test_export_optimize_flag():
    model, x = MLPModel(), torch.randn(5, 8)
    program = dynamo_onnx.export(model, (x,), optimize=True, verify=True)
    assert program.diagnostics.by_rule("model-optimized")
    assert program.diagnostics.by_rule("outputs-match")


@torch.library.custom_op("dxverify::times_rows", mutates_args=())
def times_rows(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0]


@times_rows.register_fake
def _(x):
    return torch.empty_like(x)


class TimesRows(torch.nn.Module):
    def forward(self, x):
        return times_rows(x)  # marker: rows


def _baked_times_rows(x):
    """A wrong translation: the example's row count (4) baked in as a constant."""
    from onnxscript import opset18 as op

    return op.Mul(x, op.CastLike(op.Constant(value_float=4.0), x))


def test_verify_catches_a_size_baked_as_a_constant_at_a_second_shape():
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(_baked_times_rows, "dxverify", "times_rows")
    x = torch.randn(4, 3)
    program = dynamo_onnx.export(
        TimesRows(), (x,), dynamic_shapes=({0: "rows"},), registry=registry, optimize=False
    )
    (first,) = program.verify((x,))
    assert first.ok  # at the example's size the baked constant happens to be right
    (mismatch,) = program.diagnostics.by_rule("output-mismatch")
    assert "at a second size of the dynamic dimensions: input shapes [5, 3]" in mismatch.message
    assert not program.diagnostics.by_rule("outputs-match")
    program.verify((x,), second_shape=False)  # the example alone says nothing is wrong
    assert program.diagnostics.by_rule("outputs-match")


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


def test_random_operators_are_compared_on_shapes_not_values():
    x = torch.randn(4, 3)
    program = dynamo_onnx.export(Noisy(), (x,), dynamic_shapes=({0: "rows"},))
    (comparison,) = program.verify((x,))
    assert comparison.ok  # values differ by construction; shapes agree
    assert not program.diagnostics.by_rule("output-mismatch")
    assert program.diagnostics.by_rule("nondeterministic-operator")  # said by its rule
