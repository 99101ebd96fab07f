"""Weights packed or transposed when they are read: ``packing``'s q/k/v and gate/up
(each part transposed, then concatenated) and ``quantize``'s stored transposes.

Nothing is copied until the model is serialized. A :class:`PackedTensor` of streamed
checkpoint tensors (``io.streamed_weights.StreamedTensor``) is then made in the
checkpoint's dtype (a bfloat16 transpose moves half the bytes of a float32 one) and converted
once, into the save's reused buffer (``io.fill``) or a fresh array when a reader (the
quantizer) evaluates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from dynamo_onnx.io.fill import Scratch, copy_array
from dynamo_onnx.io.streamed_weights import StreamedTensor
from dynamo_onnx.tensors import transposed

__all__ = ["PackedTensor", "concatenated"]


def concatenated(
    name: str, parts: Sequence[tuple[ir.TensorProtocol, bool]], axis: int
) -> ir.LazyTensor:
    """The tensors (each transposed where its flag says so) concatenated along ``axis``,
    computed when the model is serialized: packing copies no weight until then. One
    transposed part is a transpose (``quantize.store_transposed_weights``'s)."""
    dtype = parts[0][0].dtype
    shapes = [tuple(t.shape)[::-1] if flip else tuple(t.shape) for t, flip in parts]
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)

    def evaluate() -> ir.TensorProtocol:
        target = _NUMPY_TORCH_DTYPES.get(dtype)
        if target is not None and all(isinstance(t, StreamedTensor) for t, _ in parts):
            out = torch.empty(shape, dtype=target)  # moved in the checkpoint's dtype first
            packed.fill(out, Scratch())
            return ir.tensor(out.numpy(), name=name)
        arrays = [transposed(t.numpy()) if flip else t.numpy() for t, flip in parts]
        if len(arrays) == 1:  # a transpose alone (the quantizer's)
            return ir.tensor(arrays[0], name=name)
        return ir.tensor(np.ascontiguousarray(np.concatenate(arrays, axis=axis)), name=name)

    packed = PackedTensor(evaluate, parts, axis, dtype=dtype, shape=ir.Shape(shape), name=name)
    return packed


#: The float types NumPy holds as torch does: a packed weight of one is made by
#: :meth:`PackedTensor.fill` when evaluated too (the quantizer reads it so).
_NUMPY_TORCH_DTYPES = {
    ir.DataType.FLOAT: torch.float32,
    ir.DataType.FLOAT16: torch.float16,
    ir.DataType.DOUBLE: torch.float64,
}


class PackedTensor(ir.LazyTensor):
    """A packed weight (:func:`concatenated`) that a save can have written into its own
    buffer (:class:`~dynamo_onnx.io.fill.Fillable`): each part, when it hands its stored
    values (a streamed checkpoint's), is transposed in its file's dtype in a scratch buffer
    and converted once, into its place in ``out``."""

    def __init__(
        self,
        evaluate: Any,
        parts: Sequence[tuple[ir.TensorProtocol, bool]],
        axis: int,
        *,
        dtype: ir.DataType,
        shape: ir.Shape,
        name: str,
    ) -> None:
        super().__init__(evaluate, dtype=dtype, shape=shape, name=name)
        self._parts = tuple(parts)
        self._axis = axis

    def fill(self, out: torch.Tensor, scratch: Scratch) -> None:
        if not all(isinstance(tensor, StreamedTensor) for tensor, _ in self._parts):
            copy_array(out, self.numpy())
            return
        offset = 0
        for tensor, flip in self._parts:
            size = (tuple(tensor.shape)[::-1] if flip else tuple(tensor.shape))[self._axis]
            place = out.narrow(self._axis, offset, size)
            offset += size
            stored = tensor.stored(scratch)  # type: ignore[attr-defined]
            if stored is None:  # not an exact conversion: the part's own array
                array = transposed(tensor.numpy()) if flip else tensor.numpy()
                made = torch.empty(place.shape, dtype=out.dtype)
                copy_array(made, array)
                place.copy_(made)
                continue
            if flip:
                moved = scratch.take("transpose", stored.numel() * stored.element_size())
                moved = moved.view(stored.dtype).view(tuple(stored.shape)[::-1])
                moved.copy_(stored.T)  # in the file's dtype: half the bytes of a bfloat16
                stored = moved
            place.copy_(stored)
