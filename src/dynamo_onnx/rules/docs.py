"""Generate ``docs/rules.md`` from the catalog: ``python -m dynamo_onnx.rules.docs``."""

from __future__ import annotations

import sys

from dynamo_onnx.rules import Rule, catalog

__all__ = ["render"]

_HEADER = """\
# Rules

<!-- Generated from src/dynamo_onnx/rules/catalog.toml by `make docs`; do not edit. -->

Every finding dynamo-onnx records carries one of these rules. Ids are stable and never
reused. The level is the default; `DiagnosticOptions(warnings_as_errors=True)` renders
warnings as errors, and findings of level `none` are shown only at DEBUG verbosity.

| Id | Name | Level | Pass | What happened |
| --- | --- | --- | --- | --- |
"""


def _section(rule: Rule) -> str:
    tags = ", ".join(f"`{t}`" for t in rule.tags)
    deprecated = "\n**Deprecated:** this rule is no longer emitted.\n" if rule.deprecated else ""
    return (
        f"## {rule.id} {rule.name}\n\n"
        f"*{rule.short}*\n\n"
        f"Level: `{rule.level}` · Kind: `{rule.kind}` · Pass: `{rule.pass_name}` · "
        f"Tags: {tags}\n{deprecated}\n"
        f"{rule.full}\n\n"
        f"Message: `{rule.message}`\n\n"
        f"Fix: {rule.fix}\n\n"
        f"{rule.help}\n"
    )


def render() -> str:
    """The rules page as markdown."""
    rules = sorted(catalog(), key=lambda r: r.id)
    rows = "".join(
        f"| [{r.id}](#{r.id.lower()}-{r.name}) | `{r.name}` | {r.level} | {r.pass_name} | {r.short} |\n"
        for r in rules
    )
    return _HEADER + rows + "\n" + "\n".join(_section(r) for r in rules)


if __name__ == "__main__":
    sys.stdout.write(render())
