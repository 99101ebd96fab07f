"""The steps the transformers family hands the fusions for ONNX Runtime, on hand-built
graphs (unit layer): a windowed GroupQueryAttention's present made whole, Gemma 2's
soft-capped attention into one SDPA with its scale and cap and back out; and the steps'
places among the runtime's own."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime
import pytest
from onnxscript.rewriter import pattern

from dynamo_onnx.integrations.transformers.softcap import (
    SoftcappedAttention,
    SoftcappedAttentionUnfused,
)
from dynamo_onnx.integrations.transformers.whole_cache import WholeCacheOfWindowedAttention
from runtimes.runtime_graphs import FLOAT, count


def _windowed_gqa_graph(window: int, kept: int, output: bool = True) -> ir.Model:
    """A ``GroupQueryAttention`` of ``local_window_size=window`` whose present key goes
    through ``present[:, :, -kept:]`` (a graph output when ``output``)."""
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total"]
    inputs = [ir.Value(name=n, type=ir.TensorType(FLOAT)) for n in names]
    inputs[3].shape = ir.Shape(["B", 2, "P", 16])
    gqa = ir.node(
        "GroupQueryAttention",
        inputs,
        attributes={"num_heads": 4, "kv_num_heads": 2, "local_window_size": window},
        domain="com.microsoft",
        num_outputs=3,
    )

    def const(values: list[int]) -> ir.Value:
        value = ir.Value(type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
        value.const_value = ir.tensor(np.array(values, np.int64))
        return value

    window_of = ir.node(
        "Slice", [gqa.outputs[1], const([-kept]), const([2**63 - 1]), const([2]), const([1])]
    )
    window_of.outputs[0].name = "kept_key"
    gqa.outputs[0].name, gqa.outputs[2].name = "attention", "present_value"
    last = window_of.outputs[0]
    nodes = [gqa, window_of]
    if not output:  # the slice read by something else
        use = ir.node("Identity", [last])
        nodes.append(use)
        last = use.outputs[0]
        last.name = "used"
    graph = ir.Graph(
        inputs,
        [gqa.outputs[0], last, gqa.outputs[2]],
        nodes=nodes,
        opset_imports={"": 18, "com.microsoft": 1},
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize(
    ("window", "kept", "output", "whole"),
    [(4, 3, True, True), (4, 2, True, False), (-1, 3, True, False), (4, 3, False, False)],
)
def test_the_window_of_a_windowed_gqas_present_becomes_its_whole_present(
    window, kept, output, whole
):
    model = _windowed_gqa_graph(window, kept, output)
    rules = pattern.RewriteRuleSet([WholeCacheOfWindowedAttention.rule()])
    assert rules.apply_to_model(model) == int(whole)
    ir.passes.common.IdentityEliminationPass()(model)
    present = model.graph.outputs[1].producer()
    assert (present.op_type == "GroupQueryAttention") == whole
    assert count(model, "Slice") == (0 if whole else 1)


def _softcapped_attention(scale: float, cap: float) -> ir.Model:
    """Gemma 2's eager attention: ``softmax(cap * tanh(q k^T * scale / cap) + mask) v``."""
    shape = ir.Shape([1, 2, 3, 16])
    q, k, v = (ir.Value(name=n, type=ir.TensorType(FLOAT), shape=shape) for n in "qkv")
    mask = ir.Value(name="mask", type=ir.TensorType(FLOAT), shape=ir.Shape([1, 1, 3, 3]))

    constants: list[ir.Value] = []

    def scalar(value: float) -> ir.Value:
        name = f"c{len(constants)}"
        constant = ir.Value(name=name, type=ir.TensorType(FLOAT), shape=ir.Shape([]))
        constant.const_value = ir.tensor(np.array(value, np.float32), name=name)
        constants.append(constant)
        return constant

    kt = ir.node("Transpose", [k], attributes={"perm": [0, 1, 3, 2]})
    scores = ir.node("MatMul", [q, kt.outputs[0]])
    scaled = ir.node("Mul", [scores.outputs[0], scalar(scale)])
    div = ir.node("Div", [scaled.outputs[0], scalar(cap)])
    tanh = ir.node("Tanh", [div.outputs[0]])
    capped = ir.node("Mul", [tanh.outputs[0], scalar(cap)])
    masked = ir.node("Add", [capped.outputs[0], mask])
    weights = ir.node("Softmax", [masked.outputs[0]], attributes={"axis": -1})
    out = ir.node("MatMul", [weights.outputs[0], v])
    out.outputs[0].name = "attention"
    nodes = [kt, scores, scaled, div, tanh, capped, masked, weights, out]
    graph = ir.Graph(
        [q, k, v, mask],
        out.outputs,
        nodes=nodes,
        initializers=constants,
        opset_imports={"": 18},
    )
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, feeds: dict) -> np.ndarray:
    proto = ir.serde.serialize_model(model)
    return onnxruntime.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]


