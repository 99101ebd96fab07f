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
    """

    reason: str = ""
    window: int | None = None


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


def _is_key_positions(value: ir.Value | None) -> bool:
    """``arange(total)`` unsqueezed to ``[1, 1, 1, T]``."""
    return _is_range_from_zero(_through(value, "Unsqueeze"))


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
        if producer.op_type == "LessOrEqual" and _is_key_positions(inputs[0]):
            if not _is_query_positions(inputs[1]):
                return MaskForm("the causal test does not compare with the query positions")
            causal = True
        elif producer.op_type == "Greater" and _is_key_positions(inputs[0]):
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
    return MaskForm(window=window)


class GroupQueryAttentionOfIndexMask(GroupQueryAttention):
    """onnxscript's ``GroupQueryAttention`` rule with its mask checked: the mask is
    onnxscript's ``Trilu`` form or transformers 5's index form (:func:`index_mask_form`); a
    sliding window becomes GQA's ``local_window_size`` (GQA attends to
    ``local_window_size + 1`` tokens, the window to ``window``).

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
        self._window = form.window
        return pattern.MatchResult()

    def rewrite(self, op: Any, **kwargs: Any) -> Any:
        outputs = super().rewrite(op, **kwargs)
        if self._window is not None:
            node = outputs[0].producer()
            node.attributes["local_window_size"] = ir.AttrInt64(
                "local_window_size", self._window - 1
            )
        return outputs
