"""``embedding_bag`` without a loop: each index's bag as a membership matrix, then one
``Einsum`` (sum, mean) or a masked ``ReduceMax`` (max).

torch_lib's function builds the bags one by one (``SequenceEmpty``, a ``Loop`` of
``SequenceInsert``, ``ConcatFromSequence``). With the indices' shape static (the default of
``dynamo_export``), ONNX Runtime's graph optimizations fold the loop's inputs to constants
and the process segfaults when the model runs (it runs with optimizations disabled). The
membership matrix has no loop and no sequence, and costs one ``[indices, bags]`` mask.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

__all__ = ["embedding_bag"]

_SUM, _MEAN, _MAX = 0, 1, 2


def embedding_bag(
    weight: TFloat,
    indices: INT64,
    offsets: INT64,
    scale_grad_by_freq: bool = False,
    mode: int = _SUM,
    sparse: bool = False,
    per_sample_weights: TFloat | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> tuple[TFloat, INT64, INT64, INT64]:
    """embedding_bag.padding_idx(Tensor weight, Tensor indices, Tensor offsets, bool
    scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, bool
    include_last_offset, int? padding_idx) -> (Tensor, Tensor, Tensor, Tensor)

    The bags of 2-d ``indices`` are its rows (``offsets`` is then ``arange``); of 1-d
    ``indices``, the runs starting at each offset. Indices equal to ``padding_idx`` count in
    no bag; an empty bag is zeros, as in eager PyTorch. The outputs after the first (the
    bag of each index, the bags' sizes, and for ``max`` the index behind each maximum) are
    what backward uses; eager's are not promised for them.
    """
    flat = op.Reshape(indices, op.Constant(value_ints=[-1]))
    count = op.Shape(flat)
    position = op.Range(
        op.Constant(value_int=0), op.Squeeze(count), op.Constant(value_int=1)
    )  # [n]
    if len(indices.shape) == 2:
        bags = op.Shape(indices, start=0, end=1)
        per_bag = op.Shape(indices, start=1, end=2)
        bag_of = op.Div(position, op.Squeeze(per_bag))
    else:
        starts = offsets
        if include_last_offset:
            starts = op.Slice(offsets, op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]))
        bags = op.Shape(starts)
        started = op.LessOrEqual(op.Unsqueeze(starts, [0]), op.Unsqueeze(position, [1]))
        bag_of = op.Sub(
            op.ReduceSum(
                op.Cast(started, to=ir.DataType.INT64), op.Constant(value_ints=[1]), keepdims=0
            ),
            op.Constant(value_int=1),
        )
    bag_ids = op.Range(op.Constant(value_int=0), op.Squeeze(bags), op.Constant(value_int=1))
    member = op.Equal(op.Unsqueeze(bag_of, [1]), op.Unsqueeze(bag_ids, [0]))  # [n, bags]
    if padding_idx is not None and padding_idx >= 0:
        kept = op.Not(op.Equal(flat, op.Constant(value_int=padding_idx)))
        member = op.And(member, op.Unsqueeze(kept, [1]))
    rows = op.Gather(weight, flat, axis=0)  # [n, dim]
    if per_sample_weights is not None:
        weights = op.Reshape(per_sample_weights, op.Constant(value_ints=[-1, 1]))
        rows = op.Mul(rows, weights)
    sizes = op.ReduceSum(
        op.Cast(member, to=ir.DataType.INT64), op.Constant(value_ints=[0]), keepdims=0
    )  # [bags]
    if mode == _MAX:
        low = op.CastLike(op.Constant(value_float=float("-inf")), weight)
        masked = op.Where(op.Unsqueeze(member, [2]), op.Unsqueeze(rows, [1]), low)
        result = op.ReduceMax(masked, op.Constant(value_ints=[0]), keepdims=0)
        nonempty = op.Unsqueeze(op.Greater(sizes, op.Constant(value_int=0)), [1])
        result = op.Where(nonempty, result, op.CastLike(op.Constant(value_float=0.0), weight))
        max_indices = op.Gather(flat, op.ArgMax(masked, axis=0, keepdims=0), axis=0)
    else:
        result = op.Einsum(op.CastLike(member, weight), rows, equation="nb,nd->bd")
        if mode == _MEAN:
            divisor = op.Max(sizes, op.Constant(value_int=1))
            result = op.Div(result, op.Unsqueeze(op.CastLike(divisor, weight), [1]))
        max_indices = sizes
    return result, bag_of, sizes, max_indices
