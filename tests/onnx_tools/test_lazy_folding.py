"""A constant the optimizer folds from lazy weights stays a computation of them
(dynamo_onnx.onnx_tools.lazy_folding): its bytes are the folding's, and it follows its
weights when they are read again (a repeated layer's own, in export-llm's template)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from dynamo_onnx.onnx_tools.lazy_folding import FoldedTensor, folded_leaves, refolded
from dynamo_onnx.onnx_tools.optimizer_pipeline import run_optimizer


def _norm_model(weight: ir.TensorProtocol) -> ir.Model:
    """``x * (1 + weight)``, Gemma's norm scale: the optimizer folds ``1 + weight``."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 4]))
    w = ir.Value(name="layers.0.norm.weight", const_value=weight)
    w.type, w.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([4])
    one = ir.Value(name="one", const_value=ir.tensor(np.array(1.0, dtype=np.float32)))
    one.type, one.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([])
    add = ir.node("Add", [w, one])
    mul = ir.node("Mul", [x, add.outputs[0]])
    mul.outputs[0].name = "y"
    graph = ir.Graph(
        [x], [mul.outputs[0]], nodes=[add, mul], initializers=[w, one], opset_imports={"": 18}
    )
    return ir.Model(graph, ir_version=10)


def test_a_constant_folded_from_a_lazy_weight_follows_it():
    stored = {"values": np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)}
    weight = ir.LazyTensor(
        lambda: ir.tensor(stored["values"]),
        dtype=ir.DataType.FLOAT,
        shape=ir.Shape([4]),
        name="layers.0.norm.weight",
    )
    model = _norm_model(weight)
    run_optimizer(model)
    (scale,) = [v for v in model.graph.initializers.values() if v.name != "one"]
    assert "layers.0.norm.weight" not in model.graph.initializers  # folded
    folded = scale.const_value
    assert isinstance(folded, FoldedTensor)
    assert [t.name for t in folded_leaves(folded)] == ["layers.0.norm.weight"]
    np.testing.assert_array_equal(folded.numpy(), [1.5, 0.0, 3.0, 1.25])
    stored["values"] = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)  # another layer's
    np.testing.assert_array_equal(folded.numpy(), [2.0, 3.0, 4.0, 5.0])
    other = refolded(folded, lambda leaf: ir.tensor(np.zeros(4, dtype=np.float32)))
    np.testing.assert_array_equal(other.numpy(), np.ones(4, dtype=np.float32))


def test_a_constant_folded_from_a_weight_in_memory_is_a_plain_tensor():
    """An in-memory export's folded values are computed once, as onnxscript makes them."""
    model = _norm_model(ir.tensor(np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)))
    run_optimizer(model)
    (scale,) = [v for v in model.graph.initializers.values() if v.name != "one"]
    assert not isinstance(scale.const_value, ir.LazyTensor)
    np.testing.assert_array_equal(scale.const_value.numpy(), [1.5, 0.0, 3.0, 1.25])
