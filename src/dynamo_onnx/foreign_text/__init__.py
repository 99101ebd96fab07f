"""torch's and ONNX Runtime's text, read once into typed records: the one package that parses
what other libraries say in words.

Some facts reach the exporter only as text: the guards torch's symbolic-shape log records
while capturing (with torch's own frame), the conditions an ``ExportedProgram`` checks when
called, why torch.export refused a model, why ONNX Runtime refused a model or an input, and
which ONNX node it names. Each is read here into a frozen record, one reader a module
(``shape_log``, ``program_conditions``, ``capture_failures``, ``ort_errors``, and
``small_texts`` for the one-line ones; ``symbols`` and ``unparsed`` are what they share); the
passes work on the records, and no pass applies a regular expression to foreign text
(tests/test_architecture.py fails when a module under ``passes/`` imports ``re``).

The wordings are a contract with a library that does not know it has one. Each reader is fed
text recorded from the real torch and ONNX Runtime (``tests/foreign_text/torch-<version>/``,
one file per reader beside its test module, and ``tests/foreign_text/record.py`` re-records
them for a new version), and a message that looks like one we read but no longer parses is
kept as :class:`Unparsed`, so a finding can say it could not read torch's message and quote
it instead of going quiet.
"""

from __future__ import annotations

from dynamo_onnx.foreign_text.capture_failures import (
    CaptureFailureText,
    FailureKind,
    GraphBreak,
    read_capture_failure,
)
from dynamo_onnx.foreign_text.ort_errors import (
    InputMismatch,
    OrtError,
    UnsupportedType,
    read_ort_error,
)
from dynamo_onnx.foreign_text.program_conditions import (
    ProgramCondition,
    SizeRef,
    program_conditions,
    read_program_conditions,
)
from dynamo_onnx.foreign_text.shape_log import (
    CreatedSymbol,
    Guard,
    Remainder,
    ShapeLog,
    TorchFrame,
    is_about_a_guard,
    read_shape_log,
)
from dynamo_onnx.foreign_text.small_texts import (
    converter_message,
    fx_node_target,
    kernel_registered_in_python,
    rewrite_traceback_paths,
)
from dynamo_onnx.foreign_text.symbols import (
    mentions,
    symbol_mentions,
    symbol_renamer,
    symbols_in,
)
from dynamo_onnx.foreign_text.unparsed import Unparsed

__all__ = [
    "CaptureFailureText",
    "CreatedSymbol",
    "FailureKind",
    "GraphBreak",
    "Guard",
    "InputMismatch",
    "OrtError",
    "ProgramCondition",
    "Remainder",
    "ShapeLog",
    "SizeRef",
    "TorchFrame",
    "UnsupportedType",
    "Unparsed",
    "converter_message",
    "fx_node_target",
    "is_about_a_guard",
    "kernel_registered_in_python",
    "mentions",
    "program_conditions",
    "read_capture_failure",
    "read_ort_error",
    "read_program_conditions",
    "read_shape_log",
    "symbol_renamer",
    "rewrite_traceback_paths",
    "symbol_mentions",
    "symbols_in",
]
