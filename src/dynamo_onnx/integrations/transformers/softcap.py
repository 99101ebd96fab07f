"""Gemma 2's soft-capped attention (``attn_logit_softcapping``): ``softmax(cap * tanh(q k^T *
scale / cap) + mask) v``, which ONNX Runtime's GroupQueryAttention computes with its
``softcap`` attribute. Two rewrite rules the family hands to the fusions for ONNX Runtime
(``runtime_steps``): one into onnxscript's intermediate ``SDPA`` with ``scale`` and
``softcap`` before the attention fusions, one back out where no GroupQueryAttention took it
(onnxscript's other attention fusions have no soft cap)."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern

from dynamo_onnx.onnx_tools.constants import scalar

__all__ = ["SoftcappedAttention", "SoftcappedAttentionUnfused"]

#: The domain of onnxscript's intermediate fusion ops (``SDPA``), consumed by later fusions.
_FUSION_DOMAIN = "ai.onnxruntime._fusion"


class SoftcappedAttention(pattern.RewriteRuleClassBase):
    """Attention whose scores are soft-capped, ``softmax(cap * tanh(q k^T * scale / cap) +
    mask) v`` (Gemma 2's ``attn_logit_softcapping``), becomes onnxscript's intermediate
    ``SDPA`` with ``scale`` and ``softcap`` attributes: GroupQueryAttention has both, and
    the runtime's GroupQueryAttention rule carries them over. Where no GroupQueryAttention
    takes it, :class:`SoftcappedAttentionUnfused` writes it back out (onnxscript's other
    attention fusions have no soft cap)."""

    def __init__(self) -> None:
        super().__init__("SoftcappedAttention")

    def pattern(
        self, op: Any, query: Any, key: Any, value: Any, mask: Any, scale: Any, cap: Any, cap2: Any
    ) -> Any:
        scores = op.Mul(op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2])), scale)
        capped = op.Mul(op.Tanh(op.Div(scores, cap)), cap2)
        weights = op.Softmax(op.Add(capped, mask), axis=-1)
        return op.MatMul(weights, value)

    def check(self, context: Any, scale: ir.Value, cap: ir.Value, cap2: ir.Value, **_: Any) -> Any:
        result = pattern.MatchResult()
        if scalar(scale) is None:
            return result.fail("The scale is not a constant.", scale)
        limit = scalar(cap)
        if limit is None or limit <= 0 or scalar(cap2) != limit:
            return result.fail("The soft cap is not one positive constant.", [cap, cap2])
        return result

    def rewrite(
        self,
        op: Any,
        query: ir.Value,
        key: ir.Value,
        value: ir.Value,
        mask: ir.Value,
        scale: ir.Value,
        cap: ir.Value,
        **_: Any,
    ) -> Any:
        return op.SDPA(
            query,
            key,
            value,
            mask,
            scale=scalar(scale),
            softcap=scalar(cap),
            key_format="BHSd",
            _domain=_FUSION_DOMAIN,
        )


class SoftcappedAttentionUnfused(pattern.RewriteRuleClassBase):
    """A soft-capped ``SDPA`` (:class:`SoftcappedAttention`) that no GroupQueryAttention
    took, computed again as it was: onnxscript's ``MultiHeadAttention`` fusion would drop
    its soft cap."""

    def __init__(self) -> None:
        super().__init__("SoftcappedAttentionUnfused")

    def pattern(self, op: Any, query: Any, key: Any, value: Any, mask: Any) -> Any:
        return op.SDPA(
            query,
            key,
            value,
            mask,
            _domain=_FUSION_DOMAIN,
            _allow_other_attributes=True,
            _outputs=["attention"],
        )

    def check(self, context: Any, attention: ir.Value, **_: Any) -> Any:
        node = attention.producer()
        assert node is not None
        if node.attributes.get_float("softcap", 0.0) <= 0:
            return pattern.MatchResult().fail("The attention has no soft cap.", attention)
        return pattern.MatchResult()

    def rewrite(
        self, op: Any, query: ir.Value, key: ir.Value, value: ir.Value, mask: ir.Value, **kw: Any
    ) -> Any:
        node = kw["attention"].producer()
        scale = node.attributes.get_float("scale", 0.0)
        cap = op.Constant(value_float=node.attributes.get_float("softcap", 0.0))
        scores = op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2]))
        if scale:
            scores = op.Mul(scores, op.Constant(value_float=scale))
        else:  # SDPA's default: 1/sqrt(head size)
            size = op.Cast(op.Shape(query, start=-1), to=ir.DataType.FLOAT)
            scores = op.Div(scores, op.Sqrt(size))
        capped = op.Mul(op.Tanh(op.Div(scores, cap)), cap)
        return op.MatMul(op.Softmax(op.Add(capped, mask), axis=-1), value)
