"""Control flow: torch's higher-order operators become ONNX ``If``, ``Loop`` and ``Scan``.

torch.export keeps ``torch.cond``, ``torch.while_loop`` and ``scan`` as higher-order
operator nodes whose branches and bodies are FX sub-modules (``get_attr`` nodes). Each
sub-module is translated by a nested translator into an ONNX subgraph:

- values the sub-module reads but does not receive per iteration (operands of a ``cond``,
  additional inputs of a loop, weights) are referenced from the outer scope, as ONNX allows;
- its constants are its own (a constant made inside a branch must not be used outside it);
- its nodes' findings point at the higher-order operator's line: torch gives the nodes of a
  sub-module generated stack traces (``<eval_with_key>``), not the user's.

Handlers see the translator only through :class:`ControlFlowTranslator`, a small public
interface. Any other higher-order operator is reported (DO308) instead of crashing.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import onnx_ir as ir
import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.fx import translated_higher_order
from dynamo_onnx.passes.metadata import NodeSource, origin_props
from dynamo_onnx.passes.translate.builder import GraphBuilder, Subgraph

__all__ = ["ControlFlowTranslator", "handlers", "op_name", "translate"]


class ControlFlowTranslator(Protocol):
    """What a control-flow handler may use of the translator."""

    ctx: DiagnosticContext
    builder: GraphBuilder

    def subgraph(
        self,
        node: torch.fx.Node,
        source: NodeSource,
        module: Subgraph,
        label: str,
        outer: Sequence[ir.Value | None],
        graph: ir.Graph | None = None,
    ) -> tuple[GraphBuilder, list[ir.Value]]: ...

    def reject(self, node: torch.fx.Node, source: NodeSource, op: str, problem: str) -> None: ...


Handler = Callable[[ControlFlowTranslator, torch.fx.Node, NodeSource], tuple[str, list[int]]]


def op_name(node: torch.fx.Node) -> str:
    """``higher_order.cond`` and the like: the operator's name in findings and summaries."""
    return f"higher_order.{getattr(node.target, '__name__', node.target)}"


@functools.cache
def handlers() -> Mapping[Any, Handler]:
    """One handler per higher-order operator that ``passes.fx`` says is translated (built
    once: it is looked up for every control-flow node)."""
    table: dict[Any, Handler] = {
        torch.ops.higher_order.cond: _cond,
        torch.ops.higher_order.while_loop: _while_loop,
        torch.ops.higher_order.scan: _scan,
        torch.ops.higher_order.map_impl: _map,
        torch.ops.higher_order.wrap_with_set_grad_enabled: _inline_grad_mode,
    }
    assert frozenset(table) == translated_higher_order()
    return types.MappingProxyType(table)


def translate(
    translator: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> str | None:
    """Translate one higher-order operator node; the ONNX operator, or None and a finding."""
    handler = handlers().get(node.target)
    problem = None if handler is not None else "dynamo-onnx has no ONNX translation for it"
    if handler is not None:
        problem = _unsupported_arguments(node)
    if handler is None or problem is not None:
        translator.reject(node, source, op_name(node), problem or "")
        return None
    onnx_op, sizes = handler(translator, node, source)
    ctx = translator.ctx
    ctx.record(
        "control-flow-translated",
        locations=[source.primary],
        properties={"fx_node": node.name, "module_path": source.module_path},
        op=op_name(node),
        onnx_op=onnx_op,
        source=ctx.display(source.primary),
        sizes=", ".join(str(s) for s in sizes),
    )
    return onnx_op


def _unsupported_arguments(node: torch.fx.Node) -> str | None:
    """Why a supported operator's call still cannot be expressed in ONNX, if it cannot."""
    meta = node.meta.get("val")
    outputs = meta if isinstance(meta, (list, tuple)) else [meta]
    # Symbolic and Python numbers are 0-d tensors in ONNX, like the sizes they compute with.
    numbers = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)
    if not all(isinstance(m, numbers) for m in outputs):
        return "one of its results is not a tensor (ONNX subgraphs can only return tensors)"
    return None


def _values(translator: ControlFlowTranslator, args: Sequence[Any]) -> list[Any]:
    """Operands as ONNX values (constants stay Python values)."""
    return translator.builder.convert(list(args))


def _module(translator: ControlFlowTranslator, arg: torch.fx.Node) -> Subgraph:
    bound = translator.builder[arg.name]
    assert isinstance(bound, Subgraph)
    return bound


def _emit(
    translator: ControlFlowTranslator,
    node: torch.fx.Node,
    source: NodeSource,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    attributes: Sequence[ir.Attr],
) -> None:
    translator.builder.emit(node, op_type, inputs, attributes, origin_props(node, source))


