"""What the differential benchmarks' worker processes share (`make coverage`'s op_coverage.py
and `make compat`'s compat.py): a time limit on one export, and both exporters' chatter kept
out of the table they print."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["Timeout", "quiet", "rows_json", "time_limit"]


class Timeout(Exception):
    """One case ran past its time limit (raised in the worker by SIGALRM)."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise :class:`Timeout` in this (worker) process after ``seconds``."""

    def _raise(signum: int, frame: Any) -> None:
        raise Timeout(f"more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Python-level output of both exporters (progress, warnings) goes nowhere: the table is
    the output here. What torch prints from C++ is the worker's file descriptors' business."""
    sink = io.StringIO()
    with (
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        yield


def rows_json(report: dict[str, Any], key: str) -> str:
    """The report as JSON with one row of ``report[key]`` per line: small, and a rerun's diff
    reads row by row (case by case, operator by operator)."""
    head = {k: v for k, v in report.items() if k != key}
    lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in report[key]]
    body = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    return body + f',\n "{key}": [\n' + ",\n".join(lines) + "\n ]\n}\n"
