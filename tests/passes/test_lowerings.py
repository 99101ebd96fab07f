"""The lowerings for older opsets (passes/onnx_graph/lowerings.py), each alone on a one-node
opset-18 model: the node is gone, and the model gives what it gave, in ONNX Runtime, before
and after conversion to the older opset."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.base import CheckedRequest, ExportRequest, ExportState
from dynamo_onnx.passes.onnx_graph.lowerings import (
    CastLikeLowering,
    ConstantValueLowering,
    HardSwishLowering,
    LayerNormLowering,
    MishLowering,
    ReshapeAllowZeroLowering,
    ResizeLowering,
    SplitLowering,
    TriluLowering,
)
from dynamo_onnx.passes.onnx_graph.opset import OpsetConversionPass

FLOAT, INT64, BOOL = ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.BOOL


def _model(op_type, inputs, attributes=None, outputs=1, out_shape=None, out_dtype=None):
    """A model of one ``op_type`` node: inputs (name, dtype, shape) or constant tensors."""
    values, nodes = [], []
    for item in inputs:
        if item is None:
            values.append(None)
        elif isinstance(item, ir.TensorProtocol):
            constant = ir.node("Constant", [], attributes={"value": item})
            nodes.append(constant)
            values.append(constant.outputs[0])
        else:
            name, dtype, shape = item
            values.append(ir.Value(name=name, shape=ir.Shape(shape), type=ir.TensorType(dtype)))
    node = ir.node(op_type, values, attributes=attributes, num_outputs=outputs)
    dtype = out_dtype or next((v.dtype for v in values if v and v.producer() is None), INT64)
    for index, out in enumerate(node.outputs):
        out.name, out.dtype = f"out{index}", dtype
    node.outputs[0].shape = ir.Shape(out_shape) if out_shape is not None else None
    graph_inputs = [v for v in values if v is not None and v.producer() is None]
    graph = ir.Graph(
        graph_inputs, list(node.outputs), nodes=[*nodes, node], opset_imports={"": 18}, name="g"
    )
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    proto = ir.to_proto(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _converted(model: ir.Model, target: int) -> ir.Model:
    request = CheckedRequest(None, registry=dynamo_onnx.OnnxRegistry(), opset=target)
    state = ExportState(ExportRequest(None), checked=request, onnx_model=model)
    OpsetConversionPass()(DiagnosticContext(), state)
    assert model.opset_imports[""] == target
    return model


def _lowered_agrees(make, lowering, target, feeds, op_type):
    """``lowering`` rewrites the node away, and the model gives the same values before,
    after, and converted to ``target``."""
    expected = _run(make(), feeds)
    model = make()
    assert lowering(target)(model).modified
    assert op_type not in {n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    for got in (_run(model, feeds), _run(_converted(make(), target), feeds)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    untouched = make()
    assert not lowering(18)(untouched).modified  # at 18 the node is left as it is


def test_hardswish_is_x_times_hardsigmoid_below_14():
    x = np.linspace(-5, 5, 24, dtype=np.float32).reshape(2, 12)
    make = lambda: _model("HardSwish", [("x", FLOAT, [2, 12])])  # noqa: E731
    _lowered_agrees(make, HardSwishLowering, 13, {"x": x}, "HardSwish")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("outputs", [1, 3])
def test_layer_normalization_is_its_definition_below_17(bias, outputs):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    scale = ir.tensor(np.linspace(0.5, 2, 12, dtype=np.float32).reshape(3, 4))
    shift = ir.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    inputs = [("x", FLOAT, [2, 3, 4]), scale, *([shift] if bias else [])]

    def make():
        attrs = {"axis": -2, "epsilon": 1e-3}
        return _model("LayerNormalization", inputs, attrs, outputs=outputs)

    _lowered_agrees(make, LayerNormLowering, 16, {"x": x}, "LayerNormalization")


@pytest.mark.parametrize(("upper", "k"), [(1, 0), (0, 0), (1, 2), (0, -1)])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_trilu_is_a_where_on_rows_and_columns_below_14(upper, k, dtype):
    x = (np.arange(2 * 4 * 5).reshape(2, 4, 5) % 3).astype(dtype)
    ir_type = BOOL if dtype == np.bool_ else FLOAT
    make = lambda: _model(  # noqa: E731
        "Trilu", [("x", ir_type, [2, 4, 5]), ir.tensor(k, dtype=INT64)], {"upper": upper}
    )
    _lowered_agrees(make, TriluLowering, 11, {"x": x}, "Trilu")


def _reshape(out_shape):
    """x [b, 6] -> Reshape(allowzero=1) to the shape given at run time."""
    return _model(
        "Reshape",
        [("x", FLOAT, ["b", 6]), ("shape", INT64, [3])],
        {"allowzero": 1},
        out_shape=out_shape,
    )


@pytest.mark.parametrize("batch", [3, 0])
def test_a_reshape_to_a_computed_shape_keeps_a_zero_size_below_14(batch):
    """To [b, 2, 3] the output's 0 is the input's own (b): allowzero goes. To [2, b, 3]
    it is not: an If gives the empty tensor of that shape, as allowzero=1 does."""
    x = np.ones((batch, 6), dtype=np.float32)
    for out_shape, shape in (((["b", 2, 3]), [batch, 2, 3]), ([2, "b", 3], [2, batch, 3])):
        feeds = {"x": x, "shape": np.array(shape, dtype=np.int64)}
        (expected,) = _run(_reshape(out_shape), feeds)
        model = _reshape(out_shape)
        assert ReshapeAllowZeroLowering(13)(model).modified
        node = model.graph.outputs[0].producer()
        assert "allowzero" not in node.attributes
        assert node.op_type == ("Reshape" if out_shape[0] == "b" else "If")
        (got,) = _run(_converted(model, 13), feeds)
        assert got.shape == expected.shape == tuple(shape)


def test_typed_constants_become_tensors_below_12():
    make = lambda: _model("Constant", [], {"value_ints": [3, 4]})  # noqa: E731
    _lowered_agrees(make, ConstantValueLowering, 11, {}, "__none__")
    model = make()
    ConstantValueLowering(11)(model)
    (node,) = model.graph
    assert list(node.attributes) == ["value"]


@pytest.mark.parametrize("reduction", ["ReduceMean", "ReduceMax", "ReduceProd"])
def test_a_reduction_with_constant_axes_takes_them_as_an_attribute_at_11(reduction):
    """The converter goes down to 13 and has no adapter for ReduceMean from 13: the
    reduction's attribute form, the same from 11, is carried over."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    make = lambda: _model(  # noqa: E731
        reduction, [("x", FLOAT, [2, 3, 4]), ir.tensor([1, -1], dtype=INT64)], {"keepdims": 0}
    )
    (expected,) = _run(make(), {"x": x})
    model = _converted(make(), 11)
    (node,) = [n for n in model.graph if n.op_type == reduction]
    assert list(node.attributes["axes"].value) == [1, -1] and len(node.inputs) == 1
    np.testing.assert_allclose(_run(model, {"x": x})[0], expected)


