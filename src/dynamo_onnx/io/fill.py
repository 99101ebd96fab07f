"""Lazy tensors that write their values into memory the save hands them.

A streamed save makes every weight from the checkpoint as it writes it: read, convert from
bfloat16 to float32, transpose, pack q/k/v. Made the plain way, each of those steps
allocates a new array, and memory fresh from the kernel costs its page faults and zeroing
before the first byte is copied: several times the copy itself on a virtual machine
(docs/performance.md, "Filling reused buffers"). A :class:`Fillable` tensor writes its
values into a buffer it is given, and its intermediate steps use a thread's
:class:`Scratch`: the save (``io/data_file.py``) reuses both for every tensor, so a weight
costs the copies alone. Every step is data movement or an exact conversion: the bytes are
those the tensor's ``numpy()`` gives.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Fillable", "Scratch", "copy_array"]


class Scratch:
    """One thread's reusable byte buffers, by slot, each grown to the largest size asked
    and kept for the next tensor (a save holds one per worker thread, for the save's
    length)."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, slot: str, nbytes: int) -> torch.Tensor:
        """``nbytes`` bytes of ``slot``'s buffer (``uint8``): what the slot's last user
        wrote there is overwritten by the next one."""
        buffer = self._buffers.get(slot)
        if buffer is None or buffer.numel() < nbytes:
            buffer = self._buffers[slot] = torch.empty(nbytes, dtype=torch.uint8)
        return buffer[:nbytes]


@runtime_checkable
class Fillable(Protocol):
    """A tensor that can write its values into ``out`` (a contiguous torch tensor of its
    dtype and shape), using ``scratch`` for what it makes on the way."""

    def fill(self, out: torch.Tensor, scratch: Scratch) -> None: ...


def copy_array(out: torch.Tensor, array: np.ndarray) -> None:
    """``array``'s bytes into ``out`` (a contiguous tensor of as many bytes): whatever their
    dtype, bfloat16 and float8 included, which ``torch.from_numpy`` refuses."""
    source = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    out.reshape(-1).view(torch.uint8).copy_(torch.from_numpy(source))
