"""DiagnosticContext: the one place where every pass records what it found.

The exporter creates one context per export and hands it to every pass explicitly. Each pass
runs inside ``with ctx.pass_(name):`` (opened by the pipeline, nowhere else), which times it
and turns any exception that no finding explains yet into an ERROR finding of that pass's
rule, so no failure, in any pass, leaves an empty log. Failing on purpose is one call,
:meth:`DiagnosticContext.fail`: it records the finding and raises the error whose message is
the rule's ``[ID name] message`` and its fix.

Rendering lives in ``dynamo_onnx.reports``; this module knows nothing of it, of torch or ONNX.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn

from dynamo_onnx.diagnostics.findings import (
    Finding,
    Level,
    Location,
    first_user_frame,
    frame_locations,
)
from dynamo_onnx.diagnostics.summary import ExportSummary
from dynamo_onnx.errors import OnnxExporterError, format_message
from dynamo_onnx.options import DiagnosticOptions
from dynamo_onnx.rules import Rule, catalog

__all__ = [
    "DiagnosticContext",
    "PassRecord",
    "ProgressEvent",
    "StepRecord",
    "default_source_root",
    "exception_summary",
    "finding_text",
    "rule_text",
    "is_recorded",
    "mark_recorded",
]

#: Rules an error names in its headline, each with its fix; the reports hold the rest.
MAX_RULES_NAMED = 5

#: Marks an exception whose findings are already in the context.
RECORDED_ATTR = "_dynamo_onnx_recorded"


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    """A pass started (``start``), ended (``end``), or advanced (``progress``)."""

    kind: str
    pass_name: str
    duration_s: float = 0.0
    outcome: str = ""
    done: int = 0
    total: int = 0
    #: What ``done`` and ``total`` count: translated nodes, or the tensors a save wrote.
    unit: str = "nodes"
    #: Bytes written so far and in all (a save's progress; 0 otherwise).
    done_bytes: int = 0
    total_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step a pass ran on the ONNX model (an onnx_ir pass, by its class name) and
    whether it changed the model: its ``PassResult.modified``."""

    name: str
    modified: bool


@dataclasses.dataclass
class PassRecord:
    """When a pass ran, how long it took, and how it ended (``ok`` or ``failed``)."""

    name: str
    started: datetime.datetime
    duration_s: float = 0.0
    outcome: str = "running"
    #: The finding an unexplained exception of the pass became (None when it ended well or
    #: failed on purpose with ``ctx.fail``).
    failure: Finding | None = None
    #: The onnx_ir passes it ran on the ONNX model, in order, each with ``modified``.
    steps: list[StepRecord] = dataclasses.field(default_factory=list)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def exception_summary(exc: BaseException) -> str:
    """``Type: first line`` of the root cause: the sentence a user needs first."""
    root = exc
    while root.__cause__ is not None and not getattr(root, RECORDED_ATTR, False):
        root = root.__cause__
    text = str(root).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(root).__name__}: {first}" if first else type(root).__name__


def exception_frames(exc: BaseException) -> tuple[Location, ...]:
    """The frames of ``exc``'s traceback, innermost first (as :meth:`user_frame` takes them)."""
    return frame_locations(traceback.extract_tb(exc.__traceback__))


