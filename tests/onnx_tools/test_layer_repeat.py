"""A template's layers repeated in its ONNX graph (dynamo_onnx.onnx_tools.layer_repeat), on
hand-built layered graphs: the plan, the repetition against the graph built with all its
layers, the refusals, and graph_differences itself. The families' exports are in
tests/test_layer_repeat_families.py."""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir
import pytest

from dynamo_onnx.integrations.transformers import layer_names
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.onnx_tools.layer_repeat import (
    LayerPlan,
    LayerRepeatRefused,
    graph_differences,
    plan_template,
    repeat_layers,
)

WIDTH = 4
_LAYER = re.compile(r"(?:^|\.)(?:layers|cache|out)\.(\d+)(?=\.|$)")


def layer_of(name: str) -> int | None:
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def renamed(name: str, layer: int) -> str:
    match = _LAYER.search(name)
    assert match is not None, name
    return name[: match.start(1)] + str(layer) + name[match.end(1) :]


def _weight(name: str, seed: int, shape=(WIDTH, WIDTH)) -> ir.Value:
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.FLOAT),
        shape=ir.Shape(shape),
        const_value=ir.tensor(data, name=name),
    )


def _input(name: str) -> ir.Value:
    return ir.Value(
        name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", WIDTH])
    )


def layered_model(layers: int, scale_by_index: bool = False, seed: int = 0) -> ir.Model:
    """x -> embed -> ``layers`` layers (a ReLU, a MatMul by the layer's weight, its cache
    input added, a residual, the result as ``out.k``; a scale of ``k + 1`` in layer ``k``
    when ``scale_by_index``) -> head. Layer 0's first op differs (no residual before it),
    like a fused decoder's first norm."""
    x = _input("x")
    shared_scale = _weight("val_1", 100, ())
    inits = [shared_scale, _weight("embed.weight", 101)]
    inputs = [x]
    outputs = []
    nodes = []

    def add(op: str, *args: ir.Value, **attrs) -> ir.Value:
        node = ir.node(op, list(args), attributes=attrs or None)
        nodes.append(node)
        return node.outputs[0]

    h = add("MatMul", add("Mul", x, shared_scale), inits[1])
    for k in range(layers):
        w = _weight(f"model.layers.{k}.w", seed + k)
        past = _input(f"cache.{k}")
        inits.append(w)
        inputs.append(past)
        a = add("MatMul", h if k == 0 else add("Relu", h), w)
        if scale_by_index:
            index = _weight(f"val_{10 + k}", 0, ())
            index.const_value = ir.tensor(np.array(k + 1, dtype=np.float32))
            inits.append(index)
            a = add("Mul", a, index)
        h = add("Add", add("Add", a, past), h)
        present = add("Identity", h)
        present.name = f"out.{k}"
        outputs.append(present)
    head = _weight("head.weight", 102)
    inits.append(head)
    logits = add("MatMul", h, head)
    logits.name = "logits"
    graph = ir.Graph(
        inputs,
        [logits, *outputs],
        nodes=nodes,
        initializers=inits,
        opset_imports={"": 20},
        name="layered",
    )
    return ir.Model(graph, ir_version=10)


def _plan(kept, sources, full: ir.Model) -> LayerPlan:
    tensors = {name: v.const_value for name, v in full.graph.initializers.items()}
    return LayerPlan(
        kept,
        sources,
        layer_of,
        renamed,
        lambda tensor, j, i: tensors[renamed(tensor.name, i)],
    )


def _run(model: ir.Model) -> list[np.ndarray]:
    session = inference_session(ir.to_proto(model).SerializeToString())
    rng = np.random.default_rng(7)
    feeds = {
        i.name: rng.standard_normal((2, WIDTH)).astype(np.float32) for i in session.get_inputs()
    }
    return session.run(None, feeds)


# -- the plan ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kinds", "planned"),
    [
        ("aaaaaa", ((0, 1, 2), (0, 2, 2, 2, 2, 2))),
        ("aaaa", ((0, 1, 2), (0, 2, 2, 2))),
        # two kinds alternating (Gemma 2, Gemma 3's pattern of two)
        ("abababa", ((0, 1, 2, 3, 4), (0, 3, 4, 3, 4, 3, 4))),
        # the first layer's kind never again (Qwen2's first full layer, then sliding ones)
        ("fssssss", ((0, 1, 2), (0, 2, 2, 2, 2, 2, 2))),
        # a kind with one layer after the first: it repeats itself
        ("aaabaaa", ((0, 1, 2, 3), (0, 2, 2, 3, 2, 2, 2))),
    ],
)
def test_the_template_keeps_layer_0_and_two_of_each_kind(kinds, planned):
    assert plan_template(list(kinds)) == planned


@pytest.mark.parametrize("kinds", ["", "a", "aaa", "ababa"])
def test_no_template_when_it_would_hold_every_layer(kinds):
    assert plan_template(list(kinds)) is None


# -- the repetition ----------------------------------------------------------------------


