"""dynamo-onnx: a diagnostics-first PyTorch to ONNX exporter.

The API of ``torch.onnx.dynamo_export`` (PyTorch 2.1-2.5), working on current PyTorch, with
every finding rendered to SARIF and markdown. ``import dynamo_onnx as onnx`` and code
written for ``torch.onnx.dynamo_export`` runs as it did.

The public names that need torch (``export``, ``ONNXProgram``, ``OnnxRegistry``...) are
imported when first used (PEP 562), so that the diagnostics, the reports and the commands
that only read a SARIF log (``dynamo-onnx gate``, ``report``, ``rules``) load neither torch
nor onnx. The exporting module is ``dynamo_onnx.exporter``, not ``dynamo_onnx.export``,
so that importing it can never replace the ``export`` function with a module.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

from dynamo_onnx.deferred_imports import defer_onnxscript_parts
from dynamo_onnx.errors import (
    CaptureError,
    DecompositionError,
    DynamoOnnxWarning,
    FakeWeightsError,
    InvalidExportOptionsError,
    OnnxExporterError,
    OptimizationError,
    SaveError,
    SerializationError,
    TranslationError,
    UnsupportedOperatorError,
    VerificationError,
    WarningsAsErrorsError,
    WeightsMismatchError,
)
from dynamo_onnx.options import DiagnosticOptions, ExportOptions, ONNXRuntimeOptions
from dynamo_onnx.versions import package_version

if TYPE_CHECKING:
    from dynamo_onnx.exporter import dynamo_export, export
    from dynamo_onnx.fake import ONNXFakeContext, enable_fake_mode
    from dynamo_onnx.integrations.transformers import cache_dynamic_shapes
    from dynamo_onnx.llm_folder import export_llm
    from dynamo_onnx.program import ONNXProgram
    from dynamo_onnx.registry import OnnxRegistry
    from dynamo_onnx.torch_onnx_names import (
        OperatorExportTypes,
        TrainingMode,
        is_in_onnx_export,
    )

__version__ = package_version()

# onnxscript's optimizer and rewriter load when first used (deferred_imports.py says why)
defer_onnxscript_parts()

#: Public name -> the module that defines it (imported on first use).
_LAZY = {
    "dynamo_export": "dynamo_onnx.exporter",
    "export": "dynamo_onnx.exporter",
    "export_llm": "dynamo_onnx.llm_folder",
    "ONNXFakeContext": "dynamo_onnx.fake",
    "enable_fake_mode": "dynamo_onnx.fake",
    "cache_dynamic_shapes": "dynamo_onnx.integrations.transformers",
    "ONNXProgram": "dynamo_onnx.program",
    "OnnxRegistry": "dynamo_onnx.registry",
    "OperatorExportTypes": "dynamo_onnx.torch_onnx_names",
    "TrainingMode": "dynamo_onnx.torch_onnx_names",
    "is_in_onnx_export": "dynamo_onnx.torch_onnx_names",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dynamo_onnx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups do not come here
    return value


def __dir__() -> list[str]:
    """The public names and the submodules loaded so far: not what this module imports to
    work (``importlib``, ``Any``...), which ``dir()`` would otherwise list as if public."""
    submodules = [
        name
        for name, value in globals().items()
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}"
    ]
    return sorted({*__all__, "__version__", *submodules})


__all__ = [
    "CaptureError",
    "DecompositionError",
    "DiagnosticOptions",
    "DynamoOnnxWarning",
    "ExportOptions",
    "FakeWeightsError",
    "InvalidExportOptionsError",
    "ONNXFakeContext",
    "ONNXProgram",
    "ONNXRuntimeOptions",
    "OnnxExporterError",
    "OnnxRegistry",
    "OperatorExportTypes",
    "OptimizationError",
    "SaveError",
    "SerializationError",
    "TrainingMode",
    "TranslationError",
    "UnsupportedOperatorError",
    "VerificationError",
    "WarningsAsErrorsError",
    "WeightsMismatchError",
    "cache_dynamic_shapes",
    "dynamo_export",
    "enable_fake_mode",
    "export",
    "export_llm",
    "is_in_onnx_export",
]
