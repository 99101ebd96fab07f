"""The ``dynamo-onnx`` command: ``export``, ``rules``, ``report`` and ``gate``.

Exit codes (also in ``--help`` and docs/ci.md):

* 0: success (exported; gate passed);
* 1: the operation failed (the export failed; the gate found results at or above the level);
* 2: usage error (bad options, a module or factory that cannot be found, an unreadable log);
* 3: exported, but failed under ``--warnings-as-errors`` (the model is still written).
"""

from __future__ import annotations

import argparse
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
from collections.abc import Sequence
from typing import Any

from dynamo_onnx.diagnostics.context import default_source_root
from dynamo_onnx.reports import markdown
from dynamo_onnx.reports.terminal import ProgressPrinter
from dynamo_onnx.reports.writing import atomic_write_text
from dynamo_onnx.rules import catalog

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WARNINGS = 0, 1, 2, 3

EXIT_CODES_HELP = """\
exit codes:
  0  success: exported, or the gate passed
  1  failure: the export failed, a file could not be written, or the gate found
     results at or above --fail-on
  2  usage error: bad options or option values, MODULE:FACTORY not found or raising,
     an unreadable SARIF log
  3  exported, but failed under --warnings-as-errors (the model is still written)
"""

_VERBOSITY = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class UsageError(Exception):
    """The command line cannot be carried out as written (exit code 2)."""


# -- export ----------------------------------------------------------------------------


def _load_attribute(spec: str) -> Any:
    """``pkg.module:name`` or ``path/to/file.py:name`` -> the object."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"{spec!r} is not of the form MODULE:NAME (e.g. models.py:build)")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = pathlib.Path(module_name).resolve()
            if not path.exists():
                raise UsageError(f"no such file: {module_name}")
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
        raise UsageError(f"cannot import {module_name}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"{module_name} has no attribute {attribute!r}") from None


def _tensor_from_spec(spec: str) -> tuple[str, Any]:
    """``NAME=2x3:float32`` -> (name, a seeded random tensor of that shape and dtype)."""
    import torch

    name, sep, rest = spec.partition("=")
    if not sep or not name.isidentifier():
        raise UsageError(f"--input {spec!r} is not of the form NAME=2x3:float32")
    dims_text, _, dtype_name = rest.partition(":")
    dtype = getattr(torch, dtype_name or "float32", None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(
            f"--input {spec!r}: unknown dtype {dtype_name!r} (e.g. float32, int64, bool)"
        )
    try:
        shape = tuple(int(d) for d in dims_text.split("x")) if dims_text else ()
    except ValueError:
        raise UsageError(f"--input {spec!r}: dimensions must be integers joined by x") from None
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point or dtype.is_complex:
        tensor = torch.randn(shape, generator=generator).to(dtype)
    elif dtype == torch.bool:
        tensor = torch.rand(shape, generator=generator) > 0.5
    else:
        tensor = torch.randint(0, 10, shape, generator=generator).to(dtype)
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
        raise UsageError(f"{args.factory} is not callable")
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


class UserCodeError(UsageError):
    """The user's factory or inputs function raised: a usage error (exit code 2) whose
    message is the cause and the traceback of the user's frames only."""


def _call_user(function: Any, what: str) -> Any:
    """Call the user's ``function``; its exception becomes a :class:`UserCodeError`."""
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
        raise UserCodeError(f"{what} raised {cause}\n{lines}") from None


