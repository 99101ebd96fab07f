"""Writing the SARIF log and markdown report of an export, and warnings-as-errors."""

from __future__ import annotations

import os
import pathlib
import warnings

from dynamo_onnx.diagnostics import DiagnosticContext, Level
from dynamo_onnx.diagnostics.context import mark_recorded
from dynamo_onnx.exporter.errors import WarningsAsErrorsError, format_message

__all__ = ["write_reports", "try_write_reports", "report_paths", "warnings_as_errors"]


def report_paths(ctx: DiagnosticContext, artifacts_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """``<artifacts_dir>/<subject>.sarif`` and ``.md``."""
    base = pathlib.Path(artifacts_dir) / ctx.subject
    return f"{base}.sarif", f"{base}.md"


def write_reports(ctx: DiagnosticContext, artifacts_dir: str | os.PathLike[str]) -> list[str]:
    """Write both reports (creating the directory) and return their paths."""
    pathlib.Path(artifacts_dir).mkdir(parents=True, exist_ok=True)
    sarif_path, markdown_path = report_paths(ctx, artifacts_dir)
    ctx.save_reports(sarif_path, markdown_path)
    return [sarif_path, markdown_path]


def try_write_reports(ctx: DiagnosticContext, artifacts_dir: str | os.PathLike[str]) -> list[str]:
    """Write both reports; if that fails, record why (DO901) and warn instead of raising.

    A failure to write the reports must not cost the user the export they are about.
    """
    try:
        return write_reports(ctx, artifacts_dir)
    except OSError as exc:
        finding = ctx.record(
            "reports-not-written",
            directory=str(artifacts_dir),
            cause=exc.strerror or str(exc),
        )
        warnings.warn(f"[{finding.rule.id}] {finding.message}", RuntimeWarning, stacklevel=3)
        return []


def warnings_as_errors(ctx: DiagnosticContext) -> WarningsAsErrorsError | None:
    """The error to raise when warnings-as-errors is on and the export produced warnings."""
    if not ctx.options.warnings_as_errors:
        return None
    warnings = [f for f in ctx.findings if f.level == Level.WARNING]
    if not warnings:
        return None
    first = warnings[0]
    listing = "\n".join(f"  - {f.rule.id} {f.rule.name}: {f.message}" for f in warnings)
    error = WarningsAsErrorsError(
        format_message(
            first.rule.id,
            first.rule.name,
            f"the export produced {len(warnings)} warning(s), which warnings_as_errors=True "
            f"turns into errors:\n{listing}",
            first.rule.fix,
        ),
        rule_id=first.rule.id,
        diagnostics=ctx,
    )
    mark_recorded(error)
    return error
