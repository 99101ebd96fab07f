"""dynamo-onnx: a diagnostics-first PyTorch to ONNX exporter.

The API of ``torch.onnx.dynamo_export`` (PyTorch 2.1-2.5), working on current PyTorch, with
every finding rendered to SARIF and markdown. ``import dynamo_onnx as onnx`` and code
written for ``torch.onnx.dynamo_export`` runs as it did.
"""

from dynamo_onnx.diagnostics import DiagnosticOptions
from dynamo_onnx.exporter.api import dynamo_export, export
from dynamo_onnx.exporter.errors import (
    CaptureError,
    DecompositionError,
    FakeWeightsError,
    InvalidExportOptionsError,
    OnnxExporterError,
    SerializationError,
    SaveError,
    TranslationError,
    OptimizationError,
    UnsupportedOperatorError,
    VerificationError,
    WarningsAsErrorsError,
    WeightsMismatchError,
)
from dynamo_onnx.exporter.fake import ONNXFakeContext, enable_fake_mode
from dynamo_onnx.exporter.options import ExportOptions, ONNXRuntimeOptions
from dynamo_onnx.exporter.program import ONNXProgram
from dynamo_onnx.exporter.registry import OnnxRegistry
from dynamo_onnx.exporter.versions import package_version

__version__ = package_version()

__all__ = [
    "CaptureError",
    "DecompositionError",
    "DiagnosticOptions",
    "ExportOptions",
    "FakeWeightsError",
    "InvalidExportOptionsError",
    "ONNXFakeContext",
    "ONNXProgram",
    "ONNXRuntimeOptions",
    "OnnxExporterError",
    "OnnxRegistry",
    "OptimizationError",
    "SerializationError",
    "SaveError",
    "TranslationError",
    "UnsupportedOperatorError",
    "VerificationError",
    "WarningsAsErrorsError",
    "WeightsMismatchError",
    "dynamo_export",
    "enable_fake_mode",
    "export",
]
