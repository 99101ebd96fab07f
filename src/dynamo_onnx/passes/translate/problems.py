"""The findings translation records for a node, and the one error it raises at the end.

Translation collects all it can: each node that cannot be translated is a finding here, the
translation goes on with stand-in values, and when the graph is done
:func:`raise_for_failures` raises once, listing every problem with a coverage figure.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext, Finding
from dynamo_onnx.diagnostics.summary import OperatorUse
from dynamo_onnx.errors import TranslationError, UnsupportedOperatorError
from dynamo_onnx.passes.fx import has_decomposition
from dynamo_onnx.passes.metadata import NodeSource
from dynamo_onnx.registry.dispatch import Dispatch

__all__ = [
    "OperatorTally",
    "control_flow_unsupported",
    "dispatched",
    "nearest_match",
    "Failure",
    "raise_for_failures",
    "translation_failed",
    "unsupported",
]


@dataclasses.dataclass(frozen=True)
class Failure:
    """A node that could not be translated: what the pass's one error lists, and the
    finding recorded for it (whose rule and fix the error takes)."""

    kind: str  # "unsupported", "control-flow" or "other"
    op: str
    where: str
    finding: Finding


@dataclasses.dataclass
class OperatorTally:
    """How often each operator appeared, which ONNX function took it, and what failed."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    functions: dict[str, str | None] = dataclasses.field(default_factory=dict)
    failures: list[Failure] = dataclasses.field(default_factory=list)

    def add_failure(self, kind: str, op: str, where: str, finding: Finding) -> None:
        self.failures.append(Failure(kind, op, where, finding))

    def seen(self, op: str) -> None:
        self.counts[op] = self.counts.get(op, 0) + 1
        self.functions.setdefault(op, None)

    def translated(self, op: str, function: str) -> None:
        self.functions[op] = function

    def uses(self) -> list[OperatorUse]:
        return [OperatorUse(op, self.counts[op], self.functions[op]) for op in sorted(self.counts)]

    def coverage(self) -> tuple[int, int]:
        """(distinct operators translated, distinct operators)."""
        return sum(1 for f in self.functions.values() if f is not None), len(self.counts)


def _common(ctx: DiagnosticContext, node: torch.fx.Node, source: NodeSource) -> dict[str, object]:
    return {
        "locations": [source.primary],
        "stack": source.frames,
        "source": ctx.display(source.primary),
    }


def _node_properties(node: torch.fx.Node, source: NodeSource) -> dict[str, object]:
    properties: dict[str, object] = {"fx_node": node.name}
    if source.module_path:
        properties["module_path"] = source.module_path
    return properties


def unsupported(
    ctx: DiagnosticContext,
    tally: OperatorTally,
    node: torch.fx.Node,
    source: NodeSource,
    chosen: Dispatch,
) -> None:
    """DO301: no ONNX function for the operator (with a ready-to-paste registration)."""
    decomposable = has_decomposition(node.target)
    finding = ctx.record(
        "unsupported-operator",
        properties={
            **_node_properties(node, source),
            "reason": chosen.reason,
            "has_decomposition": decomposable,
        },
        op=chosen.op,
        decomposition=(
            "torch has a decomposition for it, but it decomposes into operators "
            "without ONNX functions"
            if decomposable
            else "torch has no decomposition for it"
        ),
        **_common(ctx, node, source),
    )
    finding.markdown = f"{finding.message}\n\n{_register_example(chosen.op, node)}"
    tally.add_failure("unsupported", chosen.op, ctx.display(source.primary), finding)


def translation_failed(
    ctx: DiagnosticContext,
    tally: OperatorTally,
    node: torch.fx.Node,
    source: NodeSource,
    chosen: Dispatch,
    failure: Exception,
) -> None:
    """DO303: the operator's ONNX function raised on these arguments."""
    assert chosen.function is not None
    text = str(failure).strip()
    finding = ctx.record(
        "operator-translation-failed",
        properties=_node_properties(node, source),
        op=chosen.op,
        function=chosen.function.name,
        cause=f"{type(failure).__name__}: {text.splitlines()[0] if text else ''}",
        **_common(ctx, node, source),
    )
    tally.add_failure("other", chosen.op, ctx.display(source.primary), finding)


def control_flow_unsupported(
    ctx: DiagnosticContext,
    tally: OperatorTally,
    node: torch.fx.Node,
    source: NodeSource,
    op: str,
    problem: str,
) -> None:
    """DO308: a control-flow node that cannot become ONNX."""
    finding = ctx.record(
        "control-flow-unsupported",
        properties=_node_properties(node, source),
        op=op,
        problem=problem,
        **_common(ctx, node, source),
    )
    tally.add_failure("control-flow", op, ctx.display(source.primary), finding)