def _cond(
    t: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> tuple[str, list[int]]:
    """``cond(pred, true_fn, false_fn, operands)`` -> ``If`` with two subgraphs."""
    pred, true_fn, false_fn, operands = node.args
    outer = _values(t, operands)
    then_branch, then_out = t.subgraph(node, source, _module(t, true_fn), "then", outer)
    else_branch, else_out = t.subgraph(node, source, _module(t, false_fn), "else", outer)
    then_branch.set_outputs(then_out)
    else_branch.set_outputs(else_out)
    _emit(
        t,
        node,
        source,
        "If",
        [t.builder.convert(pred)],
        [
            ir.AttrGraph("then_branch", then_branch.graph),
            ir.AttrGraph("else_branch", else_branch.graph),
        ],
    )
    return "ONNX `If`", [len(then_branch.graph), len(else_branch.graph)]


def _while_loop(
    t: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> tuple[str, list[int]]:
    """``while_loop(cond_fn, body_fn, carried, additional)`` -> ``Loop``.

    The first condition is computed before the loop; the body computes the next carried
    values and then the condition on them, which is the ``Loop`` body's first output.
    """
    cond_fn, body_fn, carried, additional = node.args
    carried_values, extra = _values(t, carried), _values(t, additional)
    carried_values = [
        t.builder.scalar(f"{node.name}__init{i}", v) if isinstance(v, (bool, int, float)) else v
        for i, v in enumerate(carried_values)
    ]
    cond_module, body_module = _module(t, cond_fn), _module(t, body_fn)
    _, (first,) = t.subgraph(
        node, source, cond_module, "cond0", [*carried_values, *extra], graph=t.builder.graph
    )
    prefix = f"{t.builder.prefix}{node.name}__body__"
    body = ir.Graph([], [], nodes=[], name=prefix.rstrip("_"))
    iteration = ir.Value(name=f"{prefix}iteration", shape=ir.Shape([]))
    condition_in = ir.Value(name=f"{prefix}condition", shape=ir.Shape([]))
    iteration.dtype, condition_in.dtype = ir.DataType.INT64, ir.DataType.BOOL
    body.inputs.extend([iteration, condition_in])
    body_builder, nexts = t.subgraph(
        node, source, body_module, "body", [*[None] * len(carried), *extra], graph=body
    )
    _, (again,) = t.subgraph(node, source, cond_module, "cond", [*nexts, *extra], graph=body)
    body_builder.set_outputs([again, *nexts])
    _emit(t, node, source, "Loop", [None, first, *carried_values], [ir.AttrGraph("body", body)])
    return "ONNX `Loop`", [len(body)]


def _scan_over_first_axis(
    t: ControlFlowTranslator,
    node: torch.fx.Node,
    source: NodeSource,
    body_fn: torch.fx.Node,
    states: list[ir.Value],
    xs: list[ir.Value],
    extra: list[ir.Value],
) -> tuple[str, list[int]]:
    """A ``Scan`` whose body takes the states, then one slice of each of ``xs``.

    The body's results are the next states, then the per-slice outputs that ``Scan`` stacks.
    """
    body, results = t.subgraph(
        node, source, _module(t, body_fn), "body", [*[None] * (len(states) + len(xs)), *extra]
    )
    body.set_outputs(results)
    attributes = [ir.AttrGraph("body", body.graph), ir.AttrInt64("num_scan_inputs", len(xs))]
    _emit(t, node, source, "Scan", [*states, *xs], attributes)
    return "ONNX `Scan`", [len(body.graph)]


def _scan(
    t: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> tuple[str, list[int]]:
    """``scan(combine_fn, init, xs, additional)`` -> ``Scan`` over the first axis."""
    combine_fn, init, xs, additional = node.args
    return _scan_over_first_axis(
        t, node, source, combine_fn, _values(t, init), _values(t, xs), _values(t, additional)
    )


def _map(
    t: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> tuple[str, list[int]]:
    """``map_impl(f, xs, args)`` -> ``Scan`` without state: ``f`` on each slice, stacked."""
    body_fn, xs, additional = node.args
    return _scan_over_first_axis(
        t, node, source, body_fn, [], _values(t, xs), _values(t, additional)
    )


def _inline_grad_mode(
    t: ControlFlowTranslator, node: torch.fx.Node, source: NodeSource
) -> tuple[str, list[int]]:
    """``wrap_with_set_grad_enabled(enabled, body, *args)``: the body, inline.

    Gradients do not exist in an ONNX inference graph, so the grad mode changes nothing.
    """
    _, body_fn, *args = node.args
    before = len(t.builder.graph)
    _, results = t.subgraph(
        node, source, _module(t, body_fn), "body", _values(t, args), graph=t.builder.graph
    )
    meta = node.meta.get("val")
    t.builder.bind(node.name, tuple(results) if isinstance(meta, (list, tuple)) else results[0])
    return "its body, inlined", [len(t.builder.graph) - before]
