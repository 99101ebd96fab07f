"""Smaller texts, each read by one function: the version converter's ``$13``, the
dispatcher's "registered at x.py", an FX node's ``target=``, the paths of a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable

_CONVERTER_NUMBER = re.compile(r"\$(\d+)")


def converter_message(text: str) -> str:
    """ONNX's version converter's message as a sentence: its C++ formats numbers with a
    stray ``$`` ("No Adapter From Version $13 for Gemm")."""
    return _CONVERTER_NUMBER.sub(r"\1", text)


_PYTHON_KERNEL = re.compile(r"registered at .+\.py:\d+")


def kernel_registered_in_python(description: str) -> bool:
    """Whether the dispatcher's description of a kernel (``repr`` of
    ``torch.library.get_kernel``) says it was registered from a Python file."""
    return _PYTHON_KERNEL.search(description) is not None


_FX_TARGET = re.compile(r"target=(?:torch\.ops\.)?([^\]]+)\]")


def fx_node_target(description: str) -> str | None:
    """The operator of an FX node as torch prints the node (``... target=torch.ops.aten.relu.default]``)."""
    found = _FX_TARGET.search(description)
    return found[1] if found else None


#: A frame's file in a Python traceback text: `  File "/path/x.py", line 12, in forward`.
_TRACEBACK_FILE = re.compile(r'^(\s*File ")([^"]+)(", line \d+)', re.MULTILINE)


def rewrite_traceback_paths(trace: str, rewrite: Callable[[str], str | None]) -> str:
    """``trace`` (a Python traceback's text, as torch keeps it in ``node.meta``) with each
    frame's path replaced by ``rewrite(path)``, or kept when that is None."""

    def replaced(match: re.Match[str]) -> str:
        new = rewrite(match[2])
        return match[0] if new is None else f"{match[1]}{new}{match[3]}"

    return _TRACEBACK_FILE.sub(replaced, trace)
