"""A write-only file that bypasses the page cache (``O_DIRECT``), for saving large models.

Writing hundreds of megabytes through the page cache costs what the kernel charges to find
that many free pages: on a machine whose memory is full of cache (any machine that just
loaded a model), a time that varies with what it must reclaim first. Written with
``O_DIRECT`` the bytes go from an aligned buffer to the disk, in a time that depends on the
disk alone (docs/performance.md, "Saving past the page cache").

``O_DIRECT`` wants block-aligned buffers, offsets and sizes: writes are copied into one
page-aligned buffer of ``BUFFER_BYTES`` and written a full buffer at a time; the last one is
padded to a block and the file truncated to its length. File systems without ``O_DIRECT``
(tmpfs, some network file systems) refuse it with ``EINVAL`` at the first write or at
``open``: :func:`open_direct` returns None then, and the caller writes the usual way.
"""

from __future__ import annotations

import errno
import mmap
import os
from typing import Any

import numpy as np

__all__ = ["BUFFER_BYTES", "DirectFile", "open_direct", "page_aligned_bytes"]

#: The staging buffer: 16 MiB (more does not write faster, and it counts in the peak RSS).
BUFFER_BYTES = 16 * 2**20
_BLOCK = 4096


class DirectFile:
    """A binary file opened with ``O_DIRECT``: ``write`` stages bytes, ``close`` flushes."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = mmap.mmap(-1, BUFFER_BYTES)  # anonymous: page-aligned
        self._view = memoryview(self._buffer)
        self._filled = 0
        self._written = 0

    def write(self, data: Any) -> int:
        source = memoryview(data).cast("B")
        total, offset = source.nbytes, 0
        if self._filled % _BLOCK == 0 and total >= BUFFER_BYTES and _page_aligned(source):
            # a page-aligned buffer (the save's filled ones): its whole blocks are written
            # from where they are, after what is staged (whole blocks too), not copied
            if self._filled:
                self._flush(self._filled)
            offset = total // _BLOCK * _BLOCK
            self._write(source[:offset])
            self._written += offset
        while offset < total:
            count = min(BUFFER_BYTES - self._filled, total - offset)
            self._view[self._filled : self._filled + count] = source[offset : offset + count]
            self._filled += count
            offset += count
            if self._filled == BUFFER_BYTES:
                self._flush(BUFFER_BYTES)
        return total

    def _flush(self, size: int) -> None:
        self._write(self._view[:size])
        self._written += self._filled
        self._filled = 0

    def _write(self, blocks: memoryview) -> None:
        done = 0
        while done < blocks.nbytes:
            done += os.write(self._fd, blocks[done:])

    def close(self) -> None:
        """Write what is staged (padded to a block), cut the file to its length, close."""
        try:
            if self._filled:
                length = self._written + self._filled
                padded = -(-self._filled // _BLOCK) * _BLOCK
                self._view[self._filled : padded] = bytes(padded - self._filled)
                self._flush(padded)
                os.ftruncate(self._fd, length)
        finally:
            self._view.release()
            self._buffer.close()
            os.close(self._fd)

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _page_aligned(view: memoryview) -> bool:
    """Whether ``view``'s memory starts on a page (what ``O_DIRECT`` asks of a buffer)."""
    return bool(np.frombuffer(view, dtype=np.uint8).ctypes.data % mmap.PAGESIZE == 0)


def page_aligned_bytes(nbytes: int) -> memoryview:
    """``nbytes`` of anonymous, page-aligned memory (a buffer :meth:`DirectFile.write`
    writes from without copying)."""
    return memoryview(mmap.mmap(-1, max(nbytes, 1)))[:nbytes]


def open_direct(path: str | os.PathLike[str]) -> DirectFile | None:
    """``path`` created for writing with ``O_DIRECT``, or None where that is not possible
    (no ``O_DIRECT`` on this platform or file system: write the usual way then)."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o666)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise
    probe = mmap.mmap(-1, _BLOCK)
    try:
        os.write(fd, probe)  # some file systems accept the flag at open and refuse writes
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.EINVAL:
            return None
        raise
    finally:
        probe.close()
    return DirectFile(fd)
