"""export() and dynamo_export(): run the passes in order, inside one diagnostic context."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import onnx
import torch

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext, DiagnosticOptions, Location
from dynamo_onnx.diagnostics.context import ProgressEvent, default_library_prefixes, mark_recorded
from dynamo_onnx.exporter import (
    capture,
    decomposition,
    reporting,
    serialization,
    translation,
    validation,
)
from dynamo_onnx.exporter.errors import (
    option_error,
    CaptureError,
    DecompositionError,
    InvalidExportOptionsError,
    OnnxExporterError,
    OptimizationError,
    SerializationError,
    TranslationError,
    VerificationError,
    format_message,
)
from dynamo_onnx.exporter.fake import ONNXFakeContext
from dynamo_onnx.exporter.options import ExportOptions
from dynamo_onnx.exporter.program import ONNXProgram
from dynamo_onnx.exporter.registry import OnnxRegistry
from dynamo_onnx.exporter.versions import package_version, tool_versions
from dynamo_onnx.rules import catalog

__all__ = ["export", "dynamo_export"]

_PASS_ERRORS: dict[str, type[OnnxExporterError]] = {
    "capture": CaptureError,
    "decomposition": DecompositionError,
    "translation": TranslationError,
    "serialization": SerializationError,
    "optimization": OptimizationError,
    "verification": VerificationError,
}

_PACKAGE_DIR = os.path.dirname(os.path.abspath(dynamo_onnx.__file__)) + os.sep


def _call_site() -> Location | None:
    """The user's line that called the exporter: the first frame outside this package
    that is a real file (not ``<frozen runpy>`` or ``<string>``)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        path = os.path.abspath(filename)
        if not filename.startswith("<") and not path.startswith(_PACKAGE_DIR):
            return Location(path, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _subject(model: Any) -> str:
    """A short name of what is exported, for report titles and file names."""
    if isinstance(model, torch.export.ExportedProgram):
        return "ExportedProgram"
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    return getattr(model, "__name__", type(model).__name__)


def _new_context(
    options: DiagnosticOptions | None,
    source_root: str | os.PathLike[str] | None,
    arguments: list[str],
    subject: str,
    progress: Callable[[ProgressEvent], None] | None,
) -> DiagnosticContext:
    return DiagnosticContext(
        options,
        source_root=source_root,
        call_site=_call_site(),
        library_prefixes=default_library_prefixes(torch, dynamo_onnx),
        arguments=arguments,
        versions={"dynamo-onnx": package_version(), **tool_versions()},
        subject=subject,
        listener=progress,
    )


def _wrap(ctx: DiagnosticContext, exc: BaseException) -> OnnxExporterError:
    """An OnnxExporterError for a pass failure whose finding the context recorded."""
    if isinstance(exc, OnnxExporterError):
        exc.diagnostics = ctx
        return exc
    failed = next((p for p in reversed(ctx.passes) if p.outcome == "failed"), None)
    pass_name = failed.name if failed else "export"
    rule = catalog().for_pass(pass_name)
    finding = next((f for f in reversed(ctx.findings) if f.rule is rule), None)
    if finding is None:  # raised outside any pass: record it, so the log says what happened
        finding = ctx.record_exception(exc, rule)
    cause = finding.message
    error_type = _PASS_ERRORS.get(pass_name, OnnxExporterError)
    error = error_type(
        format_message(rule.id, rule.name, cause, rule.fix), rule_id=rule.id, diagnostics=ctx
    )
    mark_recorded(error)
    return error


def export(
    model: torch.nn.Module | Callable[..., Any] | torch.export.ExportedProgram,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    opset_version: int | None = None,
    registry: OnnxRegistry | None = None,
    diagnostic_options: DiagnosticOptions | None = None,
    report: bool = False,
    artifacts_dir: str | os.PathLike[str] = ".",
    optimize: bool = False,
    verify: bool = False,
    module_functions: bool = False,
    source_root: str | os.PathLike[str] | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
) -> ONNXProgram:
    """Export a PyTorch model to an :class:`ONNXProgram`.

    Args:
        model: an ``nn.Module``, a callable, or a ``torch.export.ExportedProgram``.
        args: positional example inputs.
        kwargs: keyword example inputs.
        dynamic_shapes: torch.export dynamic shape specs (``Dim``, ``Dim.AUTO``, dicts and
            tuples per input), names as strings (``{"x": {0: "batch"}}``), or ``True`` for
            every dimension. Dynamic dims appear in the ONNX model under the user's names,
            else as ``<input>_dim_<i>``.
        opset_version: the ONNX opset of the result; default: the registry's (18).
        registry: the ONNX functions to use; default: onnxscript's torch_lib.
        diagnostic_options: verbosity and warnings-as-errors of the reports.
        report: write ``<artifacts_dir>/<Model>.sarif`` and ``<Model>.md``, on success and
            on failure (then the exception message names both paths).
        artifacts_dir: where the reports go (created if missing).
        optimize: run the onnxscript optimizer on the result (``ONNXProgram.optimize``).
        verify: compare ONNX Runtime with the model in eager PyTorch on the example inputs
            (``ONNXProgram.verify``, default tolerances); a mismatch is a warning finding.
        module_functions: group each submodule call into an ONNX local function named after
            its module path (Netron then shows the layer hierarchy); default: inline.
        source_root: the directory SARIF paths are relative to (default: cwd).
        progress: called with a ``ProgressEvent`` as passes start, end and advance.

    Raises:
        OnnxExporterError: a subclass naming the rule, the cause and the fix; its
            ``diagnostics`` hold every finding.
    """
    subject = _subject(model)
    options_ok = diagnostic_options is None or isinstance(diagnostic_options, DiagnosticOptions)
    ctx = _new_context(
        diagnostic_options if options_ok else None,
        source_root, [f"export({subject})"], subject, progress,
    )
    try:
        registry = registry if registry is not None else OnnxRegistry()
        with ctx.pass_("capture"):
            if not options_ok:
                validation.fail(
                    ctx, "invalid-option", option="diagnostic_options",
                    problem=f"is a {type(diagnostic_options).__name__}",
                    allowed="it takes a dynamo_onnx.DiagnosticOptions or None",
                )
            validation.check_model(ctx, model)
            validation.check_opset(ctx, opset_version)
            args, kwargs = validation.check_arguments(ctx, args, kwargs)
            if dynamic_shapes is True:
                dynamic_shapes = capture.all_dimensions_dynamic(model, args, kwargs or {})
            program = capture.run(
                ctx, model, args, kwargs, capture.normalize_dynamic_shapes(dynamic_shapes)
            )
            validation.check_outputs(ctx, program)
            dim_names = capture.dimension_names(program, model, dynamic_shapes)
        with ctx.pass_("decomposition"):
            program = decomposition.run(ctx, program, registry)
        with ctx.pass_("translation"):
            result = translation.run(
                ctx, program, registry,
                decompose=lambda ep, ops: decomposition.lower(ep, registry, ops)[0],
                dim_names=dim_names,
                target_opset=opset_version,
            )
        with ctx.pass_("serialization"):
            onnx_model = serialization.run(ctx, result.model, opset_version, module_functions)
        onnx_program = ONNXProgram(onnx_model, program, ctx)
        if optimize:
            onnx_program.optimize()
        if verify:
            reference = model.module() if isinstance(model, torch.export.ExportedProgram) else model
            onnx_program.verify(args, kwargs, reference=reference)
    except Exception as exc:
        error = _wrap(ctx, exc)
        ctx.finish(error)
        if report:
            error.report_paths = reporting.try_write_reports(ctx, artifacts_dir)
        if error is exc:
            raise
        raise error from exc
    gate = reporting.warnings_as_errors(ctx)
    ctx.finish(gate)
    if report:
        onnx_program.report_dir = os.fspath(artifacts_dir)
        paths = reporting.try_write_reports(ctx, artifacts_dir)
        if gate is not None:
            gate.report_paths = paths
    if gate is not None:
        gate.program = onnx_program
        raise gate
    return onnx_program


def dynamo_export(
    model: torch.nn.Module | Callable[..., Any] | torch.export.ExportedProgram,
    /,
    *model_args: Any,
    export_options: ExportOptions | None = None,
    **model_kwargs: Any,
) -> ONNXProgram:
    """Export a model to ONNX, as ``torch.onnx.dynamo_export`` did in PyTorch 2.1-2.5.

    Args:
        model: an ``nn.Module``, a callable, or a ``torch.export.ExportedProgram``.
        model_args: positional inputs to the model.
        export_options: options of the export.
        model_kwargs: keyword inputs to the model.
    """
    options = export_options or ExportOptions()
    if not isinstance(options, ExportOptions):
        raise option_error(
            "export_options", f"is a {type(options).__name__}",
            "it takes a dynamo_onnx.ExportOptions or None",
        )
    if options.fake_context is not None and not isinstance(options.fake_context, ONNXFakeContext):
        raise option_error(
            "ExportOptions(fake_context=...)", f"is a {type(options.fake_context).__name__}",
            "it takes the context of `with dynamo_onnx.enable_fake_mode() as fake_context:`",
        )
    dynamic_shapes = None
    if options.dynamic_shapes and not isinstance(model, torch.export.ExportedProgram):
        dynamic_shapes = capture.all_dimensions_dynamic(model, model_args, model_kwargs)
    return export(
        model,
        model_args,
        model_kwargs,
        dynamic_shapes=dynamic_shapes,
        registry=options.onnx_registry,
        diagnostic_options=options.diagnostic_options,
    )
