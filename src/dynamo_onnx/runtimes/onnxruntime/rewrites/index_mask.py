"""An additive attention mask built from index arithmetic (``kv_idx <= q_idx``,
``attention_mask[batch_idx, kv_idx]``, ``kv_idx > q_idx - window``: ``LessOrEqual``,
``GatherND``, ``Greater``, joined by ``And``), as model libraries write it now, read into what
it computes: causal, with the padding of ``attention_mask``, and a sliding window or not.
onnxscript's ``GroupQueryAttention`` rule knows the ``Trilu``/``Range`` form only."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from dynamo_onnx.onnx_tools.constants import scalar

__all__ = ["MaskForm", "index_mask_form"]


@dataclasses.dataclass(frozen=True)
class MaskForm:
    """What an attention mask of the index form computes, or why it is not one.

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
        and scalar(node.inputs[0]) == 0
        and scalar(node.inputs[2]) == 1
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
    return node.op_type == "Range" and scalar(node.inputs[2]) == 1


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
    """Whether ``mask`` is an additive causal mask of the index form: ``Where(allowed, 0, min)``
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
    low_value = scalar(low)
    if (
        scalar(zero) != 0
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
        constant = scalar(leaf)
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
            size = scalar(shift.inputs[1]) if shift is not None and shift.op_type == "Sub" else None
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
