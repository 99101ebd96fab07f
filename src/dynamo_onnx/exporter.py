"""export() and dynamo_export(): build the state, run the pipeline, close the context, write
the reports. An export is a list of passes run in one diagnostic context."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import torch

from dynamo_onnx.diagnostics import Level, Location
from dynamo_onnx.diagnostics.context import ProgressEvent, default_library_prefixes
from dynamo_onnx.errors import OnnxExporterError, WarningsAsErrorsError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.options import DiagnosticOptions, ExportOptions
from dynamo_onnx.passes.base import ExportRequest, ExportState, Pass, run_pipeline
from dynamo_onnx.passes.capture import CapturePass
from dynamo_onnx.passes.decompose import DecomposePass, lower
from dynamo_onnx.passes.dynamic_shapes import DynamicShapesPass
from dynamo_onnx.passes.model import model_anchor
from dynamo_onnx.passes.onnx_graph.describe import describe_into
from dynamo_onnx.passes.onnx_graph.finalize import FinalizePass
from dynamo_onnx.passes.onnx_graph.load_check import LoadCheckPass
from dynamo_onnx.passes.onnx_graph.module_functions import ModuleFunctionsPass
from dynamo_onnx.passes.onnx_graph.opset import OpsetConversionPass
from dynamo_onnx.passes.onnx_graph.weights import WeightCheckPass
from dynamo_onnx.passes.semantics import SemanticsPass
from dynamo_onnx.passes.translate import TranslatePass
from dynamo_onnx.passes.validate import ValidatePass
from dynamo_onnx.passes.validate.torch_onnx import TorchOnnxArguments
from dynamo_onnx.program import ONNXProgram
from dynamo_onnx.registry import OnnxRegistry
from dynamo_onnx.reports import ReportingContext
from dynamo_onnx.reports.terminal import ProgressPrinter, issue_warnings
from dynamo_onnx.torch_onnx_names import OperatorExportTypes, TrainingMode
from dynamo_onnx.versions import package_version, tool_versions

__all__ = [
    "dynamo_export",
    "export",
    "export_from",
    "export_passes",
    "raise_warnings_gate",
    "warnings_gate",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _call_site() -> Location | None:
    """The user's line that called the exporter: the first frame outside this package.

    Usually a file; for code without one (``python -c``, standard input, ``exec``) the
    pseudo-file (``<string>``, ``<stdin>``), which the SARIF log then carries with its text
    where it can be had. Frames of the interpreter's own machinery (``<frozen runpy>``)
    are skipped. A caller of ours that knows the line better (the command line: the
    user's factory) passes it to :func:`export_from` instead.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<"):
            if not filename.startswith("<frozen"):
                return Location(filename, frame.f_lineno, frame.f_code.co_name)
        elif not os.path.abspath(filename).startswith(_PACKAGE_DIR):
            return Location(os.path.abspath(filename), frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _pseudo_source(call_site: Location | None) -> dict[str, str]:
    """The text of the code that called the exporter when it has no file: ``python -c``'s
    command. (Standard input is read and gone; ``exec`` keeps no text either.)"""
    if call_site is None or call_site.path != "<string>":
        return {}
    argv = list(getattr(sys, "orig_argv", []))
    if "-c" in argv[:-1]:
        return {"<string>": argv[argv.index("-c") + 1]}
    return {}


def _subject(model: Any) -> str:
    """A short name of what is exported, for report titles and file names."""
    if isinstance(model, torch.export.ExportedProgram):
        return "ExportedProgram"
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    return getattr(model, "__name__", type(model).__name__)


def export_passes() -> list[Pass[ExportState]]:
    """The passes of an export, in order. Translation gets the decompose pass's ``lower`` for
    its per-node fallback: the two passes do not import each other."""
    return [
        ValidatePass(),
        CapturePass(),
        DynamicShapesPass(),
        DecomposePass(),
        SemanticsPass(),
        TranslatePass(lower),
        FinalizePass(),
        OpsetConversionPass(),
        ModuleFunctionsPass(),
        WeightCheckPass(),
        LoadCheckPass(),
    ]


def warnings_gate(ctx: ReportingContext) -> WarningsAsErrorsError | None:
    """The error to raise when warnings-as-errors is on and the export produced warnings."""
    if not ctx.options.warnings_as_errors:
        return None
    warnings = [f for f in ctx.findings if f.level == Level.WARNING]
    if not warnings:
        return None
    listing = "\n".join(f"  - {f.rule.id} {f.rule.name}: {f.message}" for f in warnings)
    cause = (
        f"the export produced {len(warnings)} warning(s), which warnings_as_errors=True "
        f"turns into errors:\n{listing}"
    )
    return ctx.error_for(warnings, WarningsAsErrorsError, cause)  # type: ignore[return-value]


def raise_warnings_gate(program: ONNXProgram, gate: WarningsAsErrorsError | None) -> None:
    """End a folder's export that ran steps after its export (quantization, save, the
    folder's checks): ``gate``, the export's own, or else the gate of those steps' warnings,
    raised with the program attached (the caller gating on warnings can still read it)."""
    if gate is None:
        assert program.diagnostics is not None
        gate = warnings_gate(program.diagnostics)
        if gate is not None:
            program.diagnostics.finish(gate)
    if gate is not None:
        gate.program = program
        raise gate


def _run(
    request: ExportRequest,
    *,
    report: bool,
    artifacts_dir: str | os.PathLike[str],
    optimize: bool | str,
    verify: bool,
    source_root: str | os.PathLike[str] | None,
    progress: Callable[[ProgressEvent], None] | None,
    call_site: Location | None,
    save: Mapping[str, Any] | None = None,
) -> ONNXProgram:
    subject = _subject(request.model)
    options = request.diagnostic_options
    if isinstance(request.export_options, ExportOptions) and options is None:
        options = request.export_options.diagnostic_options
    library_prefixes = default_library_prefixes(torch, sys.modules[__package__])
    ctx = ReportingContext(
        options if isinstance(options, DiagnosticOptions) else None,
        source_root=source_root,
        call_site=call_site,
        # the reports' anchor for findings without a line of their own
        model_location=model_anchor(request.model, library_prefixes, call_site),
        library_prefixes=library_prefixes,
        arguments=[f"export({subject})"],
        versions={"dynamo-onnx": package_version(), **tool_versions()},
        subject=subject,
        listener=progress,
    )
    ctx.sources.update(_pseudo_source(call_site))
    try:
        state = run_pipeline(ctx, export_passes(), ExportState(request))
        assert state.onnx_model is not None and state.checked is not None
        model = state.onnx_model
        describe_into(ctx.summary, model)
        reference = request.model
        if isinstance(reference, torch.export.ExportedProgram):
            reference = reference.module()
        program = ONNXProgram(
            model,
            state.exported_program,
            ctx,
            reference=reference,
            model_location=state.checked.model_location,
            inputs=state.checked.family_inputs,
        )
        if optimize and not state.checked.module_functions:
            # describes the optimized model again
            program.optimize(optimize if isinstance(optimize, str) else None)
        if verify:
            program.verify(state.checked.args, state.checked.kwargs)
        if save is not None:
            program.save(**save)
    except OnnxExporterError as error:
        ctx.finish(error)
        if report:
            error.report_paths = ctx.try_write_reports(artifacts_dir)
        raise
    except KeyboardInterrupt as interrupt:  # Ctrl-C: the findings so far, and DO143
        ctx.record_interruption(interrupt)
        if report:
            ctx.try_write_reports(artifacts_dir)
        raise
    gate = warnings_gate(ctx)
    ctx.finish(gate)
    if report:
        program.report_dir = os.fspath(artifacts_dir)
        paths = ctx.try_write_reports(artifacts_dir)
        if gate is not None:
            gate.report_paths = paths
    if gate is not None:
        gate.program = program
        raise gate
    warned = [f for f in ctx.findings if f.level == Level.WARNING]
    if warned:
        hint = (
            f"the reports in {os.fspath(artifacts_dir)}"
            if report
            else "program.diagnostics.findings, or export(..., report=True)"
        )
        issue_warnings(warned, call_site, hint)
    return program


def _export(
    model: torch.nn.Module | Callable[..., Any] | torch.export.ExportedProgram,
    args: tuple[Any, ...] = (),
    f: str | os.PathLike[str] | IO[bytes] | None = None,
    *,
    kwargs: Mapping[str, Any] | None = None,
    verbose: bool | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset_version: int | None = None,
    dynamo: bool = True,
    external_data: bool = True,
    dynamic_shapes: Any = None,
    custom_translation_table: Mapping[Any, Any] | None = None,
    report: bool = False,
    optimize: bool | str = True,
    verify: bool = False,
    profile: bool = False,
    dump_exported_program: bool = False,
    artifacts_dir: str | os.PathLike[str] = ".",
    export_params: bool = True,
    keep_initializers_as_inputs: bool = False,
    dynamic_axes: Mapping[str, Any] | None = None,
    training: Any = TrainingMode.EVAL,
    operator_export_type: Any = OperatorExportTypes.ONNX,
    do_constant_folding: bool = True,
    custom_opsets: Mapping[str, int] | None = None,
    export_modules_as_functions: Any = False,
    autograd_inlining: bool = True,
    registry: OnnxRegistry | None = None,
    diagnostic_options: DiagnosticOptions | None = None,
    module_functions: bool = False,
    source_root: str | os.PathLike[str] | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    passed: frozenset[str],
    call_site: Location | None,
) -> ONNXProgram:
    """Export a PyTorch model to an :class:`ONNXProgram`, as ``torch.onnx.export`` does.

    It takes ``torch.onnx.export``'s signature and defaults as of torch 2.13, so code
    written for it runs after ``import dynamo_onnx as onnx``; docs/usage.md ("Coming from
    torch.onnx.export") says what each argument does here. An argument with no effect is
    an ``argument-ignored`` finding, one that cannot be honored an ``argument-unsupported``
    error: never a silent difference.

    Args:
        model: an ``nn.Module``, a callable, or a ``torch.export.ExportedProgram`` (which is
            copied, never changed).
        args: positional example inputs.
        f: where to save the model (also returned): a file path, whose weights go to
            ``<f>.data`` when ``external_data`` is True, or a binary file object such as
            ``io.BytesIO`` (weights inline; ``external_data=True`` written out is DO412).
        kwargs: keyword example inputs.
        input_names, output_names: names of the graph's inputs and outputs, in order.
        opset_version: the ONNX opset of the result; default 20, as torch.onnx.
        dynamic_shapes: torch.export dynamic shape specs (``Dim``, ``Dim.AUTO``, dicts and
            tuples per input), names as strings (``{"x": {0: "batch"}}``), or ``True`` for
            every dimension. Dynamic dims appear in the ONNX model under the user's names,
            else as ``<input>_dim_<i>``.
        dynamic_axes: torch.onnx's older form, ``{"input name": {0: "batch"}}``; becomes
            dynamic shapes with those names.
        custom_translation_table: ``{torch.ops.ns.op.overload: onnxscript function}``,
            registered as ``OnnxRegistry.register_op`` would.
        report: write ``<artifacts_dir>/<Model>.sarif`` and ``<Model>.md``, on success and
            on failure (then the exception message names both paths).
        optimize: run the onnxscript optimizer on the result (default True, as torch.onnx);
            ``"onnxruntime"`` also fuses it for ONNX Runtime (``GroupQueryAttention``,
            ``RotaryEmbedding``, ``SimplifiedLayerNormalization``: docs/llm.md).
        verbose: print each pass as it runs, with its time, to standard error (as the
            command line does), and let torch's own messages during capture through (the
            partial graph of a failed capture, symbolic-shape warnings), which are hidden
            otherwise: the findings say what they say, at the model's line.
        verify: compare ONNX Runtime with the model in eager PyTorch on the example inputs
            (``ONNXProgram.verify``, default tolerances); a mismatch is a warning finding.
        export_params, keep_initializers_as_inputs: how ``f`` is saved.
        custom_opsets: the opset version of custom domains.
        export_modules_as_functions: ``True`` is ``module_functions=True``.
        registry: the ONNX functions to use; default: onnxscript's torch_lib.
        diagnostic_options: verbosity and warnings-as-errors of the reports.
        module_functions: group each submodule call into an ONNX local function named after
            its module path (Netron then shows the layer hierarchy); default: inline.
        source_root: the directory SARIF paths are relative to (default: cwd).
        progress: called with a ``ProgressEvent`` as passes start, end and advance.

    An export that succeeds with warning findings also issues them as Python warnings
    (:class:`DynamoOnnxWarning`, at the user's line, at most five and a count of the
    rest), so they reach the terminal; filter that category to silence them.

    Raises:
        OnnxExporterError: a subclass naming the rule, the cause and the fix; its
            ``diagnostics`` hold every finding.
    """
    if isinstance(f, Mapping) and kwargs is None:  # dynamo-onnx 0.1's export(model, args, kwargs)
        f, kwargs = None, f
    arguments = TorchOnnxArguments(
        f=f,
        verbose=verbose,
        dynamo=dynamo,
        profile=profile,
        dump_exported_program=dump_exported_program,
        export_params=export_params,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
        training=training,
        operator_export_type=operator_export_type,
        do_constant_folding=do_constant_folding,
        optimize=optimize,
        autograd_inlining=autograd_inlining,
        export_modules_as_functions=export_modules_as_functions,
        passed=passed,
    )
    request = ExportRequest(
        model,
        args,
        kwargs,
        dynamic_shapes,
        opset_version,
        registry,
        diagnostic_options,
        module_functions=module_functions,
        torch_onnx=arguments,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=dynamic_axes,
        custom_translation_table=custom_translation_table,
        custom_opsets=custom_opsets,
    )
    save = None
    if f is not None:
        save = {
            "destination": f,
            "include_initializers": export_params,
            "keep_initializers_as_inputs": keep_initializers_as_inputs,
            # A file object holds the weights inline unless the caller asked otherwise.
            "external_data": external_data
            if not onnx_file.is_file_object(f) or "external_data" in passed
            else None,
        }
    return _run(
        request,
        report=report,
        artifacts_dir=artifacts_dir,
        optimize=optimize,
        verify=verify,
        source_root=source_root,
        progress=progress if progress is not None or not verbose else ProgressPrinter(sys.stderr),
        call_site=call_site,
        save=save,
    )


#: ``export``'s public signature: ``_export``'s without what the entry points add.
_EXPORT_SIGNATURE = inspect.signature(_export).replace(
    parameters=[
        p
        for p in inspect.signature(_export).parameters.values()
        if p.name not in ("passed", "call_site")
    ]
)


def export_from(call_site: Location | None, /, *args: Any, **kwargs: Any) -> ONNXProgram:
    """:func:`export`, for a caller that knows the user's line better than the stack does.

    The command line passes the user's factory: above its own frames there is only the
    ``dynamo-onnx`` launcher. Findings with no line in the model's code (an
    ``nn.Sequential``, a library model) point at ``call_site``.

    ``export`` keeps torch.onnx.export's defaults, so a value alone cannot say whether the
    caller asked for it: ``_export`` gets the names of the arguments passed (``passed``),
    as ``optimize=True`` with ``module_functions=True`` is a note only when the caller
    wrote it, and ``external_data=True`` with a file object an error only then.
    """
    passed = frozenset(_EXPORT_SIGNATURE.bind(*args, **kwargs).arguments)
    return _export(*args, passed=passed, call_site=call_site, **kwargs)


def export(*args: Any, **kwargs: Any) -> ONNXProgram:  # the docstring is _export's
    return export_from(_call_site(), *args, **kwargs)


export.__doc__ = _export.__doc__
export.__signature__ = _EXPORT_SIGNATURE  # type: ignore[attr-defined]


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
        export_options: options of the export (checked like every option: DO109).
        model_kwargs: keyword inputs to the model.
    """
    options = export_options if isinstance(export_options, ExportOptions) else None
    request = ExportRequest(
        model,
        model_args,
        model_kwargs,
        registry=options.onnx_registry if options is not None else None,
        export_options=export_options,
    )
    return _run(
        request,
        report=False,
        artifacts_dir=".",
        optimize=False,
        verify=False,
        source_root=None,
        progress=None,
        call_site=_call_site(),
    )
