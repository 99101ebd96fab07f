"""Diagnostics: findings and the context that records them.

This package knows nothing of torch, ONNX, the passes or the renderings: the exporter feeds
it plain data, and ``dynamo_onnx.reports`` renders it.
"""

from dynamo_onnx.diagnostics.context import DiagnosticContext, PassRecord
from dynamo_onnx.diagnostics.findings import Finding, Level, Location
from dynamo_onnx.diagnostics.summary import ExportSummary
from dynamo_onnx.options import DiagnosticOptions

__all__ = [
    "DiagnosticContext",
    "DiagnosticOptions",
    "ExportSummary",
    "Finding",
    "Level",
    "Location",
    "PassRecord",
]
