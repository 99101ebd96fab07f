"""What transformers' sliding-window layers become once fused for ONNX Runtime: a layer
that kept only its window (its present the last ``window - 1`` tokens of the
concatenation) is one GroupQueryAttention with ``local_window_size``, which keeps the whole
cache and masks by its window. Its present (the whole cache) becomes the output in place of
the slice, with the shape of the whole cache (:class:`WholeCacheOfWindowedAttention`,
:func:`whole_cache_shapes`), and its cache dimensions take the full layers' names
(:class:`WholeWindowCacheNames`): the layer's cache contract changes from the window to the
whole sequence, onnxruntime-genai's (DO510).

The export names a sliding layer's past length apart, ``sliding_<past>``
(``dynamic_shapes.py``): it holds at most ``window - 1`` tokens. Made whole, the layer's
past and present are the same length as a full-attention layer's, so the model's inputs say
that every layer's past has one length (as onnxruntime-genai feeds it).
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript.rewriter import pattern

from dynamo_onnx.onnx_tools.attention import keeps_last, local_window, windowed_present

__all__ = [
    "SLIDING_PREFIX",
    "WholeCacheOfWindowedAttention",
    "WholeWindowCacheNames",
    "make_window_caches_whole",
    "whole_cache_shapes",
]

#: The names of a cache's inputs and outputs (``past_key_values.0.key``, ``present.0.key``).
PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."

#: The prefix of a sliding-window layer's past length (``dynamic_shapes._past_name``).
SLIDING_PREFIX = "sliding_"


class WholeCacheOfWindowedAttention(pattern.RewriteRuleClassBase):
    """The last ``local_window_size - 1`` tokens of a windowed ``GroupQueryAttention``'s
    present, as a graph output, become its whole present.

    What the runtime's GroupQueryAttention rule leaves of a layer whose cache kept only its
    window: GQA writes the new tokens into its past's buffer and masks by its window, so its
    past and present are the whole cache (the layer then reads the whole sequence's past,
    as onnxruntime-genai feeds every layer); the slice would hand back a window where the
    next step needs the whole cache.
    """

    def __init__(self) -> None:
        super().__init__("WholeCacheOfWindowedAttention")

    def pattern(self, op: Any, cache: Any, starts: Any, ends: Any) -> Any:
        return op.Slice(cache, starts, ends, _allow_other_inputs=True, _outputs=["kept"])

    def check(self, context: Any, cache: ir.Value, kept: ir.Value, **_: Any) -> Any:
        result = pattern.MatchResult()
        if not windowed_present(cache):
            return result.fail(
                "The slice is not of a windowed GroupQueryAttention's present.", cache
            )
        window = local_window(cache.producer())
        slice_node = kept.producer()
        assert window is not None and slice_node is not None
        if window <= 1 or not keeps_last(slice_node, window - 1):
            return result.fail("The slice does not keep the attention's window.", kept)
        if not kept.is_graph_output():
            return result.fail("The window is not a graph output.", kept)
        return result

    def rewrite(self, op: Any, cache: ir.Value, **_: Any) -> Any:
        return op.Identity(cache)


def whole_cache_shapes(model: ir.Model) -> None:
    """Give each windowed ``GroupQueryAttention``'s present that is a graph output the shape
    of its whole cache, ``[batch, heads, past + new, head_size]`` (the slice it replaced
    declared the window's length)."""
    for value in model.graph.outputs:
        node = value.producer()
        if node is None or not windowed_present(value):
            continue
        past = node.inputs[2 + value.index()]
        # the new tokens' length from the value input (the query and key may be normalized
        # by nodes the fusion made, whose shapes are not inferred)
        new = next(
            (v.shape[1] for v in (node.inputs[2], node.inputs[0]) if v is not None and v.shape),
            None,
        )
        if past is None or past.shape is None or new is None:
            continue
        batch, heads, length, size = past.shape
        total = f"{length} + {new}"
        value.shape = ir.Shape([batch, heads, ir.SymbolicDim(total), size])


def make_window_caches_whole(model: ir.Model) -> int:
    """:class:`WholeCacheOfWindowedAttention` on ``model``, the identities it leaves
    removed and the presents given their whole shape; the number of slices replaced."""
    count = int(
        pattern.RewriteRuleSet([WholeCacheOfWindowedAttention.rule()]).apply_to_model(model)
    )
    common_passes.IdentityEliminationPass()(model)
    whole_cache_shapes(model)
    return count


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
            if not name.startswith(PRESENT_PREFIX) or not windowed_present(present):
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
