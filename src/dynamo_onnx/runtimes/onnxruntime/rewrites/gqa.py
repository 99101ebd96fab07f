"""onnxscript's ``GroupQueryAttention`` rule with its mask checked (onnxscript 0.7's accepts
any mask), in the ``Trilu`` form or the index form (``index_mask.py``), a sliding window
carried as ``local_window_size`` and the attention's ``scale`` and ``softcap`` kept."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.gqa import GroupQueryAttention, _causal_mask_pattern

from dynamo_onnx.onnx_tools.attention import keeps_last
from dynamo_onnx.runtimes.onnxruntime.rewrites.index_mask import index_mask_form

__all__ = ["GroupQueryAttentionOfIndexMask"]


def _window_cache_reason(past: ir.Value | None, window: int) -> str:
    """Why the cache of a layer whose keys start at an offset is not "the last
    ``window - 1`` tokens of the concatenation, as an output": empty when it is.

    Such a layer keeps only its window; GroupQueryAttention keeps the whole cache and
    masks by its window instead, so its present (the whole cache) replaces the slice."""
    if past is None:
        return "the layer has no past"
    concats = [u.node for u in past.uses() if u.node.op_type == "Concat" and u.idx == 0]
    if len(concats) != 1:
        return f"`{past.name}` is not concatenated with the new tokens once"
    slices = [u.node for u in concats[0].outputs[0].uses() if u.node.op_type == "Slice"]
    if len(slices) != 1 or not keeps_last(slices[0], window - 1):
        return f"the cache of `{past.name}` is not its last {window - 1} tokens"
    if not slices[0].outputs[0].is_graph_output():
        return f"the last {window - 1} tokens of `{past.name}` are not a graph output"
    return ""


class GroupQueryAttentionOfIndexMask(GroupQueryAttention):
    """onnxscript's ``GroupQueryAttention`` rule with its mask checked: the mask is
    onnxscript's ``Trilu`` form or the index form (:func:`index_mask_form`); a
    sliding window becomes GQA's ``local_window_size`` (both count the tokens a query
    attends to, itself included: ONNX Runtime's kernel and onnxruntime-genai's builder
    agree); the attention's scale
    (onnxscript's rule drops it) becomes GQA's ``scale``.

    A sliding-window layer that keeps only its window (its keys start at an offset, its
    present is the last ``window - 1`` tokens of the concatenation) fuses too: GQA's past
    and present are then the whole cache, and the slice of the window is left for the model
    family to replace by the present (its runtime step: the layer's cache contract changes
    from the window to the whole sequence, a convention of the family's runtime).

    onnxscript 0.7's rule accepts any mask: its check compares the causal-mask match with
    ``None``, and a failed match is a falsy ``MatchResult``, never ``None``. So a model whose
    attention is not causal (a prefix LM, a bidirectional decoder) would be fused into GQA's
    causal attention and compute something else; this rule runs instead of it.
    """

    def __init__(self) -> None:
        pattern.RewriteRuleClassBase.__init__(self, "GQAOfIndexMask", remove_nodes=False)
        self._window: int | None = None

    def check(self, context: Any, mask: ir.Value, **kwargs: Any) -> Any:
        result = super().check(context, mask=mask, **kwargs)
        if not result:
            return result
        head_size = kwargs["query_BSHDh"].shape[3] if kwargs["query_BSHDh"].shape else None
        if not isinstance(head_size, int) or head_size % 16:
            return pattern.MatchResult().fail(
                f"The head size is {head_size}: ONNX Runtime's GroupQueryAttention takes "
                "multiples of 16.",
                kwargs["query_BSHDh"],
            )
        producer = mask.producer()
        assert producer is not None  # onnxscript's check made sure
        if _causal_mask_pattern.match(
            context.model, context.graph_or_function, producer, check_nodes_are_removable=False
        ):
            self._window = None
            return pattern.MatchResult()
        form = index_mask_form(mask)
        if form.reason:
            return pattern.MatchResult().fail(f"The mask is not causal: {form.reason}.", mask)
        if form.offset:
            assert form.window is not None  # index_mask_form made sure
            for past in (kwargs.get("past_key"), kwargs.get("past_value")):
                reason = _window_cache_reason(past, form.window)
                if reason:
                    return pattern.MatchResult().fail(
                        f"The sliding-window cache is not one GroupQueryAttention keeps: {reason}.",
                        past,
                    )
        self._window = form.window
        return pattern.MatchResult()

    def rewrite(self, op: Any, **kwargs: Any) -> Any:
        outputs = super().rewrite(op, **kwargs)
        node = outputs[0].producer()
        if self._window is not None:
            node.attributes["local_window_size"] = ir.AttrInt64("local_window_size", self._window)
        for name in ("scale", "softcap"):
            number = _attention_attribute(kwargs["query_BHSDh_rope"], name)
            if number is not None:
                node.attributes[name] = ir.AttrFloat32(name, number)
        return outputs


def _attention_attribute(query: ir.Value, name: str) -> float | None:
    """A float attribute of the fused attention (onnxscript's ``SDPA``) that reads
    ``query``, or None when it is not set."""
    for use in query.uses():
        if use.node.op_type == "SDPA" and name in use.node.attributes:
            value = use.node.attributes[name].value
            return None if value is None else float(value)
    return None
