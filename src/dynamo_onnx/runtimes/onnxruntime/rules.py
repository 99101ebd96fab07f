"""Rewrite rules, in onnxscript's form, for the graphs torch.export makes from transformers 5.x
that onnxscript's ORT fusions do not know yet.

Two forms differ from what onnxscript's matchers expect:

- the rotary cos/sin: transformers 5 computes ``position_ids[:, :, None].float() * inv_freq``
  (a ``Mul``), where onnxscript's ``CosSinCache`` expects the older
  ``(inv_freq @ position_ids).transpose(1, 2)`` (a ``MatMul`` and a ``Transpose``);
- the attention mask: transformers 5 builds it from index arithmetic (``kv_idx <= q_idx``,
  ``attention_mask[batch_idx, kv_idx]``, ``kv_idx > q_idx - window``: ``LessOrEqual``,
  ``GatherND``, ``Greater``, joined by ``And``) where onnxscript's ``GroupQueryAttention``
  expects the ``Trilu``/``Range`` form of transformers 4.

Each rule is a :class:`onnxscript.rewriter.pattern.RewriteRuleClassBase`; the GQA rule is
onnxscript's own with its mask checked (onnxscript 0.7's accepts any mask), in either form.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.gqa import GroupQueryAttention, _causal_mask_pattern

__all__ = [
    "CosSinCacheOfProduct",
    "SameShapeReshape",
    "GroupQueryAttentionOfIndexMask",
    "WholeCacheOfWindowedAttention",
    "SoftcappedAttention",
    "SoftcappedAttentionUnfused",
    "whole_cache_shapes",
    "MaskForm",
    "index_mask_form",
]


def _ints(value: ir.Value | None) -> list[int] | None:
    constant = None if value is None else ir.convenience.get_const_tensor(value)
    return None if constant is None else [int(v) for v in constant.numpy().reshape(-1)]


def _scalar(value: ir.Value | None) -> float | None:
    constant = None if value is None else ir.convenience.get_const_tensor(value)
    if constant is None or constant.size != 1:
        return None
    return float(constant.numpy().reshape(-1)[0])


class CosSinCacheOfProduct(pattern.RewriteRuleClassBase):
    """``RotaryEmbedding(x, cos, sin)`` whose cos/sin are computed from
    ``position_ids[:, :, None].float() * inv_freq`` becomes ONNX Runtime's
    ``com.microsoft.RotaryEmbedding(x, position_ids, cos_cache, sin_cache)``.

    The caches hold ``max_positions`` rows (constants, shared by every layer with the same
    ``inv_freq``), as onnxruntime-genai's builder writes them; without ``max_positions``
    they are computed in the graph up to the largest position id, as onnxscript does.
    """

    def __init__(self, max_positions: int | None = None) -> None:
        super().__init__("CosSinCacheOfProduct", remove_nodes=False)
        self._max_positions = max_positions
        self._caches: dict[int, tuple[ir.Value, ir.Value]] = {}

    def cleanup(self) -> None:
        self._caches.clear()

    def pattern(self, op: Any, x: Any, inv_freq: Any, position_ids: Any, axes: Any) -> Any:
        positions = op.Cast(op.Unsqueeze(position_ids, axes), to=ir.DataType.FLOAT)
        freqs = op.Mul(positions, inv_freq)
        emb = op.Concat(freqs, freqs, axis=-1)
        cos = op.Unsqueeze(op.Cos(emb), [1])
        sin = op.Unsqueeze(op.Sin(emb), [1])
        return op.RotaryEmbedding(
            x,
            cos,
            sin,
            interleaved=0,
            _allow_other_attributes=True,
            _domain="ai.onnxruntime._fusion",
            _outputs=["rotated"],
        )

    def check(
        self, context: Any, inv_freq: ir.Value, position_ids: ir.Value, axes: ir.Value, **_: Any
    ) -> Any:
        result = pattern.MatchResult()
        if position_ids.shape is None or position_ids.shape.rank() != 2:
            return result.fail("position_ids is not of rank 2 ([batch, sequence]).", position_ids)
        if _ints(axes) not in ([2], [-1]):
            return result.fail("position_ids is not unsqueezed on its last axis.", axes)
        frequencies = ir.convenience.get_const_tensor(inv_freq)
        if frequencies is None or len(frequencies.shape) != 1:
            return result.fail("inv_freq is not a constant vector.", inv_freq)
        return result

    def rewrite(
        self,
        op: Any,
        x: ir.Value,
        inv_freq: ir.Value,
        position_ids: ir.Value,
        rotated: ir.Value,
        **_: Any,
    ) -> Any:
        key = id(inv_freq)
        if key not in self._caches:
            self._caches[key] = self._cos_sin(op, inv_freq, position_ids)
        cos, sin = self._caches[key]
        attributes = {k: v.value for k, v in rotated.producer().attributes.items()}  # type: ignore[union-attr]
        return op.RotaryEmbedding(x, position_ids, cos, sin, **attributes, _domain="com.microsoft")

    def _cos_sin(self, op: Any, inv_freq: ir.Value, position_ids: ir.Value) -> tuple[Any, Any]:
        frequencies = ir.convenience.get_const_tensor(inv_freq)
        assert frequencies is not None  # check() made sure
        values = frequencies.numpy().astype(np.float32).reshape(1, -1)
        if self._max_positions is not None:
            angles = np.arange(self._max_positions, dtype=np.float32).reshape(-1, 1) @ values
            return (
                op.Constant(value=ir.tensor(np.cos(angles), name=f"cos_cache_{values.shape[1]}")),
                op.Constant(value=ir.tensor(np.sin(angles), name=f"sin_cache_{values.shape[1]}")),
            )
        count = op.Add(op.ReduceMax(position_ids, keepdims=0), op.Constant(value_int=1))
        rows = op.Cast(
            op.Reshape(
                op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1)),
                op.Constant(value_ints=[-1, 1]),
            ),
            to=ir.DataType.FLOAT,
        )
        angles = op.MatMul(rows, op.Constant(value=ir.tensor(values)))
        return op.Cos(angles), op.Sin(angles)


class SameShapeReshape(pattern.RewriteRuleClassBase):
    """A ``Reshape`` whose result has its input's shape, dimension for dimension (sizes or
    the same symbolic names), is its input. torch_lib's attention leaves one after the
    attention product (``[B, H, S, Dh]`` to ``[B, -1, S, Dh]``): it sits between the
    attention and the transposes GroupQueryAttention's pattern expects."""

    def __init__(self) -> None:
        super().__init__("SameShapeReshape")

    def pattern(self, op: Any, x: Any, shape: Any) -> Any:
        return op.Reshape(x, shape, _allow_other_attributes=True, _outputs=["reshaped"])

    def check(self, context: Any, x: ir.Value, reshaped: ir.Value, **_: Any) -> Any:
        result = pattern.MatchResult()
        before, after = x.shape, reshaped.shape
        if before is None or after is None or before.rank() != after.rank():
            return result.fail("The shapes are unknown or of different ranks.", x)
        for old, new in zip(before, after):
            if isinstance(old, int) != isinstance(new, int) or (
                not isinstance(old, int) and (old.value is None or old.value != new.value)
            ):
                return result.fail("A dimension is unknown or differs.", x)
            if isinstance(old, int) and old != new:
                return result.fail("A dimension differs.", x)
        return result

    def rewrite(self, op: Any, x: ir.Value, **_: Any) -> Any:
        return op.Identity(x)


