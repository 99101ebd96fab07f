"""The one place that reads onnxscript's torch_lib table.

torch_lib registers its functions in ``onnxscript.function_libs.torch_lib.registration``'s
``default_registry`` when its ``ops`` package is imported. torch reads the same table
through ``onnxscript._framework_apis.torch_2_11.get_torchlib_ops``, which also builds the
IR of every function (once per process, for hundreds of functions an export mostly never
calls);
reading the registry directly leaves that to the functions translation uses, and importing
torch_lib here makes each function when it is first used (``torchlib_deferred``). When the
registry moves in a release of onnxscript, the export fails here with a clear message
naming the versions this was checked with, instead of an error deep in a pass.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from dynamo_onnx.versions import tool_versions

__all__ = ["CHECKED_ONNXSCRIPT", "TorchLibFunction", "TorchLibUnavailableError", "torchlib_ops"]

#: The onnxscript versions the registry below was checked on (also pyproject.toml's pin).
CHECKED_ONNXSCRIPT = ">=0.7.2,<0.8"
_MODULE = "onnxscript.function_libs.torch_lib.registration"
_OPS = "onnxscript.function_libs.torch_lib.ops"
_REGISTRY = "default_registry"


class TorchLibUnavailableError(ImportError):
    """onnxscript does not have the torch_lib registry dynamo-onnx reads."""


@dataclasses.dataclass(frozen=True)
class TorchLibFunction:
    """One torch_lib function: the operator it implements (``aten::add.Tensor``), the
    onnxscript function, and whether it is the complex-valued variant."""

    qualified_name: str
    function: Any
    is_complex: bool


def torchlib_ops(module: str = _MODULE) -> Sequence[TorchLibFunction]:
    """torch_lib's functions, with their qualified names (internal helpers left out)."""
    try:
        if _OPS in sys.modules:  # imported already (by torch.onnx): its functions are made
            importlib.import_module(_OPS)
        else:
            from dynamo_onnx.registry.torchlib_deferred import functions_made_when_used

            with functions_made_when_used():
                importlib.import_module(_OPS)  # registers the functions
        registry = getattr(importlib.import_module(module), _REGISTRY)
        entries = list(registry.items())
    except (ImportError, AttributeError) as exc:
        installed = tool_versions().get("onnxscript", "unknown")
        raise TorchLibUnavailableError(
            f"dynamo-onnx reads onnxscript's torch_lib through {module}.{_REGISTRY}, which "
            f"onnxscript {installed} does not have (checked with onnxscript{CHECKED_ONNXSCRIPT}). "
            f'Install a checked version: pip install "onnxscript{CHECKED_ONNXSCRIPT}".'
        ) from exc
    found = []
    for name, overloads in entries:
        if name.startswith("internal::"):
            continue
        found += [TorchLibFunction(name, f, False) for f in overloads.overloads]
        found += [TorchLibFunction(name, f, True) for f in overloads.complex]
    return found
