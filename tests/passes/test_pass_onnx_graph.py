"""The passes on the ONNX model, each alone on a three-node model: finalize, opset
conversion, weight check, load check, optimization."""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
import pytest
import torch
from helpers import three_nodes

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError
from dynamo_onnx.onnx_tools.loading import node_metadata_left_out, weights_as_inputs
from dynamo_onnx.passes.base import CheckedRequest, ExportRequest, ExportState
from dynamo_onnx.passes.onnx_graph.finalize import FinalizePass
from dynamo_onnx.passes.onnx_graph.load_check import LoadCheckPass
from dynamo_onnx.passes.onnx_graph.opset import ConvertOpsetStep, OpsetConversionPass
from dynamo_onnx.passes.onnx_graph.optimize import OptimizePass, count_nodes
from dynamo_onnx.passes.onnx_graph.weights import WeightCheckPass


def _state(model: ir.Model, **checked) -> ExportState:
    request = CheckedRequest(None, registry=dynamo_onnx.OnnxRegistry(), **checked)
    return ExportState(ExportRequest(None), checked=request, onnx_model=model)


def test_finalize_names_the_inputs_and_outputs_as_asked():
    model = three_nodes()
    FinalizePass()(DiagnosticContext(), _state(model, input_names=("a",), output_names=("b",)))
    assert [v.name for v in model.graph.inputs] == ["a"]
    assert [v.name for v in model.graph.outputs] == ["b"]
    assert model.opset_imports[""] == 18


def test_finalize_refuses_more_names_than_inputs():
    with pytest.raises(InvalidOptionValueError) as info:
        FinalizePass()(DiagnosticContext(), _state(three_nodes(), input_names=("a", "b")))
    assert info.value.rule_id == "DO109" and "has 2 names for 1 graph inputs" in str(info.value)


def test_opset_conversion_folds_a_reductions_axes_and_converts_down():
    model = three_nodes()
    OpsetConversionPass()(DiagnosticContext(), _state(model, opset=17))
    assert model.opset_imports[""] == 17
    (mean,) = [n for n in model.graph if n.op_type == "ReduceMean"]
    assert list(mean.attributes["axes"].value) == [-1]
    assert "noop_with_empty_axes" not in mean.attributes
    onnx.checker.check_model(ir.to_proto(model), full_check=True)


def test_opset_conversion_names_the_operator_that_blocks_it():
    """ReduceMean's attribute form goes down to 11 (its axes are given it there), not 10:
    the finding names it with the oldest opset that takes it."""
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        OpsetConversionPass()(ctx, _state(three_nodes(), opset=10))
    assert info.value.rule_id == "DO402"
    (finding,) = ctx.by_rule("DO402")
    assert finding.properties["blocking_ops"] == ["ReduceMean"]
    assert "the oldest opset that takes it: 11" in finding.message


def test_opset_conversion_gives_a_reduction_its_axes_at_opset_11():
    model = three_nodes()
    OpsetConversionPass()(DiagnosticContext(), _state(model, opset=11))
    assert model.opset_imports[""] == 11
    (mean,) = [n for n in model.graph if n.op_type == "ReduceMean"]
    assert list(mean.attributes["axes"].value) == [-1] and len(mean.inputs) == 1
    onnx.checker.check_model(ir.to_proto(model), full_check=True)


def test_the_weight_check_warns_of_a_nan_weight_by_name():
    model = three_nodes()
    weight = ir.Value(name="w", const_value=ir.tensor(torch.tensor([1.0, float("nan")])))
    model.graph.register_initializer(weight)
    ctx = DiagnosticContext()
    WeightCheckPass()(ctx, _state(model))
    (finding,) = ctx.by_rule("DO401")
    assert "`w`" in finding.message


def test_the_load_check_finds_an_invalid_model():
    model = three_nodes()
    (relu,) = [n for n in model.graph if n.op_type == "Relu"]
    relu.attributes["bogus"] = ir.AttrInt64("bogus", 1)
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        LoadCheckPass()(ctx, _state(model))
    assert info.value.rule_id == "DO407"


def _with_weight(model: ir.Model, weight: torch.Tensor) -> ir.Model:
    """``y = ReduceMean(Relu(x)) + w``: a weight of the given size used by the graph."""
    (mean,) = [n for n in model.graph if n.op_type == "ReduceMean"]
    value = ir.Value(name="w", const_value=ir.tensor(weight))
    model.graph.register_initializer(value)
    add = ir.node("Add", [mean.outputs[0], value])
    model.graph.append(add)
    out = add.outputs[0]
    out.name, out.shape, out.dtype = "z", ir.Shape([2, weight.shape[-1]]), ir.DataType.FLOAT
    model.graph.outputs[0] = out
    return model


