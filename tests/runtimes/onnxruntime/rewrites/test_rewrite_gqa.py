"""GroupQueryAttentionOfIndexMask is onnxscript's rule with the mask checked."""

from __future__ import annotations

from dynamo_onnx.runtimes.onnxruntime.rewrites import GroupQueryAttentionOfIndexMask


def test_the_gqa_rule_is_onnxscripts_with_the_mask_checked():
    rule = GroupQueryAttentionOfIndexMask()
    assert rule.name == "GQAOfIndexMask"
    assert type(rule).__mro__[1].__name__ == "GroupQueryAttention"  # onnxscript's pattern
