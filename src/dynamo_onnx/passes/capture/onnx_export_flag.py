"""``torch.onnx.is_in_onnx_export()`` is True while dynamo-onnx captures a model.

Code written for ``torch.onnx.export`` branches on it (``if torch.onnx.is_in_onnx_export():``
to emit ``torch.onnx.ops.symbolic`` nodes, or a simpler path for the exporter), and
torch.onnx's exporter makes it True for the whole export. torch has no public way to set
it: the function reads a flag of a private torch module, which dynamo-onnx may not import.

So the public function itself answers True for the duration of the capture: its code object
is swapped for one that returns True, and put back afterwards, also when the capture fails.
Swapping the code (rather than the ``torch.onnx.is_in_onnx_export`` attribute) keeps the
function object the same, so code that did ``from torch.onnx import is_in_onnx_export`` at
import time sees it too, and so does TorchDynamo, which folds the function (by identity)
to False in strict capture, as it does under torch.onnx. This is the only torch state an
export changes here; :func:`check_supported` says so loudly if a torch release turns the
function into something whose code cannot be swapped (tests/test_onnx_export_flag.py).
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator

import torch

__all__ = ["check_supported", "onnx_export_flag"]


def _exporting() -> bool:
    return True


class _Swap:
    """The swapped code and how many captures (threads, nested exports) are inside it: the
    last one out puts torch's code back, so no capture ends another's early."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.original: types.CodeType | None = None


_SWAP = _Swap()


def check_supported() -> types.FunctionType:
    """The function to patch; TypeError if torch made it something else (a builtin, a
    wrapper with a closure), so that the tests fail instead of the flag silently not being set."""
    function = torch.onnx.is_in_onnx_export
    if not isinstance(function, types.FunctionType) or function.__code__.co_freevars:
        raise TypeError(
            "torch.onnx.is_in_onnx_export is no longer a plain Python function "
            f"({type(function).__name__}); dynamo-onnx cannot make it True during export"
        )
    return function


@contextlib.contextmanager
def onnx_export_flag() -> Iterator[None]:
    """``torch.onnx.is_in_onnx_export()`` returns True inside the block, as it was after."""
    function = check_supported()
    with _SWAP.lock:
        if _SWAP.depth == 0:
            _SWAP.original = function.__code__
            function.__code__ = _exporting.__code__
        _SWAP.depth += 1
    try:
        yield
    finally:
        with _SWAP.lock:
            _SWAP.depth -= 1
            if _SWAP.depth == 0 and _SWAP.original is not None:
                function.__code__ = _SWAP.original
                _SWAP.original = None
