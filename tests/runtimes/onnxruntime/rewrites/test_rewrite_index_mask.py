"""index_mask_form on hand-built index-arithmetic masks: causal, padded, windowed, offset."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from dynamo_onnx.runtimes.onnxruntime.rewrites import index_mask_form


def _mask_graph(extra: str | None) -> ir.Value:
    """transformers 5's mask: ``Where(kv <= q & attention_mask[b, kv] [& extra], 0, min)``."""

    def const(values, dtype=np.int64) -> ir.Value:
        array = np.array(values, dtype)
        value = ir.Value(
            type=ir.TensorType(ir.DataType.from_numpy(array.dtype)), shape=ir.Shape(array.shape)
        )
        value.const_value = ir.tensor(array)
        return value

    past = ir.Value(name="past", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    new = ir.Value(name="new", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    mask = ir.Value(
        name="attention_mask", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["B", "T"])
    )
    total = ir.node("Add", [past, new])
    kv = ir.node("Range", [const(0), total.outputs[0], const(1)])
    if extra is not None and extra.startswith("offset"):  # the last positions: arange + offset
        offset = ir.Value(name="offset", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
        kv_range = kv
        kv = ir.node("Add", [kv_range.outputs[0], offset])
    q_range = ir.node("Range", [const(0), new, const(1)])
    q = ir.node("Add", [q_range.outputs[0], past])
    kv4 = ir.node("Unsqueeze", [kv.outputs[0], const([0, 1, 2])])
    q4 = ir.node("Unsqueeze", [q.outputs[0], const([0, 1, 3])])
    causal = ir.node("LessOrEqual", [kv4.outputs[0], q4.outputs[0]])
    cast = ir.node("Cast", [mask], attributes={"to": ir.DataType.BOOL})
    padding = ir.node("Unsqueeze", [cast.outputs[0], const([1, 2])])
    nodes = [total, kv, q_range, q, kv4, q4, causal, cast, padding]
    if extra is not None and extra.startswith("offset"):
        nodes.insert(1, kv_range)
    allowed = ir.node("And", [causal.outputs[0], padding.outputs[0]])
    nodes.append(allowed)
    if extra in ("window", "offset window"):
        shifted = ir.node("Sub", [q4.outputs[0], const(4)])
        window = ir.node("Greater", [kv4.outputs[0], shifted.outputs[0]])
        allowed = ir.node("And", [allowed.outputs[0], window.outputs[0]])
        nodes += [shifted, window, allowed]
    elif extra == "bidirectional":
        both = ir.node("Or", [causal.outputs[0], padding.outputs[0]])
        allowed = ir.node("And", [both.outputs[0], padding.outputs[0]])
        nodes += [both, allowed]
    where = ir.node(
        "Where",
        [allowed.outputs[0], const(0.0, np.float32), const(np.finfo(np.float32).min, np.float32)],
    )
    nodes.append(where)
    inputs = [past, new, mask] + ([offset] if extra and extra.startswith("offset") else [])
    ir.Graph(inputs, [where.outputs[0]], nodes=nodes, opset_imports={"": 18})
    return where.outputs[0]


def test_transformers_index_mask_is_causal_with_padding_and_its_window():
    assert index_mask_form(_mask_graph(None)).reason == ""
    assert index_mask_form(_mask_graph(None)).window is None
    windowed = index_mask_form(_mask_graph("window"))
    assert windowed.reason == "" and windowed.window == 4
    other = index_mask_form(_mask_graph("bidirectional"))
    assert other.reason.startswith("the mask also tests `Or`")


def test_keys_from_an_offset_are_a_window_that_keeps_only_its_last_tokens():
    kept = index_mask_form(_mask_graph("offset window"))
    assert kept.reason == "" and kept.window == 4 and kept.offset
    assert not index_mask_form(_mask_graph("window")).offset
    # keys from an offset without a window: not a form GroupQueryAttention computes
    assert index_mask_form(_mask_graph("offset")).reason == (
        "the key positions start at an offset, without a sliding window"
    )
