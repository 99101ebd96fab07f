"""Python's cyclic garbage collector while passes run: spaced out, kept off the caller's
heap, then as the caller had it.

An export allocates hundreds of thousands of objects (torch's fake tensors, symbolic sizes,
FX nodes, ONNX nodes), and at Python's default thresholds (700, 10, 10) that sets off a full
collection every few hundred thousand allocations, each walking the caller's whole heap:
the model, the libraries, everything else a notebook holds. While the passes run, young
collections come less often and full ones a tenth as often. What the caller had before the
pipeline is frozen out of the collector meanwhile (``gc.freeze``): none of it becomes
garbage because of the export, and the full collection that the spaced thresholds leave due
when they are put back walked all of it (docs/performance.md has the figures). The
pipeline's end collects what the export made, with the caller's heap still frozen, then
unfreezes it: cycles the export left are freed as before, and the caller's objects are back
in the oldest generation as they were (CPython then counts only the export's survivors as
that generation's size, so the caller's next full collection comes once sooner). Nothing is frozen when the caller froze objects of
their own (unfreezing would release theirs too, as in a nested pipeline) or switched the
collector off. The thresholds are only raised, never lowered, and put back as they were; a
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
    """Raise the collector's thresholds to :data:`SPACED` and freeze the caller's heap for
    the ``with`` block; collect what the block made, then give both back."""
    given = gc.get_threshold()
    freeze = gc.isenabled() and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(*(max(mine, theirs) for mine, theirs in zip(SPACED, given)))
    try:
        yield
    finally:
        gc.set_threshold(*given)
        if freeze:
            gc.collect()  # the export's objects only: the caller's are frozen
            gc.unfreeze()
