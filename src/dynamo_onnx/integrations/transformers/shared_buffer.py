"""What onnxruntime-genai may do with a causal LM fused for ONNX Runtime
(``optimize="onnxruntime"``): share the past and present buffers of the KV cache when every
present is a GroupQueryAttention's output (``past_present_share_buffer``)."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

__all__ = ["genai_search_options"]


def _shares_buffer(model: ir.Model) -> bool:
    """Whether each ``present.*`` output is a ``GroupQueryAttention``'s present, computed
    from the graph input of the same past: GQA then writes the new tokens into the past's
    buffer in place, and onnxruntime-genai can hand it one buffer of the whole length."""
    inputs = {v.name: v for v in model.graph.inputs}
    presents = [v for v in model.graph.outputs if (v.name or "").startswith("present.")]
    if not presents:
        return False
    for value in presents:
        node = value.producer()
        if node is None or node.op_type != "GroupQueryAttention" or node.domain != "com.microsoft":
            return False
        index = value.index()
        past = node.inputs[2 + index] if index in (1, 2) and len(node.inputs) > 2 + index else None
        expected = "past_key_values." + (value.name or "").removeprefix("present.")
        if past is None or inputs.get(expected) is not past:
            return False
    return True


def genai_search_options(model: ir.Model) -> dict[str, Any]:
    """The ``search`` options of genai_config.json that follow from the fused model."""
    return {"past_present_share_buffer": _shares_buffer(model)}
