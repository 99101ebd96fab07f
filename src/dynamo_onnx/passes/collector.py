"""Python's cyclic garbage collector while passes run: spaced out, then as the caller had it.

An export allocates hundreds of thousands of objects (torch's fake tensors, symbolic sizes,
FX nodes, ONNX nodes), and at Python's default thresholds (700, 10, 10) that sets off a full
collection every few hundred thousand allocations, each walking the caller's whole heap:
the model, the libraries, everything else a notebook holds. With young collections less
often and full ones a tenth as often while the passes run, GPT-2's (124M) export spends
0.31-0.36 s collecting instead of 0.51-0.56 s (3.4-3.55 s instead of 3.55-3.9 s), the one
full collection left being the first after the pipeline, over what the export made; the
peak memory is the same (the export keeps what it allocates until it ends). The thresholds
are only raised, never lowered, and put back as they were when the pipeline ends; a
collector the caller switched off stays off.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["SPACED", "collections_spaced"]

#: The thresholds while passes run (each generation's at least this).
SPACED = (2000, 20, 100)


@contextlib.contextmanager
def collections_spaced() -> Iterator[None]:
    """Raise the collector's thresholds to :data:`SPACED` for the ``with`` block."""
    given = gc.get_threshold()
    gc.set_threshold(*(max(mine, theirs) for mine, theirs in zip(SPACED, given)))
    try:
        yield
    finally:
        gc.set_threshold(*given)
