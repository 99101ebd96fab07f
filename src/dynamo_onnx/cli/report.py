"""``dynamo-onnx report LOG``: the markdown report rendered from a saved SARIF log."""

from __future__ import annotations

import argparse
from typing import Any

from dynamo_onnx.cli.exit_codes import EXIT_OK
from dynamo_onnx.cli.output import emit, writing
from dynamo_onnx.cli.sarif_log import read_log
from dynamo_onnx.reports import markdown
from dynamo_onnx.reports.writing import atomic_write_text


def run(args: argparse.Namespace) -> int:
    text = markdown.render(read_log(args.sarif))
    if args.output:
        with writing("markdown report", args.output):
            atomic_write_text(args.output, text)
        emit(f"wrote {args.output}")
    else:
        emit(text.rstrip("\n"))
    return EXIT_OK


def add_parser(commands: Any) -> None:
    """``report`` and its options, in the command's subparsers."""
    report = commands.add_parser("report", help="render the markdown report of a saved SARIF log")
    report.add_argument("sarif", help="a SARIF log written by dynamo-onnx")
    report.add_argument("-o", "--output", help="write the markdown here instead of stdout")
    report.set_defaults(func=run)
