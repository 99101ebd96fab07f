"""``dynamo-onnx rules [RULE]``: the catalog's rules listed, or one rule's help."""

from __future__ import annotations

import argparse
from typing import Any

from dynamo_onnx.cli.exit_codes import EXIT_OK, UsageError
from dynamo_onnx.cli.output import emit
from dynamo_onnx.rules import catalog


def _rule_order(rule: Any) -> tuple[int, str]:
    """DO100 before DO1000: by the number of the id."""
    digits = "".join(c for c in rule.id if c.isdigit())
    return (int(digits) if digits else 0, rule.id)


def run(args: argparse.Namespace) -> int:
    if args.rule is None:
        for rule in sorted(catalog(), key=_rule_order):
            emit(f"{rule.id}  {rule.name:<30} {rule.level:<8} {rule.short}")
        return EXIT_OK
    rules = catalog()
    key = args.rule if args.rule in rules else args.rule.upper()  # `do301` is DO301
    if key not in rules:
        raise UsageError(args.rule, "is not a rule id or name", "`dynamo-onnx rules` lists them")
    rule = rules.get(key)
    emit(f"{rule.id} {rule.name} ({rule.level}, pass {rule.pass_name})\n")
    emit(rule.short + "\n")
    emit(rule.full + "\n")
    emit(rule.help)
    return EXIT_OK


def add_parser(commands: Any) -> None:
    """``rules`` and its argument, in the command's subparsers."""
    rules = commands.add_parser("rules", help="list the rules, or print one rule's help")
    rules.add_argument("rule", nargs="?", help="a rule id (DO301) or name (unsupported-operator)")
    rules.set_defaults(func=run)
