"""torch_lib's functions made when first used, not all at its import.

torch_lib's ``torch_op`` decorator builds each function as its module is imported: it types
the signature of each of its ~420 traced functions from their annotations and compiles the
~50 scripted ones (onnxscript's converter on their source), 41,000 objects that live as long
as the process, for exports that call a few dozen of them. While dynamo-onnx imports torch_lib
(:func:`functions_made_when_used`), the two constructors that decorator calls,
``onnxscript.values.TracedOnnxFunction`` and ``onnxscript.script``, make these subclasses
instead: the same types (``isinstance`` holds), whose first attribute read makes the real
function with the same public constructor and takes its state. Dispatch reads the signatures
of the candidates of the operators a graph has; torch's own exporter, run later in the same
process, reads them all and gets the same functions (docs/performance.md, "The overhead
beyond capture", third round).

The two names are put back when the import ends, also when it fails; the functions made
in that window stay deferred for the life of the process. Not thread-safe against another
thread scripting onnxscript functions during that import (it would get deferred functions,
which behave the same).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import onnxscript
from onnxscript import values as onnxscript_values

__all__ = ["DeferredScripted", "DeferredTraced", "functions_made_when_used", "is_made"]

#: Where the real function's maker waits until the first attribute read.
_MAKER = "_dynamo_onnx_make"


class _MadeWhenUsed:
    """The first read of an attribute the instance lacks makes the real function (its maker,
    kept under :data:`_MAKER`) and takes its state; later reads are plain attribute reads."""

    def __getattr__(self, name: str) -> Any:
        make = self.__dict__.pop(_MAKER, None)
        if make is None:  # made already: the attribute does not exist
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.update(vars(make()))
        return getattr(self, name)


class DeferredTraced(_MadeWhenUsed, onnxscript_values.TracedOnnxFunction):
    """A ``TracedOnnxFunction`` whose signature is typed when first asked for."""

    def __init__(self, opset: onnxscript_values.Opset, func: Callable[..., Any]) -> None:
        functools.update_wrapper(self, func)
        self.__dict__[_MAKER] = functools.partial(_TRACED, opset, func)


class DeferredScripted(_MadeWhenUsed, onnxscript_values.OnnxFunction):
    """An ``OnnxFunction`` compiled from its source when first used."""

    def __init__(self, decorator: Callable[[Callable[..., Any]], Any], func: Any) -> None:
        functools.update_wrapper(self, func)
        self.__dict__[_MAKER] = functools.partial(decorator, func)


#: onnxscript's own constructors, the ones the deferred functions call when first used.
_TRACED = onnxscript_values.TracedOnnxFunction
_SCRIPT = onnxscript.script


def _deferred_script(*args: Any, **kwargs: Any) -> Callable[[Any], DeferredScripted]:
    """``onnxscript.script(...)``'s stand-in: the decorator it returns defers the compile."""
    decorator = _SCRIPT(*args, **kwargs)  # checks its arguments now, as script() does
    return lambda func: DeferredScripted(decorator, func)


def is_made(function: Any) -> bool:
    """Whether a torch_lib function has been made (always, for one not deferred)."""
    return _MAKER not in vars(function)


@contextlib.contextmanager
def functions_made_when_used() -> Iterator[None]:
    """While it is open, torch_lib's decorator makes deferred functions (module docstring)."""
    onnxscript_values.TracedOnnxFunction = DeferredTraced  # type: ignore[misc]
    onnxscript.script = _deferred_script  # type: ignore[assignment]
    try:
        yield
    finally:
        onnxscript_values.TracedOnnxFunction = _TRACED  # type: ignore[misc]
        onnxscript.script = _SCRIPT
