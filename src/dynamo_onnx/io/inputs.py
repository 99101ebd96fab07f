"""The user's inputs as the exported program lists them: flat leaves, kwargs in export order."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.export import graph_signature as gs
from torch.export import pytree

__all__ = [
    "call_arguments",
    "complex_outputs",
    "flatten",
    "leaf_paths",
    "onnx_input_tensors",
    "spread",
    "user_input_leaves",
]


def call_arguments(args: Any, kwargs: Any) -> tuple[Any, Any]:
    """The caller's ``args`` and ``kwargs`` as every entry point takes them: a lone tensor is
    the one positional input (``export(model, x)``, ``verify(x)``, as torch.onnx.export
    reads it) and no ``kwargs`` is an empty dict. Anything else comes back as it was given,
    for the caller to check (a tensor must never be iterated as a sequence of its rows)."""
    if isinstance(args, torch.Tensor):
        args = (args,)
    return args, {} if kwargs is None else kwargs


def flatten(obj: Any) -> list[Any]:
    """Leaves of nested tuples, lists and dicts, in torch.export's order (None is a leaf).

    An object of a class registered as a pytree node (a dataclass, or a model family's
    object its library registered) is flattened as torch.export flattened it when it
    captured a program given to the export."""
    if isinstance(obj, (list, tuple)):
        return [leaf for item in obj for leaf in flatten(item)]
    if isinstance(obj, dict):
        return [leaf for item in obj.values() for leaf in flatten(item)]
    if obj is not None and type(obj) in pytree.SUPPORTED_NODES:
        return [leaf for item in pytree.tree_flatten(obj)[0] for leaf in flatten(item)]
    return [obj]


def user_input_leaves(
    ep: torch.export.ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[Any]:
    """Every input leaf, keyword arguments reordered as they were at export time."""
    spec = ep.call_spec.in_spec
    if kwargs and spec is not None and spec.num_children == 2:
        order = list(spec.child(1).context or [])
        kwargs = {k: kwargs[k] for k in order if k in kwargs}
    return flatten((tuple(args), dict(kwargs)))


def onnx_input_tensors(
    ep: torch.export.ExportedProgram | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[Any]:
    """The leaves that are ONNX graph inputs (tensors), in graph order."""
    if ep is None:
        return [a for a in flatten((tuple(args), dict(kwargs))) if isinstance(a, torch.Tensor)]
    leaves = user_input_leaves(ep, args, kwargs)
    user_specs = [s for s in ep.graph_signature.input_specs if s.kind == gs.InputKind.USER_INPUT]
    if len(leaves) != len(user_specs):
        raise TypeError(f"The ONNX program takes {len(user_specs)} input leaves, got {len(leaves)}")
    return [leaf for leaf, s in zip(leaves, user_specs) if isinstance(s.arg, gs.TensorArgument)]


def complex_outputs(ep: torch.export.ExportedProgram | None) -> list[bool]:
    """For each ONNX graph output, whether eager returns it complex (ONNX holds it as its
    [..., 2] real and imaginary parts)."""
    if ep is None:
        return []
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    vals = {
        a.name: a.meta.get("val") for a in flatten(output.args[0]) if isinstance(a, torch.fx.Node)
    }
    flags = []
    for spec in ep.graph_signature.output_specs:
        if spec.kind != gs.OutputKind.USER_OUTPUT:
            continue
        val = vals.get(getattr(spec.arg, "name", ""))
        flags.append(isinstance(val, torch.Tensor) and val.is_complex())
    return flags


def spread(signature: inspect.Signature, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Bound arguments with a ``**kwargs`` parameter's entries as arguments of their own
    (an input that reaches ``forward`` through ``**kwargs`` is named by its own key)."""
    spread_out: dict[str, Any] = {}
    for name, value in arguments.items():
        parameter = signature.parameters.get(name)
        if parameter is not None and parameter.kind is parameter.VAR_KEYWORD:
            spread_out.update(value)
        else:
            spread_out[name] = value
    return spread_out


def _child_keys(spec: Any) -> list[str]:
    """The name of each child of a ``TreeSpec`` node: its key where the node has keys,
    else its position."""
    n, context = spec.num_children, spec.context
    if isinstance(context, (list, tuple)):
        if len(context) == n and all(isinstance(k, str) for k in context):
            return list(context)
        first = context[0] if context else None
        if isinstance(first, (list, tuple)) and len(first) == n:
            if all(isinstance(k, str) for k in first):
                return list(first)
    return [str(i) for i in range(n)]


def leaf_paths(spec: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every leaf of a ``TreeSpec``, in flattening order (``('kwargs', 'x')``)."""
    if spec.is_leaf():
        yield prefix
        return
    for i, key in enumerate(_child_keys(spec)):
        yield from leaf_paths(spec.child(i), (*prefix, key))
