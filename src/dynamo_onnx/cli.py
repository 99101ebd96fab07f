"""The ``dynamo-onnx`` command: ``export``, ``export-llm``, ``rules``, ``report`` and ``gate``.

Exit codes (also in ``--help`` and docs/ci.md):

* 0: success (exported; gate passed);
* 1: the operation failed (the export failed; the gate found results at or above the level;
  a file or standard output could not be written: DO902);
* 2: usage error (bad options or values: DO109; an unreadable log: DO903; a passed gate's
  file that cannot be written: DO902, so that the gate's 1 always means findings);
* 3: exported, but failed under ``--warnings-as-errors`` (the model is still written);
* 130: interrupted (Ctrl-C): one line on stderr, the reports asked for written with the
  findings so far and DO143, no model file.

Whatever a user can cause ends in a :class:`CommandError`, which :func:`main` prints as
``dynamo-onnx COMMAND: [DOnnn name] message`` and the rule's fix, and turns into its exit
code: no traceback. A reader that stops early (``| head``) is not an error.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import inspect
import json
import logging
import os
import pathlib
import sys
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from dynamo_onnx.diagnostics.context import default_source_root, rule_text
from dynamo_onnx.reports import markdown
from dynamo_onnx.reports.terminal import ProgressPrinter
from dynamo_onnx.reports.writing import atomic_write_text
from dynamo_onnx.rules import catalog

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WARNINGS = 0, 1, 2, 3
#: Interrupted by SIGINT (Ctrl-C): 128 + 2, what a shell reports for it.
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0  success: exported, or the gate passed
  1  failure: the export failed, a file or standard output could not be written
     (DO902), or the gate found results at or above --fail-on
  2  usage error: bad options or option values (DO109), MODULE:FACTORY not found or
     raising (DO140), an unreadable SARIF log (DO903), a passed gate's --output or job
     summary that cannot be written (DO902)
  3  exported, but failed under --warnings-as-errors (the model is still written)
  130  interrupted (Ctrl-C): the reports hold the findings so far (DO143)
"""

_VERBOSITY = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class CommandError(Exception):
    """Something the user can cause, as its rule's message and the command's exit code.

    :func:`main` is the one place that prints it (``[DOnnn name] message`` and the fix)
    and returns its code; nothing a user can cause reaches them as a traceback."""

    def __init__(self, rule_id: str, code: int, detail: str = "", **fields: object) -> None:
        self.rule = catalog().get(rule_id)
        self.code, self.fields, self.detail = code, fields, detail
        super().__init__(rule_text(self.rule, **fields))

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n{self.detail}" if self.detail else text


class UsageError(CommandError):
    """A command-line value the command cannot take (DO109, exit code 2): ``option`` (the
    option or the value given) ``problem``; ``allowed``."""

    def __init__(self, option: str, problem: str, allowed: str, detail: str = "") -> None:
        super().__init__(
            "invalid-option", EXIT_USAGE, detail, option=option, problem=problem, allowed=allowed
        )


class UnreadableLogError(CommandError):
    """A SARIF log ``gate`` or ``report`` cannot read (DO903, exit code 2)."""

    def __init__(self, path: str, cause: str) -> None:
        super().__init__("unreadable-sarif-log", EXIT_USAGE, path=path, cause=cause)


def _cause(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


@contextlib.contextmanager
def _writing(what: str, path: str) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``what`` to ``path`` into DO902 (exit code 1)."""
    try:
        yield
    except OSError as exc:
        raise CommandError(
            "output-not-written", EXIT_FAILED, what=what, path=path, cause=_cause(exc)
        ) from None


def _stop_output() -> None:
    """Send what is left of standard output nowhere (the reader is gone, or the device is
    full), so the interpreter's last flush at exit cannot fail again."""
    try:
        target = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (redirected to a buffer): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, target)
    os.close(devnull)