def nearest_match(
    ctx: DiagnosticContext, node: torch.fx.Node, source: NodeSource, chosen: Dispatch
) -> None:
    """DO305: dispatch chose the nearest of several functions, not a perfect match."""
    assert chosen.function is not None
    ctx.record(
        "dispatch-nearest-match",
        properties=_node_properties(node, source),
        op=chosen.op,
        function=chosen.function.name,
        candidates=chosen.candidates,
        mismatches="; ".join(chosen.mismatches),
        **_common(ctx, node, source),
    )


def dispatched(
    ctx: DiagnosticContext, node: torch.fx.Node, source: NodeSource, chosen: Dispatch
) -> None:
    """DO304 (DEBUG): which function translated the node, and why it was chosen."""
    assert chosen.function is not None
    ctx.record(
        "node-dispatched",
        locations=[source.primary],
        properties={"fx_node": node.name},
        op=chosen.op,
        function=chosen.function.name,
        reason=chosen.reason,
    )


def raise_for_failures(ctx: DiagnosticContext, tally: OperatorTally) -> None:
    """Raise once for every node that could not be translated, if any."""
    problems = tally.failures
    if not problems:
        return
    translated, total = tally.coverage()
    coverage = f"{translated} of {total} distinct operators translated"
    lines = [f"  - {f.op} at {f.where}" for f in problems]
    unsupported_ops = [f for f in problems if f.kind == "unsupported"]
    if unsupported_ops:
        distinct = sorted({f.op for f in unsupported_ops})
        cause = f"{len(distinct)} operator(s) have no ONNX function ({coverage}):\n" + "\n".join(
            lines
        )
        ctx.raise_for([f.finding for f in unsupported_ops], UnsupportedOperatorError, cause)
    control_flow = [f for f in problems if f.kind == "control-flow"]
    if control_flow:
        cause = f"{len(problems)} node(s) cannot be exported ({coverage}):\n" + "\n".join(
            f"  - {f.finding.message}" for f in problems
        )
        ctx.raise_for([f.finding for f in control_flow], TranslationError, cause)
    cause = (
        f"{len(problems)} node(s) failed to translate ({coverage}):\n"
        + "\n".join(lines)
        + "\n"
        + "\n".join(f"    {f.finding.message}" for f in problems)
    )
    ctx.raise_for([f.finding for f in problems], TranslationError, cause)


def _register_example(op: str, node: torch.fx.Node) -> str:
    """A ready-to-paste registration for the operator, for the finding's markdown."""
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    params = _parameters(node)
    first = params.split(":")[0].split(",")[0].split("=")[0].strip() or "x0"
    overload_arg = f", overload={overload!r}" if overload else ""
    fn = f"{namespace}_{name}".replace(".", "_")
    return (
        "Register one (ready to paste, then write the body):\n\n"
        "```python\n"
        "import dynamo_onnx\n"
        "from onnxscript import opset18 as op\n\n\n"
        f"def {fn}({params or 'x0'}):\n"
        f"    return op.Identity({first})  # replace with the ONNX computation of {op}\n\n\n"
        "registry = dynamo_onnx.OnnxRegistry()\n"
        f"registry.register_op({fn}, {namespace!r}, {name!r}{overload_arg})\n"
        "program = dynamo_onnx.export(model, args, registry=registry)\n"
        "```"
    )


#: Python spellings of the schema's non-tensor types, for the registration example.
_PYTHON_TYPES = {"float": "float", "int": "int", "SymInt": "int", "bool": "bool", "str": "str"}


def _parameters(node: torch.fx.Node) -> str:
    """The parameters of the function to register, from the operator's schema: tensors by
    name, other arguments with their Python type and default (``x, scale: float = 1.0``),
    as the translator passes them. Without a schema: one ``x<i>`` per node input."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
        return ", ".join(f"x{i}" for i in range(len(inputs)))
    params = []
    for argument in schema.arguments:
        kind = str(argument.type).rstrip("?")
        text = argument.name
        if kind in _PYTHON_TYPES:
            text += f": {_PYTHON_TYPES[kind]}"
        elif "Tensor" not in kind:
            text += f": {kind}"
        if argument.has_default_value():
            text += f" = {argument.default_value!r}"
        elif str(argument.type).endswith("?"):
            text += " = None"
        params.append(text)
    return ", ".join(params)
