"""ExportOptions, ONNXRuntimeOptions and DiagnosticOptions, and the one place they are checked.

Every option problem is an :class:`OptionProblem`: the option, what is wrong, what it takes,
and whether it is a wrong type (``TypeError``) or a wrong value (``ValueError``). Options
built by the user are checked when they are constructed; options handed to ``export`` or
``dynamo_export`` are checked by the validate pass with the same functions, so a bad option
fails the same way wherever it is given: ``[DO109 invalid-option]``, the cause, the fix.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dynamo_onnx.defaults import DYNAMO_EXPORT_OPSET, EXPORT_OPSET
from dynamo_onnx.errors import (
    InvalidExportOptionsError,
    InvalidOptionTypeError,
    InvalidOptionValueError,
    format_message,
)
from dynamo_onnx.rules import get_rule

if TYPE_CHECKING:
    import onnxruntime

    from dynamo_onnx.registry import OnnxRegistry

__all__ = [
    "DiagnosticOptions",
    "ExportOptions",
    "ONNXRuntimeOptions",
    "OptionProblem",
    "diagnostic_options_problem",
    "export_options_problem",
    "default_opset",
    "opset_problem",
    "optimize_problem",
]

#: The runtimes ``export(optimize=...)`` fuses a model for, besides True and False.
OPTIMIZE_RUNTIMES = ("onnxruntime",)

_VALID_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)


@dataclasses.dataclass(frozen=True)
class OptionProblem:
    """What is wrong with one option, in the fields of the ``invalid-option`` rule."""

    option: str
    problem: str
    allowed: str
    error_type: type[InvalidExportOptionsError] = InvalidOptionValueError

    @property
    def fields(self) -> dict[str, str]:
        """The message fields of ``invalid-option``."""
        return {"option": self.option, "problem": self.problem, "allowed": self.allowed}

    def error(self) -> InvalidExportOptionsError:
        """The error for a problem found where no export runs yet (a constructor)."""
        rule = get_rule("invalid-option")
        message = format_message(rule.id, rule.name, rule.format_message(**self.fields), rule.fix)
        return self.error_type(message, rule_id=rule.id)


def _type_problem(option: str, value: Any, allowed: str) -> OptionProblem:
    return OptionProblem(option, f"is a {type(value).__name__}", allowed, InvalidOptionTypeError)


@dataclasses.dataclass
class DiagnosticOptions:
    """Options for the diagnostic context, as in ``torch.onnx.DiagnosticOptions``.

    Attributes:
        verbosity_level: a :mod:`logging` level. It filters what the SARIF log and the
            markdown report show, never what is recorded: WARNING shows errors and warnings,
            INFO adds notes and the table of passes, DEBUG adds per-node dispatch detail.
        warnings_as_errors: render every warning as an error, and make the export raise
            after both reports are written.
    """

    verbosity_level: int = logging.INFO
    warnings_as_errors: bool = False

    def __post_init__(self) -> None:
        problem = _diagnostic_fields_problem(self)
        if problem is not None:
            raise problem.error()


def _diagnostic_fields_problem(options: DiagnosticOptions) -> OptionProblem | None:
    level = options.verbosity_level
    if isinstance(level, bool) or level not in _VALID_LEVELS:
        return OptionProblem(
            "DiagnosticOptions.verbosity_level",
            f"is {level!r}",
            "it takes logging.DEBUG, INFO, WARNING or ERROR "
            f"({', '.join(map(str, _VALID_LEVELS))})",
            InvalidOptionValueError,
        )
    if not isinstance(options.warnings_as_errors, bool):
        return _type_problem(
            "DiagnosticOptions.warnings_as_errors",
            options.warnings_as_errors,
            "it takes True or False",
        )
    return None


def diagnostic_options_problem(
    value: Any, option: str = "diagnostic_options"
) -> OptionProblem | None:
    """What is wrong with a ``diagnostic_options`` argument, or None."""
    if value is None:
        return None
    if not isinstance(value, DiagnosticOptions):
        return _type_problem(option, value, "it takes a dynamo_onnx.DiagnosticOptions or None")
    return _diagnostic_fields_problem(value)


@dataclasses.dataclass
class ExportOptions:
    """Options to influence the TorchDynamo ONNX exporter.

    Attributes:
        dynamic_shapes: ``True`` makes every input dimension dynamic, ``False`` every one
            static, ``None`` lets the exporter choose.
        fake_context: the fake context the model was built in (see ``enable_fake_mode``).
        onnx_registry: the registry of ONNX functions; default: onnxscript's torch_lib.
        diagnostic_options: verbosity and warnings-as-errors of the reports.
    """

    dynamic_shapes: bool | None = None
    fake_context: Any = None
    onnx_registry: OnnxRegistry | None = None
    diagnostic_options: DiagnosticOptions = dataclasses.field(default_factory=DiagnosticOptions)

    def __post_init__(self) -> None:
        if self.diagnostic_options is None:
            self.diagnostic_options = DiagnosticOptions()
        problem = _export_fields_problem(self)
        if problem is not None:
            raise problem.error()


def _is_fake_context(value: Any) -> bool:
    """Whether ``value`` is an ``ONNXFakeContext`` (imported here: ``dynamo_onnx.fake``
    needs torch, and the diagnostics, which read these options, must load without it)."""
    from dynamo_onnx.fake import ONNXFakeContext

    return isinstance(value, ONNXFakeContext)


def _export_fields_problem(options: ExportOptions) -> OptionProblem | None:
    if options.dynamic_shapes not in (None, True, False):
        return OptionProblem(
            "ExportOptions.dynamic_shapes",
            f"is {options.dynamic_shapes!r}",
            "it takes True, False or None; pass torch.export dynamic shape specs to "
            "dynamo_onnx.export(..., dynamic_shapes=...) instead",
            InvalidOptionTypeError,
        )
    if options.fake_context is not None and not _is_fake_context(options.fake_context):
        return _type_problem(
            "ExportOptions.fake_context",
            options.fake_context,
            "it takes the context of `with dynamo_onnx.enable_fake_mode() as fake_context:`",
        )
    return diagnostic_options_problem(
        options.diagnostic_options, "ExportOptions.diagnostic_options"
    )


def export_options_problem(value: Any) -> OptionProblem | None:
    """What is wrong with an ``export_options`` argument, or None."""
    if value is None:
        return None
    if not isinstance(value, ExportOptions):
        return _type_problem(
            "export_options", value, "it takes a dynamo_onnx.ExportOptions or None"
        )
    return _export_fields_problem(value)


def default_opset(torch_onnx_call: bool) -> int:
    """The opset of a result when the caller asks for none: torch.onnx.export's for a call
    in its form (``export``), the seed's for ``dynamo_export``. The validate pass applies
    it, and only it."""
    return EXPORT_OPSET if torch_onnx_call else DYNAMO_EXPORT_OPSET


def opset_problem(opset_version: Any) -> OptionProblem | None:
    """What is wrong with an ``opset_version`` argument, or None."""
    if opset_version is None:
        return None
    import onnx.defs  # here: the options load without onnx (see _is_fake_context)

    highest = onnx.defs.onnx_opset_version()
    if isinstance(opset_version, bool) or not isinstance(opset_version, int):
        return OptionProblem(
            "opset_version",
            f"is {opset_version!r}",
            f"it takes an int from 7 to {highest} (the newest this onnx knows), or None for "
            f"the default ({EXPORT_OPSET} for export, {DYNAMO_EXPORT_OPSET} for dynamo_export)",
            InvalidOptionTypeError,
        )
    if not 7 <= opset_version <= highest:
        return OptionProblem(
            "opset_version",
            f"is {opset_version!r}",
            f"it takes an int from 7 to {highest} (the newest this onnx knows), or None for "
            f"the default ({EXPORT_OPSET} for export, {DYNAMO_EXPORT_OPSET} for dynamo_export)",
        )
    return None


@dataclasses.dataclass
class ONNXRuntimeOptions:
    """Options to influence the execution of the ONNX model through ONNX Runtime.

    Attributes:
        session_options: ONNX Runtime session options.
        execution_providers: execution providers, by name or ``(name, options)``.
        execution_provider_options: one options dict per provider.
    """

    session_options: Sequence[onnxruntime.SessionOptions] | onnxruntime.SessionOptions | None = None
    execution_providers: Sequence[str | tuple[str, Mapping[Any, Any]]] | None = None
    execution_provider_options: Sequence[Mapping[Any, Any]] | None = None


def optimize_problem(value: Any) -> OptionProblem | None:
    """What is wrong with an ``optimize`` argument (True, False or a runtime), or None."""
    allowed = "it takes True, False or " + " or ".join(repr(r) for r in OPTIMIZE_RUNTIMES)
    if isinstance(value, bool) or value in OPTIMIZE_RUNTIMES:
        return None
    if isinstance(value, str):
        return OptionProblem("optimize", f"is {value!r}", allowed)
    return _type_problem("optimize", value, allowed)