def _emit(text: str) -> None:
    """Print ``text`` on standard output, line by line as it is produced. A reader that
    stops early (``| head``) ends the output quietly; a failed write (a full device) is
    DO902."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _stop_output()
    except OSError as exc:
        _stop_output()
        raise CommandError(
            "output-not-written",
            EXIT_FAILED,
            what="output",
            path="standard output",
            cause=_cause(exc),
        ) from None


# -- export ----------------------------------------------------------------------------


_MODULE_FORMS = "a .py path or a dotted module, a colon and a name (models.py:build)"


def _load_attribute(spec: str) -> Any:
    """``pkg.module:name`` or ``path/to/file.py:name`` -> the object."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(spec, "is not of the form MODULE:NAME", _MODULE_FORMS)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = pathlib.Path(module_name).resolve()
            if not path.exists():
                raise UsageError(spec, f"names {module_name}: no such file", _MODULE_FORMS)
            sys.path.insert(0, str(path.parent))
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            assert loader_spec is not None and loader_spec.loader is not None
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[path.stem] = module
            loader = loader_spec.loader
            _call_user(lambda: loader.exec_module(module), module_name)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(spec, f"cannot import {module_name}: {exc}", _MODULE_FORMS) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(
            spec, f"names {module_name}, which has no attribute {attribute!r}", _MODULE_FORMS
        ) from None


_INPUT_FORM = "--input takes NAME=2x3:float32 (sizes of 0 or more joined by x, a torch dtype)"


def _tensor_from_spec(spec: str) -> tuple[str, Any]:
    """``NAME=2x3:float32`` -> (name, a seeded random tensor of that shape and dtype)."""
    import torch

    name, sep, rest = spec.partition("=")
    if not sep or not name.isidentifier():
        raise UsageError(spec, "is not of the form NAME=2x3:float32", _INPUT_FORM)
    dims_text, _, dtype_name = rest.partition(":")
    dtype = getattr(torch, dtype_name or "float32", None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(spec, f"has the unknown dtype {dtype_name!r}", _INPUT_FORM)
    try:
        shape = tuple(int(d) for d in dims_text.split("x")) if dims_text else ()
    except ValueError:
        raise UsageError(
            spec, "has dimensions that are not integers joined by x", _INPUT_FORM
        ) from None
    if any(d < 0 for d in shape):
        raise UsageError(spec, f"has a negative size {min(shape)}", _INPUT_FORM)
    generator = torch.Generator().manual_seed(0)
    try:
        if dtype.is_floating_point or dtype.is_complex:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.rand(shape, generator=generator) > 0.5
        else:
            tensor = torch.randint(0, 10, shape, generator=generator).to(dtype)
    except (RuntimeError, MemoryError) as exc:  # too large to allocate, a dtype torch can't fill
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(spec, f"cannot be made: {cause}", _INPUT_FORM) from None
    return name, tensor


def _split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs as (args, kwargs): a tuple, a dict, or a (tuple, dict) pair."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if (
        isinstance(inputs, tuple)
        and len(inputs) == 2
        and isinstance(inputs[0], tuple)
        and isinstance(inputs[1], dict)
    ):
        return inputs[0], inputs[1]
    if isinstance(inputs, tuple):
        return inputs, {}
    if isinstance(inputs, list):
        return tuple(inputs), {}
    return (inputs,), {}


def _load_factory(args: argparse.Namespace) -> Any:
    """The factory ``MODULE:FACTORY`` names (its module is executed once, here)."""
    factory = _load_attribute(args.factory)
    if not callable(factory):
        raise UsageError(args.factory, "is not callable", _FACTORY_FORMS)
    return factory


