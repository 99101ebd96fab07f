"""The runner checks the pass contract: a pass that declares ``changes_input = False`` and
changes what it was given in place is caught (dynamo_onnx.passes.contract). Made-up passes,
one that lies and honest ones, on a hand-built ONNX model and a captured program."""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir
import pytest
import torch
from helpers import Tiny, three_nodes

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.passes.base import ExportRequest, ExportState, run_pipeline
from dynamo_onnx.passes.contract import CHECK_VARIABLE, PassContractError


def _rename_first_node(state: ExportState) -> ExportState:
    assert state.onnx_model is not None
    next(iter(state.onnx_model.graph)).name = "renamed"
    return state


def _relu_becomes_sigmoid(state: ExportState) -> ExportState:
    assert state.exported_program is not None
    for node in state.exported_program.graph.nodes:
        if node.target is torch.ops.aten.relu.default:
            node.target = torch.ops.aten.sigmoid.default
    return state


def _weight_replaced(state: ExportState) -> ExportState:
    assert state.onnx_model is not None
    value = next(iter(state.onnx_model.graph.initializers.values()))
    value.const_value = ir.tensor([5.0], name=value.name)
    return state


class _Made:
    error_type: ClassVar[type[OnnxExporterError]] = OnnxExporterError

    def __init__(self, change, changes_input: bool) -> None:
        self.change, self.changes_input = change, changes_input
        self.name = "lying" if not changes_input else "honest"

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        return self.change(state)


def _with_model() -> ExportState:
    return ExportState(ExportRequest(None), onnx_model=three_nodes())


def _with_weight() -> ExportState:
    model = three_nodes()
    weight = ir.Value(name="w", const_value=ir.tensor([1.0], name="w"))
    model.graph.register_initializer(weight)
    return ExportState(ExportRequest(None), onnx_model=model)


def _with_program() -> ExportState:
    program = torch.export.export(Tiny(), (torch.randn(2, 4),))
    return ExportState(ExportRequest(None), exported_program=program)


@pytest.mark.parametrize(
    "given, change, changed",
    [
        (_with_model, _rename_first_node, "state.onnx_model"),
        (_with_weight, _weight_replaced, "state.onnx_model"),
        (_with_program, _relu_becomes_sigmoid, "state.exported_program"),
    ],
    ids=["node-renamed", "weight-replaced", "program-rewritten"],
)
def test_a_pass_that_lies_about_changing_its_input_is_caught(given, change, changed):
    ctx = DiagnosticContext()
    with pytest.raises(PassContractError) as caught:
        run_pipeline(ctx, [_Made(change, changes_input=False)], given(), check_contract=True)
    message = str(caught.value)
    assert "'lying' pass declares changes_input = False" in message
    assert f"changed {changed} in place" in message
    # the same pass, honest about it, runs; without the check, the lie goes unseen
    run_pipeline(ctx, [_Made(change, changes_input=True)], given(), check_contract=True)
    run_pipeline(ctx, [_Made(change, changes_input=False)], given(), check_contract=False)


def test_a_pass_that_returns_a_new_model_keeps_its_word():
    """Changing nothing in place is what False means: a new model in the new state is fine."""

    def new_model(state: ExportState) -> ExportState:
        fresh = three_nodes()
        next(iter(fresh.graph)).name = "renamed"
        return state.replace(onnx_model=fresh)

    state = _with_model()
    out = run_pipeline(DiagnosticContext(), [_Made(new_model, False)], state, check_contract=True)
    assert next(iter(out.onnx_model.graph)).name == "renamed"
    assert next(iter(state.onnx_model.graph)).name != "renamed"


@pytest.mark.parametrize("setting, caught", [("1", True), ("0", False), ("", False)])
def test_the_environment_turns_the_check_on(monkeypatch, setting, caught):
    monkeypatch.setenv(CHECK_VARIABLE, setting)
    liar = _Made(_rename_first_node, changes_input=False)
    if caught:
        with pytest.raises(PassContractError):
            run_pipeline(DiagnosticContext(), [liar], _with_model())
    else:
        run_pipeline(DiagnosticContext(), [liar], _with_model())
