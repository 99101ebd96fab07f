"""Other libraries' log output while a pass runs: theirs, not ours.

torch, onnxscript and onnx_ir log what they try and what fails (often with a traceback).
During an export that text is not the user's output: a pass that knows what such a record
means reports it as a finding; the rest is dropped, by a filter added to the logger for as
long as the pass runs (never by replacing the caller's handlers or levels, which are left
as they were).
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator

__all__ = [
    "ONNX_IR_CHATTER",
    "deprecations_ignored",
    "dropped",
    "filtered",
    "partial_graphs_dropped",
    "torch_deprecations_ignored",
]

#: onnx_ir's warnings while torch_lib builds nodes and while the optimizer runs ("Attribute
#: type is ambiguous because it is an empty sequence", "Skipped deduplication of
#: initializer"): about how the library is called, nothing the user can act on.
ONNX_IR_CHATTER = ("onnx_ir._convenience", "onnx_ir.passes.common.initializer_deduplication")


class _DropAll(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def filtered(logger: logging.Logger, log_filter: logging.Filter) -> Iterator[None]:
    """``log_filter`` on ``logger`` while the block runs (added beside the caller's filters
    and handlers, removed afterwards)."""
    logger.addFilter(log_filter)
    try:
        yield
    finally:
        logger.removeFilter(log_filter)


@contextlib.contextmanager
def dropped(*names: str) -> Iterator[None]:
    """No record of these loggers reaches any handler while the block runs."""
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(filtered(logging.getLogger(name), _DropAll()))
        yield


@contextlib.contextmanager
def deprecations_ignored() -> Iterator[None]:
    """Deprecation warnings (``FutureWarning``, ``DeprecationWarning``) ignored while the
    passes run: the passes call the model and the libraries as the user's inputs ask
    (a model library's warning that a parameter was renamed, on every eager call of a capture
    and a verification), which the user sees when they call the model themselves;
    repeated by an export, they are noise. The caller's filters are put back afterwards."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@contextlib.contextmanager
def torch_deprecations_ignored() -> Iterator[None]:
    """torch's own deprecation warnings about its internals while it copies tree specs
    (``isinstance(treespec, LeafSpec)`` is deprecated), ignored while the block runs; the
    warnings filters are put back afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning
        )
        yield


@contextlib.contextmanager
def partial_graphs_dropped() -> Iterator[None]:
    """torch.export ``print``s the partial FX graph of a failed capture to ``sys.stderr``
    (once per wrapper it passes through: 36 lines for a one-line data-dependent branch);
    the capture finding already names the line. What is written to ``sys.stderr`` while
    the block runs is held, the failure's ``partial_fx_graph`` taken out, and the rest
    (the model's own prints) written to the real stream afterwards, which is put back."""
    real, held = sys.stderr, io.StringIO()
    graph = None
    sys.stderr = held
    try:
        yield
    except BaseException as exc:
        graph = getattr(exc, "partial_fx_graph", None)
        raise
    finally:
        sys.stderr = real
        text = held.getvalue()
        if graph is not None:
            text = text.replace(f"{graph}\n", "")
        if text:
            real.write(text)
