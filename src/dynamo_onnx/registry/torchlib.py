"""The one place that reads onnxscript's torch_lib table.

onnxscript exposes it to torch through a versioned module, ``onnxscript._framework_apis``
(``torch_2_11.get_torchlib_ops``: the API torch itself calls). It is underscored, so it may
move in a release of onnxscript; when it does, the export fails here with a clear message
naming the versions this was checked with, instead of an ImportError deep in a pass.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from dynamo_onnx.versions import tool_versions

__all__ = ["CHECKED_ONNXSCRIPT", "TorchLibUnavailableError", "torchlib_ops"]

#: The onnxscript versions the framework API below was checked on (also pyproject.toml's pin).
CHECKED_ONNXSCRIPT = ">=0.7.2,<0.8"
_MODULE = "onnxscript._framework_apis.torch_2_11"
_FUNCTION = "get_torchlib_ops"


class TorchLibUnavailableError(ImportError):
    """onnxscript does not have the framework API dynamo-onnx reads torch_lib through."""


def torchlib_ops(module: str = _MODULE) -> Sequence[Any]:
    """torch_lib's functions with their qualified names (``meta.qualified_name``,
    ``meta.function``, ``meta.is_complex``)."""
    try:
        get_ops = getattr(importlib.import_module(module), _FUNCTION)
    except (ImportError, AttributeError) as exc:
        installed = tool_versions().get("onnxscript", "unknown")
        raise TorchLibUnavailableError(
            f"dynamo-onnx reads onnxscript's torch_lib through {module}.{_FUNCTION}, which "
            f"onnxscript {installed} does not have (checked with onnxscript{CHECKED_ONNXSCRIPT}). "
            f'Install a checked version: pip install "onnxscript{CHECKED_ONNXSCRIPT}".'
        ) from exc
    return list(get_ops())
