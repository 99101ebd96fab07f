"""CosSinCacheOfProduct on transformers 5's rotary cos/sin, hand-built."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript.rewriter import pattern

from dynamo_onnx.runtimes.onnxruntime.rewrites import CosSinCacheOfProduct
from runtimes.runtime_graphs import FLOAT


def _rotary_graph(axes: list[int]) -> ir.Model:
    """``RotaryEmbedding(x, cos, sin)`` (onnxscript's intermediate op) of transformers 5's
    ``position_ids[:, :, None].float() * inv_freq``."""
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", 2, "S", 8]))
    ids = ir.Value(
        name="position_ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["B", "S"])
    )
    inv = ir.Value(name="inv_freq", type=ir.TensorType(FLOAT), shape=ir.Shape([4]))
    inv.const_value = ir.tensor(np.array([1.0, 0.1, 0.01, 0.001], np.float32), name="inv_freq")

    def const(name: str, values: list[int]) -> ir.Value:
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
        value.const_value = ir.tensor(np.array(values, np.int64), name=name)
        return value

    axis, one = const("axis", axes), const("one", [1])
    unsqueeze = ir.node("Unsqueeze", [ids, axis])
    cast = ir.node("Cast", [unsqueeze.outputs[0]], attributes={"to": FLOAT})
    mul = ir.node("Mul", [cast.outputs[0], inv])
    cat = ir.node("Concat", [mul.outputs[0], mul.outputs[0]], attributes={"axis": -1})
    cos, sin = ir.node("Cos", [cat.outputs[0]]), ir.node("Sin", [cat.outputs[0]])
    cos4, sin4 = (
        ir.node("Unsqueeze", [cos.outputs[0], one]),
        ir.node("Unsqueeze", [sin.outputs[0], one]),
    )
    rope = ir.node(
        "RotaryEmbedding",
        [x, cos4.outputs[0], sin4.outputs[0]],
        attributes={"interleaved": 0, "num_heads": 2},
        domain="ai.onnxruntime._fusion",
    )
    rope.outputs[0].name = "y"
    nodes = [unsqueeze, cast, mul, cat, cos, sin, cos4, sin4, rope]
    graph = ir.Graph(
        [x, ids],
        [rope.outputs[0]],
        nodes=nodes,
        initializers=[inv, axis, one],
        opset_imports={"": 18, "ai.onnxruntime._fusion": 1},
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("positions", [16, None])
def test_the_cos_sin_of_a_product_becomes_ort_rotary_with_a_cache(positions):
    model = _rotary_graph([2])
    assert pattern.RewriteRuleSet([CosSinCacheOfProduct.rule(positions)]).apply_to_model(model) == 1
    (rope,) = [n for n in model.graph if n.op_type == "RotaryEmbedding"]
    assert rope.domain == "com.microsoft"
    assert rope.inputs[1].name == "position_ids"
    if positions is not None:
        cos = ir.convenience.get_const_tensor(rope.inputs[2])
        assert cos is not None and cos.shape == (16, 4)
        np.testing.assert_allclose(
            cos.numpy()[5], np.cos(5 * np.array([1.0, 0.1, 0.01, 0.001])), rtol=1e-6
        )


def test_the_cos_sin_rule_leaves_positions_unsqueezed_elsewhere():
    model = _rotary_graph([1])
    assert pattern.RewriteRuleSet([CosSinCacheOfProduct.rule(16)]).apply_to_model(model) == 0