def test_the_load_check_copies_no_weight_and_puts_the_model_back():
    """The session loads the model with its weight (4 KiB) as a graph input: the proto the
    check builds holds no weight, and the model keeps its initializer and inputs."""
    model = _with_weight(three_nodes(), torch.ones(1, 1024))
    with weights_as_inputs(model):
        proto = ir.to_proto(model)
    assert [i.name for i in proto.graph.input] == ["x", "w"]
    assert list(proto.graph.initializer) == []
    assert [v.name for v in model.graph.inputs] == ["x"]
    assert list(model.graph.initializers) == ["w"]
    assert model.graph.initializers["w"].const_value.nbytes == 4096
    # onnx_ir's own record agrees: the weight is no graph input any more (a stale mark made
    # onnxscript's folder skip every node on a weight, as if it were an input)
    assert not model.graph.initializers["w"].is_graph_input()
    ctx = DiagnosticContext()
    LoadCheckPass()(ctx, _state(model))
    assert ctx.findings == []


def test_the_load_check_serializes_no_node_metadata_and_puts_it_back():
    """Neither the checker nor ONNX Runtime reads a node's metadata (the stack, the FX node):
    the proto the check builds has none, the model's own metadata stays (the checker checks
    its keys), and every node has its metadata back after, a failing check's node too."""
    model = three_nodes()
    model.metadata_props["producer.note"] = "kept"
    for node in model.graph:
        node.metadata_props["pkg.torch.onnx.stack_trace"] = f"File model.py, {node.op_type}"
    with weights_as_inputs(model), node_metadata_left_out(model):
        proto = ir.to_proto(model)
    assert [list(n.metadata_props) for n in proto.graph.node] == [[]] * len(model.graph)
    assert [(p.key, p.value) for p in proto.metadata_props] == [("producer.note", "kept")]
    assert all(n.metadata_props["pkg.torch.onnx.stack_trace"] for n in model.graph)

    (relu,) = [n for n in model.graph if n.op_type == "Relu"]
    relu.attributes["bogus"] = ir.AttrInt64("bogus", 1)
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        LoadCheckPass()(DiagnosticContext(), _state(model))
    assert info.value.rule_id == "DO407"
    assert relu.metadata_props["pkg.torch.onnx.stack_trace"] == "File model.py, Relu"


def test_the_optimizer_leaves_a_transposed_weight_to_onnx_runtime():
    """``MatMul(x, Transpose(w))`` (a Linear) keeps the caller's weight: folding the
    Transpose would copy it; a small constant (<= 1 KiB) is folded as onnxscript does."""
    model = _with_weight(three_nodes(), torch.ones(1, 3))
    (add,) = [n for n in model.graph if n.op_type == "Add"]
    weight = ir.Value(name="big", const_value=ir.tensor(torch.randn(512, 3)))
    small = ir.Value(name="small", const_value=ir.tensor(torch.randn(3, 3)))
    for value in (weight, small):
        model.graph.register_initializer(value)
    big_t = ir.node("Transpose", [weight], attributes={"perm": [1, 0]})
    small_t = ir.node("Transpose", [small], attributes={"perm": [1, 0]})
    matmul = ir.node("MatMul", [add.outputs[0], small_t.outputs[0]])
    out = ir.node("MatMul", [matmul.outputs[0], big_t.outputs[0]])
    model.graph.extend([big_t, small_t, matmul, out])
    model.graph.outputs[0] = out.outputs[0]
    tensor = weight.const_value
    OptimizePass()(DiagnosticContext(), model)
    transposes = [n for n in model.graph if n.op_type == "Transpose"]
    assert [n.inputs[0].name for n in transposes] == ["big"]  # the small one folded
    assert model.graph.initializers["big"].const_value is tensor  # not copied


def test_the_load_check_hands_back_what_onnx_runtime_loads_with_the_checkers_complaint():
    """A declared shape the checker infers differently: ONNX Runtime loads the model, so it
    is a DO410 warning naming the node, not an error."""
    model = three_nodes()
    (relu,) = [n for n in model.graph if n.op_type == "Relu"]
    relu.outputs[0].shape = ir.Shape([3, 3])  # the checker infers [2, 3]
    relu.outputs[0].dtype = ir.DataType.FLOAT
    ctx = DiagnosticContext()
    LoadCheckPass()(ctx, _state(model))
    (finding,) = ctx.by_rule("DO410")
    assert finding.level.name == "WARNING"
    assert f"node `{relu.name}` (`Relu` on float" in finding.message
    assert "Inferred shape and existing shape differ in dimension 0: (2) vs (3)" in finding.message


def test_the_optimizer_folds_the_constants_and_records_the_counts():
    model = three_nodes()
    ctx = DiagnosticContext()
    assert OptimizePass.changes_input
    OptimizePass()(ctx, model)
    assert count_nodes(model) == 2  # Relu, ReduceMean with constant axes
    (note,) = ctx.by_rule("DO501")
    assert (note.properties["before"], note.properties["after"]) == (5, 2)


