"""The runtime pass transformers' causal LMs want after their fusion for ONNX Runtime: the
names of the sliding-window layers' cache dimensions once those layers keep their whole
cache.

The export names a sliding layer's past length apart, ``sliding_<past>``
(``dynamic_shapes.py``): it holds at most ``window - 1`` tokens. Fused into
GroupQueryAttention with its window, the layer's past and present are the whole cache
(DO510), the same length as a full-attention layer's: its dimensions take the full
layers' names, so the model's inputs say that every layer's past has one length (as
onnxruntime-genai feeds it).
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["SLIDING_PREFIX", "WholeWindowCacheNames"]

#: The names of a cache's inputs and outputs (``past_key_values.0.key``, ``present.0.key``).
PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."

#: The prefix of a sliding-window layer's past length (``dynamic_shapes._past_name``).
SLIDING_PREFIX = "sliding_"


def _whole_present(value: ir.Value) -> bool:
    """Whether ``value`` is a windowed GroupQueryAttention's present (its whole cache)."""
    node = value.producer()
    return (
        node is not None
        and node.op_type == "GroupQueryAttention"
        and node.domain == "com.microsoft"
        and node.attributes.get_int("local_window_size", -1) > 0
        and value.index() in (1, 2)
    )


def _renamed(shape: ir.Shape | None, old: str, new: str) -> ir.Shape | None:
    if shape is None:
        return None
    dims = [
        ir.SymbolicDim(d.value.replace(old, new))
        if isinstance(d, ir.SymbolicDim) and d.value and old in d.value
        else d
        for d in shape
    ]
    return ir.Shape(dims)


class WholeWindowCacheNames(ir.passes.InPlacePass):
    """``past_key_values.<i>.*`` of a layer whose ``present.<i>.*`` is a windowed
    GroupQueryAttention's whole cache: ``sliding_<past>`` -> ``<past>`` in the past's and
    the present's shapes."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        inputs = {v.name: v for v in model.graph.inputs}
        modified = False
        for present in model.graph.outputs:
            name = present.name or ""
            if not name.startswith(PRESENT_PREFIX) or not _whole_present(present):
                continue
            past = inputs.get(PAST_PREFIX + name.removeprefix(PRESENT_PREFIX))
            if past is None or past.shape is None or past.shape.rank() != 4:
                continue
            length = past.shape[2]
            text = length.value if isinstance(length, ir.SymbolicDim) else None
            if not text or not text.startswith(SLIDING_PREFIX):
                continue
            full = text.removeprefix(SLIDING_PREFIX)
            past.shape = _renamed(past.shape, text, full)
            present.shape = _renamed(present.shape, text, full)
            modified = True
        return ir.passes.PassResult(model, modified)
