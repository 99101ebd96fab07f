"""Weights read when they are written: an ONNX model whose initializers load on demand.

A model captured with fake weights gets, for each initializer, an ``ir.LazyTensor`` whose
function reads the tensor from where it is stored (a checkpoint's file) and converts it to
the initializer's dtype. onnx_ir writes external data one tensor at a time, evaluating each
lazy tensor, writing its bytes and dropping them: the weights pass through memory one by
one. What the ONNX passes do with a weight in between (pack q, k and v; store a transpose;
quantize to ``MatMulNBits``) is a lazy tensor over these, evaluated at the same time.

:class:`WeightStream` makes the lazy tensors and keeps what the findings need from the
values seen: the count of non-finite values per weight (DO401, decided from the values as
they are read, not from a second pass over the checkpoint).

A model whose layers are repeated from a template's (``onnx_tools.layer_repeat``) evaluates
a template layer's lazy tensor for each layer it stands for, with :data:`READ_REDIRECT` set
to that layer's :class:`ReadRedirect`: the leaf reads then take that layer's tensors and the
stream records that layer's weight names.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import onnx_ir as ir
import torch

from dynamo_onnx.io.fill import Scratch, copy_array
from dynamo_onnx.tensors import ONNX_TO_TORCH_DTYPE, widens_exactly

__all__ = [
    "READ_REDIRECT",
    "ReadRedirect",
    "StreamedTensor",
    "WeightStream",
    "non_finite_count",
    "torch_non_finite_count",
]


class ReadRedirect(Protocol):
    """How the reads of one template layer's weights become another layer's."""

    def weight(self, name: str) -> str:
        """The name the stream records for the template's weight ``name``."""
        ...

    def source(self, checkpoint: Any, name: str) -> tuple[Any, str]:
        """The checkpoint and tensor name read instead of ``checkpoint``'s ``name``."""
        ...


#: The redirect of the lazy tensor being evaluated, if any. Set inside the evaluating
#: function (a context variable is per thread: a writer that evaluates in a worker thread
#: sees the one its own evaluation set).
READ_REDIRECT: contextvars.ContextVar[ReadRedirect | None] = contextvars.ContextVar(
    "READ_REDIRECT", default=None
)


def non_finite_count(array: np.ndarray, chunk: int = 1 << 22) -> int:
    """NaN and inf values of ``array``; a finite sum proves there are none (one pass, no
    full-size temporary), else they are counted chunk by chunk."""
    if array.dtype.kind != "f" or not array.size:
        return 0
    flat = array.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(flat.sum(dtype=flat.dtype)):
            return 0
    return int(
        sum(int((~np.isfinite(flat[i : i + chunk])).sum()) for i in range(0, flat.size, chunk))
    )


@dataclasses.dataclass
class WeightStream:
    """The lazy weights of one model and what was learned reading them."""

    #: name -> (non-finite values, values), for each weight read that holds one
    non_finite: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: names of the weights read at least once
    read: set[str] = dataclasses.field(default_factory=set)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def rename(self, name_of: Callable[[str], str]) -> None:
        """The weights recorded so far under the names ``name_of`` gives them (a
        template's weights read while it was exported, named as the model's)."""
        with self._lock:
            self.read = {name_of(n) for n in self.read}
            self.non_finite = {name_of(n): v for n, v in self.non_finite.items()}

    def lazy(
        self,
        name: str,
        dtype: ir.DataType,
        shape: ir.Shape,
        load: Callable[[], np.ndarray],
        stored: Callable[[Scratch], torch.Tensor] | None = None,
    ) -> ir.LazyTensor:
        """An initializer's tensor that calls ``load`` each time its data is needed (the
        result is not cached: it lives as long as its reader holds it). With ``stored``
        (the tensor as its file holds it, read into a scratch buffer), a
        :class:`StreamedTensor`: a save fills its buffers from that, converting once."""

        def evaluate() -> ir.TensorProtocol:
            array = load()
            self.seen(name, non_finite_count(array), int(array.size))
            return ir.tensor(array, name=name)

        if stored is None:
            return ir.LazyTensor(evaluate, dtype=dtype, shape=shape, name=name)
        return StreamedTensor(self, evaluate, stored, dtype=dtype, shape=shape, name=name)

    def seen(self, name: str, bad: int, size: int) -> None:
        """Weight ``name`` read (under the name the redirect gives it), with ``bad``
        non-finite values of ``size``."""
        redirect = READ_REDIRECT.get()
        recorded = name if redirect is None else redirect.weight(name)
        with self._lock:
            self.read.add(recorded)
            if bad:
                self.non_finite[recorded] = (bad, size)


def torch_non_finite_count(tensor: torch.Tensor, chunk: int = 1 << 22) -> int:
    """:func:`non_finite_count` of a torch tensor (bfloat16 too, which NumPy lacks): a
    finite minimum and maximum prove there are none (NaN propagates through both; one
    pass, no temporary, several times faster than a sum in float32), else they are
    counted chunk by chunk."""
    if not tensor.is_floating_point() or not tensor.numel():
        return 0
    flat = tensor.reshape(-1)
    low, high = torch.aminmax(flat)
    if bool(torch.isfinite(low)) and bool(torch.isfinite(high)):
        return 0
    return sum(
        int((~torch.isfinite(flat[i : i + chunk])).sum()) for i in range(0, flat.numel(), chunk)
    )


class StreamedTensor(ir.LazyTensor):
    """A streamed weight that also hands its values as its file stores them (read into a
    :class:`~dynamo_onnx.io.fill.Scratch` buffer, in the file's dtype where converting
    them to the initializer's is exact) to a consumer that only moves them: packing and
    transposing move half the bytes of a bfloat16 checkpoint, and the conversion to float32
    writes once, where the value lands (:class:`~dynamo_onnx.io.fill.Fillable`). The stream
    records the read and its non-finite values as :meth:`WeightStream.lazy`'s evaluation
    does."""

    def __init__(
        self,
        stream: WeightStream,
        evaluate: Callable[[], ir.TensorProtocol],
        stored: Callable[[Scratch], torch.Tensor],
        *,
        dtype: ir.DataType,
        shape: ir.Shape,
        name: str,
    ) -> None:
        super().__init__(evaluate, dtype=dtype, shape=shape, name=name)
        self._stream = stream
        self._stored = stored
        self._target = ONNX_TO_TORCH_DTYPE.get(dtype)

    def stored(self, scratch: Scratch) -> torch.Tensor | None:
        """The values in the file's dtype (a view of ``scratch``'s ``"read"`` slot, valid
        until the slot's next use), or None when they would not convert exactly to the
        initializer's dtype (read the usual way then)."""
        if self._target is None:
            return None
        tensor = self._stored(scratch)
        if not widens_exactly(tensor.dtype, self._target):
            return None
        self._stream.seen(self.name or "", torch_non_finite_count(tensor), tensor.numel())
        return tensor

    def fill(self, out: torch.Tensor, scratch: Scratch) -> None:
        tensor = self.stored(scratch)
        if tensor is None:  # a narrowing conversion: the evaluation's array, counted on it
            copy_array(out, self.numpy())
            return
        out.copy_(tensor.reshape(out.shape))
