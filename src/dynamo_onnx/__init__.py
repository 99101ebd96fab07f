"""dynamo-onnx: a diagnostics-first PyTorch to ONNX exporter.

The API of ``torch.onnx.dynamo_export`` (PyTorch 2.1-2.5), working on current PyTorch, with
every finding rendered to SARIF and markdown. ``import dynamo_onnx as onnx`` and code
written for ``torch.onnx.dynamo_export`` runs as it did.
"""

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
from dynamo_onnx.export import dynamo_export, export
from dynamo_onnx.fake import ONNXFakeContext, enable_fake_mode
from dynamo_onnx.options import DiagnosticOptions, ExportOptions, ONNXRuntimeOptions
from dynamo_onnx.passes.validate.caches import cache_dynamic_shapes
from dynamo_onnx.program import ONNXProgram
from dynamo_onnx.registry import OnnxRegistry
from dynamo_onnx.versions import package_version

__version__ = package_version()

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
    "OptimizationError",
    "SaveError",
    "SerializationError",
    "TranslationError",
    "UnsupportedOperatorError",
    "VerificationError",
    "WarningsAsErrorsError",
    "WeightsMismatchError",
    "cache_dynamic_shapes",
    "dynamo_export",
    "enable_fake_mode",
    "export",
]
