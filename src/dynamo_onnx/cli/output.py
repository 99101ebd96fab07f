"""What the command writes: standard output line by line, its files with DO902 when they
cannot be written, and failures cut to a length a terminal shows."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from dynamo_onnx.cli.exit_codes import EXIT_FAILED, CommandError


def oserror_cause(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


@contextlib.contextmanager
def writing(what: str, path: str) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``what`` to ``path`` into DO902 (exit code 1)."""
    try:
        yield
    except OSError as exc:
        raise CommandError(
            "output-not-written", EXIT_FAILED, what=what, path=path, cause=oserror_cause(exc)
        ) from None


def _stop_output() -> None:
    """Send what is left of standard output nowhere (the reader is gone, or the device is
    full), so the interpreter's last flush at exit cannot fail again."""
    try:
        target = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (redirected to a buffer): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, target)
    os.close(devnull)


def emit(text: str) -> None:
    """Print ``text`` on standard output, line by line as it is produced. A reader that
    stops early (``| head``) ends the output quietly; a failed write (a full device) is
    DO902."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _stop_output()
    except OSError as exc:
        _stop_output()
        raise CommandError(
            "output-not-written",
            EXIT_FAILED,
            what="output",
            path="standard output",
            cause=oserror_cause(exc),
        ) from None


#: At most this many lines of a failure are printed; the reports hold the rest.
_MAX_FAILURE_LINES = 40


def bounded(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= _MAX_FAILURE_LINES:
        return text
    rest = len(lines) - _MAX_FAILURE_LINES
    return "\n".join([*lines[:_MAX_FAILURE_LINES], f"... ({rest} more lines in the reports)"])


def write_each(writes: list[tuple[str, str, Any]]) -> None:
    """Attempt every write; one that fails does not stop the others. The failures are
    raised together as one DO902 (exit code 1)."""
    failures: list[CommandError] = []
    for what, path, write in writes:
        try:
            with writing(what, path):
                write()
        except CommandError as exc:
            failures.append(exc)
    if failures:
        first, *rest = failures
        if rest:
            first.detail = "\n".join(str(f).splitlines()[0] for f in rest)
        raise first
