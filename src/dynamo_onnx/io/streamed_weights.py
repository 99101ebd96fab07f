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
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

__all__ = ["WeightStream", "non_finite_count"]


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

    def lazy(
        self,
        name: str,
        dtype: ir.DataType,
        shape: ir.Shape,
        load: Callable[[], np.ndarray],
    ) -> ir.LazyTensor:
        """An initializer's tensor that calls ``load`` each time its data is needed (the
        result is not cached: it lives as long as its reader holds it)."""

        def evaluate() -> ir.TensorProtocol:
            array = load()
            bad = non_finite_count(array)
            with self._lock:
                self.read.add(name)
                if bad:
                    self.non_finite[name] = (bad, int(array.size))
            return ir.tensor(array, name=name)

        return ir.LazyTensor(evaluate, dtype=dtype, shape=shape, name=name)
