"""SameShapeReshape on a one-node graph: a Reshape to its input's own shape goes, a real one stays."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from onnxscript.rewriter import pattern

from dynamo_onnx.runtimes.onnxruntime.rewrites import SameShapeReshape
from runtimes.runtime_graphs import FLOAT, count


def _reshape_graph(result: list[int | str]) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", 4, "S", 8]))
    shape = ir.Value(
        name="shape", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(result)])
    )
    reshape = ir.node("Reshape", [x, shape])
    reshape.outputs[0].shape = ir.Shape(result)
    reshape.outputs[0].type = ir.TensorType(FLOAT)
    reshape.outputs[0].name = "y"
    graph = ir.Graph([x, shape], reshape.outputs, nodes=[reshape], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize(
    ("result", "left"),
    [(["B", 4, "S", 8], 0), (["B", "S", 32], 1), (["B", 4, "T", 8], 1), (["B", 4, None, 8], 1)],
)
def test_a_same_shape_reshape_is_removed_and_a_real_one_kept(result, left):
    model = _reshape_graph(result)
    pattern.RewriteRuleSet([SameShapeReshape.rule()]).apply_to_model(model)
    assert count(model, "Reshape") == left
