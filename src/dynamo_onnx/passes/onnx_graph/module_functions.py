"""The module-functions pass: each submodule call becomes an ONNX local function.

With ``export(..., module_functions=True)`` the nodes of each submodule call are moved into
a local function named after the module path (``h.0.attn`` -> ``h_0_attn``, domain
``pkg.dynamo_onnx.modules``), innermost modules first, so Netron shows the model's layer
hierarchy. Weights used inside a module become inputs of its function (ONNX functions
cannot see the graph's initializers). The values computed are unchanged. The grouping is
an onnx_ir pass (``GroupModulesStep``) whose ``modified`` is recorded in the pass record.
"""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.metadata import (
    MODULE_CHAIN,
    MODULE_CLASS,
    MODULE_CLASSES,
    MODULE_PATH,
    NAMESPACE,
)
from dynamo_onnx.passes.onnx_graph.steps import run_steps

__all__ = ["DOMAIN", "GroupModulesStep", "ModuleFunctionsPass", "group_modules"]

DOMAIN = "pkg.dynamo_onnx.modules"
_CHAIN = MODULE_CHAIN
_CLASSES = MODULE_CLASSES


class ModuleFunctionsPass:
    """With ``module_functions=True``: group submodule calls into local functions (DO405)."""

    name: ClassVar[str] = PassName.MODULE_FUNCTIONS
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model = state.onnx_model
        assert model is not None
        if not state.checked.module_functions:
            return state
        before = len(model.functions)
        grouping = GroupModulesStep()
        run_steps(ctx, model, [grouping])
        skipped = grouping.skipped
        ctx.record(
            "module-functions",
            properties={"skipped_modules": skipped},
            count=len(model.functions) - before,
            skipped=f"; left inline: {', '.join(skipped)}" if skipped else "",
        )
        return state


class GroupModulesStep(ir.passes.InPlacePass):
    """Every submodule call grouped into a local function, as an onnx_ir pass: modified
    when at least one function was made. ``skipped`` holds, after a run, the module paths
    left inline (for the DO405 note)."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[str] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = len(model.functions)
        self.skipped = group_modules(model)
        return ir.passes.PassResult(model, modified=len(model.functions) != before)


def _function_name(path: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in path)


def _chain(node: ir.Node) -> list[str]:
    text = node.metadata_props.get(_CHAIN, "")
    return text.split(";") if text else []


def group_modules(model: ir.Model) -> list[str]:
    """Group every submodule call into a function; returns the paths that could not be.

    A module is left inline when grouping it would reorder the graph (a node outside the
    module that sits between its nodes consumes one of its values).
    """
    graph = model.graph
    paths = {p for node in graph for p in _chain(node)}
    skipped = []
    for path in sorted(paths, key=lambda p: (-p.count("."), p)):
        if not _group(model, path):
            skipped.append(path)
    return skipped


def _with_nested(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` and every node of their subgraphs, at any depth."""
    found: list[ir.Node] = []
    for node in nodes:
        found.append(node)
        for attribute in node.attributes.values():
            if isinstance(attribute, ir.Attr) and attribute.type == ir.AttributeType.GRAPH:
                found.extend(ir.traversal.RecursiveGraphIterator(attribute.value))
            elif isinstance(attribute, ir.Attr) and attribute.type == ir.AttributeType.GRAPHS:
                for sub in attribute.value:
                    found.extend(ir.traversal.RecursiveGraphIterator(sub))
    return found


def _of_graph(value: ir.Value, graph: ir.Graph) -> bool:
    """Whether ``value`` belongs to ``graph`` itself (not to one of its subgraphs)."""
    producer = value.producer()
    return producer.graph is graph if producer is not None else value.graph is graph


def _group(model: ir.Model, path: str) -> bool:
    graph = model.graph
    order = {id(node): i for i, node in enumerate(graph)}
    members = [node for node in graph if path in _chain(node)]
    if not members:
        return True
    member_ids = {id(n) for n in members}
    produced = {id(v) for n in members for v in n.outputs}
    first, last = order[id(members[0])], order[id(members[-1])]
    for node in list(graph)[first : last + 1]:
        if id(node) not in member_ids and any(
            v is not None and id(v) in produced for v in node.inputs
        ):
            return False
    # Inputs: values used inside and made outside (graph inputs and weights included),
    # also those a member's subgraph (a Loop body, an If branch) reads from the graph: a
    # function sees only its own inputs.
    inputs: list[ir.Value] = []
    seen: set[int] = set()
    for node in _with_nested(members):
        for value in node.inputs:
            if (
                value is not None
                and id(value) not in produced
                and id(value) not in seen
                and _of_graph(value, graph)
            ):
                seen.add(id(value))
                inputs.append(value)
    graph_outputs = {id(v) for v in graph.outputs}
    outputs = [
        v
        for n in members
        for v in n.outputs
        if id(v) in graph_outputs or any(id(user) not in member_ids for user, _ in v.uses())
    ]
    chain = _chain(members[0])
    depth = chain.index(path)
    classes = members[0].metadata_props.get(_CLASSES, "").split(";")
    # The function's own values stand for the outer ones inside it.
    params = [ir.Value(name=v.name, shape=v.shape, type=v.type) for v in inputs]
    mapping = {id(v): p for v, p in zip(inputs, params)}
    call = ir.Node(DOMAIN, _function_name(path), inputs, num_outputs=len(outputs), name=path)
    for inner, outer in zip(outputs, call.outputs):
        outer.name, outer.shape, outer.type = inner.name, inner.shape, inner.type
        for user, index in list(inner.uses()):
            if id(user) not in member_ids:
                user.replace_input_with(index, outer)
        for i, value in enumerate(graph.outputs):
            if value is inner:
                graph.outputs[i] = outer
    graph.insert_after(members[-1], call)
    for node in members:
        graph.remove(node)
    for node in _with_nested(members):
        for index, value in enumerate(node.inputs):
            if value is not None and id(value) in mapping:
                node.replace_input_with(index, mapping[id(value)])
    body = ir.Graph(params, outputs, nodes=members, opset_imports=dict(model.opset_imports))
    function = ir.Function(DOMAIN, _function_name(path), "", graph=body, attributes=())
    class_name = classes[depth] if depth < len(classes) else ""
    function.metadata_props[MODULE_PATH] = path
    function.metadata_props[MODULE_CLASS] = class_name
    call.metadata_props.update(
        {
            NAMESPACE: path,
            MODULE_PATH: path,
            _CHAIN: ";".join(chain[:depth]) if depth else "",
            _CLASSES: ";".join(classes[:depth]) if depth else "",
        }
    )
    model.functions[function.identifier()] = function
    model.opset_imports.setdefault(DOMAIN, 1)
    return True
