"""What ``export`` and ``export-llm`` share: the options of their reports and terminal, the
reports written (each on its own: one that fails does not stop the other), and the lines
that sum up an export (its counts, its warnings)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from dynamo_onnx.cli.exit_codes import CommandError
from dynamo_onnx.cli.output import writing
from dynamo_onnx.diagnostics.context import default_source_root

VERBOSITY = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def command_context(args: argparse.Namespace, location: Any) -> Any:
    """A reporting context for what the command records itself, before or around the
    export (the factory raising, Ctrl-C while loading it)."""
    from dynamo_onnx.reports import ReportingContext

    return ReportingContext(
        call_site=location,
        source_root=args.source_root or default_source_root(),
        arguments=["dynamo-onnx", *sys.argv[1:]],
        subject=args.factory.rpartition(":")[2] or args.factory,
    )


def report_usage_error(args: argparse.Namespace, exc: CommandError, location: Any) -> None:
    """Write the reports asked for when the command cannot start the export (the factory
    is missing, raises, or gives no inputs): a CI step that uploads the SARIF ``if:
    always()`` gets a log saying why (DO109 at the factory, DO140 at the line that
    raised), not a missing file."""
    if not (args.sarif or args.report):
        return
    from dynamo_onnx.errors import InvalidOptionValueError

    location = getattr(exc, "location", None) or location
    ctx = command_context(args, location)
    finding = ctx.record(exc.rule.id, locations=[location], **exc.fields)
    ctx.finish(ctx.error_for([finding], InvalidOptionValueError, finding.message))
    _, unwritten = write_reports(ctx, args)
    for failure in unwritten:
        print(failure, file=sys.stderr)


def write_reports(ctx: Any, args: argparse.Namespace) -> tuple[list[str], list[CommandError]]:
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
            with writing(what, path):
                ctx.save_reports(all_rules=args.all_rules, **{keyword: path})
        except CommandError as exc:
            failed.append(exc)
        else:
            written.append(f"{label} {path}")
    return written, failed


def finding_counts(ctx: Any) -> str:
    levels = {"ERROR": 0, "WARNING": 0}
    for finding in ctx.findings:
        level = ctx.effective_level(finding).name
        if level in levels:
            levels[level] += 1
    return f"{levels['ERROR']} error(s), {levels['WARNING']} warning(s)"


def warning_lines(ctx: Any) -> list[str]:
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


def add_diagnostics_arguments(command: argparse.ArgumentParser) -> None:
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
        choices=sorted(VERBOSITY),
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
