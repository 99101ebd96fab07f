"""A SARIF log -> a markdown report a person can read, through jinja2 templates.

The markdown is rendered from the SARIF log, never from the context directly, so a saved
log renders the same report (``dynamo-onnx report x.sarif``): the SARIF is the record.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jinja2

from dynamo_onnx.reports import sarif

__all__ = ["render"]

_LEVELS = (
    ("error", "❌", "Errors"),
    ("warning", "⚠️", "Warnings"),
    ("note", "ℹ️", "Notes"),
    ("none", "🔎", "Details"),
)


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dynamo_onnx.reports", "templates"),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cell"] = _cell
    env.filters["seconds"] = lambda s: f"{s:.2f} s" if s >= 0.01 else f"{s * 1000:.1f} ms"
    return env


def _cell(value: Any) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _where(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a result points, unless it is only anchored at the export call."""
    locations = result.get("locations") or []
    properties = result.get("properties") or {}
    anchored = properties.get("anchor") in ("call-site", "model")
    if not locations or anchored and "origin" not in properties:
        return None
    physical = locations[0].get("physicalLocation", {})
    uri = physical.get("artifactLocation", {}).get("uri", "")
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    region = physical.get("region", {})
    frames = (result.get("stacks") or [{}])[0].get("frames") or []
    function = None
    for frame in frames:
        frame_region = frame.get("location", {}).get("physicalLocation", {}).get("region", {})
        if frame_region.get("startLine") == region.get("startLine"):
            function = frame.get("location", {}).get("message", {}).get("text")
            break
    return {
        "origin": properties.get("origin"),
        "path": uri,
        "line": region.get("startLine"),
        "snippet": properties.get("originSnippet")
        if "origin" in properties
        else (region.get("snippet") or {}).get("text"),
        "function": function,
    }


def _groups(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    rules = run["tool"]["driver"].get("rules", [])
    groups = []
    for level, icon, title in _LEVELS:
        by_rule: dict[str, dict[str, Any]] = {}
        for result in run.get("results", []):
            if sarif.finding_level(result) != level:
                continue
            rule = rules[result["ruleIndex"]]
            entry = by_rule.setdefault(
                rule["id"],
                {
                    "id": rule["id"],
                    "name": rule.get("name", ""),
                    "short": rule["shortDescription"]["text"],
                    "fix": rule.get("help", {}).get("text", ""),
                    "help": rule.get("help", {}).get("markdown", ""),
                    "help_uri": rule.get("helpUri"),
                    "has_details": "**How to fix.**" in rule.get("help", {}).get("markdown", ""),
                    "results": [],
                },
            )
            message = result["message"]
            text = message.get("markdown") or message["text"]
            # The fix ends each warning's message in the log (for VS Code); here it is said
            # once per rule, below its results.
            text = text.split("\n\n**Fix:** ", 1)[0]
            entry["results"].append({"message": text, "where": _where(result)})
        if by_rule:
            count = sum(len(r["results"]) for r in by_rule.values())
            groups.append(
                {
                    "level": level,
                    "icon": icon,
                    "title": title,
                    "count": count,
                    "rules": list(by_rule.values()),
                }
            )
    return groups


def render(log: Mapping[str, Any]) -> str:
    """Render the markdown report of a SARIF log produced by dynamo-onnx."""
    run = log["runs"][0]
    invocation = (run.get("invocations") or [{}])[0]
    properties = run.get("properties", {})
    notifications = invocation.get("toolExecutionNotifications") or []
    operators = properties.get("operators") or []
    translated = sum(1 for op in operators if op.get("function"))
    context = {
        "subject": properties.get("subject", "model"),
        "succeeded": bool(invocation.get("executionSuccessful")),
        "failure": notifications[0]["message"]["text"] if notifications else None,
        "failure_detail": (notifications[0].get("exception") or {}).get("message")
        if notifications
        else None,
        "verbosity": properties.get("verbosity", "INFO"),
        "warnings_as_errors": properties.get("warningsAsErrors", False),
        "passes": (invocation.get("properties") or {}).get("passes"),
        "groups": _groups(run),
        "rendered": properties.get("renderedFindings", len(run.get("results", []))),
        "recorded": properties.get("recordedFindings", len(run.get("results", []))),
        "operators": operators,
        "translated": translated,
        "inputs": properties.get("inputs") or [],
        "outputs": properties.get("outputs") or [],
        "model": properties.get("model"),
        "versions": (invocation.get("properties") or {}).get("versions") or {},
        "start": invocation.get("startTimeUtc"),
    }
    return _environment().get_template("report.md.j2").render(**context)
