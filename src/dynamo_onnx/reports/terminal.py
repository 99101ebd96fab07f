"""What an export shows in the terminal: each pass as it runs (the CLI's progress and
``export(verbose=True)``), and the warnings of a successful export as Python warnings.

A user who never opens the report must still learn that the batch became static: an export
that succeeds with warnings issues a :class:`~dynamo_onnx.errors.DynamoOnnxWarning` per
warning finding, at the user's line, a bounded number of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TextIO

from dynamo_onnx.diagnostics import Finding, Location
from dynamo_onnx.diagnostics.context import ProgressEvent, finding_text
from dynamo_onnx.errors import DynamoOnnxWarning

__all__ = ["MAX_PYTHON_WARNINGS", "ProgressPrinter", "issue_warnings"]

#: Warnings issued one by one; past this number, one more says how many were left out.
MAX_PYTHON_WARNINGS = 5


#: Characters of a save's progress bar on a terminal.
BAR_WIDTH = 30


class ProgressPrinter:
    """Each pass as it runs, with its time, a node counter during translation, and a bar
    of the tensors and bytes a save has written.

    On a terminal a pass's line is rewritten in place (``\\r`` and erase-to-end); into a
    file or a pipe (``2> log``, CI) each pass is one plain line when it ends, and a save
    one line at each tenth of its bytes, with no control characters."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        isatty = getattr(stream, "isatty", None)
        self.live = bool(isatty()) if callable(isatty) else False
        self._tenth = -1  # the last tenth of a save's bytes printed as a plain line

    def _plain_line(self, event: ProgressEvent) -> None:
        """A line at each tenth of a save's bytes, for a log that keeps every line."""
        tenth = 10 * event.done_bytes // max(event.total_bytes, 1)
        if tenth > self._tenth:
            self._tenth = tenth
            self.stream.write(f"  {event.pass_name}: {10 * tenth}% ({_counts(event)})\n")
            self.stream.flush()

    def __call__(self, event: ProgressEvent) -> None:
        mark = "done" if event.outcome == "ok" else event.outcome
        if event.kind == "start":
            self._tenth = -1
        if not self.live:
            if event.kind == "progress" and event.total_bytes:
                self._plain_line(event)
            elif event.kind == "end":
                self.stream.write(f"  {event.pass_name}: {mark} in {event.duration_s:.2f} s\n")
                self.stream.flush()
            return
        if event.kind == "start":
            self.stream.write(f"  {event.pass_name} ...")
        elif event.kind == "progress" and event.total_bytes:
            self.stream.write(f"\r  {event.pass_name} {_bar(event)} {_counts(event)}\033[K")
        elif event.kind == "progress":
            self.stream.write(f"\r  {event.pass_name} ... {event.done}/{event.total} nodes")
        else:
            self.stream.write(f"\r  {event.pass_name}: {mark} in {event.duration_s:.2f} s\033[K\n")
        self.stream.flush()


def _bar(event: ProgressEvent, width: int = BAR_WIDTH) -> str:
    filled = width * event.done_bytes // max(event.total_bytes, 1)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _counts(event: ProgressEvent) -> str:
    """``12/291 tensors, 0.48/4.85 GB`` (MB below a GB)."""
    scale, unit = (1e9, "GB") if event.total_bytes >= 1e9 else (1e6, "MB")
    return (
        f"{event.done}/{event.total} {event.unit}, "
        f"{event.done_bytes / scale:.2f}/{event.total_bytes / scale:.2f} {unit}"
    )


def issue_warnings(
    findings: Sequence[Finding],
    fallback: Location | None,
    report_hint: str,
    limit: int = MAX_PYTHON_WARNINGS,
) -> None:
    """A ``DynamoOnnxWarning`` for each finding, at its user's line (else ``fallback``, the
    export call), reading as an error of its rule would. Past ``limit``, one warning
    counts the rest and says where to read them (``report_hint``)."""
    for finding in findings[:limit]:
        where = finding.primary or fallback
        _warn(finding_text(finding), where)
    if len(findings) > limit:
        _warn(f"{len(findings) - limit} more warning(s) of this export: {report_hint}", fallback)


def _warn(text: str, where: Location | None) -> None:
    if where is None:
        warnings.warn(text, DynamoOnnxWarning, stacklevel=4)
        return
    warnings.warn_explicit(text, DynamoOnnxWarning, where.path, where.line)
