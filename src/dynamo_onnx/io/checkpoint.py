"""The weights of a safetensors checkpoint (a folder's, or one file) read a tensor at a time.

``save_pretrained`` writes ``model.safetensors``, or shards with ``model.safetensors.index.json``
mapping each tensor's name to its shard. A safetensors file is an 8-byte header length, a
JSON header (each tensor's dtype, shape and byte range) and the tensors' bytes: this module
reads the headers once and then a tensor's bytes on demand, with ``readinto`` into a buffer
of its own size. The ``safetensors`` library memory-maps the whole file instead, and every
page of the mapping a read touches then counts in the process's resident memory until the
file is closed: streaming a checkpoint through it grows the peak RSS by the checkpoint's
size. A plain read leaves the bytes in the page cache, which the kernel reclaims as it needs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = [
    "INDEX_FILE",
    "SINGLE_FILE",
    "Checkpoint",
    "StoredTensor",
    "lazy_tensor",
    "open_checkpoint",
]

#: The single file ``save_pretrained`` writes for a model that fits in one shard.
SINGLE_FILE = "model.safetensors"
#: The index of a sharded checkpoint: ``{"weight_map": {name: shard file}}``.
INDEX_FILE = "model.safetensors.index.json"

#: safetensors' dtype names (the format's specification) as torch dtypes.
_DTYPES: Mapping[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


@dataclasses.dataclass(frozen=True)
class StoredTensor:
    """Where one tensor's bytes are: its file, byte range, dtype and shape."""

    name: str
    path: pathlib.Path
    start: int
    end: int
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def _header(path: pathlib.Path) -> dict[str, StoredTensor]:
    """The tensors of one safetensors file, from its header (the data is not read)."""
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path.name}: tensor {name} has dtype {entry['dtype']}, unknown here")
        start, end = entry["data_offsets"]
        tensors[name] = StoredTensor(
            name, path, base + start, base + end, dtype, tuple(entry["shape"])
        )
    return tensors


class Checkpoint:
    """The tensors of a folder's safetensors files, by name; :meth:`read` reads one."""

    def __init__(self, tensors: Mapping[str, StoredTensor]) -> None:
        self._tensors = dict(tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def stored(self, name: str) -> StoredTensor:
        return self._tensors[name]

    @property
    def files(self) -> tuple[pathlib.Path, ...]:
        return tuple(sorted({t.path for t in self._tensors.values()}))

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The tensor ``name``, converted to ``dtype`` when given: a fresh tensor that owns
        its memory (nothing of the file stays mapped)."""
        stored = self._tensors[name]
        # not zeroed first: every byte is read into it
        tensor = self.read_into(name, torch.empty(stored.nbytes, dtype=torch.uint8))
        if dtype is not None and dtype != tensor.dtype:
            return tensor.to(dtype)
        return tensor

    def read_into(self, name: str, buffer: torch.Tensor) -> torch.Tensor:
        """The tensor ``name`` as stored (its dtype and shape), read into ``buffer``'s
        first bytes (a contiguous ``uint8`` tensor at least its size, e.g. a
        ``fill.Scratch`` slot reused from tensor to tensor) and viewing them."""
        stored = self._tensors[name]
        if not stored.nbytes:
            return torch.empty(stored.shape, dtype=stored.dtype)
        target = buffer[: stored.nbytes]
        view = memoryview(target.numpy())
        with open(stored.path, "rb", buffering=0) as file:
            file.seek(stored.start)
            done = 0
            while done < stored.nbytes:
                count = file.readinto(view[done:])
                if not count:
                    raise OSError(f"{stored.path.name} ends inside tensor {name}")
                done += count
        view.release()
        return target.view(stored.dtype).reshape(stored.shape)


def open_checkpoint(folder: str | os.PathLike[str]) -> Checkpoint | None:
    """The safetensors checkpoint of ``folder`` (one file, or shards with their index), or
    the ``.safetensors`` file ``folder``; None when there is none (a ``pytorch_model.bin``
    cannot be read a tensor at a time)."""
    folder = pathlib.Path(folder)
    if folder.is_file() and folder.suffix == ".safetensors":
        return Checkpoint(_header(folder))
    index = folder / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        tensors: dict[str, StoredTensor] = {}
        for shard in sorted(set(weight_map.values())):
            for name, stored in _header(folder / shard).items():
                if weight_map.get(name) == shard:
                    tensors[name] = stored
        return Checkpoint(tensors)
    single = folder / SINGLE_FILE
    if single.is_file():
        return Checkpoint(_header(single))
    return None


def lazy_tensor(checkpoint: Checkpoint, name: str, dtype: torch.dtype) -> Any:
    """The checkpoint's tensor ``name`` as an ``ir.LazyTensor`` of ``dtype``: read and
    converted each time it is serialized, held by nobody in between."""
    import onnx_ir as ir

    from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE

    stored = checkpoint.stored(name)

    def evaluate() -> ir.TensorProtocol:
        return ir.tensor(checkpoint.read(name, dtype).numpy(), name=name)

    return ir.LazyTensor(
        evaluate, dtype=TORCH_TO_ONNX_DTYPE[dtype], shape=ir.Shape(stored.shape), name=name
    )
