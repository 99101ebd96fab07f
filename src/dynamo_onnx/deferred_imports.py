"""onnxscript's optimizer and rewriter, and ONNX's reference evaluator, loaded when first
used, not with the packages that import them.

``import onnxscript`` imports its ``optimizer`` and ``rewriter`` subpackages, and with
them ONNX's reference evaluator (about 200 modules): 0.07 s of CPU and 9,000 objects that
live as long as the process, for an export that does not optimize and never calls them.
When dynamo-onnx is imported before onnxscript, :func:`defer_onnxscript_parts` puts a
:class:`DeferredModule` for each into ``sys.modules``: onnxscript's ``from . import
optimizer, rewriter`` binds it, and the first read of any of its attributes imports the
subpackage through the ordinary import system (``import onnxscript.rewriter.pattern``
included), makes it the package's attribute and ``sys.modules``' entry, and copies its
namespace into the stand-in, so a reference taken earlier reads the same objects
(docs/performance.md, "The overhead beyond capture", fourth round). onnxscript's evaluator,
which translation routes torch_lib's calls through, imports ``onnx.reference`` (0.02 s) for
its eager mode only: :func:`defer_onnx_reference` makes it a stand-in too, bound as
``onnx.reference`` (onnx is imported by then).

Where the module was imported first (by torch.onnx or the caller) nothing is changed. The
stand-ins carry the module's ``__spec__`` and ``__file__`` (``importlib.util.find_spec``
and scans of ``sys.modules`` by file read them without importing it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = [
    "DEFERRED",
    "DeferredModule",
    "defer_onnx_reference",
    "defer_onnxscript_parts",
    "is_deferred",
]

#: The subpackages deferred (``onnxscript/__init__.py`` imports both; nothing else in
#: onnxscript imports them while it is imported).
DEFERRED = ("onnxscript.optimizer", "onnxscript.rewriter")


class DeferredModule(types.ModuleType):
    """A subpackage's stand-in in ``sys.modules`` until an attribute it lacks is read."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_load(self), name)

    def __dir__(self) -> list[str]:
        return dir(_load(self))


def is_deferred(name: str) -> bool:
    """Whether the module ``name`` is still a stand-in that has not been imported."""
    return isinstance(sys.modules.get(name), DeferredModule)  # the real one replaces it


#: Held while a stand-in is replaced: two threads reading a stand-in at once (export-llm's
#: save and its layer copy's export) import the module once. Re-entrant: loading the
#: optimizer reads the rewriter's stand-in.
_LOADING = threading.RLock()


def _load(stand_in: DeferredModule) -> types.ModuleType:
    """Import the real subpackage (its parent first), put it where the stand-in was and
    copy its namespace into the stand-in."""
    with _LOADING:
        return _replace(stand_in)


def _replace(stand_in: DeferredModule) -> types.ModuleType:
    name = stand_in.__name__
    parent_name, _, child = name.rpartition(".")
    parent = importlib.import_module(parent_name)  # binds the stand-in, if not yet imported
    current = sys.modules.get(name)
    if current is not None and current is not stand_in:
        return current  # imported already, as the stand-in's namespace shows once copied
    del sys.modules[name]
    if vars(parent).get(child) is stand_in:
        # the import system then binds the partly imported module while it runs
        delattr(parent, child)
    try:
        real = importlib.import_module(name)
    except BaseException:
        sys.modules[name] = stand_in
        setattr(parent, child, stand_in)
        raise
    vars(stand_in).update(vars(real))
    return real


def _stand_in(name: str, package: importlib.machinery.ModuleSpec) -> DeferredModule | None:
    """The stand-in of ``name``, a subpackage of ``package`` found on disk; None when it is
    not there (another onnxscript layout: then nothing is deferred)."""
    spec = importlib.machinery.PathFinder.find_spec(name, package.submodule_search_locations)
    if spec is None or spec.origin is None:
        return None
    stand_in = DeferredModule(name)
    stand_in.__spec__ = spec
    stand_in.__file__ = spec.origin
    stand_in.__loader__ = spec.loader
    stand_in.__package__ = name
    return stand_in


def defer_onnxscript_parts() -> None:
    """Put the stand-ins of :data:`DEFERRED` in ``sys.modules`` unless onnxscript or one of
    them was imported already (or onnxscript is not installed)."""
    if "onnxscript" in sys.modules or any(name in sys.modules for name in DEFERRED):
        return
    package = importlib.util.find_spec("onnxscript")
    if package is None or not package.submodule_search_locations:
        return
    stand_ins = [_stand_in(name, package) for name in DEFERRED]
    if all(stand_ins):
        sys.modules.update({m.__name__: m for m in stand_ins if m is not None})


def defer_onnx_reference() -> None:
    """Make ``onnx.reference`` a stand-in, bound as ``onnx``'s attribute, unless it was
    imported already; onnx must be imported (the stand-in is its attribute)."""
    name = "onnx.reference"
    onnx = sys.modules.get("onnx")
    if onnx is None or name in sys.modules or onnx.__spec__ is None:
        return
    stand_in = _stand_in(name, onnx.__spec__)
    if stand_in is not None:
        sys.modules[name] = stand_in
        onnx.reference = stand_in
