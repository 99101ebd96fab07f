"""onnxscript's MultiHeadAttention fusion with the shape of what it replaces checked.

onnxscript 0.7's ``MultiHeadAttention`` rule replaces ``SDPA -> Transpose -> Reshape`` by a
``MultiHeadAttention`` node, whose output is ``(batch, sequence, hidden)``, without checking
the ``Reshape``'s target (its ``check`` leaves it as a TODO). When the model flattens the
attention's output for a ``Gemm`` (a ``Conv1D`` layer: ``view(-1, hidden)`` then ``addmm``),
the optimizer has merged the two reshapes into one to ``(batch * sequence, hidden)``, and the
fused node hands the ``Gemm`` a 3-D tensor: a model ONNX Runtime refuses. The rule here is
onnxscript's, with that ``Reshape`` required to give the fused node's shape.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.mha import MultiHeadAttention

__all__ = ["MultiHeadAttentionOfItsShape", "mha_rewrites"]


class MultiHeadAttentionOfItsShape(MultiHeadAttention):
    """onnxscript's ``MultiHeadAttention`` rule, matching only where the ``Reshape`` it
    replaces gives ``(batch, sequence, hidden)`` like the query: the fused node's shape."""

    def check(  # type: ignore[override]
        self, op: Any, attention_reshaped: ir.Value | None = None, **bindings: Any
    ) -> pattern.MatchResult:
        result = super().check(op, **bindings)
        if not result:
            return result
        query = bindings.get("query_BSD")
        got = None if attention_reshaped is None else attention_reshaped.shape
        want = None if query is None else query.shape
        if got is None or want is None or got.rank() != 3 or list(got)[:2] != list(want)[:2]:
            return result.fail(
                f"The attention's output is reshaped to {got}, not to (batch, sequence, "
                f"hidden) {want}: MultiHeadAttention would give it another shape",
                attention_reshaped,
            )
        return result


def mha_rewrites(has_past_present: bool) -> pattern.RewriteRuleSet:
    """onnxscript's ``mha_rules_with_past`` (``has_past_present``) or ``mha_rules_no_past``,
    the same rules in the same order, made of :class:`MultiHeadAttentionOfItsShape`."""
    rules = [
        MultiHeadAttentionOfItsShape.rule(
            "MHA"
            + ("_Rotary" if rotary else "")
            + ("_Past" if has_past_present else "")
            + ("_CrossAttention" if cross else ""),
            is_rotary=rotary,
            has_past_present=has_past_present,
            is_cross_attention=cross,
        )
        for rotary in (False, True)
        for cross in ((False,) if has_past_present else (False, True))
    ]
    return pattern.RewriteRuleSet(rules)
