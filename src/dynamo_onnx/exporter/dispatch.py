"""Dispatch: choose the ONNX function that translates one FX node."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx

from dynamo_onnx.exporter.registry import ONNXFunction, OnnxRegistry, target_name

__all__ = ["Dispatch", "dispatch", "is_complex_node"]


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """The outcome of dispatching one node: the chosen function (or None) and why."""

    op: str
    function: ONNXFunction | None
    reason: str


def _is_complex_arg(arg: Any) -> bool:
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        return isinstance(val, torch.Tensor) and val.is_complex()
    if isinstance(arg, (list, tuple)):
        return any(_is_complex_arg(a) for a in arg)
    return False


def is_complex_node(node: torch.fx.Node) -> bool:
    """Whether any tensor input of the node is complex-valued."""
    return any(_is_complex_arg(a) for a in node.args) or any(
        _is_complex_arg(a) for a in node.kwargs.values()
    )


def dispatch(node: torch.fx.Node, registry: OnnxRegistry) -> Dispatch:
    """Pick the ONNX function for ``node``: custom functions first, complex ones for complex inputs."""
    op = target_name(node.target)
    candidates = registry.functions_for(op)
    if not candidates:
        return Dispatch(op, None, "no ONNX function is registered for this operator")
    complex_inputs = is_complex_node(node)
    matching = [c for c in candidates if c.is_complex == complex_inputs]
    if not matching:
        kind = "complex" if complex_inputs else "real"
        return Dispatch(op, None, f"no ONNX function handles {kind}-valued inputs")
    chosen = matching[0]
    reason = "custom function" if chosen.is_custom else "torch_lib function"
    return Dispatch(op, chosen, reason)
