"""Python's cyclic garbage collector while passes run: spaced out, then as the caller had it.

An export allocates hundreds of thousands of objects (torch's fake tensors, symbolic sizes,
FX nodes, ONNX nodes), and at Python's default thresholds (700, 10, 10) that sets off a full
collection every few hundred thousand allocations, each walking the caller's whole heap:
the model, the libraries, everything else a notebook holds. While the passes run, full
collections come a tenth as often, and young ones after ten thousand allocations: most of
what a pass makes (a graph being traced, translated, converted) is freed before a young
collection can see it, so it is never promoted to the oldest generation. CPython runs a
full collection once the objects promoted since the last one pass a quarter of those it
kept, so what an export promotes decides how soon the caller pays one after it
(docs/performance.md). The peak memory is the same: the export keeps what it allocates
until it ends. The thresholds are only raised, never lowered, and put back as they were
when the pipeline ends; a collector the caller switched off stays off.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from dynamo_onnx.defaults import GC_THRESHOLDS_WHILE_EXPORTING

__all__ = ["collections_spaced"]


@contextlib.contextmanager
def collections_spaced() -> Iterator[None]:
    """Raise the collector's thresholds to ``GC_THRESHOLDS_WHILE_EXPORTING`` (each
    generation's at least that) for the ``with`` block."""
    given = gc.get_threshold()
    gc.set_threshold(
        *(max(mine, theirs) for mine, theirs in zip(GC_THRESHOLDS_WHILE_EXPORTING, given))
    )
    try:
        yield
    finally:
        gc.set_threshold(*given)