class DiagnosticContext:
    """Records findings and pass timings for one export.

    Args:
        options: verbosity and warnings-as-errors; they affect rendering only.
        source_root: the directory SARIF paths are relative to (default: the top of the
            version-control work tree that holds the call site, else the working
            directory; see :func:`default_source_root`).
        call_site: the user's line that called the exporter; findings with no user frame
            of their own are anchored there.
        model_location: where the model's code is (its ``forward``): the anchor of findings
            that have no line of their own when the export call is outside the source root
            (the CLI). Report metadata, like ``call_site``: the passes read the checked
            request's.
        library_prefixes: path prefixes of code that is not the user's (torch, this
            package, the standard library); stack frames under them are never primary.
        arguments: the command line or call, recorded in the SARIF invocation.
        versions: versions of the tools involved, recorded in both renderings.
        subject: what is being exported (the model's class name), for titles and ids.
        listener: called with a :class:`ProgressEvent` when a pass starts or ends and as
            nodes are translated (the command line's progress display); never required.
    """

    def __init__(
        self,
        options: DiagnosticOptions | None = None,
        *,
        source_root: str | os.PathLike[str] | None = None,
        call_site: Location | None = None,
        model_location: Location | None = None,
        library_prefixes: Sequence[str] = (),
        arguments: Sequence[str] = (),
        versions: dict[str, str] | None = None,
        subject: str = "model",
        listener: Callable[[ProgressEvent], None] | None = None,
    ) -> None:
        self.options = options or DiagnosticOptions()
        if source_root is None:
            real = call_site is not None and not call_site.path.startswith("<")
            source_root = default_source_root(os.path.dirname(call_site.path) if real else None)  # type: ignore[union-attr]
        self.source_root = os.path.abspath(source_root)
        self.call_site = call_site
        #: Source text of code that has no file (``python -c``, a notebook cell), by its
        #: pseudo path, so the SARIF log can carry it.
        self.sources: dict[str, str] = {}
        self.library_prefixes = tuple(library_prefixes)
        self.arguments = list(arguments)
        self.versions = dict(versions or {})
        self.subject = subject
        self.listener = listener
        self.model_location = model_location
        self.findings: list[Finding] = []
        self.passes: list[PassRecord] = []
        #: What the export produced, for the reports.
        self.summary = ExportSummary()
        #: Figures measured while exporting (a streamed save's tensors, bytes and peak
        #: memory), by name: the SARIF invocation's properties. Like timings, they vary.
        self.measurements: dict[str, Any] = {}
        self.started = _now()
        self.finished: datetime.datetime | None = None
        self.success: bool | None = None
        self.exception: BaseException | None = None
        self._current_pass = "export"
        self._current_record: PassRecord | None = None
        #: the DO143 finding once the work was interrupted (Ctrl-C)
        self.interrupted_by: Finding | None = None

    # -- recording ---------------------------------------------------------------------

    def record(
        self,
        rule: Rule | str,
        *,
        level: Level | None = None,
        locations: Iterable[Location | None] = (),
        stack: Iterable[Location] = (),
        related: Iterable[Location] = (),
        properties: dict[str, Any] | None = None,
        markdown: str | None = None,
        **fields: object,
    ) -> Finding:
        """Record a finding of ``rule`` whose message is the rule's template filled with ``fields``."""
        if isinstance(rule, str):
            rule = catalog().get(rule)
        finding = Finding(
            rule=rule,
            level=level if level is not None else Level.from_name(rule.level),
            message=rule.format_message(**fields),
            pass_name=self._current_pass,
            locations=[loc for loc in locations if loc is not None],
            stack=list(stack),
            related=list(related),
            properties={**fields, **(properties or {})},
            markdown=markdown,
        )
        self.findings.append(finding)
        return finding

    def carry(self, earlier: DiagnosticContext) -> None:
        """Take the findings of ``earlier``, a context of the same run that ended before
        this one began (``export_llm``'s load of a folder, which precedes the export that
        opens this one), before this one's: one record of the run, so none is dropped on
        success and the reports, the SARIF log and the gate see them all. Carrying twice
        adds nothing."""
        held = {id(f) for f in self.findings}
        self.findings[:0] = [f for f in earlier.findings if id(f) not in held]

    def fail(
        self,
        rule: Rule | str,
        error_type: type[OnnxExporterError],
        location: Location | None = None,
        *,
        stack: Iterable[Location] = (),
        properties: dict[str, Any] | None = None,
        **fields: object,
    ) -> NoReturn:
        """Record an ERROR finding of ``rule`` and raise ``error_type`` with its message.

        The finding points at ``location``, else at the user's call of the exporter. The
        error reads ``[ID name] message`` then ``Fix:`` and the rule's one-line fix.
        """
        finding = self.record(
            rule,
            level=Level.ERROR,
            locations=[location or self.call_site],
            stack=stack,
            properties=properties,
            **fields,
        )
        self.raise_for([finding], error_type, finding.message)

    def raise_for(
        self, findings: Sequence[Finding], error_type: type[OnnxExporterError], cause: str
    ) -> NoReturn:
        """Raise ``error_type`` for findings already recorded (a collect-all pass reports
        every problem as its own finding, then fails once): the first one's rule and fix."""
        raise self.error_for(findings, error_type, cause)

    def error_for(
        self, findings: Sequence[Finding], error_type: type[OnnxExporterError], cause: str
    ) -> OnnxExporterError:
        """The error :meth:`raise_for` raises: ``[ID name] cause`` and the rule's fix. When
        the findings are of several rules (warnings made errors: DO401, DO122, DO120), the
        headline names each and a fix follows for each, at most :data:`MAX_RULES_NAMED`
        of them and a count of the rest; ``rule_id`` is the first's."""
        rules = list(dict.fromkeys(f.rule for f in findings))
        rule = rules[0]
        if len(rules) == 1:
            text = format_message(rule.id, rule.name, cause, rule.fix)
        else:
            shown, rest = rules[:MAX_RULES_NAMED], len(rules) - MAX_RULES_NAMED
            more = f" (+{rest} more rule(s) in the reports)" if rest > 0 else ""
            tags = " ".join(f"[{r.id} {r.name}]" for r in shown)
            fixes = "\n".join(f"Fix ({r.id}): {r.fix}" for r in shown)
            text = f"{tags}{more} {cause}\n{fixes}"
        error = error_type(text, rule_id=rule.id, diagnostics=self)
        mark_recorded(error)
        return error

    def display(self, location: Location | None) -> str:
        """``path:line`` for messages, the path relative to the source root when inside it."""
        if location is None:
            return "an unknown location"
        path = location.path
        if path.startswith(self.source_root + os.sep):
            path = os.path.relpath(path, self.source_root)
        return f"{path}:{location.line}"

    def user_frame(self, frames: Sequence[Location]) -> Location | None:
        """The innermost frame of user code among ``frames`` (innermost first).

        Code with no file (``<string>``) is the user's only when the export was called from
        such code (``python -c``); called from a file (a script, the CLI's factory), a
        ``<string>`` frame is code a library generated (a dataclass's ``__init__`` in
        transformers' outputs), and the finding goes to its anchor instead."""
        found = first_user_frame(frames, self.library_prefixes)
        called_from_a_file = self.call_site is not None and not self.call_site.path.startswith("<")
        if found is not None and found.path.startswith("<") and called_from_a_file:
            return None
        return found

    def record_exception(self, exc: BaseException, rule: Rule | str | None = None) -> Finding:
        """Record ``exc`` as an ERROR finding and mark it recorded."""
        rule = rule or catalog().for_pass(self._current_pass)
        frames = exception_frames(exc)
        user = self.user_frame(frames)
        finding = self.record(
            rule,
            level=Level.ERROR,
            locations=[user],
            stack=frames,
            properties={"exception": type(exc).__name__},
            cause=exception_summary(exc),
        )
        mark_recorded(exc)
        return finding

    @contextlib.contextmanager
    def pass_(self, name: str) -> Iterator[PassRecord]:
        """Run a pass: time it, and turn an unexplained exception into a finding."""
        record = PassRecord(name, _now())
        self.passes.append(record)
        previous, self._current_pass = self._current_pass, name
        outer, self._current_record = self._current_record, record
        start = time.perf_counter()
        self._notify(ProgressEvent("start", name))
        try:
            yield record
        except KeyboardInterrupt:
            # the user stopped the export: the pass did not fail, and its failure rule
            # (DO100 for capture) would blame the model; the caller records DO143
            record.outcome = "interrupted"
            raise
        except BaseException as exc:
            record.outcome = "failed"
            if not getattr(exc, RECORDED_ATTR, False):
                record.failure = self.record_exception(exc, catalog().for_pass(name))
            raise
        else:
            record.outcome = "ok"
        finally:
            record.duration_s = time.perf_counter() - start
            self._current_pass = previous
            self._current_record = outer
            self._notify(ProgressEvent("end", name, record.duration_s, record.outcome))

    def record_step(self, name: str, modified: bool) -> None:
        """Record that the running pass ran the step ``name`` on the ONNX model and whether
        it changed it (onnx_ir's ``PassResult.modified``). Outside a pass (a pass called
        alone, as in its unit test) there is no record to add it to."""
        if self._current_record is not None:
            self._current_record.steps.append(StepRecord(name, modified))

    def progress(
        self,
        done: int,
        total: int,
        *,
        unit: str = "nodes",
        done_bytes: int = 0,
        total_bytes: int = 0,
    ) -> None:
        """Report progress within the current pass (translation reports nodes, the save
        the tensors and bytes it has written)."""
        if self.listener is not None:
            event = ProgressEvent(
                "progress",
                self._current_pass,
                done=done,
                total=total,
                unit=unit,
                done_bytes=done_bytes,
                total_bytes=total_bytes,
            )
            self._notify(event)

    def _notify(self, event: ProgressEvent) -> None:
        if self.listener is not None:
            self.listener(event)

    def record_interruption(self, interrupt: KeyboardInterrupt, during: str | None = None) -> None:
        """Record that the user stopped the work (DO143) and close the context with it:
        the reports written from here on say what was found until then and that it was
        interrupted, never that it succeeded. ``during``: what was running (default: the
        last pass started). The context is attached to ``interrupt`` (``diagnostics``), which
        the caller re-raises: Ctrl-C stays a KeyboardInterrupt for a Python caller."""
        if during is None:
            during = self.passes[-1].name if self.passes else "the export"
        finding = self.record("export-interrupted", level=Level.ERROR, during=during)
        self.finish(self.error_for([finding], OnnxExporterError, finding.message))
        self.interrupted_by = finding
        interrupt.diagnostics = self  # type: ignore[attr-defined]

    def finish(self, exception: BaseException | None = None) -> None:
        """Close the context: success is "no exception and no error finding".

        Work after the export (optimize, verify, save) closes it again, so that success is
        recomputed and a log never says "succeeded" beside an error.
        """
        self.finished = _now()
        self.exception = exception
        self.success = exception is None and not self.has_errors()

    # -- queries -----------------------------------------------------------------------

    def effective_level(self, finding: Finding) -> Level:
        """The level a finding is rendered at: warnings become errors under warnings-as-errors."""
        if self.options.warnings_as_errors and finding.level == Level.WARNING:
            return Level.ERROR
        return finding.level

    def visible(self) -> list[Finding]:
        """The findings the renderings show at the configured verbosity."""
        threshold = self.options.verbosity_level
        return [f for f in self.findings if self.effective_level(f) >= threshold]

    def has_errors(self) -> bool:
        """Whether any finding is an error after warnings-as-errors promotion."""
        return any(self.effective_level(f) >= Level.ERROR for f in self.findings)

    def by_rule(self, rule: str) -> list[Finding]:
        """Findings of a rule, by id or name."""
        target = catalog().get(rule)
        return [f for f in self.findings if f.rule is target or f.rule.id == target.id]

    def __repr__(self) -> str:
        counts = {lvl.name: 0 for lvl in Level}
        for f in self.findings:
            counts[f.level.name] += 1
        return f"DiagnosticContext(findings={counts}, passes={[p.name for p in self.passes]})"