@dataclasses.dataclass(frozen=True)
class MaskForm:
    """What an attention mask of transformers 5's index form computes, or why it is not one.

    Attributes:
        reason: why the mask is not of the form (empty when it is).
        window: the number of tokens a sliding-window mask keeps (``kv > q - window``), or
            None for a full causal mask.
        offset: whether the key positions start at an offset (``arange(n) + offset``): the
            keys are the last ``n`` tokens of the sequence, as a cache that keeps only its
            window holds them; only with a window.
    """

    reason: str = ""
    window: int | None = None
    offset: bool = False


def _through(value: ir.Value | None, *op_types: str) -> ir.Value | None:
    """``value`` with its producers of ``op_types`` (first input) walked back."""
    while value is not None and value.producer() is not None:
        node = value.producer()
        assert node is not None
        if node.op_type not in op_types or not node.inputs:
            break
        value = node.inputs[0]
    return value


def _is_range_from_zero(value: ir.Value | None) -> bool:
    node = None if value is None else value.producer()
    return (
        node is not None
        and node.op_type == "Range"
        and _scalar(node.inputs[0]) == 0
        and _scalar(node.inputs[2]) == 1
    )


def _key_positions(value: ir.Value | None) -> str | None:
    """``"start"`` for ``arange(total)`` unsqueezed to ``[1, 1, 1, T]``, ``"offset"`` for
    ``arange(n) + offset`` (the last ``n`` positions), None for anything else."""
    source = _through(value, "Unsqueeze")
    if _is_range_from_zero(source):
        return "start"
    node = None if source is None else source.producer()
    if node is not None and node.op_type == "Add" and any(map(_is_range_from_zero, node.inputs)):
        return "offset"
    return None


