"""Facts about FX graphs that several passes share: which nodes only assert, which operators
are higher-order (control flow) and which of those translation handles, what torch
decomposes, and the values FX nodes carry."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.fx

__all__ = [
    "ASSERTIONS",
    "argument_value",
    "draws_random",
    "graph_modules",
    "has_decomposition",
    "is_higher_order",
    "is_none_output",
    "is_static",
    "meta_value",
    "none_outputs",
    "random_outputs",
    "range_bounds",
    "static_size",
    "translated_higher_order",
]

#: Nodes translation skips: they only assert what torch checked at capture.
ASSERTIONS = frozenset(
    {
        torch.ops.aten._assert_async.default,
        torch.ops.aten._assert_async.msg,
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten._assert_tensor_metadata.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
        torch.ops.aten.sym_constrain_range.default,
    }
)


def is_higher_order(target: Any) -> bool:
    """Whether an FX target is one of torch's higher-order operators (cond, map, scan...)."""
    return any(cls.__name__ == "HigherOrderOperator" for cls in type(target).__mro__)


@functools.cache
def translated_higher_order() -> frozenset[Any]:
    """The higher-order operators translation turns into ONNX (``If``, ``Loop``, ``Scan``,
    or the body inline); the translate pass has one handler for each of them."""
    return frozenset(
        {
            torch.ops.higher_order.cond,
            torch.ops.higher_order.while_loop,
            torch.ops.higher_order.scan,
            torch.ops.higher_order.map_impl,
            torch.ops.higher_order.wrap_with_set_grad_enabled,
        }
    )


@functools.cache
def _decomposable() -> frozenset[Any]:
    """Operators torch.export's default table decomposes (built once: it has ~900 entries)."""
    return frozenset(torch.export.default_decompositions().keys())


def has_decomposition(target: Any) -> bool:
    """Whether ``run_decompositions`` decomposes the operator: it is in torch.export's
    default table, or it is a CompositeImplicitAutograd operator (``mH``, ``mT``: kept by
    the capture, decomposed by any re-trace, though the table does not list them)."""
    if target in _decomposable():
        return True
    has_kernel = getattr(target, "has_kernel_for_dispatch_key", None)
    return has_kernel is not None and has_kernel(torch.DispatchKey.CompositeImplicitAutograd)


def meta_value(arg: Any) -> Any:
    """What an FX argument holds at trace time: ``meta["val"]`` of a node, else the value."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def is_static(node: torch.fx.Node) -> bool:
    """Whether every tensor the node takes or makes has a static shape."""
    vals = [meta_value(a) for a in node.all_input_nodes] + [node.meta.get("val")]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    return all(isinstance(d, int) for t in tensors for d in t.shape)


def graph_modules(ep: torch.export.ExportedProgram) -> list[torch.fx.GraphModule]:
    """The program's graph module and every sub-module (control-flow branches and bodies)."""
    return [m for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]


def argument_value(node: torch.fx.Node, name: str) -> Any:
    """The value of an operator's argument by its schema name: given positionally, by
    keyword, or the schema's default (``dropout_p`` of attention defaults to 0.0)."""
    schema = getattr(node.target, "_schema", None)
    for index, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name != name:
            continue
        if index < len(node.args) and not argument.kwarg_only:
            return node.args[index]
        if name in node.kwargs:
            return node.kwargs[name]
        return argument.default_value if argument.has_default_value() else None
    return None


def _names_of(node: torch.fx.Node) -> frozenset[str]:
    schema = getattr(node.target, "_schema", None)
    return frozenset(a.name for a in (schema.arguments if schema is not None else ()))


def draws_random(node: torch.fx.Node) -> bool:
    """Whether a node draws random numbers in the exported graph.

    A seeded nondeterministic operator draws, except where its arguments turn that off:
    ``train=False`` (``dropout`` in eval mode is the identity), or a dropout probability
    of 0 on a dropout or attention operator (a model library's attention calls
    ``scaled_dot_product_attention`` with ``dropout_p=0.0`` in eval mode). The decision is
    made on the graph's constant arguments; a probability computed in the graph counts as
    random.
    """
    if node.op != "call_function":
        return False
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    names = _names_of(node)
    for flag in ("train", "training"):
        if flag in names and argument_value(node, flag) is False:
            return False
    operator = str(getattr(node.target, "__name__", node.target))
    if "dropout" in operator or "attention" in operator:
        probability = next(
            (argument_value(node, p) for p in ("dropout_p", "p") if p in names), None
        )
        if isinstance(probability, (int, float)) and probability == 0:
            return False
    return True


def _draws_random_inside(root: torch.nn.Module, node: torch.fx.Node) -> bool:
    """Whether a node draws random numbers, itself or in the branches and bodies of a
    control-flow operator (its ``get_attr`` graph modules)."""
    if draws_random(node):
        return True
    if node.op != "call_function" or not is_higher_order(node.target):
        return False
    for arg in node.all_input_nodes:
        if arg.op != "get_attr":
            continue
        sub = getattr(root, str(arg.target), None)
        if isinstance(sub, torch.fx.GraphModule) and any(
            _draws_random_inside(sub, n) for n in sub.graph.nodes
        ):
            return True
    return False


def is_none_output(spec: Any) -> bool:
    """Whether an output spec is a ``None`` the model returns (``return y, None``): torch.onnx
    drops those from the ONNX outputs, and so does dynamo-onnx."""
    arg = spec.arg
    return isinstance(arg, torch.export.graph_signature.ConstantArgument) and arg.value is None


def none_outputs(ep: torch.export.ExportedProgram) -> list[int]:
    """The positions, among the flattened user outputs, of the ``None`` the model returns."""
    user = [
        spec
        for spec in ep.graph_signature.output_specs
        if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
    ]
    return [i for i, spec in enumerate(user) if is_none_output(spec)]


def random_outputs(ep: torch.export.ExportedProgram) -> list[bool]:
    """For each user output of the program, whether its value depends on a node that draws
    random numbers (those outputs can only be compared with eager on their shapes)."""
    tainted: set[torch.fx.Node] = set()
    for node in ep.graph.nodes:  # topological order: inputs come before their users
        if _draws_random_inside(ep.graph_module, node) or any(
            i in tainted for i in node.all_input_nodes
        ):
            tainted.add(node)
    produced = {n.name: n for n in ep.graph.nodes}
    flags = []
    for spec in ep.graph_signature.output_specs:
        if spec.kind != torch.export.graph_signature.OutputKind.USER_OUTPUT or is_none_output(spec):
            continue
        node = produced.get(getattr(spec.arg, "name", ""))
        flags.append(node is not None and node in tainted)
    return flags


def static_size(size: Any) -> int | None:
    """A dimension's size when the program fixes it: an int, or a symbolic size torch
    replaced by a constant (a placeholder keeps its ``SymInt`` even then); else None."""
    if isinstance(size, int):
        return size
    text = str(size)
    return int(text) if text.lstrip("-").isdigit() else None


def range_bounds(value_range: Any) -> tuple[int | None, int | None]:
    """A range constraint of the program (``VR[5, int_oo]``) as ints; None for infinity."""

    def bound(value: Any) -> int | None:
        text = str(value)
        return int(text) if text.lstrip("-").isdigit() else None

    return bound(value_range.lower), bound(value_range.upper)
