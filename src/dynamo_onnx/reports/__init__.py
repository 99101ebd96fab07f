"""Renderings of the findings: a SARIF 2.1.0 log and a markdown report, and writing them.

:class:`ReportingContext` is the diagnostic context an export hands to users: the recorder
of ``dynamo_onnx.diagnostics`` plus its renderings. The arrow runs one way: reports know the
diagnostics, the diagnostics know nothing of reports.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pathlib
import warnings
from collections.abc import Iterator
from typing import Any

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.context import rule_text
from dynamo_onnx.errors import SaveError
from dynamo_onnx.reports.writing import atomic_write_text, report_paths

__all__ = ["ReportingContext"]


class ReportingContext(DiagnosticContext):
    """A diagnostic context that renders its findings to SARIF and markdown."""

    def to_sarif(self, *, all_rules: bool = False) -> dict[str, Any]:
        """The findings as a SARIF 2.1.0 log, validated against the OASIS schema; with
        ``all_rules``, it describes every rule of the catalog, not only those its results
        use.

        The renderers (sarif-om, jsonschema, jinja2: slow to import) are imported when a
        report is first asked for, not by every export."""
        from dynamo_onnx.reports import sarif

        return sarif.to_sarif(self, all_rules=all_rules)

    def save_sarif(self, path: str | os.PathLike[str]) -> None:
        """Write the SARIF log to ``path`` (atomically); DO414 if it cannot be written."""
        with _saving("SARIF log", path):
            self.save_reports(sarif_path=path)

    def to_markdown(self) -> str:
        """The findings as a markdown report (rendered from the SARIF log)."""
        from dynamo_onnx.reports import markdown

        return markdown.render(self.to_sarif())

    def save_markdown(self, path: str | os.PathLike[str]) -> None:
        """Write the markdown report to ``path`` (atomically); DO414 if it cannot be written."""
        with _saving("markdown report", path):
            self.save_reports(markdown_path=path)

    def save_reports(
        self,
        sarif_path: str | os.PathLike[str] | None = None,
        markdown_path: str | os.PathLike[str] | None = None,
        *,
        all_rules: bool = False,
    ) -> None:
        """Write the SARIF log and/or the markdown report (each atomically); ``all_rules``
        as :meth:`to_sarif` takes it.

        Both come from one SARIF log, built and validated once: on a big model at DEBUG
        that build is most of what the reports cost.
        """
        if sarif_path is None and markdown_path is None:
            return
        from dynamo_onnx.reports import markdown

        with _cyclic_gc_paused():
            log = self.to_sarif(all_rules=all_rules)
            if sarif_path is not None:
                atomic_write_text(sarif_path, json.dumps(log, indent=2) + "\n")
            if markdown_path is not None:
                atomic_write_text(markdown_path, markdown.render(log))

    def write_reports(self, artifacts_dir: str | os.PathLike[str]) -> list[str]:
        """Write both reports into ``artifacts_dir`` (created if missing); their paths."""
        pathlib.Path(artifacts_dir).mkdir(parents=True, exist_ok=True)
        sarif_path, markdown_path = report_paths(artifacts_dir, self.subject)
        self.save_reports(sarif_path, markdown_path)
        return [sarif_path, markdown_path]

    def try_write_reports(self, artifacts_dir: str | os.PathLike[str]) -> list[str]:
        """Write both reports; if that fails, record why (DO901) and warn instead of raising.

        A failure to write the reports must not cost the user the export they are about.
        """
        try:
            return self.write_reports(artifacts_dir)
        except OSError as exc:
            finding = self.record(
                "reports-not-written",
                directory=str(artifacts_dir),
                cause=exc.strerror or str(exc),
            )
            warnings.warn(f"[{finding.rule.id}] {finding.message}", RuntimeWarning, stacklevel=3)
            return []


@contextlib.contextmanager
def _saving(what: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """A report the caller asked for that cannot be written is DO414, naming the caller's
    path (the ``OSError`` names the temporary file beside it); a ``SaveError`` is also an
    ``OSError``, so ``except OSError`` keeps working. Nothing is recorded: the log is what
    could not be written."""
    try:
        yield
    except OSError as exc:
        cause = exc.strerror or str(exc) or type(exc).__name__
        message = rule_text("report-not-written", what=what, path=os.fspath(path), cause=cause)
        raise SaveError(message, rule_id="DO414") from exc


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the reports are rendered.

    Rendering allocates many small dicts (the schema, the log, the template), which triggers
    full collections; right after an export the heap holds the whole model, so each of those
    walks millions of objects: on GPT-2 that was half of what writing the reports cost. The
    reports make no reference cycles worth collecting; reference counting frees them. The
    collector is switched back on only if it was on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
