"""Control flow: torch's higher-order operators become ONNX ``If``, ``Loop`` and ``Scan``.

torch.export keeps ``torch.cond``, ``torch.while_loop`` and ``scan`` as higher-order
operator nodes whose branches and bodies are FX sub-modules (``get_attr`` nodes). Each
sub-module is translated by a child translator into an ONNX subgraph:

- values the sub-module reads but does not receive per iteration (operands of a ``cond``,
  additional inputs of a loop, weights) are referenced from the outer scope, as ONNX allows;
- its constants are its own (a constant made inside a branch must not be used outside it);
- its nodes' findings point at the higher-order operator's line: torch gives the nodes of a
  sub-module generated stack traces (``<eval_with_key>``), not the user's.

Any other higher-order operator is reported (DO308) instead of crashing translation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch
import torch.fx

if TYPE_CHECKING:
    from dynamo_onnx.exporter.translation import _GraphTranslator, _Source

__all__ = ["Subgraph", "TRANSLATED", "is_higher_order", "translate_higher_order"]


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """A ``get_attr`` node that names an FX sub-module (a branch or a loop body)."""

    name: str
    module: torch.fx.GraphModule


def is_higher_order(target: Any) -> bool:
    """Whether an FX target is one of torch's higher-order operators (cond, map, scan...)."""
    return any(cls.__name__ == "HigherOrderOperator" for cls in type(target).__mro__)


def _handlers() -> dict[Any, Any]:
    return {
        torch.ops.higher_order.cond: _cond,
        torch.ops.higher_order.while_loop: _while_loop,
        torch.ops.higher_order.scan: _scan,
        torch.ops.higher_order.map_impl: _map,
        torch.ops.higher_order.wrap_with_set_grad_enabled: _inline_grad_mode,
    }



def translate_higher_order(
    translator: _GraphTranslator, node: torch.fx.Node, source: _Source
) -> str | None:
    """Translate one higher-order operator node; the ONNX operator, or None and a finding."""
    handler = _handlers().get(node.target)
    problem = None if handler is not None else "dynamo-onnx has no ONNX translation for it"
    if handler is not None:
        problem = _unsupported_arguments(node)
    if problem is None:
        onnx_op, sizes = handler(translator, node, source)
        translator.ctx.record(
            "control-flow-translated",
            locations=[source.primary],
            properties={"fx_node": node.name, "module_path": source.module_path},
            op=_name(node),
            onnx_op=onnx_op,
            source=translator.ctx.display(source.primary),
            sizes=", ".join(str(s) for s in sizes),
        )
        return onnx_op
    translator.report_control_flow(node, source, _name(node), problem)
    return None


def _name(node: torch.fx.Node) -> str:
    return f"higher_order.{getattr(node.target, '__name__', node.target)}"


def _unsupported_arguments(node: torch.fx.Node) -> str | None:
    """Why a supported operator's call still cannot be expressed in ONNX, if it cannot."""
    meta = node.meta.get("val")
    outputs = meta if isinstance(meta, (list, tuple)) else [meta]
    if not all(isinstance(m, torch.Tensor) for m in outputs):
        return "one of its results is not a tensor (ONNX subgraphs can only return tensors)"
    return None


# -- subgraphs ------------------------------------------------------------------------------


