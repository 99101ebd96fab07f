"""What the benchmarks' worker processes share (`make coverage`'s op_coverage.py, `make
compat`'s compat.py, `make bench`'s compare.py and llm_genai.py): a time limit on one export,
both exporters' chatter kept out of the table they print, and dynamo-onnx's bytecode compiled
before fresh processes are timed."""

from __future__ import annotations

import compileall
import contextlib
import io
import json
import signal
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["Timeout", "compile_bytecode", "quiet", "rows_json", "time_limit"]


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


def compile_bytecode() -> None:
    """Write dynamo-onnx's bytecode (``__pycache__``) before fresh processes are timed.

    torch, onnx and onnxscript come from site-packages compiled when they were installed, as
    a wheel of dynamo-onnx is. A source tree run with ``PYTHONDONTWRITEBYTECODE=1`` (set on
    the shared VMs) would instead compile each of the ~150 modules an export imports from
    source in every worker, a cost no installed package pays; compiling them once here
    (a no-op when they are up to date) measures the exporter as it is installed.
    """
    import dynamo_onnx

    for folder in dynamo_onnx.__path__:
        compileall.compile_dir(folder, quiet=1)
