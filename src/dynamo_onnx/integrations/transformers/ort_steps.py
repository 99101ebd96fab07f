"""The rewrites transformers' models hand the fusions for ONNX Runtime (the family's
``runtime_steps``), each before the runtime's own step it must precede: Gemma 2's
soft-capped attention into the intermediate attention the GroupQueryAttention rule reads,
and back out where none took it; a sliding layer's present made its whole cache, then its
cache dimensions named as the full layers'."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir
from onnxscript.rewriter import pattern

from dynamo_onnx.integrations.base import RuntimeStep
from dynamo_onnx.integrations.transformers.softcap import (
    SoftcappedAttention,
    SoftcappedAttentionUnfused,
)
from dynamo_onnx.integrations.transformers.whole_cache import (
    WholeWindowCacheNames,
    make_window_caches_whole,
)

__all__ = ["onnxruntime_steps"]

#: The runtime's steps these run before: its attention fusions (onnxscript's ``sdpa``),
#: and the packing of a GroupQueryAttention's q, k and v, which follows its fusion.
_ATTENTION, _AFTER_GQA = "sdpa", "packed_qkv_for_gqa"


def _rules(rule: pattern.RewriteRule) -> Callable[[ir.Model], int]:
    rules = pattern.RewriteRuleSet([rule])
    return lambda model: int(rules.apply_to_model(model))


def _cache_names(model: ir.Model) -> int:
    return int(WholeWindowCacheNames()(model).modified)


def onnxruntime_steps() -> list[RuntimeStep]:
    """The family's steps for ONNX Runtime, in the order they run."""
    return [
        RuntimeStep("sdpa_softcap", _rules(SoftcappedAttention.rule()), before=_ATTENTION),
        RuntimeStep(
            "whole_window_cache",
            make_window_caches_whole,
            before=_AFTER_GQA,
            changes_outputs=True,
        ),
        RuntimeStep(
            "sdpa_softcap_unfused", _rules(SoftcappedAttentionUnfused.rule()), before=_AFTER_GQA
        ),
        RuntimeStep("whole_window_cache_names", _cache_names),
    ]
