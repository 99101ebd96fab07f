"""The external data file of a save (``model.onnx.data``), written while the next weights
are made: its tensors evaluated ahead in threads, written in file order past the page cache.

``ir.save(..., external_data=...)`` evaluates each lazy tensor, then writes it through the
page cache, one after the other: for a streamed export (each weight read from the
checkpoint, converted, packed or quantized as it is written) the disk waits for the CPU and
the CPU for the disk, and the page cache charges the writer for every page it must reclaim
first (docs/performance.md, issue 44's "The save"). Here threads evaluate the next tensors
(the reads and torch's and NumPy's copies release the GIL; ONNX Runtime's quantizer holds
it) while the caller's thread writes the current one with ``O_DIRECT`` (``direct_file``):
the save holds the tensor written and the ``ahead`` being made
(``defaults.SAVE_TENSORS_AHEAD``), within twice the largest tensor's bytes.

The file is the one ``ir.save`` writes, byte for byte: the same tensors (the initializers of
more than the threshold's bytes, in the graphs' declaration order), packed end to end, each
as onnx_ir serializes it; the model file then refers to it through the ``ExternalTensor`` s
onnx_ir would make.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import io
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import onnx_ir as ir
import torch

from dynamo_onnx.io.direct_file import open_direct, page_aligned_bytes
from dynamo_onnx.io.fill import Fillable, Scratch
from dynamo_onnx.tensors import ONNX_TO_TORCH_DTYPE

__all__ = ["THREAD_NAME", "evaluated_ahead", "external_values", "payload", "write_data_file"]

#: The name (prefix) of the threads that make the weights.
THREAD_NAME = "dynamo-onnx-save"

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")

#: Types onnx_ir packs several values into a byte of (or not as NumPy holds them).
_PACKED = frozenset(
    {
        ir.DataType.INT4,
        ir.DataType.UINT4,
        ir.DataType.FLOAT4E2M1,
        ir.DataType.INT2,
        ir.DataType.UINT2,
        ir.DataType.FLOAT6E2M3,
        ir.DataType.FLOAT6E3M2,
        ir.DataType.STRING,
    }
)


def external_values(model: ir.Model, threshold: int) -> list[ir.Value] | None:
    """The initializers ``ir.save`` writes to the external data file, in its order (every
    graph's, subgraphs too, of more than ``threshold`` bytes); None when the model holds an
    ``ExternalTensor`` (onnx_ir reloads or rewrites those first: it saves that model)."""
    values = []
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if isinstance(tensor, ir.ExternalTensor):
                return None
            if tensor.nbytes > threshold:
                values.append(value)
    return values


def _evaluated(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    while isinstance(tensor, ir.LazyTensor):
        tensor = tensor.raw()
    return tensor


def payload(tensor: ir.TensorProtocol) -> memoryview:
    """The bytes onnx_ir writes for ``tensor`` (a lazy one evaluated): a view of its array
    where they are its memory, else what its ``tofile`` writes to a file object."""
    tensor = _evaluated(tensor)
    raw = getattr(tensor, "raw", None)
    if (
        type(tensor) is ir.Tensor
        and isinstance(raw, np.ndarray)
        and tensor.dtype not in _PACKED
        and raw.dtype.itemsize == tensor.dtype.itemsize
        and raw.dtype.byteorder != ">"
        and sys.byteorder == "little"
    ):
        return memoryview(np.ascontiguousarray(raw).reshape(-1).view(np.uint8))
    buffer = io.BytesIO()  # no fileno: onnx_ir's tofile writes its tobytes() to it
    if hasattr(tensor, "tofile"):
        tensor.tofile(buffer)
    else:
        buffer.write(tensor.tobytes())
    return buffer.getbuffer()


def evaluated_ahead(
    items: Sequence[_Item],
    evaluate: Callable[[_Item], _Result],
    workers: int = 1,
    *,
    size: Callable[[_Item], int] | None = None,
    budget: int | None = None,
) -> Iterator[_Result]:
    """``evaluate(item)`` for each item, in order, computed by ``workers`` threads ahead of
    the consumer: the consumer's item and at most ``workers`` being made are held (the
    consumer drops its item before asking for the next). With a ``budget``, an item is
    started only while the ``size`` of those held and its own fit in it, or alone: the
    largest items are made one at a time. An error of ``evaluate`` is raised here, the same
    exception; when the consumer stops (an error, Ctrl-C), the threads end after the items
    they are on."""
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=THREAD_NAME)
    pending: collections.deque[tuple[concurrent.futures.Future[_Result], int]] = collections.deque()
    started = 0

    def start(held: int) -> None:
        nonlocal started
        while started < len(items) and len(pending) < workers:
            item = items[started]
            cost = size(item) if size is not None else 0
            in_flight = held + sum(c for _, c in pending)
            if budget is not None and in_flight and in_flight + cost > budget:
                return
            pending.append((pool.submit(evaluate, item), cost))
            started += 1

    try:
        while True:
            start(0)
            if not pending:
                return
            future, cost = pending.popleft()
            result = future.result()
            start(cost)
            yield result
            del result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Buffers:
    """The reused memory of one save: each worker thread's :class:`Scratch`, and the
    buffers :class:`Fillable` tensors are written into, each handed back once written, as
    many as the tensors held at once. Kept only through a run of fillable tensors: where
    others follow (an int4 model's quantized weights after its float embedding), the
    buffers and the scratch are dropped, or they would add to what those hold."""

    def __init__(self, tensors: Sequence[ir.TensorProtocol], ahead: int) -> None:
        fills = [_fills(t) for t in tensors]
        self._fills = fills
        # a buffer handed back after tensor i serves one of the next ``ahead + 1``
        self._keep = [any(fills[i + 1 : i + 2 + ahead]) for i in range(len(tensors))]
        self._free: queue.SimpleQueue[torch.Tensor] = queue.SimpleQueue()
        self._local = threading.local()

    def payload(
        self, index: int, tensor: ir.TensorProtocol
    ) -> tuple[memoryview, torch.Tensor | None]:
        """``tensor``'s bytes, and the buffer they are in when it is to be handed back."""
        if not self._fills[index]:
            self._local.scratch = None
            self._drop_free()
            return payload(tensor), None
        buffer = self._buffer(tensor.nbytes)
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = Scratch()
        out = buffer[: tensor.nbytes].view(ONNX_TO_TORCH_DTYPE[tensor.dtype])
        tensor.fill(out.view(tuple(tensor.shape.numpy())), scratch)  # type: ignore[attr-defined]
        return memoryview(buffer[: tensor.nbytes].numpy()), buffer

    def _buffer(self, nbytes: int) -> torch.Tensor:
        try:
            buffer = self._free.get_nowait()
        except queue.Empty:
            return _page_aligned(nbytes)
        if buffer.numel() < nbytes:  # dropped: a larger one takes its place
            return _page_aligned(nbytes)
        return buffer

    def _drop_free(self) -> None:
        while True:
            try:
                self._free.get_nowait()
            except queue.Empty:
                return

    def written(self, index: int, buffer: torch.Tensor | None) -> None:
        if buffer is not None and self._keep[index]:
            self._free.put(buffer)


def _page_aligned(nbytes: int) -> torch.Tensor:
    """A buffer the direct writer writes from where it is (no copy to its staging)."""
    return torch.frombuffer(page_aligned_bytes(nbytes), dtype=torch.uint8)


def _fills(tensor: ir.TensorProtocol) -> bool:
    return (
        tensor.nbytes > 0
        and isinstance(tensor, Fillable)
        and tensor.dtype in ONNX_TO_TORCH_DTYPE
        and tensor.dtype not in _PACKED
        and sys.byteorder == "little"
    )


#: ``before(index, tensor)``: called as each tensor is about to be written.
BeforeEach = Callable[[int, ir.TensorProtocol], None]


def write_data_file(
    tensors: Sequence[ir.TensorProtocol],
    path: str | os.PathLike[str],
    *,
    direct: bool,
    before: BeforeEach | None = None,
    ahead: int = 1,
) -> None:
    """Write the tensors' bytes end to end to ``path`` (created), evaluated ``ahead`` at a
    time while one is written (:func:`evaluated_ahead`: the tensors held at once, the one
    written included, are at most twice the largest one's bytes), with
    ``O_DIRECT`` when ``direct`` and the file system allows it. A :class:`Fillable`
    tensor is written into a buffer reused from tensor to tensor (``io/fill.py``).
    Raises what an evaluation or the file raised; ``ValueError`` for a
    tensor whose bytes are not its declared size (the offsets follow the declared sizes, as
    onnx_ir's do)."""
    file = open_direct(path) if direct else None
    budget = 2 * max((t.nbytes for t in tensors), default=0)  # one ahead is always within
    buffers = _Buffers(tensors, ahead)
    made = evaluated_ahead(
        list(enumerate(tensors)),
        lambda item: buffers.payload(*item),
        ahead,
        size=lambda item: item[1].nbytes,
        budget=budget,
    )
    # closed on an error too: its threads stop there, not when the generator is collected
    with contextlib.closing(made), file if file is not None else open(path, "wb") as out:
        for index, (data, buffer) in enumerate(made):
            tensor = tensors[index]
            if data.nbytes != tensor.nbytes:
                raise ValueError(
                    f"tensor {tensor.name!r} gave {data.nbytes} bytes for its "
                    f"{tensor.nbytes} ({tensor.dtype.name}, shape {tensor.shape})"
                )
            if before is not None:
                before(index, tensor)
            out.write(data)
            data.release()
            del data
            buffers.written(index, buffer)