def _is_query_positions(value: ir.Value | None) -> bool:
    """``arange(new) + past`` unsqueezed to ``[1, 1, S, 1]`` (or ``Range(past, total)``)."""
    source = _through(value, "Unsqueeze")
    node = None if source is None else source.producer()
    if node is None:
        return False
    if node.op_type == "Add":
        return any(_is_range_from_zero(v) for v in node.inputs)
    return node.op_type == "Range" and _scalar(node.inputs[2]) == 1


def _is_padding(value: ir.Value | None) -> bool:
    """Whether ``value`` is graph input ``attention_mask`` itself, cast, reshaped or gathered
    at the key positions (``attention_mask[batch_idx, kv_idx]``), and nothing else."""
    value = _through(value, "Unsqueeze", "Cast", "Expand", "Reshape", "GatherND")
    return value is not None and value.is_graph_input() and value.name == "attention_mask"


def _leaves(value: ir.Value) -> list[ir.Value]:
    """The operands of a tree of ``And`` nodes."""
    node = value.producer()
    if node is None or node.op_type != "And":
        return [value]
    return [leaf for operand in node.inputs if operand is not None for leaf in _leaves(operand)]


def index_mask_form(mask: ir.Value) -> MaskForm:
    """Whether ``mask`` is transformers 5's additive causal mask: ``Where(allowed, 0, min)``
    with ``allowed`` the conjunction of ``kv_idx <= q_idx``, the padding
    ``attention_mask[batch, kv_idx]`` and, for a sliding window, ``kv_idx > q_idx - w``.

    GroupQueryAttention computes exactly that from the sequence lengths, provided the
    ``attention_mask`` marks each row's tokens from the start (no holes), as
    onnxruntime-genai feeds it.
    """
    node = mask.producer()
    if node is None or node.op_type != "Where" or len(node.inputs) != 3:
        return MaskForm("the mask is not computed by a Where(allowed, 0, min)")
    allowed, zero, low = node.inputs
    low_value = _scalar(low)
    if (
        _scalar(zero) != 0
        or low_value is None
        or not (np.isneginf(low_value) or low_value <= np.finfo(np.float32).min)
    ):
        return MaskForm("the mask is not Where(allowed, 0, the dtype's minimum)")
    assert allowed is not None
    causal = padding = False
    window: int | None = None
    starts: set[str] = set()
    for leaf in _leaves(_through(allowed, "Expand") or allowed):
        producer = leaf.producer()
        constant = _scalar(leaf)
        if constant is not None:
            if not constant:
                return MaskForm("the mask is a constant False")
            continue
        if producer is None:
            return MaskForm(f"the mask reads `{leaf.name}` directly")
        inputs = producer.inputs
        keys = _key_positions(inputs[0]) if producer.op_type in ("LessOrEqual", "Greater") else None
        if keys is not None:
            starts.add(keys)
        if producer.op_type == "LessOrEqual" and keys is not None:
            if not _is_query_positions(inputs[1]):
                return MaskForm("the causal test does not compare with the query positions")
            causal = True
        elif producer.op_type == "Greater" and keys is not None:
            shift = inputs[1].producer() if inputs[1] is not None else None
            size = (
                _scalar(shift.inputs[1]) if shift is not None and shift.op_type == "Sub" else None
            )
            if size is None or shift is None or not _is_query_positions(shift.inputs[0]):
                return MaskForm("the sliding-window test is not kv_idx > q_idx - window")
            window = int(size)
        elif _is_padding(leaf):
            padding = True
        else:
            return MaskForm(f"the mask also tests `{producer.op_type}` ({leaf.name})")
    if not causal:
        return MaskForm("the mask has no causal test (kv_idx <= q_idx)")
    if not padding:
        return MaskForm("the mask does not read the graph input `attention_mask`")
    if len(starts) > 1:
        return MaskForm("the causal and window tests see the keys at different positions")
    if "offset" in starts and window is None:
        return MaskForm("the key positions start at an offset, without a sliding window")
    return MaskForm(window=window, offset="offset" in starts)


