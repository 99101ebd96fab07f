"""A cross-attention that reads keys and values kept per head (``[batch, heads, length,
head_size]``, an encoder-decoder model's cross cache) takes them as they are.

onnxscript's ``MultiHeadAttention`` rules take a 3-D key and value, so the fused node of a
cross-attention over a cache input is fed ``Reshape(Transpose(cache, [0, 2, 1, 3]), [0, 0,
-1])``: a copy of the whole encoder-length cache, each decoding step, for every layer.
ONNX Runtime's ``MultiHeadAttention`` also takes the key and value in that 4-D layout (its
cross-attention form, the one onnxruntime-genai's model builder writes for speech models), so the
transposes go and the node reads the cache directly; the result is the same.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern

__all__ = ["CrossAttentionOfHeadsCache"]

_HEADS_FIRST = [0, 2, 1, 3]


def _merges_heads(transposed: ir.Value, shape: ir.Value) -> bool:
    perm = transposed.producer().attributes.get_ints("perm") if transposed.producer() else None
    constant = ir.convenience.get_const_tensor(shape)
    merged = None if constant is None else [int(v) for v in constant.numpy().reshape(-1)]
    return list(perm or ()) == _HEADS_FIRST and merged == [0, 0, -1]


class CrossAttentionOfHeadsCache(pattern.RewriteRuleClassBase):
    """``MultiHeadAttention(q, merge(transpose(K)), merge(transpose(V)))`` with no past, bias
    or mask, K and V of ``[batch, num_heads, length, head_size]`` → ``MultiHeadAttention(q,
    K, V)`` with the same attributes."""

    def __init__(self) -> None:
        super().__init__("CrossAttentionOfHeadsCache")

    def pattern(
        self, op: Any, query: Any, key: Any, value: Any, key_shape: Any, value_shape: Any
    ) -> Any:
        key_t = op.Transpose(key, _outputs=["key_t"])
        value_t = op.Transpose(value, _outputs=["value_t"])
        return op.MultiHeadAttention(
            query,
            op.Reshape(key_t, key_shape),
            op.Reshape(value_t, value_shape),
            _domain="com.microsoft",
            _allow_other_attributes=True,
            _outputs=["attention"],
        )

    def check(
        self,
        context: Any,
        key: ir.Value,
        value: ir.Value,
        key_t: ir.Value,
        value_t: ir.Value,
        key_shape: ir.Value,
        value_shape: ir.Value,
        attention: ir.Value,
        **_: Any,
    ) -> Any:
        result = pattern.MatchResult()
        node = attention.producer()
        heads = node.attributes.get_int("num_heads") if node is not None else None
        for cache in (key, value):
            shape = cache.shape
            if shape is None or shape.rank() != 4 or shape[1] != heads:
                return result.fail(
                    "The key or value is not [batch, num_heads, length, head].", cache
                )
        if not (_merges_heads(key_t, key_shape) and _merges_heads(value_t, value_shape)):
            return result.fail("The key or value is not merged from its heads.", key)
        return result

    def rewrite(
        self,
        op: Any,
        query: ir.Value,
        key: ir.Value,
        value: ir.Value,
        attention: ir.Value,
        **_: Any,
    ) -> Any:
        attributes = {name: attr.value for name, attr in attention.producer().attributes.items()}
        return op.MultiHeadAttention(query, key, value, _domain="com.microsoft", **attributes)
