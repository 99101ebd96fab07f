"""Diagnostics: findings, the context that records them, and their renderings.

This package knows nothing of torch.export or ONNX: the exporter feeds it plain data.
"""

from dynamo_onnx.diagnostics.context import DiagnosticContext, PassRecord
from dynamo_onnx.diagnostics.findings import Finding, Level, Location
from dynamo_onnx.diagnostics.options import DiagnosticOptions

__all__ = [
    "DiagnosticContext",
    "DiagnosticOptions",
    "Finding",
    "Level",
    "Location",
    "PassRecord",
]