def _subgraph(
    parent: _GraphTranslator,
    node: torch.fx.Node,
    source: _Source,
    module: Subgraph,
    label: str,
    outer: Sequence[ir.Value | None],
    graph: ir.Graph | None = None,
) -> tuple[ir.Graph, list[ir.Value]]:
    """Translate ``module`` into ``graph`` (a new subgraph unless given).

    The sub-module's placeholders are bound, in order, to ``outer``; an entry that is
    ``None`` becomes an input of the subgraph (a loop-carried value or a scanned slice).
    Returns the graph and the values of the sub-module's results.
    """
    prefix = f"{parent.prefix}{node.name}__{label}__"
    if graph is None:
        graph = ir.Graph([], [], nodes=[], name=prefix.rstrip("_"))
    child = parent.child_for_subgraph(graph, module.module, prefix, source)
    placeholders = [n for n in module.module.graph.nodes if n.op == "placeholder"]
    for placeholder, value in zip(placeholders, outer, strict=True):
        if value is None:
            value = ir.Value(name=f"{prefix}{placeholder.name}")
            _type_from(value, placeholder.meta.get("val"))
            graph.inputs.append(value)
        child.values[placeholder.name] = value
    child.translate(module.module.graph)
    (output,) = [n for n in module.module.graph.nodes if n.op == "output"]
    results = output.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    values = [child.values[r.name] for r in results]
    assert all(isinstance(v, ir.Value) for v in values)
    return graph, values  # type: ignore[return-value]


def _set_outputs(graph: ir.Graph, values: Sequence[ir.Value], prefix: str) -> None:
    """Make ``values`` the outputs of ``graph``.

    ONNX wants each output of a subgraph produced inside it, and once: a result that is an
    input, an outer value or a repeated value goes through an ``Identity``.
    """
    outputs: list[ir.Value] = []
    for i, value in enumerate(values):
        producer = value.producer()
        if producer is None or producer.graph is not graph or value in outputs:
            identity = ir.Node("", "Identity", [value], num_outputs=1, name=f"{prefix}out{i}")
            identity.outputs[0].name = f"{prefix}out{i}"
            identity.outputs[0].dtype, identity.outputs[0].shape = value.dtype, value.shape
            graph.append(identity)
            value = identity.outputs[0]
        outputs.append(value)
    graph.outputs.extend(outputs)


def _type_from(value: ir.Value, meta: Any) -> None:
    from dynamo_onnx.exporter.translation import _set_type_and_shape

    _set_type_and_shape(value, meta)


def _emit(
    parent: _GraphTranslator,
    node: torch.fx.Node,
    source: _Source,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    attributes: Sequence[ir.Attr],
) -> None:
    meta = node.meta.get("val")
    count = len(meta) if isinstance(meta, (list, tuple)) else 1
    onnx_node = ir.Node("", op_type, inputs, attributes, num_outputs=count)
    outputs: Any = tuple(onnx_node.outputs) if isinstance(meta, (list, tuple)) else onnx_node.outputs[0]
    parent.adopt_nodes(node, outputs, [onnx_node], source)


def _cond(parent: _GraphTranslator, node: torch.fx.Node, source: _Source) -> tuple[str, list[int]]:
    """``cond(pred, true_fn, false_fn, operands)`` -> ``If`` with two subgraphs."""
    pred, true_fn, false_fn, operands = node.args
    outer = [parent.arg(o) for o in operands]
    then_graph, then_out = _subgraph(parent, node, source, parent.arg(true_fn), "then", outer)
    else_graph, else_out = _subgraph(parent, node, source, parent.arg(false_fn), "else", outer)
    _set_outputs(then_graph, then_out, f"{parent.prefix}{node.name}__then__")
    _set_outputs(else_graph, else_out, f"{parent.prefix}{node.name}__else__")
    condition = parent.arg(pred)
    _emit(
        parent,
        node,
        source,
        "If",
        [condition],
        [ir.AttrGraph("then_branch", then_graph), ir.AttrGraph("else_branch", else_graph)],
    )
    return "ONNX `If`", [len(then_graph), len(else_graph)]