def test_softcapped_attention_is_one_sdpa_with_its_scale_and_cap_or_written_back():
    model = _softcapped_attention(0.0625, 50.0)
    rng = np.random.default_rng(0)
    feeds = {n: 10 * rng.standard_normal((1, 2, 3, 16), dtype=np.float32) for n in "qkv"}
    feeds["mask"] = np.triu(np.full((3, 3), -1e9, np.float32), 1)[None, None]
    want = _run(model, feeds)
    assert pattern.RewriteRuleSet([SoftcappedAttention.rule()]).apply_to_model(model) == 1
    (sdpa,) = list(model.graph)
    assert (sdpa.op_type, sdpa.domain) == ("SDPA", "ai.onnxruntime._fusion")
    assert sdpa.attributes.get_float("scale") == 0.0625
    assert sdpa.attributes.get_float("softcap") == 50.0
    # no GroupQueryAttention took it: written back out, the same values
    back = pattern.RewriteRuleSet([SoftcappedAttentionUnfused.rule()]).apply_to_model(model)
    assert back == 1 and count(model, "Tanh") == 1 and count(model, "SDPA") == 0
    np.testing.assert_allclose(_run(model, feeds), want, rtol=1e-5, atol=1e-5)


def test_two_caps_are_not_one_soft_cap():
    model = _softcapped_attention(0.0625, 50.0)
    tanh = next(n for n in model.graph if n.op_type == "Tanh")
    after = next(u.node for u in tanh.outputs[0].uses())
    after.inputs[1].const_value = ir.tensor(np.array(30.0, np.float32))
    assert pattern.RewriteRuleSet([SoftcappedAttention.rule()]).apply_to_model(model) == 0


def test_the_steps_run_where_the_runtimes_own_steps_ran_them():
    """Handed over through the protocol, the family's steps take the places in the
    runtime's sequence they had when the runtime held them: the soft cap before onnxscript's
    attention fusion, the whole cache and the soft cap written back right after
    GroupQueryAttention's, before its q, k and v are packed."""
    from dynamo_onnx.integrations.transformers.ort_steps import onnxruntime_steps
    from dynamo_onnx.runtimes.onnxruntime.fusions import _steps

    family = [s for s in onnxruntime_steps() if s.before is not None]
    names = [name for name, _, _ in _steps(None, family)]
    at = names.index("partial_rotary_embedding")
    assert names[at : at + 9] == [
        "partial_rotary_embedding",
        "sdpa_softcap",
        "sdpa",
        "canonical_dims",
        "same_shape_reshape",
        "gqa",
        "whole_window_cache",
        "sdpa_softcap_unfused",
        "packed_qkv_for_gqa",
    ]
    assert [name for name, _, _ in _steps(None)] == [
        n for n in names if n not in {"sdpa_softcap", "whole_window_cache", "sdpa_softcap_unfused"}
    ]


def test_a_step_placed_before_no_step_of_the_runtime_is_refused():
    from dynamo_onnx.integrations.base import RuntimeStep
    from dynamo_onnx.runtimes.onnxruntime.fusions import _steps

    with pytest.raises(ValueError, match="'odd' runs before 'sdpa2', not a step"):
        _steps(None, [RuntimeStep("odd", lambda model: 0, before="sdpa2")])
