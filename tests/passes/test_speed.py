"""Work cut for speed does what it did: the rewrite rules filtered by their root op type
rewrite the same graph, and the weight check finds non-finite values in every dtype."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxscript.rewriter
import pytest
import torch
from onnxscript.rewriter import pattern

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.onnx_tools.rule_roots import root_filtered, root_op_type
from dynamo_onnx.passes import metadata
from dynamo_onnx.passes.onnx_graph import weights
from dynamo_onnx.tensors import torch_tensor_to_ir


def _graph() -> ir.Model:
    """x -> Transpose(perm 1,0) -> Transpose(perm 1,0) -> Identity -> Reshape to its shape
    -> Add: a model the default rules rewrite in several places."""
    x = ir.val("x", ir.DataType.FLOAT, ir.Shape([2, 3]))
    t1 = ir.node("Transpose", [x], attributes={"perm": [1, 0]})
    t2 = ir.node("Transpose", [t1.outputs[0]], attributes={"perm": [1, 0]})
    ident = ir.node("Identity", [t2.outputs[0]])
    shape = ir.Value(name="shape", const_value=ir.tensor(np.array([2, 3], dtype=np.int64)))
    reshape = ir.node("Reshape", [ident.outputs[0], shape])
    add = ir.node("Add", [reshape.outputs[0], x])
    add.outputs[0].name = "y"
    graph = ir.Graph(
        [x],
        [add.outputs[0]],
        nodes=[t1, t2, ident, reshape, add],
        initializers=[shape],
        opset_imports={"": 20},
    )
    for node in graph:
        for i, out in enumerate(node.outputs):
            out.name = out.name or f"{node.op_type}_{i}_{id(node)}"
    return ir.Model(graph, ir_version=10)


def _text(model: ir.Model) -> str:
    return str(ir.to_proto(model).graph.node)


def test_root_filtered_rules_rewrite_the_same_graph():
    rules = list(onnxscript.rewriter._DEFAULT_REWRITE_RULES)  # onnxscript's set
    plain, filtered = _graph(), _graph()
    count = pattern.RewriteRuleSet(rules).apply_to_model(plain)
    assert count > 0  # the graph is one the rules change
    assert root_filtered(rules).apply_to_model(filtered) == count
    assert _text(filtered) == _text(plain)
    assert len(list(filtered.graph)) < 5


def test_a_filtered_rule_is_not_matched_on_other_op_types(monkeypatch):
    rule = next(
        r for r in onnxscript.rewriter._DEFAULT_REWRITE_RULES if root_op_type(r) == "Transpose"
    )
    seen = []
    original = type(rule).try_rewrite

    def spy(self, model, graph, node, **kwargs):
        seen.append(node.op_type)
        return original(self, model, graph, node, **kwargs)

    monkeypatch.setattr(type(rule), "try_rewrite", spy)
    root_filtered([rule]).apply_to_model(_graph())
    assert seen and set(seen) == {"Transpose"}
    seen.clear()
    pattern.RewriteRuleSet([rule]).apply_to_model(_graph())
    assert {"Identity", "Reshape", "Add"} <= set(seen)  # what the filter spares


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(("bad", "count"), [(None, 0), (float("nan"), 2), (float("inf"), 2)])
def test_weight_check_counts_non_finite_values(dtype, bad, count):
    tensor = torch.full((300, 300), 60000.0 if dtype == torch.float16 else 1.0, dtype=dtype)
    if bad is not None:
        tensor[7, 7] = bad
        tensor[299, 0] = -bad
    # fp16: a sum of 90,000 values of 60,000 overflows float16, not the float32 it is summed in
    assert weights._count_non_finite(tensor) == count
    assert weights._count_non_finite(tensor.t()) == count  # strided


def test_weight_check_records_each_bad_weight():
    good = torch.ones(100, 100)
    bad = torch.ones(100, 100, dtype=torch.bfloat16)
    bad[0, 0] = float("nan")
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 20})
    for name, tensor in (("good", good), ("bad", bad)):
        value = ir.Value(name=name, const_value=torch_tensor_to_ir(tensor, name))
        graph.initializers[name] = value
    ctx = DiagnosticContext()
    weights._check_weights(ctx, ir.Model(graph, ir_version=10))
    findings = [f for f in ctx.findings if f.rule.name == "non-finite-weights"]
    assert [(f.properties["name"], f.properties["count"]) for f in findings] == [("bad", 1)]


def test_portable_stack_traces_are_made_once_per_text(monkeypatch, tmp_path):
    """Nodes share their stack texts (each layer repeats its lines): the paths of a text
    are made relative once, and the text is what it was."""
    library, root = str(tmp_path / "site-packages"), str(tmp_path / "work")
    trace = (
        f'  File "{root}/model.py", line 3, in forward\n    y = self.lin(x)\n'
        f'  File "{library}/torch/nn/modules/linear.py", line 9, in forward\n'
        '  File "/elsewhere/script.py", line 1, in <module>\n'
    )
    expected = (
        '  File "model.py", line 3, in forward\n    y = self.lin(x)\n'
        '  File "torch/nn/modules/linear.py", line 9, in forward\n'
        '  File "/elsewhere/script.py", line 1, in <module>\n'
    )
    assert metadata.portable_stack_trace(trace, root, [library]) == expected

    def refused(*args):
        raise AssertionError("the text's paths were made relative again")

    monkeypatch.setattr(metadata.os.path, "relpath", refused)
    assert metadata.portable_stack_trace(trace, root, (library,)) == expected