def _while_loop(
    parent: _GraphTranslator, node: torch.fx.Node, source: _Source
) -> tuple[str, list[int]]:
    """``while_loop(cond_fn, body_fn, carried, additional)`` -> ``Loop``.

    The first condition is computed before the loop; the body computes the next carried
    values and then the condition on them, which is the ``Loop`` body's first output.
    """
    cond_fn, body_fn, carried, additional = node.args
    carried_values = [parent.arg(c) for c in carried]
    extra = [parent.arg(a) for a in additional]
    cond_module, body_module = parent.arg(cond_fn), parent.arg(body_fn)
    _, (first,) = _subgraph(
        parent, node, source, cond_module, "cond0", [*carried_values, *extra], graph=parent.graph
    )
    prefix = f"{parent.prefix}{node.name}__body__"
    body = ir.Graph([], [], nodes=[], name=prefix.rstrip("_"))
    iteration = ir.Value(name=f"{prefix}iteration", shape=ir.Shape([]))
    condition_in = ir.Value(name=f"{prefix}condition", shape=ir.Shape([]))
    iteration.dtype, condition_in.dtype = ir.DataType.INT64, ir.DataType.BOOL
    body.inputs.extend([iteration, condition_in])
    body, nexts = _subgraph(
        parent, node, source, body_module, "body", [*[None] * len(carried), *extra], graph=body
    )
    _, (again,) = _subgraph(
        parent, node, source, cond_module, "cond", [*nexts, *extra], graph=body
    )
    _set_outputs(body, [again, *nexts], prefix)
    _emit(parent, node, source, "Loop", [None, first, *carried_values], [ir.AttrGraph("body", body)])
    return "ONNX `Loop`", [len(body)]


def _scan_over_first_axis(
    parent: _GraphTranslator,
    node: torch.fx.Node,
    source: _Source,
    body_fn: Any,
    states: list[ir.Value],
    xs: list[ir.Value],
    extra: list[ir.Value],
) -> tuple[str, list[int]]:
    """A ``Scan`` whose body takes the states, then one slice of each of ``xs``.

    The body's results are the next states, then the per-slice outputs that ``Scan`` stacks.
    """
    body, results = _subgraph(
        parent, node, source, parent.arg(body_fn), "body",
        [*[None] * (len(states) + len(xs)), *extra],
    )
    _set_outputs(body, results, f"{parent.prefix}{node.name}__body__")
    attributes = [ir.AttrGraph("body", body), ir.AttrInt64("num_scan_inputs", len(xs))]
    _emit(parent, node, source, "Scan", [*states, *xs], attributes)
    return "ONNX `Scan`", [len(body)]


def _scan(parent: _GraphTranslator, node: torch.fx.Node, source: _Source) -> tuple[str, list[int]]:
    """``scan(combine_fn, init, xs, additional)`` -> ``Scan`` over the first axis."""
    combine_fn, init, xs, additional = node.args
    return _scan_over_first_axis(
        parent, node, source, combine_fn,
        [parent.arg(i) for i in init], [parent.arg(x) for x in xs],
        [parent.arg(a) for a in additional],
    )


def _map(parent: _GraphTranslator, node: torch.fx.Node, source: _Source) -> tuple[str, list[int]]:
    """``map_impl(f, xs, args)`` -> ``Scan`` without state: ``f`` on each slice, stacked."""
    body_fn, xs, additional = node.args
    return _scan_over_first_axis(
        parent, node, source, body_fn,
        [], [parent.arg(x) for x in xs], [parent.arg(a) for a in additional],
    )


def _inline_grad_mode(
    parent: _GraphTranslator, node: torch.fx.Node, source: _Source
) -> tuple[str, list[int]]:
    """``wrap_with_set_grad_enabled(enabled, body, *args)``: the body, inline.

    Gradients do not exist in an ONNX inference graph, so the grad mode changes nothing.
    """
    _, body_fn, *args = node.args
    before = len(parent.graph)
    _, results = _subgraph(
        parent, node, source, parent.arg(body_fn), "body", [parent.arg(a) for a in args],
        graph=parent.graph,
    )
    meta = node.meta.get("val")
    parent.values[node.name] = tuple(results) if isinstance(meta, (list, tuple)) else results[0]
    return "its body, inlined", [len(parent.graph) - before]


#: The higher-order operators translation handles.
TRANSLATED = frozenset(_handlers())
