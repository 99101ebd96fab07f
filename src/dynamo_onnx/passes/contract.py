"""The pass contract, checked: a pass that declares ``changes_input = False`` leaves what it
was given as it was.

Like onnx_ir's pass infrastructure checks ``in_place``, :func:`dynamo_onnx.passes.base.run_pipeline`
takes a fingerprint of every program, ONNX model and module a pass is given, before and after
the pass, and raises :class:`PassContractError` when a pass that says it changes nothing
changed one. The fingerprints cost a walk of each graph per pass, so the check runs when asked:
``run_pipeline(..., check_contract=True)`` or the environment variable
``DYNAMO_ONNX_CHECK_PASSES=1`` (the test suite sets it, tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import onnx_ir as ir
import torch

__all__ = ["CHECK_VARIABLE", "PassContractError", "checking", "fingerprint", "unchanged"]

#: The environment variable that turns the check on for every pipeline.
CHECK_VARIABLE = "DYNAMO_ONNX_CHECK_PASSES"

#: Tensor attributes up to this many elements are compared by value; larger ones by identity.
_SMALL_TENSOR = 1024


class PassContractError(AssertionError):
    """A pass changed its input while declaring ``changes_input = False``: a bug in the pass,
    never the user's, so it is raised as it is, not turned into a finding."""


def checking() -> bool:
    """Whether the environment asks every pipeline to check its passes' contract."""
    return os.environ.get(CHECK_VARIABLE, "") not in ("", "0")


def fingerprint(state: Any) -> dict[str, str]:
    """Field path -> a text that changes when the program, ONNX model or module there
    changes, for every one that ``state`` holds (in its fields and its fields' fields)."""
    found: dict[str, str] = {}
    for path, value in _fields(state, "state", depth=2):
        text = _describe(value)
        if text is not None:
            found[path] = text
    return found


def unchanged(name: str, before: dict[str, str], after: dict[str, str]) -> None:
    """Raise :class:`PassContractError` naming what pass ``name`` changed."""
    changed = sorted(path for path, text in before.items() if after.get(path) != text)
    if changed:
        raise PassContractError(
            f"the {name!r} pass declares changes_input = False but changed "
            f"{', '.join(changed)} in place: copy it first, or declare changes_input = True"
        )


def _fields(value: Any, path: str, depth: int):
    yield path, value
    if depth == 0 or not dataclasses.is_dataclass(value) or isinstance(value, type):
        return
    for field in dataclasses.fields(value):
        yield from _fields(getattr(value, field.name), f"{path}.{field.name}", depth - 1)


def _describe(value: Any) -> str | None:
    if isinstance(value, torch.export.ExportedProgram):
        return _program(value)
    if isinstance(value, ir.Model):
        return _model(value)
    if isinstance(value, torch.nn.Module):
        return _module(value)
    return None


def _program(ep: torch.export.ExportedProgram) -> str:
    """Every graph's nodes (targets, arguments, names), the signature and the weights' identity.

    Node by node rather than ``str(graph)``, which writes the graph as Python code with its
    types: four times the cost, paid twice per pass."""
    graphs = [
        f"{path}:\n" + "\n".join(_fx_node(node) for node in module.graph.nodes)
        for path, module in ep.graph_module.named_modules()
        if isinstance(module, torch.fx.GraphModule)
    ]
    weights = [f"{k}:{id(v)}" for k, v in {**ep.state_dict, **ep.constants}.items()]
    return "\n".join([*graphs, str(ep.graph_signature), *weights])


def _fx_node(node: torch.fx.Node) -> str:
    """A node's kind, name, target and arguments (other nodes by name: their ``repr``)."""
    return f"{node.op} {node.name} {node.target} {node.args!r} {node.kwargs!r}"


def _module(module: torch.nn.Module) -> str:
    """Submodules with their mode and patched methods, parameters and buffers by identity."""
    parts = [
        f"{path}:{type(sub).__name__}:training={sub.training}:patched={'forward' in vars(sub)}"
        for path, sub in module.named_modules()
    ]
    parts += [
        f"{name}:{id(t)}:{tuple(t.shape)}:{t.dtype}"
        for name, t in [*module.named_parameters(), *module.named_buffers()]
    ]
    return "\n".join(parts)


def _model(model: ir.Model) -> str:
    """The graph and functions node by node, I/O, initializers (by identity) and imports."""
    parts = [f"opsets:{sorted(model.opset_imports.items())}", f"meta:{model.metadata_props}"]
    for graph in (model.graph, *model.functions.values()):
        parts.append(f"graph {graph.name}: {_values(graph.inputs)} -> {_values(graph.outputs)}")
        parts += [_node(node) for node in ir.traversal.RecursiveGraphIterator(graph)]
    parts += [
        f"init {name}:{value.type}:{value.shape}:{id(value.const_value)}"
        for name, value in model.graph.initializers.items()
    ]
    return "\n".join(parts)


def _values(values: Any) -> str:
    return ",".join(
        "-" if v is None else f"{v.name}:{v.type}:{v.shape}:{id(v.const_value)}" for v in values
    )


def _node(node: ir.Node) -> str:
    attributes = ",".join(f"{name}={_attribute(a)}" for name, a in node.attributes.items())
    return (
        f"{node.name} {node.domain}::{node.op_type}:{node.overload}"
        f"({_values(node.inputs)}) -> ({_values(node.outputs)}) {{{attributes}}}"
    )


def _attribute(attribute: Any) -> str:
    if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return "graph"  # its nodes are walked with the graph's
    if attribute.type == ir.AttributeType.TENSOR:
        tensor = attribute.value
        small = tensor.size <= _SMALL_TENSOR
        return f"{tensor.dtype}{tensor.shape}:{tensor.tobytes().hex() if small else id(tensor)}"
    return repr(attribute.value)