def _model_and_inputs(
    factory: Any, args: argparse.Namespace
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import dynamo_onnx

    if args.fake:  # built on the meta device: no memory for the weights
        with dynamo_onnx.enable_fake_mode():
            return _build(factory, args)
    return _build(factory, args)


def _factory_location(factory: Any) -> Any:
    """Where the factory is defined, or None."""
    from dynamo_onnx.diagnostics import Location

    try:
        path = inspect.getsourcefile(factory)
        _, line = inspect.getsourcelines(factory)
    except (TypeError, OSError):
        return None
    return (
        Location(os.path.abspath(path), line, getattr(factory, "__name__", None)) if path else None
    )


_FACTORY_FORMS = (
    "a factory returns (model, example inputs), or a model when --inputs or --input gives "
    "them (docs/ci.md)"
)


class UserCodeError(CommandError):
    """The user's factory, inputs or registry function raised (DO140, exit code 2): the
    message names the cause and the line that raised (``location``, the innermost frame
    of the user's code), the detail is the traceback of the user's frames only."""

    def __init__(self, what: str, cause: str, frames: str, location: Any) -> None:
        source = _shown_path(location) if location is not None else "an unknown line"
        super().__init__(
            "user-code-raised", EXIT_USAGE, frames, what=what, cause=cause, source=source
        )
        self.location = location


def _shown_path(location: Any) -> str:
    """``path:line`` relative to the working directory when inside it."""
    path = os.path.relpath(location.path)
    return f"{location.path if path.startswith('..') else path}:{location.line}"


def _call_user(function: Any, what: str) -> Any:
    """Call the user's ``function``; its exception becomes a :class:`UserCodeError`."""
    from dynamo_onnx.diagnostics import Location

    try:
        return function()
    except Exception as exc:  # noqa: BLE001 - reported as the user's error
        package = os.path.dirname(os.path.abspath(__file__)) + os.sep
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if not os.path.abspath(f.filename).startswith(package)
        ]
        lines = "".join(traceback.format_list(frames)).rstrip()
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raised = frames[-1] if frames else None
        location = (
            Location(os.path.abspath(raised.filename), raised.lineno or 1, raised.name)
            if raised is not None
            else None
        )
        raise UserCodeError(what, cause, lines, location) from None


