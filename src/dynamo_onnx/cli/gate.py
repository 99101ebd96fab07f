"""``dynamo-onnx gate LOG``: exit code 1 when a SARIF log has results at or above a level
(with ``--baseline``, only results new since a previous log), the log with ``baselineState``
written, and the verdict in the GitHub Actions job summary."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from dynamo_onnx.cli.exit_codes import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
)
from dynamo_onnx.cli.output import emit, write_each
from dynamo_onnx.cli.sarif_log import read_log, result_location, result_rule_name
from dynamo_onnx.cli.step_summary import append_to_summary, step_summary
from dynamo_onnx.reports.writing import atomic_write_text

_RANK = {"none": 0, "note": 1, "warning": 2, "error": 3}


def _fingerprint(result: dict[str, Any]) -> str | None:
    from dynamo_onnx.reports.sarif import FINGERPRINT_KEY

    return (result.get("partialFingerprints") or {}).get(FINGERPRINT_KEY)


def run(args: argparse.Namespace) -> int:
    log = read_log(args.sarif)
    sarif_run = log["runs"][0]
    threshold = _RANK[args.fail_on]
    known: set[str] = set()
    if args.baseline:
        baseline = read_log(args.baseline)
        known = {fp for r in baseline["runs"][0]["results"] if (fp := _fingerprint(r))}
    failing = []
    for result in sarif_run["results"]:
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
    rules = sarif_run["tool"]["driver"].get("rules", [])
    for result in failing:
        lines.append(
            f"  {result.get('level', 'warning')} {result.get('ruleId', '')} "
            f"{result_rule_name(result, rules)} {result_location(result)}: {result['message']['text']}"
        )
    emit("\n".join(lines))
    writes = []
    if args.output:
        text = json.dumps(log, indent=2) + "\n"
        writes.append(
            ("gated SARIF log", args.output, lambda: atomic_write_text(args.output, text))
        )
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        summary = step_summary(verdict, scope, args.fail_on, failing, rules)
        writes.append(
            (
                "job summary (GITHUB_STEP_SUMMARY)",
                summary_path,
                lambda: append_to_summary(summary_path, summary),
            )
        )
    try:
        write_each(writes)
    except CommandError as exc:
        # 1 keeps meaning "results at or above the level": a passed gate whose files
        # cannot be written is a command that cannot be carried out as asked (2).
        exc.code = EXIT_FAILED if failing else EXIT_USAGE
        raise
    return EXIT_FAILED if failing else EXIT_OK


def add_parser(commands: Any) -> None:
    """``gate`` and its options, in the command's subparsers."""
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
        help="the lowest level that fails (default: %(default)s)",
    )
    gate.add_argument("--output", help="write the log with baselineState set here")
    gate.set_defaults(func=run)
