"""``dynamo-onnx export MODULE:FACTORY``: a model from the user's code to an ONNX file and
its reports; Ctrl-C ends it with exit code 130 and the reports so far."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

from dynamo_onnx.cli.exit_codes import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WARNINGS,
    UsageError,
)
from dynamo_onnx.cli.exporting import (
    VERBOSITY,
    add_diagnostics_arguments,
    command_context,
    finding_counts,
    report_usage_error,
    warning_lines,
    write_reports,
)
from dynamo_onnx.cli.inputs import dynamic_shapes
from dynamo_onnx.cli.output import bounded, emit
from dynamo_onnx.cli.user_code import (
    UserCodeError,
    factory_location,
    load_factory,
    model_and_inputs,
    registry_keywords,
)
from dynamo_onnx.defaults import EXPORT_OPSET
from dynamo_onnx.diagnostics.context import default_source_root
from dynamo_onnx.reports.terminal import ProgressPrinter


def run(args: argparse.Namespace) -> int:
    """``dynamo-onnx export``; Ctrl-C ends it with :func:`_interrupted`."""
    try:
        return _export_command(args)
    except KeyboardInterrupt as interrupt:
        return _interrupted(args, interrupt)


def _interrupted(args: argparse.Namespace, interrupt: KeyboardInterrupt) -> int:
    """Exit 130 with one line on stderr and the reports asked for, holding the findings
    recorded until Ctrl-C and DO143 (the export's own context, attached to the interrupt
    by the exporter; a context of the command's when the export had not started). No
    model file: it is written, atomically, only after a finished export."""
    ctx = getattr(interrupt, "diagnostics", None)
    if ctx is None:
        ctx = command_context(args, None)
        ctx.record_interruption(interrupt, "loading the model")
    elif ctx.interrupted_by is None:  # after the export: saving the model
        ctx.record_interruption(interrupt, "saving the model")
    written, unwritten = write_reports(ctx, args)
    where = "; wrote " + ", ".join(written) if written else ""
    during = ctx.interrupted_by.properties["during"] if ctx.interrupted_by else "the export"
    print(f"dynamo-onnx export: interrupted during {during}{where}", file=sys.stderr)
    for failure in unwritten:
        print(failure, file=sys.stderr)
    return EXIT_INTERRUPTED


def _export_command(args: argparse.Namespace) -> int:
    import dynamo_onnx
    from dynamo_onnx.exporter import export_from

    factory = None
    try:
        factory = load_factory(args)
        model, positional, keywords = model_and_inputs(factory, args)
        dynamic = dynamic_shapes(args)
        translation = registry_keywords(args)
    except (UsageError, UserCodeError) as exc:
        report_usage_error(args, exc, factory_location(factory) if factory else None)
        raise
    show_progress = not args.quiet and sys.stderr.isatty()
    options = dynamo_onnx.DiagnosticOptions(
        verbosity_level=VERBOSITY[args.verbosity], warnings_as_errors=args.warnings_as_errors
    )
    start = time.perf_counter()
    program = None
    code, failure = EXIT_OK, ""
    try:
        # The command prints its own list of the warnings: no Python warning repeats them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dynamo_onnx.DynamoOnnxWarning)
            # Findings without a line in the model's own code (an nn.Sequential, a
            # library model) point at the factory, not at the launcher that called us.
            program = export_from(
                factory_location(factory),
                model,
                positional,
                kwargs=keywords,
                dynamic_shapes=dynamic,
                opset_version=args.opset,
                diagnostic_options=options,
                source_root=args.source_root or default_source_root(),
                progress=ProgressPrinter(sys.stderr) if show_progress else None,
                verbose=args.verbose,
                optimize=args.optimize_for or True,
                **translation,
            )
        ctx = program.diagnostics
    except dynamo_onnx.WarningsAsErrorsError as error:
        program, ctx, code = error.program, error.diagnostics, EXIT_WARNINGS  # type: ignore[assignment]
        failure = str(error)
    except dynamo_onnx.InvalidExportOptionsError as error:  # --opset 99: a bad option
        ctx, code, failure = error.diagnostics, EXIT_USAGE, str(error)
    except dynamo_onnx.OnnxExporterError as error:
        ctx, code = error.diagnostics, EXIT_FAILED
        failure = str(error)
    written = []
    if program is not None:
        fake = bool(program.fake_weights())
        try:
            # Fake weights have no data: the architecture is saved, weights as inputs.
            program.save(
                args.output, include_initializers=not fake, keep_initializers_as_inputs=fake
            )
        except dynamo_onnx.OnnxExporterError as error:  # DO406, in the reports too
            code, failure = EXIT_FAILED, str(error)
        except KeyboardInterrupt as interrupt:
            program.diagnostics.record_interruption(interrupt, "saving the model")
            raise
        else:
            written.append(
                f"model {args.output}" + (" (fake weights: saved as inputs)" if fake else "")
            )
    reports, unwritten = write_reports(ctx, args)
    written += reports
    exported = code == EXIT_OK
    unwritten_text = "\n".join(map(str, unwritten))
    if unwritten and exported:
        code, failure = EXIT_FAILED, unwritten_text
    elif unwritten:
        failure += "\n" + unwritten_text
    elapsed = time.perf_counter() - start
    where = "; wrote " + ", ".join(written) if written else ""
    if code == EXIT_OK:
        emit(f"exported {ctx.subject} in {elapsed:.1f} s: {finding_counts(ctx)}{where}")
        listing = warning_lines(ctx)
        if listing:
            print(bounded("\n".join(listing)), file=sys.stderr)
        return code
    if exported:
        headline = f"exported {ctx.subject}, but not every report was written: {finding_counts(ctx)}{where}"
    elif code == EXIT_WARNINGS and not unwritten:
        headline = f"exported {ctx.subject}, but warnings are errors: {finding_counts(ctx)}{where}"
    else:
        headline = f"export of {ctx.subject} failed: {finding_counts(ctx)}{where}"
    emit(headline)
    print(bounded(failure), file=sys.stderr)
    return code


def add_parser(commands: Any) -> None:
    """``export`` and its options, in the command's subparsers."""
    export = commands.add_parser(
        "export",
        help="export a model to ONNX",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument(
        "factory",
        metavar="MODULE:FACTORY",
        help="a function returning the model, or (model, example inputs)",
    )
    export.add_argument(
        "--inputs",
        metavar="MODULE:FN",
        help="a function returning example inputs: a tuple, a dict, or (tuple, dict)",
    )
    export.add_argument(
        "--input",
        action="append",
        metavar="NAME=2x3:float32",
        help="a random example input for forward's NAME (repeatable)",
    )
    export.add_argument(
        "-o", "--output", default="model.onnx", help="the ONNX file (default: model.onnx)"
    )
    export.add_argument("--opset", type=int, help=f"the ONNX opset (default {EXPORT_OPSET})")
    export.add_argument("--dynamic", action="store_true", help="make every input dimension dynamic")
    export.add_argument(
        "--dynamic-dim",
        action="append",
        metavar="INPUT:DIM=NAME",
        help="make one dimension of forward's INPUT dynamic under NAME (x:0=batch; "
        "repeatable; a shared NAME makes dimensions equal); warns (DO106) where the model "
        "fixes its size",
    )
    export.add_argument(
        "--registry",
        metavar="MODULE:NAME",
        help="the ONNX functions to translate with: an OnnxRegistry, a function returning "
        "one, or a custom_translation_table dict (DO301's fix)",
    )
    export.add_argument(
        "--fake",
        action="store_true",
        help="build the model in fake mode (meta device, no weight memory); the "
        "ONNX file then has the weights as inputs, without data",
    )
    export.add_argument(
        "--optimize-for",
        choices=["onnxruntime"],
        help="also fuse the model for this runtime (attention into GroupQueryAttention, "
        "rotary embeddings, RMS norms: docs/llm.md)",
    )
    add_diagnostics_arguments(export)
    export.set_defaults(func=run)
