"""``dynamo-onnx export-llm HF_DIR -o OUT``: a Hugging Face folder on disk to a folder
onnxruntime-genai runs, with the reports, warnings and exit codes of ``export``."""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings
from typing import Any

from dynamo_onnx.cli.exit_codes import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WARNINGS,
)
from dynamo_onnx.cli.exporting import (
    VERBOSITY,
    add_diagnostics_arguments,
    finding_counts,
    warning_lines,
    write_reports,
)
from dynamo_onnx.cli.output import bounded, emit
from dynamo_onnx.defaults import QUANTIZATION_ACCURACY_LEVEL, QUANTIZATION_BLOCK_SIZE
from dynamo_onnx.diagnostics.context import default_source_root
from dynamo_onnx.reports.terminal import ProgressPrinter


def _weights_figures(ctx: Any) -> str:
    """`` (4.85 GB of weights, peak memory 1.07 GB)`` after a streamed save, else nothing."""
    from dynamo_onnx.llm_stream import MEASUREMENT

    figures = ctx.measurements.get(MEASUREMENT) if ctx is not None else None
    if not figures:
        return ""
    return (
        f" ({figures['bytesWritten'] / 1e9:.2f} GB of weights, "
        f"peak memory {figures['peakRssBytes'] / 1e9:.2f} GB)"
    )


def run(args: argparse.Namespace) -> int:
    """A Hugging Face folder on disk to a folder onnxruntime-genai runs (``export_llm``),
    with the reports, the warnings and the exit codes of ``export``."""
    import dynamo_onnx

    options = dynamo_onnx.DiagnosticOptions(
        verbosity_level=VERBOSITY[args.verbosity], warnings_as_errors=args.warnings_as_errors
    )
    # minutes of work: the passes and the bar of the weights written, on a terminal; plain
    # lines in a file or a CI log
    show_progress = not args.quiet
    start = time.perf_counter()
    code, failure, ctx = EXIT_OK, "", None
    try:
        # The command prints its own list of the warnings: no Python warning repeats them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dynamo_onnx.DynamoOnnxWarning)
            program = dynamo_onnx.export_llm(
                args.hf_dir,
                args.output,
                precision=args.precision,
                optimize=True if args.optimize_for == "none" else args.optimize_for,
                block_size=args.block_size,
                accuracy_level=args.accuracy_level,
                progress=ProgressPrinter(sys.stderr) if show_progress else None,
                diagnostic_options=options,
                source_root=args.source_root or default_source_root(),
                verbose=args.verbose,
            )
        ctx = program.diagnostics
    except dynamo_onnx.WarningsAsErrorsError as error:  # the folder is written all the same
        ctx, code, failure = error.diagnostics, EXIT_WARNINGS, str(error)
    except dynamo_onnx.InvalidExportOptionsError as error:
        ctx, code, failure = error.diagnostics, EXIT_USAGE, str(error)
    except dynamo_onnx.OnnxExporterError as error:
        ctx, code, failure = error.diagnostics, EXIT_FAILED, str(error)
    written, unwritten = write_reports(ctx, args) if ctx is not None else ([], [])
    unwritten_text = "\n".join(map(str, unwritten))
    if unwritten and code == EXIT_OK:
        code, failure = EXIT_FAILED, unwritten_text
    elif unwritten:
        failure += "\n" + unwritten_text
    elapsed = time.perf_counter() - start
    where = "; wrote " + ", ".join(written) if written else ""
    summary = finding_counts(ctx) if ctx is not None else "no diagnostics"
    out = pathlib.Path(args.output)
    folder = (
        f"wrote {out}: " + ", ".join(sorted(p.name for p in out.iterdir())) + _weights_figures(ctx)
        if code in (EXIT_OK, EXIT_WARNINGS) and out.is_dir()
        else None
    )
    if code == EXIT_OK:
        emit(f"exported {args.hf_dir} in {elapsed:.1f} s: {summary}{where}")
    elif code == EXIT_WARNINGS and not unwritten:
        emit(f"exported {args.hf_dir}, but warnings are errors: {summary}{where}")
    else:
        emit(f"export-llm of {args.hf_dir} failed: {summary}{where}")
        # a multimodal folder that stopped at one of its models: which were written, which not
        for finding in ctx.by_rule("multimodal-folder-written") if ctx is not None else ():
            emit(finding.message)
    if folder is not None:
        emit(folder)
    if code == EXIT_OK:
        listing = warning_lines(ctx)
        if listing:
            print(bounded("\n".join(listing)), file=sys.stderr)
        return code
    print(bounded(failure), file=sys.stderr)
    return code


def add_parser(commands: Any) -> None:
    """``export-llm`` and its options, in the command's subparsers."""
    llm = commands.add_parser(
        "export-llm",
        help="export a causal LM from a Hugging Face folder on disk to a folder "
        "onnxruntime-genai runs (model, external data, its configuration, tokenizer)",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    llm.add_argument("hf_dir", metavar="HF_DIR", help="the folder save_pretrained wrote")
    llm.add_argument("-o", "--output", required=True, help="the output folder")
    llm.add_argument(
        "--precision",
        choices=["fp32", "int8", "int4"],
        default="fp32",
        help="MatMul weights in float, or quantized to MatMulNBits (default: fp32)",
    )
    llm.add_argument(
        "--optimize-for",
        choices=["onnxruntime", "none"],
        default="onnxruntime",
        help="fuse the model for this runtime (attention, norms, rotary embeddings; the "
        "default), or none: the plain model (docs/llm.md)",
    )
    llm.add_argument(
        "--block-size",
        type=int,
        default=QUANTIZATION_BLOCK_SIZE,
        help="int4/int8 block size (default: %(default)s)",
    )
    llm.add_argument(
        "--accuracy-level",
        type=int,
        default=QUANTIZATION_ACCURACY_LEVEL,
        help="MatMulNBits' accuracy level: 4 computes with int8 activations (default: %(default)s)",
    )
    add_diagnostics_arguments(llm)
    llm.set_defaults(func=run)
