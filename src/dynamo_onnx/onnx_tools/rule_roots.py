"""onnxscript rewrite rules tried only on the nodes their pattern can start from.

``RewriteRuleSet`` tries every rule on every node: a rule set of 30 rules on a graph of 1000
nodes is 30,000 matcher calls per pass, and the optimizer runs its rule set up to twice per
call, three calls when a model is optimized for ONNX Runtime (223,000 matcher calls on the
8-layer decoder of docs/performance.md, most of the optimizer's time). Almost every call
fails at its first step: the node's op type is not the one of the pattern's output node,
which is what the matcher compares first. :func:`root_filtered` wraps each rule so that this
comparison is made before the matcher is set up; the rules that match, and what they do,
are the same, in the same order.

A rule is filtered only when onnxscript's own simple matcher matches its single output node
first against the node (the common case); any other rule (several output nodes, another
matcher, an op type given as a pattern) is tried as it is. A tracer (``MatchingTracer``,
the fusion findings' reasons) sees every try as before: the filter is off when one is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import onnx_ir as ir
from onnxscript.rewriter import _matcher, pattern

__all__ = ["root_filtered", "root_op_type"]


def root_op_type(rule: pattern.RewriteRule) -> str | None:
    """The op type every node the rule can rewrite has, or None when it cannot be told."""
    target = getattr(rule, "_target_pattern", None)
    matcher = getattr(rule, "_matcher", None)
    if (
        target is None
        or type(matcher) is not _matcher.SimplePatternMatcher
        or not target.has_single_output_node
    ):
        return None
    identifier = target.output_node.op_identifier()
    return identifier[1] if identifier is not None else None


class _RootFiltered:
    """A rewrite rule that returns at once for a node of another op type than its root's."""

    def __init__(self, rule: pattern.RewriteRule, op_type: str) -> None:
        self._rule = rule
        self._op_type = op_type

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_rule", "_op_type"):  # copies, pickles
            raise AttributeError(name)
        return getattr(self._rule, name)

    def __repr__(self) -> str:
        return repr(self._rule)

    def __str__(self) -> str:
        return str(self._rule)

    def try_rewrite(
        self,
        model: ir.Model,
        graph_or_function: ir.Graph | ir.Function,
        node: ir.Node,
        *,
        verbose: int | None = None,
        tracer: Any = None,
    ) -> Any:
        if tracer is None and node.op_type != self._op_type:
            return None
        return self._rule.try_rewrite(
            model, graph_or_function, node, verbose=verbose, tracer=tracer
        )


def root_filtered(rules: Iterable[pattern.RewriteRule]) -> pattern.RewriteRuleSet:
    """A rule set of ``rules``, each tried only on nodes of its root's op type."""
    wrapped = []
    for rule in rules:
        op_type = root_op_type(rule)
        wrapped.append(rule if op_type is None else _RootFiltered(rule, op_type))
    return pattern.RewriteRuleSet(cast(list[pattern.RewriteRule], wrapped))