def test_the_template_repeated_is_the_model_built_whole():
    full, template = layered_model(6), layered_model(3)
    kept, sources = plan_template(["a"] * 6)
    repeated = repeat_layers(template, _plan(kept, sources, full))
    assert graph_differences(repeated, full) == []
    assert list(repeated.graph.initializers) == list(full.graph.initializers)
    assert [v.name for v in repeated.graph.inputs] == [v.name for v in full.graph.inputs]
    assert [v.name for v in repeated.graph.outputs] == [v.name for v in full.graph.outputs]
    for got, want in zip(_run(repeated), _run(full), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_template_is_left_as_it_was_and_its_tensors_shared():
    full, template = layered_model(6), layered_model(3)
    before = ir.to_proto(template).SerializeToString()
    kept, sources = plan_template(["a"] * 6)
    repeated = repeat_layers(template, _plan(kept, sources, full))
    assert ir.to_proto(template).SerializeToString() == before
    assert (
        repeated.graph.initializers["head.weight"].const_value
        is template.graph.initializers["head.weight"].const_value
    )
    assert (
        repeated.graph.initializers["model.layers.5.w"].const_value
        is full.graph.initializers["model.layers.5.w"].const_value
    )


def test_layers_that_differ_by_their_index_are_refused():
    template = layered_model(3, scale_by_index=True)
    kept, sources = plan_template(["a"] * 6)
    with pytest.raises(LayerRepeatRefused) as refused:
        repeat_layers(template, _plan(kept, sources, layered_model(6, scale_by_index=True)))
    assert "layers 1 and 2" in refused.value.reason
    assert "its Mul node" in refused.value.reason  # where the two first differ


def test_a_plan_the_template_cannot_vouch_for_is_refused():
    """Layer 3 repeating the template's first layer (whose graph differs); a template of
    one layer after the first, whose copies would start with what the first layer leaves
    (a ReLU of its output here) though nothing shows that its own kind leaves the same."""
    full, template = layered_model(6), layered_model(3)
    with pytest.raises(LayerRepeatRefused, match="first layer"):
        repeat_layers(template, _plan((0, 1, 2), (0, 2, 2, 0, 2, 2), full))
    with pytest.raises(LayerRepeatRefused) as refused:
        repeat_layers(layered_model(2), _plan((0, 1), (0, 1, 1, 1, 1, 1), full))
    assert "the model's layer 2 would start with what template layer 0 leaves" in str(refused.value)


def test_a_subgraph_is_refused():
    template = layered_model(3)
    branch = ir.Graph([], [ir.Value(name="b")], nodes=[], name="branch")
    cond = ir.node("Constant", [], attributes={"value_int": 1})
    node = ir.node(
        "If", [cond.outputs[0]], attributes={"then_branch": branch, "else_branch": branch}
    )
    template.graph.extend([cond, node])
    with pytest.raises(LayerRepeatRefused, match="subgraph"):
        repeat_layers(template, _plan((0, 1, 2), (0, 2, 2, 2), layered_model(4)))


# -- graph_differences -------------------------------------------------------------------


def test_names_of_nodes_and_made_values_are_no_difference():
    a, b = layered_model(3), layered_model(3)
    for i, node in enumerate(b.graph):
        node.name = f"renamed_{i}"
        for out in node.outputs:
            if out not in b.graph.outputs:
                out.name = f"v{i}"
    assert graph_differences(a, b) == []


def test_a_changed_weight_name_constant_or_attribute_is_a_difference():
    base = layered_model(3)
    weight = layered_model(3)
    weight.graph.initializers["model.layers.1.w"].name = "model.layers.1.v"
    assert graph_differences(base, weight) != []
    constant = layered_model(3)
    constant.graph.initializers["val_1"].const_value = ir.tensor(np.array(2.0, np.float32))
    assert graph_differences(base, constant) != []
    attribute = layered_model(3)
    relu = next(n for n in attribute.graph if n.op_type == "Relu")
    relu.op_type = "Sigmoid"
    assert any("Sigmoid" in d for d in graph_differences(base, attribute, limit=100))


def test_the_order_of_a_non_commutative_ops_inputs_is_a_difference():
    base, swapped = layered_model(3), layered_model(3)
    matmul = next(n for n in swapped.graph if n.op_type == "MatMul")
    first, second = matmul.inputs
    matmul.replace_input_with(0, second)
    matmul.replace_input_with(1, first)
    assert graph_differences(base, swapped) != []
    added = layered_model(3)
    add = next(n for n in added.graph if n.op_type == "Add")
    first, second = add.inputs
    add.replace_input_with(0, second)
    add.replace_input_with(1, first)
    assert graph_differences(base, added) == []


# -- transformers' names -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("model.layers.3.self_attn.qkv_proj.weight", 3),
        ("transformer.h.11.attn.c_attn.weight", 11),
        ("model.layers.2.block_sparse_moe.experts.5.w1.weight", 2),
        ("model.layers.7.mlp.experts.gate_up_proj", 7),
        ("model.layers.4.attn.qkv_proj.MatMul.weight_Q4", 4),
        ("past_key_values.3.key", 3),
        ("present.12.value", 12),
        ("model.embed_tokens.weight", None),
        ("lm_head.weight", None),
        ("val_12", None),
        ("model.norm.weight", None),
    ],
)
def test_transformers_layer_names(name, layer):
    assert layer_names.layer_of(name) == layer
    if layer is not None:
        moved = layer_names.renamed(name, layer + 10)
        assert layer_names.layer_of(moved) == layer + 10
        assert layer_names.renamed(moved, layer) == name
