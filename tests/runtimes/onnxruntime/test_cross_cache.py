"""``CrossAttentionOfHeadsCache``: a MultiHeadAttention fed a per-head cache through
Transpose and Reshape reads the cache directly, with the same result in ONNX Runtime; a
cache whose heads are not the node's is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnxscript.rewriter import pattern

from dynamo_onnx.runtimes.onnxruntime.cross_cache import CrossAttentionOfHeadsCache

HIDDEN = 64


def _graph(cache_heads: int, num_heads: int = 4) -> onnx.ModelProto:
    head = HIDDEN // cache_heads
    cache = ["B", cache_heads, "T", head]
    nodes = [
        helper.make_node("Constant", [], ["merge"], value_ints=[0, 0, -1]),
        helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["key_t", "merge"], ["key_3d"]),
        helper.make_node("Transpose", ["value"], ["value_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["value_t", "merge"], ["value_3d"]),
        helper.make_node(
            "MultiHeadAttention",
            ["query", "key_3d", "value_3d"],
            ["out"],
            domain="com.microsoft",
            num_heads=num_heads,
            scale=0.25,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "cross",
        [
            helper.make_tensor_value_info("query", TensorProto.FLOAT, ["B", "S", HIDDEN]),
            helper.make_tensor_value_info("key", TensorProto.FLOAT, cache),
            helper.make_tensor_value_info("value", TensorProto.FLOAT, cache),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "S", HIDDEN])],
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize(("batch", "new", "length"), [(1, 1, 1500), (2, 3, 7)])
def test_the_cross_attention_reads_its_cache_directly_with_the_same_result(batch, new, length):
    proto = _graph(cache_heads=4)
    rng = np.random.default_rng(0)
    feeds = {
        "query": rng.standard_normal((batch, new, HIDDEN), dtype=np.float32),
        "key": rng.standard_normal((batch, 4, length, 16), dtype=np.float32),
        "value": rng.standard_normal((batch, 4, length, 16), dtype=np.float32),
    }
    before = _run(proto, feeds)
    model = ir.from_proto(proto)
    assert pattern.RewriteRuleSet([CrossAttentionOfHeadsCache.rule()]).apply_to_model(model) == 1
    ir.passes.common.RemoveUnusedNodesPass()(model)
    (attention,) = [n for n in model.graph if n.op_type == "MultiHeadAttention"]
    assert [v.name for v in attention.inputs] == ["query", "key", "value"]
    assert attention.attributes["num_heads"].value == 4
    assert attention.attributes["scale"].value == 0.25
    assert not [n for n in model.graph if n.op_type in ("Transpose", "Reshape")]
    np.testing.assert_allclose(_run(ir.to_proto(model), feeds), before, rtol=1e-5, atol=1e-5)


def test_a_cache_whose_heads_are_not_the_nodes_is_left_alone():
    model = ir.from_proto(_graph(cache_heads=2, num_heads=4))
    assert pattern.RewriteRuleSet([CrossAttentionOfHeadsCache.rule()]).apply_to_model(model) == 0
    assert sum(n.op_type == "Transpose" for n in model.graph) == 2