def _ints_or_none(value: ir.Value | None) -> list[int] | None:
    return None if value is None else _ints(value)


def keeps_last(node: ir.Node, count: int) -> bool:
    """Whether ``node`` is a ``Slice`` keeping the last ``count`` positions of axis 2 of a
    ``[batch, heads, positions, head_size]`` tensor (``x[:, :, -count:, :]``)."""
    if node.op_type != "Slice" or node.domain != "" or len(node.inputs) < 3:
        return False
    starts, ends = _ints(node.inputs[1]), _ints(node.inputs[2])
    axes = _ints_or_none(node.inputs[3]) if len(node.inputs) > 3 else [0]  # Slice's default
    steps = _ints_or_none(node.inputs[4]) if len(node.inputs) > 4 else None
    return (
        starts == [-count]
        and ends is not None
        and len(ends) == 1
        and ends[0] >= 2**31 - 1
        and axes in ([2], [-2])
        and steps in (None, [1])
    )


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
    onnxscript's ``Trilu`` form or transformers 5's index form (:func:`index_mask_form`); a
    sliding window becomes GQA's ``local_window_size`` (both count the tokens a query
    attends to, itself included: ONNX Runtime's kernel and onnxruntime-genai's builder
    agree); the attention's scale
    (onnxscript's rule drops it) becomes GQA's ``scale``.

    A sliding-window layer that keeps only its window (its keys start at an offset, its
    present is the last ``window - 1`` tokens of the concatenation) fuses too: GQA's past
    and present are then the whole cache, and :class:`WholeCacheOfWindowedAttention`
    makes its present the output in place of the slice (the layer's cache contract
    changes from the window to the whole sequence, onnxruntime-genai's).

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


class WholeCacheOfWindowedAttention(pattern.RewriteRuleClassBase):
    """The last ``local_window_size - 1`` tokens of a windowed ``GroupQueryAttention``'s
    present, as a graph output, become its whole present.

    What :class:`GroupQueryAttentionOfIndexMask` leaves of a layer whose cache kept only its
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
        node = cache.producer()
        if (
            node is None
            or node.op_type != "GroupQueryAttention"
            or node.domain != "com.microsoft"
            or cache.index() not in (1, 2)
        ):
            return result.fail("The slice is not of a GroupQueryAttention's present.", cache)
        window = node.attributes.get_int("local_window_size", -1)
        slice_node = kept.producer()
        assert slice_node is not None
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
        if (
            node is None
            or node.op_type != "GroupQueryAttention"
            or node.attributes.get_int("local_window_size", -1) <= 0
            or value.index() not in (1, 2)
        ):
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


#: The domain of onnxscript's intermediate fusion ops (``SDPA``), consumed by later fusions.
_FUSION_DOMAIN = "ai.onnxruntime._fusion"


class SoftcappedAttention(pattern.RewriteRuleClassBase):
    """Attention whose scores are soft-capped, ``softmax(cap * tanh(q k^T * scale / cap) +
    mask) v`` (Gemma 2's ``attn_logit_softcapping``), becomes onnxscript's intermediate
    ``SDPA`` with ``scale`` and ``softcap`` attributes: GroupQueryAttention has both, and
    :class:`GroupQueryAttentionOfIndexMask` carries them over. Where no GroupQueryAttention
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
        if _scalar(scale) is None:
            return result.fail("The scale is not a constant.", scale)
        limit = _scalar(cap)
        if limit is None or limit <= 0 or _scalar(cap2) != limit:
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
            scale=_scalar(scale),
            softcap=_scalar(cap),
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