def default_source_root(start: str | os.PathLike[str] | None = None) -> str:
    """The top of the version-control work tree holding ``start`` (a directory; default: the
    working directory): the nearest ancestor with a ``.git``, which is what GitHub resolves
    paths against. Without one, the working directory."""
    directory = os.path.abspath(start or os.getcwd())
    while True:
        if os.path.exists(os.path.join(directory, ".git")):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return os.getcwd()
        directory = parent


def rule_text(rule: Rule | str, **fields: object) -> str:
    """A message of ``rule`` that no finding holds (the command line's own failures), as an
    error of the rule reads: ``[ID name] message`` and its fix."""
    rule = catalog().get(rule) if isinstance(rule, str) else rule
    return format_message(rule.id, rule.name, rule.format_message(**fields), rule.fix)


def finding_text(finding: Finding) -> str:
    """A finding as an error of its rule reads: ``[ID name] message`` and ``Fix:`` its fix
    (also the text of the Python warnings a successful export issues)."""
    return format_message(finding.rule.id, finding.rule.name, finding.message, finding.rule.fix)


def is_recorded(exc: BaseException) -> bool:
    """Whether the context's findings already explain an exception."""
    return bool(getattr(exc, RECORDED_ATTR, False))


def mark_recorded(exc: BaseException) -> None:
    """Mark an exception as already explained by findings in the context."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, RECORDED_ATTR, True)


def default_library_prefixes(*modules: Any) -> tuple[str, ...]:
    """Directory prefixes of the given modules' packages and of the standard library."""
    prefixes = {os.path.dirname(sys.modules["os"].__file__ or "") + os.sep}
    for module in modules:
        path = getattr(module, "__file__", None)
        if path:
            prefixes.add(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(sorted(prefixes))