def test_mish_is_x_times_tanh_of_softplus_below_18():
    x = np.linspace(-5, 5, 24, dtype=np.float32).reshape(2, 12)
    make = lambda: _model("Mish", [("x", FLOAT, [2, 12])])  # noqa: E731
    _lowered_agrees(make, MishLowering, 17, {"x": x}, "Mish")


def test_castlike_is_a_cast_to_the_type_of_its_second_input_below_15():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    like = np.ones((1,), dtype=np.float32)
    make = lambda: _model(  # noqa: E731
        "CastLike", [("x", INT64, [2, 3]), ("like", FLOAT, [1])], out_dtype=FLOAT
    )
    _lowered_agrees(make, CastLikeLowering, 13, {"x": x, "like": like}, "CastLike")


@pytest.mark.parametrize("target", [15, 18, 20])
def test_castlike_infers_no_types_for_a_target_that_has_it(monkeypatch, target):
    """ONNX's inference on a serialized copy of the model is only for a CastLike lowered:
    an export to opset 20 (the default) with a CastLike in its graph paid it for nothing."""
    from dynamo_onnx.passes.onnx_graph import lowerings  # the module's name spied

    calls = []
    monkeypatch.setattr(lowerings, "inferred_types", lambda model: calls.append(model) or {})
    make = lambda: _model(  # noqa: E731
        "CastLike", [("x", INT64, [2, 3]), ("like", FLOAT, [1])], out_dtype=FLOAT
    )
    assert not CastLikeLowering(target)(make()).modified
    _converted(make(), target) if target != 18 else None
    assert calls == []
    assert CastLikeLowering(14)(make()).modified and len(calls) == 1


@pytest.mark.parametrize("target", [11, 17])
def test_a_split_in_parts_of_a_static_axis_gets_its_sizes_below_18(target):
    x = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
    make = lambda: _model(  # noqa: E731
        "Split", [("x", FLOAT, [2, 7])], {"axis": 1, "num_outputs": 2}, outputs=2
    )
    _lowered_agrees(make, SplitLowering, target, {"x": x}, "__none__")
    model = _converted(make(), target)
    (split,) = [n for n in model.graph if n.op_type == "Split"]
    assert "num_outputs" not in split.attributes


def test_a_resize_without_roi_gets_an_empty_one_for_opset_11():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    scales = ir.tensor(np.array([1, 1, 2, 1.5], dtype=np.float32))
    make = lambda: _model(  # noqa: E731
        "Resize",
        [("x", FLOAT, [2, 3, 4, 5]), None, scales],
        {"mode": "linear", "keep_aspect_ratio_policy": "stretch"},
    )
    _lowered_agrees(make, ResizeLowering, 11, {"x": x}, "__none__")
    model = _converted(make(), 11)
    (resize,) = [n for n in model.graph if n.op_type == "Resize"]
    assert len(resize.inputs) == 3 and "keep_aspect_ratio_policy" not in resize.attributes