def _loop_reading_an_outer_value() -> ir.Model:
    """A Loop whose body reads ``x`` from the main graph and names its own values ``val_0``
    and ``val_1`` (as each graph's onnx_ir counter does), and a main graph that names two
    values after the Loop the same."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3]))
    body_inputs = [
        ir.Value(name="i", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])),
        ir.Value(name="c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([])),
        ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3])),
    ]
    add = ir.node("Add", [body_inputs[2], x], name="add")
    neg = ir.node("Neg", [add.outputs[0]], name="neg")
    keep = ir.node("Identity", [body_inputs[1]], name="keep")
    outputs = [keep.outputs[0], neg.outputs[0]]
    body = ir.Graph(body_inputs, outputs, nodes=[add, neg, keep], name="body")
    add.outputs[0].name, neg.outputs[0].name = "val_0", "val_1"
    go = ir.node("Constant", [], {"value": ir.tensor(True)}, name="go")
    trips = ir.node("Constant", [], {"value": ir.tensor(3, dtype=ir.DataType.INT64)}, name="n")
    go.outputs[0].name, trips.outputs[0].name = "go", "trips"
    loop = ir.node("Loop", [trips.outputs[0], go.outputs[0], x], {"body": body}, name="loop")
    loop.outputs[0].name = "looped"
    after = ir.node("Neg", [loop.outputs[0]], name="after")
    again = ir.node("Neg", [after.outputs[0]], name="again")
    after.outputs[0].name, again.outputs[0].name = "val_0", "val_1"
    nodes = [go, trips, loop, after, again]
    graph = ir.Graph([x], [again.outputs[0]], nodes=nodes, opset_imports={"": 20})
    return ir.Model(graph, ir_version=10)


def test_model_wide_names_make_a_loop_body_and_the_graph_after_it_apart():
    import onnxruntime as ort

    from dynamo_onnx.onnx_tools.names import ModelWideNamesStep

    def names() -> list[str | None]:
        return [v.name for n in ir.traversal.RecursiveGraphIterator(model.graph) for v in n.outputs]

    model = _loop_reading_an_outer_value()
    ir.passes.common.NameFixPass()(model)  # onnx_ir's pass leaves the clash (scoped names)
    assert names().count("val_0") == 2
    result = ModelWideNamesStep()(model)
    assert result.modified
    assert len(names()) == len(set(names()))
    assert [v.name for v in model.graph.inputs] == ["x"]  # the caller's names stay
    assert [v.name for v in model.graph.outputs] == ["val_1"]
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString())
    x = torch.arange(3, dtype=torch.float32)
    y = x
    for _ in range(3):
        y = -(y + x)
    (got,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), y)


def test_finalize_records_whether_each_onnx_ir_step_modified_the_model():
    ctx = DiagnosticContext()
    with ctx.pass_("finalize") as record:
        FinalizePass()(ctx, _state(three_nodes(), input_names=("a",)))
    steps = {s.name: s.modified for s in record.steps}
    assert list(steps)[0] == "RemoveUnusedNodesPass" and list(steps)[-1] == "ModelWideNamesStep"
    assert steps["RenameIOStep"] is True  # x -> a
    assert steps["RenameDimsStep"] is False  # no dimension symbol to rename
    assert steps["OutputFixPass"] is False
    with ctx.pass_("finalize") as again:
        FinalizePass()(ctx, _state(three_nodes()))
    assert {s.name: s.modified for s in again.steps}["RenameIOStep"] is False


def test_opset_conversion_is_an_onnx_ir_pass_whose_modified_is_recorded():
    ctx = DiagnosticContext()
    with ctx.pass_("opset-conversion") as record:
        OpsetConversionPass()(ctx, _state(three_nodes(), opset=17))
    assert [(s.name, s.modified) for s in record.steps][0] == ("ConvertOpsetStep", True)
    assert [s.name for s in record.steps] == ["ConvertOpsetStep", "ModelWideNamesStep"]
    with ctx.pass_("opset-conversion") as unchanged:
        OpsetConversionPass()(ctx, _state(three_nodes(), opset=18))
    assert unchanged.steps == []  # already at the opset: nothing to run
    model = three_nodes()
    result = ConvertOpsetStep(DiagnosticContext(), 18)(model)
    assert isinstance(ConvertOpsetStep(ctx, 17), ir.passes.InPlacePass)
    assert result.model is model and result.modified is False


def test_the_steps_are_in_the_sarif_invocation():
    from dynamo_onnx.reports import ReportingContext

    ctx = ReportingContext(dynamo_onnx.DiagnosticOptions(verbosity_level=logging.DEBUG))
    with ctx.pass_("opset-conversion"):
        OpsetConversionPass()(ctx, _state(three_nodes(), opset=17))
    ctx.finish(None)
    (entry,) = ctx.to_sarif()["runs"][0]["invocations"][0]["properties"]["passes"]
    assert entry["steps"][0] == {"name": "ConvertOpsetStep", "modified": True}
