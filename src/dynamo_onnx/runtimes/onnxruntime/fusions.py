"""Optimizing an exported model for ONNX Runtime: onnxscript's ORT fusions, in their order,
with the rewrite rules of this package (``rewrites/``) beside onnxscript's and a model family's steps
(``RuntimeStep``) where the family places them, and the findings of what stayed unfused.

The sequence is ``onnxscript.rewriter.ort_fusions.fuse_xformers``'s, step for step: the
rotary cos/sin rule and the GQA rule of this package run right after onnxscript's own, so a
graph of the form onnxscript knows fuses as it does there.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxscript.optimizer
from onnxscript.rewriter import MatchingTracer, pattern, rewrite
from onnxscript.rewriter.ort_fusions import (
    ORT_PATTERN_REWRITE_RULES,
    shape_optimization,
)
from onnxscript.rewriter.ort_fusions.attention import fuse_attention
from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu
from onnxscript.rewriter.ort_fusions.cos_sin_cache import fuse_cos_sin_cache
from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
from onnxscript.rewriter.ort_fusions.gelu import fuse_gelu
from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
from onnxscript.rewriter.ort_fusions.rms_normalization import (
    fuse_rms_normalization,
    rms_normalization_rules,
)
from onnxscript.rewriter.ort_fusions.rotary_embedding import (
    fuse_partial_rotary_embedding,
    fuse_rotary_embedding,
)
from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa, sdpa_rules
from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha
from onnxscript.rewriter.ort_fusions.skip_normalization import (
    fuse_skip_layer_normalization,
    fuse_skip_rms_normalization,
)
from onnxscript.rewriter.rules.common import gemm_to_matmul_add_rule

from dynamo_onnx.onnx_tools.rule_roots import root_filtered
from dynamo_onnx.runtimes.onnxruntime.cross_cache import CrossAttentionOfHeadsCache
from dynamo_onnx.runtimes.onnxruntime.mha import mha_rewrites
from dynamo_onnx.runtimes.onnxruntime.packing import (
    PackedQKVOfSlices,
    PackedQKVOfSplit,
    pack_projections,
)
from dynamo_onnx.runtimes.onnxruntime.rewrites import (
    CosSinCacheOfProduct,
    GroupQueryAttentionOfIndexMask,
    SameShapeReshape,
)

if TYPE_CHECKING:
    from dynamo_onnx.integrations.base import RuntimeStep

__all__ = ["FUSED_OPS", "MatchFailure", "canonical_dims", "fuse", "op_counts"]

#: The ONNX Runtime operators a fusion makes, by the kind of block they replace.
FUSED_OPS: Mapping[str, tuple[str, ...]] = {
    "attention": ("GroupQueryAttention", "MultiHeadAttention", "Attention"),
    "rotary": ("RotaryEmbedding",),
    "norm": (
        "SimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "LayerNormalization",
        "SkipLayerNormalization",
    ),
}

Fusion = Callable[..., int]


@dataclasses.dataclass(frozen=True)
class MatchFailure:
    """Why a fusion did not apply to a block: onnxscript's matcher's reason at a node.

    Attributes:
        kind: the kind of block (a key of :data:`FUSED_OPS`).
        node: the node the match started from (its metadata says which module it is in).
        reason: the matcher's reason.
    """

    kind: str
    node: ir.Node
    reason: str


def op_counts(model: ir.Model) -> collections.Counter[str]:
    """Nodes of the main graph by op type."""
    return collections.Counter(node.op_type for node in model.graph)


def _rewrites(*rules: pattern.RewriteRule) -> Fusion:
    ruleset = pattern.RewriteRuleSet(list(rules))

    def apply(model: ir.Model, **kwargs: object) -> int:
        return int(ruleset.apply_to_model(model, **kwargs))  # type: ignore[arg-type]

    return apply


Step = tuple[str, Fusion, dict[str, object]]


def _steps(max_positions: int | None, family: Sequence[RuntimeStep] = ()) -> list[Step]:
    """``fuse_xformers``'s fusions in its order, with this package's rewrite rules where they belong
    and each of ``family``'s steps right before the step it names (in the family's order)."""
    steps = _own_steps(max_positions)
    for extra in family:
        names = [name for name, _, _ in steps]
        if extra.before not in names:
            raise ValueError(
                f"a family's step {extra.name!r} runs before {extra.before!r}, not a step"
            )
        steps.insert(names.index(extra.before), (extra.name, extra.run, {}))
    return steps


def _own_steps(max_positions: int | None) -> list[Step]:
    return [
        ("erf_gelu", fuse_erfgelu, {}),
        ("rms_normalization", fuse_rms_normalization, {}),
        ("skip_layer_normalization", fuse_skip_layer_normalization, {}),
        ("skip_rms_normalization", fuse_skip_rms_normalization, {}),
        ("rotary_embedding", fuse_rotary_embedding, {}),
        ("cos_sin_cache", fuse_cos_sin_cache, {}),
        ("cos_sin_cache_of_product", _rewrites(CosSinCacheOfProduct.rule(max_positions)), {}),
        ("cse", _cse, {}),
        ("partial_rotary_embedding", fuse_partial_rotary_embedding, {}),
        ("sdpa", fuse_sdpa, {"apply_shape_inference": True}),
        ("canonical_dims", canonical_dims, {}),
        ("same_shape_reshape", _same_shape_reshapes, {}),
        # onnxscript's GroupQueryAttention with its mask checked: rewrites/gqa.py
        ("gqa", _rewrites(GroupQueryAttentionOfIndexMask.rule()), {}),
        # onnxscript's fuse_qkv_gqa with the attention's attributes kept: packing.py
        ("packed_qkv_for_gqa", _rewrites(PackedQKVOfSlices.rule()), {}),
        (
            "mha1",
            _rewrites(*mha_rewrites(has_past_present=True).rules),
            {},
        ),  # mha.py: shape checked
        ("mha2", _rewrites(*mha_rewrites(has_past_present=False).rules), {}),
        ("mha_scale", fuse_mha_scale, {}),
        ("mha_bias", fuse_mha_bias, {"only_after_mha": True}),
        ("attention", fuse_attention, {"only_after_mha": True}),
        ("gelu", fuse_gelu, {}),
        ("bias_gelu", fuse_bias_gelu, {}),
        ("sdpa_via_mha", replace_sdpa_by_mha, {}),
        # after the attention fusions, whose patterns read q, k and v from MatMuls of their own
        ("packed_projections", pack_projections, {}),
        ("packed_qkv_of_split", _rewrites(PackedQKVOfSplit.rule()), {}),
    ]


def _same_shape_reshapes(model: ir.Model) -> int:
    count = _rewrites(SameShapeReshape.rule())(model)
    common_passes.IdentityEliminationPass()(model)
    return count


def _cse(model: ir.Model) -> int:
    """onnxscript runs it between the rotary fusions (0: it counts no fusion)."""
    common_passes.CommonSubexpressionEliminationPass()(model)
    return 0


def _before_fusing(model: ir.Model, optimizer: Callable[[ir.Model], None]) -> None:
    """What ``fuse_xformers`` does before fusing: shapes, folding, shape arithmetic."""
    common_passes.ShapeInferencePass()(model)
    optimizer(model)
    shape_optimization.rules.apply_to_model(model)
    optimizer(model)
    canonical_dims(model)


#: How sympy and ONNX's shape inference write an operator in a dimension's expression.
_OPERATORS = (" + ", " - ", "*", "//")


def canonical_dims(model: ir.Model) -> int:
    """Write every symbolic dimension that is an expression in one canonical form (sympy's),
    so that equal sizes compare equal; the number of values whose shape was rewritten.

    The export names ``past + new`` as sympy prints it (``past_sequence_length +
    sequence_length``); ONNX's shape inference, run between the fusions, writes the sum it
    computes in its operands' order (``sequence_length + past_sequence_length``). The
    matchers compare dimensions by their text: GroupQueryAttention's saw two sizes where
    there is one, and left some layers of a decoder unfused.
    """
    import sympy  # torch's dependency; only needed here

    seen: dict[str, str] = {}
    count = 0
    values = [*model.graph.inputs, *(o for node in model.graph for o in node.outputs)]
    for value in values:
        if value.shape is None:
            continue
        dims = list(value.shape)
        changed = False
        for i, dim in enumerate(dims):
            text = dim.value if isinstance(dim, ir.SymbolicDim) else None
            if not text or not any(op in text for op in _OPERATORS):
                continue  # a name (a user's `batch-size` is not a difference)
            if text not in seen:
                try:
                    seen[text] = str(sympy.sympify(text))
                except (sympy.SympifyError, SyntaxError, TypeError):
                    seen[text] = text
            if seen[text] != text:
                dims[i] = ir.SymbolicDim(seen[text])
                changed = True
        if changed:
            value.shape = ir.Shape(dims)
            count += 1
    return count


def fuse(
    model: ir.Model,
    *,
    max_positions: int | None = None,
    optimizer: Callable[[ir.Model], None] = onnxscript.optimizer.optimize,
    failures: list[MatchFailure] | None = None,
    family: Sequence[RuntimeStep] = (),
) -> dict[str, int]:
    """Fuse ``model`` in place for ONNX Runtime; the count of each fusion applied.

    ``max_positions`` is the number of rows of the rotary cos/sin caches (the model's
    ``max_position_embeddings``); ``optimizer`` runs between the steps. Into
    ``failures`` go the matcher's reasons where a block's fusion did not apply (normalization,
    rotary, attention), traced right after the step that would have fused it. ``family``:
    the model family's steps placed among the fusions (those with a ``before``).
    """
    rewrite(model, [gemm_to_matmul_add_rule])
    _before_fusing(model, optimizer)
    counts: dict[str, int] = {}
    for name, step, options in _steps(max_positions, family):
        kwargs = dict(options)
        if kwargs.pop("only_after_mha", False) and not (counts["mha1"] or counts["mha2"]):
            counts[name] = 0
            continue
        counts[name] = step(model, **kwargs)
        if failures is not None and name in _TRACED:
            kind, rules, left = _TRACED[name]
            if any(left(node) for node in model.graph):
                failures.extend(match_failures(model, kind, rules()))
    optimizer(model)  # inlines the intermediate fusion functions no fusion consumed
    rewrite(model, root_filtered(ORT_PATTERN_REWRITE_RULES))  # the same rules, sooner
    # on the fused nodes the optimizer just inlined: a cross-attention reads its
    # [batch, heads, length, head] cache as it is (cross_cache.py)
    counts["cross_attention_cache"] = _rewrites(CrossAttentionOfHeadsCache.rule())(model)
    ir.passes.Sequential(
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=1),
        common_passes.RemoveInitializersFromInputsPass(),
        common_passes.ShapeInferencePass(),
    )(model)
    return counts


def match_failures(
    model: ir.Model, kind: str, rules: Iterable[pattern.RewriteRule]
) -> list[MatchFailure]:
    """Why ``rules`` fail on ``model``, as onnxscript's tracer records it: the best partial
    matches, their root node and the matcher's reason. Changes nothing."""
    tracer = MatchingTracer()
    pattern.RewriteRuleSet(list(rules)).apply_to_model(model, tracer=tracer)
    return [
        MatchFailure(kind, match.root_node, str(match.match_result.reason or "no match"))
        for matches in tracer.best_matches_map.values()
        for match in matches
        if not match.match_result
    ]


def _is(op_type: str, domain: str = "") -> Callable[[ir.Node], bool]:
    return lambda node: node.op_type == op_type and node.domain == domain


#: The steps whose failures are traced: (kind, the rules, what an unfused block leaves).
_TRACED: dict[str, tuple[str, Callable[[], list[pattern.RewriteRule]], Callable[[ir.Node], bool]]]
_TRACED = {
    "rms_normalization": ("norm", lambda: list(rms_normalization_rules), _is("ReduceMean")),
    "sdpa": ("attention", lambda: list(sdpa_rules.rules), _is("Softmax")),
    "cos_sin_cache_of_product": (
        "rotary",
        lambda: [CosSinCacheOfProduct.rule()],
        _is("RotaryEmbedding", "ai.onnxruntime._fusion"),
    ),
    "gqa": (
        "attention",
        lambda: [GroupQueryAttentionOfIndexMask.rule()],
        _is("SDPA", "ai.onnxruntime._fusion"),
    ),
}
