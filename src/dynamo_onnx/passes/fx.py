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
    "draws_random",
    "graph_modules",
    "has_decomposition",
    "is_higher_order",
    "is_static",
    "range_bounds",
    "meta_value",
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
    """Whether torch.export's default table decomposes the operator."""
    return target in _decomposable()


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


def draws_random(node: torch.fx.Node) -> bool:
    """Whether a node draws random numbers: a seeded nondeterministic operator, unless its
    ``train`` argument turns that off (``dropout`` in eval mode is the identity)."""
    if node.op != "call_function":
        return False
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    schema = getattr(node.target, "_schema", None)
    for index, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name in ("train", "training"):
            value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
            return value is not False
    return True


def range_bounds(value_range: Any) -> tuple[int | None, int | None]:
    """A range constraint of the program (``VR[5, int_oo]``) as ints; None for infinity."""

    def bound(value: Any) -> int | None:
        text = str(value)
        return int(text) if text.lstrip("-").isdigit() else None

    return bound(value_range.lower), bound(value_range.upper)
