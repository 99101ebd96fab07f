"""The validate pass alone: the checked request every later pass reads."""

from __future__ import annotations

import pytest
import torch
from helpers import Tiny, validated

import dynamo_onnx
from dynamo_onnx.defaults import DYNAMO_EXPORT_OPSET, EXPORT_OPSET
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.base import ExportRequest, ExportState
from dynamo_onnx.passes.validate import ValidatePass
from dynamo_onnx.passes.validate.torch_onnx import TorchOnnxArguments


def test_the_checked_request_applies_the_default_opset_and_binds_forward_once():
    x = torch.randn(2, 4)
    checked = validated(Tiny(), (x,)).checked
    assert checked.opset == 18
    assert list(checked.bound) == ["x"] and checked.bound["x"] is x
    assert checked.model_location is not None and checked.model_location.function == "forward"
    assert checked.args == (x,) and dict(checked.kwargs) == {}


def test_each_entry_points_default_opset_is_applied_by_validation_alone():
    """export() hands validation the opset as given (None); validation applies the entry
    point's default: torch.onnx.export's 20 for a call in its form, the seed's 18 else."""
    x = torch.randn(2, 4)
    as_export = TorchOnnxArguments(passed=frozenset({"model", "args"}))
    assert validated(Tiny(), (x,), torch_onnx=as_export).checked.opset == EXPORT_OPSET == 20
    assert validated(Tiny(), (x,)).checked.opset == DYNAMO_EXPORT_OPSET == 18
    for opset in (17, 21):
        assert validated(Tiny(), (x,), opset_version=opset, torch_onnx=as_export).checked.opset == (
            opset
        )
        assert validated(Tiny(), (x,), opset_version=opset).checked.opset == opset


@pytest.mark.parametrize(
    ("module_functions", "as_functions", "expected"),
    [(False, False, False), (True, False, True), (False, True, True), (False, {Tiny}, True)],
)
def test_export_modules_as_functions_is_merged_into_module_functions_by_validation(
    module_functions, as_functions, expected
):
    arguments = TorchOnnxArguments(export_modules_as_functions=as_functions)
    checked = validated(
        Tiny(), (torch.randn(2, 4),), module_functions=module_functions, torch_onnx=arguments
    ).checked
    assert checked.module_functions is expected


def test_names_and_labels_are_checked_and_typed():
    checked = validated(
        Tiny(), (torch.randn(2, 4),), input_names=["tokens"], output_names=["probs"]
    ).checked
    assert checked.input_names == ("tokens",) and checked.output_names == ("probs",)
    assert checked.label("x") == "tokens"


def test_both_spellings_of_every_dimension_dynamic_give_one_checked_request():
    x = torch.randn(2, 4)
    spelled = validated(Tiny(), (x,), dynamic_shapes=True).checked
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    optioned = validated(Tiny(), (x,), export_options=options).checked
    for checked in (spelled, optioned):
        assert checked.shapes.everything and not checked.shapes.declared
        assert dict(checked.shapes.requested) == {("x", 0): 2, ("x", 1): 4}
    assert spelled.shapes.spec == optioned.shapes.spec


def test_a_named_dimension_is_declared_and_becomes_auto():
    checked = validated(Tiny(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: "batch"}}).checked
    assert checked.shapes.declared == frozenset({("x", 0)})
    assert checked.shapes.spec == {"x": {0: torch.export.Dim.AUTO}}
    assert checked.shapes.named == {"x": {0: "batch"}}


@pytest.mark.parametrize(
    "dims", [["batch", None], ("batch", None), [torch.export.Dim.AUTO, None]], ids=str
)
def test_a_tensors_list_of_dims_is_checked_into_the_dict_it_means(dims):
    """``{"x": ["batch", None]}`` and ``{"x": {0: "batch"}}`` are one request to torch.export:
    validation hands the later passes one spelling."""
    x = torch.randn(2, 4)
    listed = validated(Tiny(), (x,), dynamic_shapes={"x": dims}).checked
    as_dict = validated(Tiny(), (x,), dynamic_shapes={"x": {0: dims[0]}}).checked
    assert listed.shapes.named == as_dict.shapes.named == {"x": {0: dims[0]}}
    assert listed.shapes.spec == as_dict.shapes.spec
    assert listed.shapes.declared == as_dict.shapes.declared == frozenset({("x", 0)})
    static = validated(Tiny(), (x,), dynamic_shapes={"x": [None, None]}).checked
    assert static.shapes.named == {"x": None} and not static.shapes.requested
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match=r"\[DO131 "):
        validated(Tiny(), (x,), dynamic_shapes={"x": ["batch"]})  # not a list of its dims
    with_none = validated(Tiny(), (x,), dynamic_shapes={"x": {0: dims[0], 1: None}}).checked
    assert with_none.shapes.named == as_dict.shapes.named  # None is a static dimension
    by_position = validated(Tiny(), (x,), dynamic_shapes=(dims,)).checked
    assert by_position.shapes.named == ({0: dims[0]},)
    assert by_position.shapes.declared == as_dict.shapes.declared


def test_a_bad_opset_fails_in_validate_with_its_rule():
    ctx = DiagnosticContext()
    state = ExportState(ExportRequest(Tiny(), (torch.randn(2, 4),), opset_version=3))
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        ValidatePass()(ctx, state)
    assert info.value.rule_id == "DO109"
    assert [f.rule.id for f in ctx.findings] == ["DO109"]


@pytest.mark.parametrize(
    ("request_fields", "argument", "level"),
    [
        ({"dynamic_shapes": {"x": {0: "batch"}}}, "dynamic_shapes", "WARNING"),
        ({"dynamic_shapes": ({0: torch.export.Dim("batch")},)}, "dynamic_shapes", "WARNING"),
        ({"dynamic_axes": {"x": [0]}}, "dynamic_axes", "WARNING"),
        ({"dynamic_axes": {"x": {0: "batch"}}}, "dynamic_axes", "WARNING"),
        (
            {"export_options": dynamo_onnx.ExportOptions(dynamic_shapes=True)},
            "ExportOptions.dynamic_shapes",
            "WARNING",
        ),
    ],
)
def test_a_spec_beside_an_exported_program_is_read_and_reported(request_fields, argument, level):
    """Validation returns early for an ExportedProgram, but only after reading every spec
    argument: each is a DO111 (a warning: this program has the dims static), none dropped."""
    x = torch.randn(2, 4)
    program = torch.export.export(Tiny(), (x,))
    ctx = DiagnosticContext()
    state = ValidatePass()(ctx, ExportState(ExportRequest(program, (x,), **request_fields)))
    (finding,) = ctx.by_rule("argument-ignored")
    assert finding.rule.id == "DO111" and finding.level.name == level
    assert f"`{argument}`" in finding.message or argument in finding.message
    assert "fixed when torch.export.export captured it" in finding.message
    assert state.checked.model is program  # never changed, never re-captured


def test_every_dimension_dynamic_beside_a_dynamic_exported_program_is_a_note():
    x = torch.randn(2, 4)
    batch = torch.export.Dim("batch")
    program = torch.export.export(Tiny(), (x,), dynamic_shapes={"x": {0: batch}})
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    ctx = DiagnosticContext()
    ValidatePass()(ctx, ExportState(ExportRequest(program, (x,), export_options=options)))
    (finding,) = ctx.by_rule("DO111")
    assert finding.level.name == "NOTE" and "every dimension static" not in finding.message
