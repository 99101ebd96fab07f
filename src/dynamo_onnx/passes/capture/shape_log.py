"""torch's symbolic-shape log while capture runs, whatever the caller configured: the
records the dynamic-shapes pass reads to say which line caused what the program shows."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.diagnostics.findings import stack_locations
from dynamo_onnx.foreign_text import is_about_a_guard
from dynamo_onnx.passes.base import ShapeLogRecord
from dynamo_onnx.passes.logs import dropped, filtered, partial_graphs_dropped

__all__ = ["ShapeLogListener"]


class ShapeLogListener(logging.Filter):
    """Where torch's symbolic shapes came from: each record of its symbolic-shape logger
    during capture, with the Python stack when it adds a guard (torch names its own frame
    for a guard; the stack still holds the user's line behind it).

    The findings are decided from the captured program; these records only say which
    line caused what the program shows. They must not depend on how the caller's process
    configured logging, so while capture runs the logger is made to produce them whatever
    ``logging.disable``, ``dictConfig(disable_existing_loggers=True)``, the logger's level
    or ``TORCH_LOGS`` say, and a filter on the logger (added, never replacing a handler)
    takes them. They stop here: torch's warnings during capture (the FX graph, 36 lines of
    it, for every data-dependent branch) say what a finding says at the user's line. With
    ``show`` (``verbose=True``, ``dynamo-onnx export --verbose``) a record the caller's
    configuration would have shown goes on to the caller's handlers. Everything is
    restored afterwards.
    """

    LOGGER = "torch.fx.experimental.symbolic_shapes"

    #: The errors a failed attempt logs anyway ("Error while creating guard" and its stack
    #: for a constraint violation; strict mode's summary of any failure): the finding
    #: reports it, once, at the user's line. Dropped by a filter while capture runs.
    QUIET = (
        "torch._guards",
        "torch.export._trace",
        "torch._subclasses.fake_tensor",
        "torch._export.non_strict_utils",  # "0/1 specialized": DO105 says it
        # "Using None as a dynamic shape dimension is deprecated": validation hands torch no
        # None (torch.onnx's idiom, which users write), a spec torch refined may still hold one
        "torch.export.dynamic_shapes",
    )

    def __init__(self, show: bool = False) -> None:
        super().__init__()
        self.records: list[ShapeLogRecord] = []
        self.show = show
        self._shown: Any = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        stack: tuple[Location, ...] = ()
        if is_about_a_guard(message):
            stack = stack_locations()
        self.records.append(ShapeLogRecord(message, stack))
        return self.show and self._shown is not None and bool(self._shown(record.levelno))

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._producing(logging.getLogger(self.LOGGER)))
            stack.enter_context(dropped(*self.QUIET))
            if not self.show:
                stack.enter_context(partial_graphs_dropped())
            yield

    @contextlib.contextmanager
    def _producing(self, logger: logging.Logger) -> Iterator[None]:
        """The logger emits INFO records to this filter whatever the caller configured."""
        was_disabled = logger.disabled
        own = logger.__dict__.get("isEnabledFor")
        shown_by_caller = logger.isEnabledFor

        def shown(level: int) -> bool:  # what the caller's configuration lets through
            return not was_disabled and shown_by_caller(level)

        self._shown = shown
        logger.disabled = False
        logger.isEnabledFor = lambda level: level >= logging.INFO or shown(level)  # type: ignore[method-assign]
        try:
            with filtered(logger, self):
                yield
        finally:
            if own is None:
                del logger.isEnabledFor
            else:
                logger.isEnabledFor = own  # type: ignore[method-assign]
            logger.disabled = was_disabled
            self._shown = None
