"""A SARIF log on disk as ``gate`` and ``report`` read it: checked against the schema (an
unreadable one is DO903), and the rule and location of one of its results."""

from __future__ import annotations

import json
from typing import Any

from dynamo_onnx.cli.exit_codes import UnreadableLogError
from dynamo_onnx.cli.output import oserror_cause


def read_log(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UnreadableLogError(path, oserror_cause(exc)) from None
    except UnicodeDecodeError:
        raise UnreadableLogError(path, "not UTF-8 text") from None
    if not text.strip():
        raise UnreadableLogError(path, "the file is empty")
    try:
        log = json.loads(text)
    except ValueError as exc:
        raise UnreadableLogError(path, f"not JSON ({exc})") from None
    try:
        log["runs"][0]["results"]  # the shape we need
    except (KeyError, IndexError, TypeError):
        raise UnreadableLogError(path, "not a SARIF log (it has no runs[0].results)") from None
    from dynamo_onnx.reports import sarif

    try:  # what gate and report read of it is there, as the schema says
        sarif.validate(log)
    except ValueError as exc:
        raise UnreadableLogError(path, f"not a SARIF 2.1.0 log: {exc}") from None
    return log


def result_rule_name(result: dict[str, Any], rules: list[Any]) -> str:
    index = result.get("ruleIndex")
    return rules[index].get("name", "") if isinstance(index, int) and index < len(rules) else ""


def result_location(result: dict[str, Any]) -> str:
    """``uri:line`` of a result's first location (a log may have results without one)."""
    try:
        location = result["locations"][0]["physicalLocation"]
        return f"{location['artifactLocation']['uri']}:{location['region']['startLine']}"
    except (KeyError, IndexError, TypeError):
        return "(no location)"