def _build(factory: Any, args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    produced = _call_user(factory, args.factory)
    example: Any = None
    if isinstance(produced, tuple) and len(produced) == 2 and callable(produced[0]):
        model, example = produced
    else:
        model = produced
    if not callable(model):
        raise UsageError(
            args.factory, f"returned {type(model).__name__}, not a model", _FACTORY_FORMS
        )
    if args.inputs and args.input:
        raise UsageError("--inputs", "and --input are both given", "give one of them")
    if args.inputs:
        inputs = _load_attribute(args.inputs)
        example = _call_user(inputs, args.inputs)
    elif args.input:
        example = dict(_tensor_from_spec(spec) for spec in args.input)
    if example is None:
        raise UsageError(
            args.factory,
            "returned only a model",
            "give example inputs with --inputs MODULE:FN or --input NAME=2x3:float32",
        )
    positional, keywords = _split_inputs(example)
    return model, positional, keywords


def _command_context(args: argparse.Namespace, location: Any) -> Any:
    """A reporting context for what the command records itself, before or around the
    export (the factory raising, Ctrl-C while loading it)."""
    from dynamo_onnx.reports import ReportingContext

    return ReportingContext(
        call_site=location,
        source_root=args.source_root or default_source_root(),
        arguments=["dynamo-onnx", *sys.argv[1:]],
        subject=args.factory.rpartition(":")[2] or args.factory,
    )


def _report_usage_error(args: argparse.Namespace, exc: CommandError, location: Any) -> None:
    """Write the reports asked for when the command cannot start the export (the factory
    is missing, raises, or gives no inputs): a CI step that uploads the SARIF ``if:
    always()`` gets a log saying why (DO109 at the factory, DO140 at the line that
    raised), not a missing file."""
    if not (args.sarif or args.report):
        return
    from dynamo_onnx.errors import InvalidOptionValueError

    location = getattr(exc, "location", None) or location
    ctx = _command_context(args, location)
    finding = ctx.record(exc.rule.id, locations=[location], **exc.fields)
    ctx.finish(ctx.error_for([finding], InvalidOptionValueError, finding.message))
    _, unwritten = _write_reports(ctx, args)
    for failure in unwritten:
        print(failure, file=sys.stderr)


def _write_reports(ctx: Any, args: argparse.Namespace) -> tuple[list[str], list[CommandError]]:
    """Write each report asked for; one that cannot be written does not stop the other.
    Returns what was written and why each of the others was not (DO902)."""
    written, failed = [], []
    for label, what, path, keyword in (
        ("SARIF", "SARIF log", args.sarif, "sarif_path"),
        ("report", "markdown report", args.report, "markdown_path"),
    ):
        if not path:
            continue
        try:
            with _writing(what, path):
                ctx.save_reports(all_rules=args.all_rules, **{keyword: path})
        except CommandError as exc:
            failed.append(exc)
        else:
            written.append(f"{label} {path}")
    return written, failed


#: At most this many lines of a failure are printed; the reports hold the rest.
_MAX_FAILURE_LINES = 40


def _bounded(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= _MAX_FAILURE_LINES:
        return text
    rest = len(lines) - _MAX_FAILURE_LINES
    return "\n".join([*lines[:_MAX_FAILURE_LINES], f"... ({rest} more lines in the reports)"])


def _weights_figures(ctx: Any) -> str:
    """`` (4.85 GB of weights, peak memory 1.07 GB)`` after a streamed save, else nothing."""
    from dynamo_onnx.llm_stream import MEASUREMENT  # noqa: PLC0415

    figures = ctx.measurements.get(MEASUREMENT) if ctx is not None else None
    if not figures:
        return ""
    return (
        f" ({figures['bytesWritten'] / 1e9:.2f} GB of weights, "
        f"peak memory {figures['peakRssBytes'] / 1e9:.2f} GB)"
    )


def _summary(ctx: Any) -> str:
    levels = {"ERROR": 0, "WARNING": 0}
    for finding in ctx.findings:
        level = ctx.effective_level(finding).name
        if level in levels:
            levels[level] += 1
    return f"{levels['ERROR']} error(s), {levels['WARNING']} warning(s)"


def _warning_lines(ctx: Any) -> list[str]:
    """Each warning of a successful export on one line: rule, location, message (the
    first line; the reports hold the rest and the fix)."""
    fallback = ctx.call_site
    lines = []
    for finding in ctx.findings:
        if ctx.effective_level(finding).name != "WARNING":
            continue
        where = ctx.display(finding.primary or fallback)
        text = finding.message.splitlines()[0] if finding.message else ""
        lines.append(f"  warning {finding.rule.id} {finding.rule.name} {where}: {text}")
    return lines


_DIM_FORM = "--dynamic-dim takes INPUT:DIM=NAME (x:0=batch), DIM an index, NAME an identifier"


def _dynamic_shapes(args: argparse.Namespace) -> Any:
    """``--dynamic`` (every dimension) or ``--dynamic-dim x:0=batch`` (named ones) as the
    ``dynamic_shapes`` of the export: ``True``, ``{"x": {0: "batch"}}`` or None."""
    if args.dynamic and args.dynamic_dim:
        raise UsageError("--dynamic", "and --dynamic-dim are both given", "give one of them")
    if args.dynamic:
        return True
    if not args.dynamic_dim:
        return None
    spec: dict[str, dict[int, str]] = {}
    for text in args.dynamic_dim:
        where, _, name = text.partition("=")
        input_name, sep, dim_text = where.partition(":")
        if not sep or not input_name.isidentifier() or not dim_text.isdigit():
            raise UsageError(text, "is not of the form INPUT:DIM=NAME", _DIM_FORM)
        name = name or f"{input_name}_dim{dim_text}"
        if not name.isidentifier():
            raise UsageError(text, f"names the dimension {name!r}, not an identifier", _DIM_FORM)
        spec.setdefault(input_name, {})[int(dim_text)] = name
    return spec


_REGISTRY_FORMS = (
    "--registry takes MODULE:NAME of an OnnxRegistry, a function returning one, or a "
    "custom_translation_table dict {torch.ops.ns.op.default: onnxscript function}"
)


def _registry(args: argparse.Namespace) -> dict[str, Any]:
    """``--registry MODULE:NAME`` as the export's ``registry=`` or
    ``custom_translation_table=`` keyword (DO301's fix, from the command line)."""
    if not args.registry:
        return {}
    from collections.abc import Mapping

    from dynamo_onnx.registry import OnnxRegistry

    found = _load_attribute(args.registry)
    if not isinstance(found, (OnnxRegistry, Mapping)) and callable(found):
        found = _call_user(found, args.registry)
    if isinstance(found, OnnxRegistry):
        return {"registry": found}
    if isinstance(found, Mapping):
        return {"custom_translation_table": found}
    raise UsageError(args.registry, f"is a {type(found).__name__}", _REGISTRY_FORMS)


def _cmd_export(args: argparse.Namespace) -> int:
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
        ctx = _command_context(args, None)
        ctx.record_interruption(interrupt, "loading the model")
    elif ctx.interrupted_by is None:  # after the export: saving the model
        ctx.record_interruption(interrupt, "saving the model")
    written, unwritten = _write_reports(ctx, args)
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
        factory = _load_factory(args)
        model, positional, keywords = _model_and_inputs(factory, args)
        dynamic = _dynamic_shapes(args)
        translation = _registry(args)
    except (UsageError, UserCodeError) as exc:
        _report_usage_error(args, exc, _factory_location(factory) if factory else None)
        raise
    show_progress = not args.quiet and sys.stderr.isatty()
    options = dynamo_onnx.DiagnosticOptions(
        verbosity_level=_VERBOSITY[args.verbosity], warnings_as_errors=args.warnings_as_errors
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
                _factory_location(factory),
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
    reports, unwritten = _write_reports(ctx, args)
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
        _emit(f"exported {ctx.subject} in {elapsed:.1f} s: {_summary(ctx)}{where}")
        listing = _warning_lines(ctx)
        if listing:
            print(_bounded("\n".join(listing)), file=sys.stderr)
        return code
    if exported:
        headline = (
            f"exported {ctx.subject}, but not every report was written: {_summary(ctx)}{where}"
        )
    elif code == EXIT_WARNINGS and not unwritten:
        headline = f"exported {ctx.subject}, but warnings are errors: {_summary(ctx)}{where}"
    else:
        headline = f"export of {ctx.subject} failed: {_summary(ctx)}{where}"
    _emit(headline)
    print(_bounded(failure), file=sys.stderr)
    return code


def _cmd_export_llm(args: argparse.Namespace) -> int:
    """A Hugging Face folder on disk to a folder onnxruntime-genai runs (``export_llm``),
    with the reports, the warnings and the exit codes of ``export``."""
    import dynamo_onnx

    options = dynamo_onnx.DiagnosticOptions(
        verbosity_level=_VERBOSITY[args.verbosity], warnings_as_errors=args.warnings_as_errors
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
    written, unwritten = _write_reports(ctx, args) if ctx is not None else ([], [])
    unwritten_text = "\n".join(map(str, unwritten))
    if unwritten and code == EXIT_OK:
        code, failure = EXIT_FAILED, unwritten_text
    elif unwritten:
        failure += "\n" + unwritten_text
    elapsed = time.perf_counter() - start
    where = "; wrote " + ", ".join(written) if written else ""
    summary = _summary(ctx) if ctx is not None else "no diagnostics"
    out = pathlib.Path(args.output)
    folder = (
        f"wrote {out}: " + ", ".join(sorted(p.name for p in out.iterdir())) + _weights_figures(ctx)
        if code in (EXIT_OK, EXIT_WARNINGS) and out.is_dir()
        else None
    )
    if code == EXIT_OK:
        _emit(f"exported {args.hf_dir} in {elapsed:.1f} s: {summary}{where}")
    elif code == EXIT_WARNINGS and not unwritten:
        _emit(f"exported {args.hf_dir}, but warnings are errors: {summary}{where}")
    else:
        _emit(f"export-llm of {args.hf_dir} failed: {summary}{where}")
        # a multimodal folder that stopped at one of its models: which were written, which not
        for finding in ctx.by_rule("multimodal-folder-written") if ctx is not None else ():
            _emit(finding.message)
    if folder is not None:
        _emit(folder)
    if code == EXIT_OK:
        listing = _warning_lines(ctx)
        if listing:
            print(_bounded("\n".join(listing)), file=sys.stderr)
        return code
    print(_bounded(failure), file=sys.stderr)
    return code


# -- rules, report -----------------------------------------------------------------------


def _rule_order(rule: Any) -> tuple[int, str]:
    """DO100 before DO1000: by the number of the id."""
    digits = "".join(c for c in rule.id if c.isdigit())
    return (int(digits) if digits else 0, rule.id)


def _cmd_rules(args: argparse.Namespace) -> int:
    if args.rule is None:
        for rule in sorted(catalog(), key=_rule_order):
            _emit(f"{rule.id}  {rule.name:<30} {rule.level:<8} {rule.short}")
        return EXIT_OK
    rules = catalog()
    key = args.rule if args.rule in rules else args.rule.upper()  # `do301` is DO301
    if key not in rules:
        raise UsageError(args.rule, "is not a rule id or name", "`dynamo-onnx rules` lists them")
    rule = rules.get(key)
    _emit(f"{rule.id} {rule.name} ({rule.level}, pass {rule.pass_name})\n")
    _emit(rule.short + "\n")
    _emit(rule.full + "\n")
    _emit(rule.help)
    return EXIT_OK


def _read_log(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UnreadableLogError(path, _cause(exc)) from None
    except UnicodeDecodeError:
        raise UnreadableLogError(path, "not UTF-8 text") from None
    if not text.strip():
        raise UnreadableLogError(path, "the file is empty")
    try:
        log = json.loads(text)
    except ValueError as exc:
        raise UnreadableLogError(path, f"not JSON ({exc})") from None
    try:
        log["runs"][0]["results"]  # noqa: B018 - the shape we need
    except (KeyError, IndexError, TypeError):
        raise UnreadableLogError(path, "not a SARIF log (it has no runs[0].results)") from None
    from dynamo_onnx.reports import sarif

    try:  # what gate and report read of it is there, as the schema says
        sarif.validate(log)
    except ValueError as exc:
        raise UnreadableLogError(path, f"not a SARIF 2.1.0 log: {exc}") from None
    return log


def _cmd_report(args: argparse.Namespace) -> int:
    text = markdown.render(_read_log(args.sarif))
    if args.output:
        with _writing("markdown report", args.output):
            atomic_write_text(args.output, text)
        _emit(f"wrote {args.output}")
    else:
        _emit(text.rstrip("\n"))
    return EXIT_OK


# -- gate --------------------------------------------------------------------------------

_RANK = {"none": 0, "note": 1, "warning": 2, "error": 3}


def _fingerprint(result: dict[str, Any]) -> str | None:
    from dynamo_onnx.reports.sarif import FINGERPRINT_KEY

    return (result.get("partialFingerprints") or {}).get(FINGERPRINT_KEY)


def _cmd_gate(args: argparse.Namespace) -> int:
    log = _read_log(args.sarif)
    run = log["runs"][0]
    threshold = _RANK[args.fail_on]
    known: set[str] = set()
    if args.baseline:
        baseline = _read_log(args.baseline)
        known = {fp for r in baseline["runs"][0]["results"] if (fp := _fingerprint(r))}
    failing = []
    for result in run["results"]:
        fingerprint = _fingerprint(result)
        if args.baseline:
            result["baselineState"] = "unchanged" if fingerprint in known else "new"
        is_new = not args.baseline or result["baselineState"] == "new"
        if is_new and _RANK.get(result.get("level", "warning"), 2) >= threshold:
            failing.append(result)
    scope = "new " if args.baseline else ""
    verdict = "failed" if failing else "passed"
    lines = [
        f"dynamo-onnx gate {verdict}: {len(failing)} {scope}result(s) at or above {args.fail_on}"
    ]
    rules = run["tool"]["driver"].get("rules", [])
    for result in failing:
        lines.append(
            f"  {result.get('level', 'warning')} {result.get('ruleId', '')} "
            f"{_rule_name(result, rules)} {_where(result)}: {result['message']['text']}"
        )
    _emit("\n".join(lines))
    writes = []
    if args.output:
        text = json.dumps(log, indent=2) + "\n"
        writes.append(
            ("gated SARIF log", args.output, lambda: atomic_write_text(args.output, text))
        )
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        summary = _step_summary(verdict, scope, args.fail_on, failing, rules)
        writes.append(
            (
                "job summary (GITHUB_STEP_SUMMARY)",
                summary_path,
                lambda: _append(summary_path, summary),
            )
        )
    try:
        _write_each(writes)
    except CommandError as exc:
        # 1 keeps meaning "results at or above the level": a passed gate whose files
        # cannot be written is a command that cannot be carried out as asked (2).
        exc.code = EXIT_FAILED if failing else EXIT_USAGE
        raise
    return EXIT_FAILED if failing else EXIT_OK


def _rule_name(result: dict[str, Any], rules: list[Any]) -> str:
    index = result.get("ruleIndex")
    return rules[index].get("name", "") if isinstance(index, int) and index < len(rules) else ""


def _where(result: dict[str, Any]) -> str:
    """``uri:line`` of a result's first location (a log may have results without one)."""
    try:
        location = result["locations"][0]["physicalLocation"]
        return f"{location['artifactLocation']['uri']}:{location['region']['startLine']}"
    except (KeyError, IndexError, TypeError):
        return "(no location)"


def _write_each(writes: list[tuple[str, str, Any]]) -> None:
    """Attempt every write; one that fails does not stop the others. The failures are
    raised together as one DO902 (exit code 1)."""
    failures: list[CommandError] = []
    for what, path, write in writes:
        try:
            with _writing(what, path):
                write()
        except CommandError as exc:
            failures.append(exc)
    if failures:
        first, *rest = failures
        if rest:
            first.detail = "\n".join(str(f).splitlines()[0] for f in rest)
        raise first


def _append(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def _step_summary(
    verdict: str, scope: str, level: str, failing: list[dict[str, Any]], rules: list[Any]
) -> str:
    """A markdown table of the failing results for the GitHub Actions job summary."""
    icon = "❌" if failing else "✅"
    text = [
        f"### {icon} dynamo-onnx gate {verdict}\n",
        f"{len(failing)} {scope}result(s) at or above `{level}`.\n",
    ]
    if failing:
        text += ["| Level | Rule | Location | Message |", "| --- | --- | --- | --- |"]
        for result in failing:
            name = _rule_name(result, rules)
            message = " ".join(result["message"]["text"].split()).replace("|", "\\|")
            text.append(
                f"| {result.get('level', 'warning')} | {result.get('ruleId', '')} `{name}` | "
                f"`{_where(result)}` | {message} |"
            )
    return "\n".join(text) + "\n\n"


# -- the parser --------------------------------------------------------------------------


def _diagnostics_arguments(command: argparse.ArgumentParser) -> None:
    """The options of a command that exports: its reports, their verbosity, the warnings
    gate and what the terminal shows (``export`` and ``export-llm`` alike)."""
    command.add_argument("--sarif", help="write the SARIF log here")
    command.add_argument("--report", help="write the markdown report here")
    command.add_argument(
        "--all-rules",
        action="store_true",
        help="describe every rule of the catalog in the SARIF log, not only those it uses",
    )
    command.add_argument(
        "--verbosity",
        choices=sorted(_VERBOSITY),
        default="info",
        help="what the reports show (default: info)",
    )
    command.add_argument(
        "--warnings-as-errors",
        action="store_true",
        help="fail (exit code 3) when the export produces warnings; the model is written",
    )
    command.add_argument(
        "--source-root",
        help="SARIF paths are relative to this (default: the top of the git work tree "
        "holding the working directory, else the working directory)",
    )
    command.add_argument(
        "--quiet",
        action="store_true",
        help="no progress: only the final summary (and the warnings, or what failed)",
    )
    command.add_argument(
        "--verbose",
        action="store_true",
        help="also show what torch and the ONNX libraries print while exporting (hidden by default)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynamo-onnx",
        description="A diagnostics-first PyTorch to ONNX exporter.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the versions of dynamo-onnx, torch, onnx, onnxscript and onnxruntime",
    )
    commands = parser.add_subparsers(dest="command")

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
    export.add_argument("--opset", type=int, help="the ONNX opset (default 20)")
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
    _diagnostics_arguments(export)
    export.set_defaults(func=_cmd_export)

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
        "--block-size", type=int, default=32, help="int4/int8 block size (default: 32)"
    )
    llm.add_argument(
        "--accuracy-level",
        type=int,
        default=4,
        help="MatMulNBits' accuracy level: 4 computes with int8 activations (default: 4)",
    )
    _diagnostics_arguments(llm)
    llm.set_defaults(func=_cmd_export_llm)

    rules = commands.add_parser("rules", help="list the rules, or print one rule's help")
    rules.add_argument("rule", nargs="?", help="a rule id (DO301) or name (unsupported-operator)")
    rules.set_defaults(func=_cmd_rules)

    report = commands.add_parser("report", help="render the markdown report of a saved SARIF log")
    report.add_argument("sarif", help="a SARIF log written by dynamo-onnx")
    report.add_argument("-o", "--output", help="write the markdown here instead of stdout")
    report.set_defaults(func=_cmd_report)

    gate = commands.add_parser(
        "gate",
        help="fail when a SARIF log has results at or above a level",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gate.add_argument("sarif", help="the SARIF log to judge")
    gate.add_argument("--baseline", help="a previous log: only results not in it count")
    gate.add_argument(
        "--fail-on",
        choices=["error", "warning"],
        default="error",
        help="the lowest level that fails (default: error)",
    )
    gate.add_argument("--output", help="write the log with baselineState set here")
    gate.set_defaults(func=_cmd_gate)
    return parser


def _versions() -> str:
    from dynamo_onnx.versions import package_version, tool_versions

    tools = ", ".join(f"{name} {version}" for name, version in tool_versions().items())
    return f"dynamo-onnx {package_version()} ({tools})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    # torch's own deprecation chatter is not the user's concern on a terminal.
    warnings.filterwarnings("ignore", category=FutureWarning)
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on bad options
    try:
        if args.version:
            _emit(_versions())
            return EXIT_OK
        if args.command is None:
            parser.error("give a command (export, export-llm, rules, report, gate) or --version")
        return int(args.func(args))
    except CommandError as exc:
        command = f"dynamo-onnx {args.command}" if args.command else "dynamo-onnx"
        print(f"{command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:  # Ctrl-C outside an export (a second one while reporting)
        command = f"dynamo-onnx {args.command}" if args.command else "dynamo-onnx"
        print(f"{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def console_main() -> NoReturn:
    """The ``dynamo-onnx`` command (and ``python -m dynamo_onnx.cli``): :func:`main`, then the
    process ends.

    Before it ends, the objects the export left (torch's and sympy's, millions of them) are
    frozen out of the garbage collector: the interpreter's final collections would walk
    them all for ~1 s, a quarter of a small export's command, to free memory the process
    gives back on exit anyway. Only here: :func:`main` called in a caller's process leaves
    its collector alone."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console_main()
