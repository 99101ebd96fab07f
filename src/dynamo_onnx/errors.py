"""OnnxExporterError and its subclasses.

Every error the exporter raises on purpose is an :class:`OnnxExporterError` whose message
names the rule id, the cause and the fix, and which carries the diagnostic context so the
findings are never lost (``error.diagnostics.findings``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynamo_onnx.diagnostics import DiagnosticContext

__all__ = [
    "DynamoOnnxWarning",
    "OnnxExporterError",
    "InvalidExportOptionsError",
    "CaptureError",
    "DecompositionError",
    "UnsupportedOperatorError",
    "TranslationError",
    "SerializationError",
    "SaveError",
    "FakeWeightsError",
    "InvalidOptionValueError",
    "InvalidOptionTypeError",
    "WeightsMismatchError",
    "OptimizationError",
    "VerificationError",
    "WarningsAsErrorsError",
]


class DynamoOnnxWarning(UserWarning):
    """A warning finding of an export that succeeded, issued as a Python warning at the
    user's line so that it reaches the terminal. Filter it like any warning:
    ``warnings.filterwarnings("ignore", category=dynamo_onnx.DynamoOnnxWarning)``."""


class OnnxExporterError(RuntimeError):
    """Errors raised by the ONNX exporter. This is the base class for all exporter errors.

    Attributes:
        rule_id: the id of the rule that explains the error (``DO301``...).
        diagnostics: the diagnostic context of the export, with every finding recorded.
    """

    def __init__(
        self,
        message: str,
        *,
        rule_id: str | None = None,
        diagnostics: DiagnosticContext | None = None,
    ) -> None:
        super().__init__(message)
        self.rule_id = rule_id
        self.diagnostics = diagnostics
        #: Paths of the reports written for this failure, when ``report=True``.
        self.report_paths: list[str] = []

    def __str__(self) -> str:
        text = super().__str__()
        if self.report_paths:
            text += "\nReports: " + ", ".join(self.report_paths)
        return text


class InvalidExportOptionsError(OnnxExporterError):
    """The arguments of ``export()`` or ``ExportOptions`` are invalid."""


class InvalidOptionValueError(InvalidExportOptionsError, ValueError):
    """An option with a value outside what it takes (also a ``ValueError``)."""


class InvalidOptionTypeError(InvalidExportOptionsError, TypeError):
    """An option of the wrong type (also a ``TypeError``)."""


class CaptureError(OnnxExporterError):
    """No capture strategy could turn the model into an ExportedProgram."""


class DecompositionError(OnnxExporterError):
    """Decomposing the ExportedProgram into translatable ATen operators failed."""


class UnsupportedOperatorError(OnnxExporterError):
    """Operators of the model have no ONNX function (every one is listed)."""


class TranslationError(OnnxExporterError):
    """Translating FX nodes to ONNX failed for another reason than a missing function."""


class SerializationError(OnnxExporterError):
    """Building, converting or writing the ONNX model failed."""


class SaveError(SerializationError, OSError):
    """The model could not be written; also an ``OSError``, as file errors are."""


class FakeWeightsError(SerializationError):
    """The weights are fake (meta): they cannot be saved or run before ``apply_weights``."""


class WeightsMismatchError(OnnxExporterError):
    """``apply_weights`` was given names, shapes or dtypes that do not match the model."""


class OptimizationError(OnnxExporterError):
    """The onnxscript optimizer failed on the model."""


class VerificationError(OnnxExporterError):
    """The exported model could not be run for verification."""


class WarningsAsErrorsError(OnnxExporterError):
    """The export succeeded, but produced warnings while ``warnings_as_errors=True``.

    ``program`` holds the exported :class:`ONNXProgram`, usable despite the warnings.
    """

    program: object = None


def format_message(rule_id: str, rule_name: str, cause: str, fix: str) -> str:
    """The shape of every exporter error message: rule, cause, fix."""
    return f"[{rule_id} {rule_name}] {cause}\nFix: {fix}"