def _build(factory: Any, args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    produced = _call_user(factory, args.factory)
    example: Any = None
    if isinstance(produced, tuple) and len(produced) == 2 and callable(produced[0]):
        model, example = produced
    else:
        model = produced
    if not callable(model):
        raise UsageError(f"{args.factory} returned {type(model).__name__}, not a model")
    if args.inputs and args.input:
        raise UsageError("give example inputs with --inputs or --input, not both")
    if args.inputs:
        inputs = _load_attribute(args.inputs)
        example = _call_user(inputs, args.inputs)
    elif args.input:
        example = dict(_tensor_from_spec(spec) for spec in args.input)
    if example is None:
        raise UsageError(
            f"{args.factory} returned only a model: give example inputs with "
            "--inputs MODULE:FN or --input NAME=2x3:float32"
        )
    positional, keywords = _split_inputs(example)
    return model, positional, keywords


def _report_usage_error(args: argparse.Namespace, exc: UsageError, location: Any) -> None:
    """Write the reports asked for when the command cannot start the export (the factory
    is missing, raises, or gives no inputs): a CI step that uploads the SARIF ``if:
    always()`` gets a log saying why (DO109 at the factory), not a missing file."""
    if not (args.sarif or args.report):
        return
    from dynamo_onnx.errors import InvalidOptionValueError
    from dynamo_onnx.reports import ReportingContext

    ctx = ReportingContext(
        call_site=location,
        source_root=args.source_root or default_source_root(),
        arguments=["dynamo-onnx", *sys.argv[1:]],
        subject=args.factory.rpartition(":")[2] or args.factory,
    )
    finding = ctx.record(
        "invalid-option",
        locations=[location],
        option=args.factory,
        problem=_usage_problem(args.factory, str(exc).splitlines()[0]),
        allowed="a factory returns (model, example inputs), or a model when --inputs or "
        "--input gives them (docs/ci.md)",
    )
    ctx.finish(ctx.error_for([finding], InvalidOptionValueError, finding.message))
    _, unwritten = _write_reports(ctx, args)
    if unwritten:
        print("could not write " + ", ".join(unwritten), file=sys.stderr)


def _usage_problem(factory: str, text: str) -> str:
    """The usage error as a DO109 problem of ``factory``: "returned only a model: ..."."""
    rest = text.removeprefix(factory).strip()
    return rest if rest != text.strip() else f"cannot be used: {text}"


def _write_reports(ctx: Any, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Write each report asked for; one that cannot be written does not stop the other.
    Returns what was written and what failed (with the reason)."""
    ctx.all_rules = args.all_rules
    written, failed = [], []
    for label, path, keyword in (
        ("SARIF", args.sarif, "sarif_path"),
        ("report", args.report, "markdown_path"),
    ):
        if not path:
            continue
        try:
            ctx.save_reports(**{keyword: path})
        except OSError as exc:
            failed.append(f"{label} {path} ({exc.strerror or exc})")
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


def _summary(ctx: Any) -> str:
    levels = {"ERROR": 0, "WARNING": 0}
    for finding in ctx.findings:
        level = ctx.effective_level(finding).name
        if level in levels:
            levels[level] += 1
    return f"{levels['ERROR']} error(s), {levels['WARNING']} warning(s)"


def _cmd_export(args: argparse.Namespace) -> int:
    import dynamo_onnx

    factory = None
    try:
        factory = _load_factory(args)
        model, positional, keywords = _model_and_inputs(factory, args)
    except UsageError as exc:
        _report_usage_error(args, exc, _factory_location(factory) if factory else None)
        raise
    # Findings without a line in the model's own code (an nn.Sequential, a library model)
    # point at the factory, not at the launcher that called us (exporter.CALL_SITE_LOCAL).
    __dynamo_onnx_call_site__ = _factory_location(factory)  # noqa: F841
    dynamic = True if args.dynamic else None
    show_progress = not args.quiet and sys.stderr.isatty()
    options = dynamo_onnx.DiagnosticOptions(
        verbosity_level=_VERBOSITY[args.verbosity], warnings_as_errors=args.warnings_as_errors
    )
    start = time.perf_counter()
    program = None
    code, failure = EXIT_OK, ""
    try:
        # The command prints its own summary of the findings: no Python warning repeats it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dynamo_onnx.DynamoOnnxWarning)
            program = dynamo_onnx.export(
                model,
                positional,
                kwargs=keywords,
                dynamic_shapes=dynamic,
                opset_version=args.opset,
                diagnostic_options=options,
                source_root=args.source_root or default_source_root(),
                progress=ProgressPrinter(sys.stderr) if show_progress else None,
                verbose=args.verbose,
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
        else:
            written.append(
                f"model {args.output}" + (" (fake weights: saved as inputs)" if fake else "")
            )
    reports, unwritten = _write_reports(ctx, args)
    written += reports
    exported = code == EXIT_OK
    if unwritten and exported:
        code, failure = EXIT_FAILED, "could not write " + ", ".join(unwritten)
    elif unwritten:
        failure += "\ncould not write " + ", ".join(unwritten)
    elapsed = time.perf_counter() - start
    where = "; wrote " + ", ".join(written) if written else ""
    if code == EXIT_OK:
        print(f"exported {ctx.subject} in {elapsed:.1f} s: {_summary(ctx)}{where}")
        return code
    if exported:
        headline = (
            f"exported {ctx.subject}, but not every report was written: {_summary(ctx)}{where}"
        )
    elif code == EXIT_WARNINGS and not unwritten:
        headline = f"exported {ctx.subject}, but warnings are errors: {_summary(ctx)}{where}"
    else:
        headline = f"export of {ctx.subject} failed: {_summary(ctx)}{where}"
    print(headline)
    print(_bounded(failure), file=sys.stderr)
    return code


# -- rules, report -----------------------------------------------------------------------


def _cmd_rules(args: argparse.Namespace) -> int:
    if args.rule is None:
        for rule in catalog():
            print(f"{rule.id}  {rule.name:<30} {rule.level:<8} {rule.short}")
        return EXIT_OK
    try:
        rule = catalog().get(args.rule)
    except KeyError:
        try:  # `do301` is DO301
            rule = catalog().get(args.rule.upper())
        except KeyError:
            raise UsageError(f"no rule {args.rule!r}; `dynamo-onnx rules` lists them") from None
    print(f"{rule.id} {rule.name} ({rule.level}, pass {rule.pass_name})\n")
    print(rule.short + "\n")
    print(rule.full + "\n")
    print(rule.help)
    return EXIT_OK


def _read_log(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read the SARIF log {path}: {exc.strerror or exc}") from exc
    if not text.strip():
        raise UsageError(f"cannot read the SARIF log {path}: the file is empty")
    try:
        log = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"cannot read the SARIF log {path}: not JSON ({exc})") from exc
    try:
        log["runs"][0]["results"]  # noqa: B018 - the shape we need
    except (KeyError, IndexError, TypeError):
        raise UsageError(
            f"cannot read the SARIF log {path}: not a SARIF log (it has no runs[0].results)"
        ) from None
    return log


def _cmd_report(args: argparse.Namespace) -> int:
    text = markdown.render(_read_log(args.sarif))
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


# -- gate --------------------------------------------------------------------------------

_RANK = {"none": 0, "note": 1, "warning": 2, "error": 3}


def _fingerprint(result: dict[str, Any]) -> str | None:
    from dynamo_onnx.reports.sarif import FINGERPRINT_KEY

    return (result.get("partialFingerprints") or {}).get(FINGERPRINT_KEY)


def _cmd_gate(args: argparse.Namespace) -> int:
    from dynamo_onnx.reports import sarif

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
    if args.output:
        sarif.validate(log)
        atomic_write_text(args.output, json.dumps(log, indent=2) + "\n")
    scope = "new " if args.baseline else ""
    verdict = "failed" if failing else "passed"
    lines = [
        f"dynamo-onnx gate {verdict}: {len(failing)} {scope}result(s) at or above {args.fail_on}"
    ]
    rules = run["tool"]["driver"].get("rules", [])
    for result in failing:
        location = result["locations"][0]["physicalLocation"]
        rule = rules[result["ruleIndex"]] if rules else {"name": ""}
        lines.append(
            f"  {result['level']} {result['ruleId']} {rule.get('name', '')} "
            f"{location['artifactLocation']['uri']}:{location['region']['startLine']}: "
            f"{result['message']['text']}"
        )
    print("\n".join(lines))
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        _append_step_summary(summary_path, verdict, scope, args.fail_on, failing, rules)
    return EXIT_FAILED if failing else EXIT_OK


def _append_step_summary(
    path: str, verdict: str, scope: str, level: str, failing: list[dict[str, Any]], rules: list[Any]
) -> None:
    """A markdown table of the failing results for the GitHub Actions job summary."""
    icon = "❌" if failing else "✅"
    text = [
        f"### {icon} dynamo-onnx gate {verdict}\n",
        f"{len(failing)} {scope}result(s) at or above `{level}`.\n",
    ]
    if failing:
        text += ["| Level | Rule | Location | Message |", "| --- | --- | --- | --- |"]
        for result in failing:
            location = result["locations"][0]["physicalLocation"]
            name = rules[result["ruleIndex"]].get("name", "") if rules else ""
            message = " ".join(result["message"]["text"].split()).replace("|", "\\|")
            text.append(
                f"| {result['level']} | {result['ruleId']} `{name}` | "
                f"`{location['artifactLocation']['uri']}:{location['region']['startLine']}` | {message} |"
            )
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(text) + "\n\n")


# -- the parser --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynamo-onnx",
        description="A diagnostics-first PyTorch to ONNX exporter.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

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
    export.add_argument("--sarif", help="write the SARIF log here")
    export.add_argument("--report", help="write the markdown report here")
    export.add_argument("--opset", type=int, help="the ONNX opset (default 20)")
    export.add_argument(
        "--all-rules",
        action="store_true",
        help="describe every rule of the catalog in the SARIF log, not only those it uses",
    )
    export.add_argument("--dynamic", action="store_true", help="make every input dimension dynamic")
    export.add_argument(
        "--fake",
        action="store_true",
        help="build the model in fake mode (meta device, no weight memory); the "
        "ONNX file then has the weights as inputs, without data",
    )
    export.add_argument(
        "--verbosity",
        choices=sorted(_VERBOSITY),
        default="info",
        help="what the reports show (default: info)",
    )
    export.add_argument(
        "--warnings-as-errors",
        action="store_true",
        help="fail (exit code 3) when the export produces warnings",
    )
    export.add_argument(
        "--source-root",
        help="SARIF paths are relative to this (default: the top of the git work tree "
        "holding the working directory, else the working directory)",
    )
    export.add_argument("--quiet", action="store_true", help="print only the final summary")
    export.add_argument(
        "--verbose",
        action="store_true",
        help="also show what torch and the ONNX libraries print while exporting (hidden by default)",
    )
    export.set_defaults(func=_cmd_export)

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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    # torch's own deprecation chatter is not the user's concern on a terminal.
    warnings.filterwarnings("ignore", category=FutureWarning)
    args = _parser().parse_args(argv)  # exits 2 on bad options
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"dynamo-onnx {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
