"""The ``dynamo-onnx`` command: ``rules`` and ``report`` (``export`` and ``gate`` to come).

Exit codes: 0 success; 1 the operation failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from dynamo_onnx.diagnostics import markdown
from dynamo_onnx.diagnostics.files import atomic_write_text
from dynamo_onnx.rules import catalog

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _cmd_rules(args: argparse.Namespace) -> int:
    if args.rule is None:
        for rule in catalog():
            print(f"{rule.id}  {rule.name:<30} {rule.level:<8} {rule.short}")
        return EXIT_OK
    try:
        rule = catalog().get(args.rule)
    except KeyError:
        print(f"dynamo-onnx: no rule {args.rule!r}; `dynamo-onnx rules` lists them", file=sys.stderr)
        return EXIT_USAGE
    print(f"{rule.id} {rule.name} ({rule.level}, pass {rule.pass_name})\n")
    print(rule.short + "\n")
    print(rule.full + "\n")
    print(rule.help)
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    try:
        with open(args.sarif, encoding="utf-8") as handle:
            log = json.load(handle)
        text = markdown.render(log)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        print(f"dynamo-onnx report: cannot render {args.sarif}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynamo-onnx",
        description="A diagnostics-first PyTorch to ONNX exporter.",
        epilog="Exit codes: 0 success; 1 the operation failed; 2 usage error.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rules = commands.add_parser("rules", help="list the rules, or print one rule's help")
    rules.add_argument("rule", nargs="?", help="a rule id (DO301) or name (unsupported-operator)")
    rules.set_defaults(func=_cmd_rules)
    report = commands.add_parser("report", help="render the markdown report of a saved SARIF log")
    report.add_argument("sarif", help="a SARIF log written by dynamo-onnx")
    report.add_argument("-o", "--output", help="write the markdown here instead of stdout")
    report.set_defaults(func=_cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    args = _parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
