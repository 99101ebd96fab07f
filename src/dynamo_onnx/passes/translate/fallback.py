"""The per-node decomposition fallback: a node whose operator has no working ONNX function,
but a torch decomposition, is captured alone, decomposed, and its small graph translated in
place of the node (DO306). Only for static shapes: the example inputs are zeros of the
node's input shapes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from dynamo_onnx.passes.logs import torch_deprecations_ignored

__all__ = ["Lower", "flat_args", "single_node_program"]

#: Decomposes an ExportedProgram, also the given operators (the decompose pass's ``lower``,
#: handed to translation by the pipeline so that the two passes do not import each other).
Lower = Callable[[torch.export.ExportedProgram, Sequence[Any]], torch.export.ExportedProgram]


def flat_args(node: torch.fx.Node) -> list[Any]:
    """The node's arguments, positional then keyword, with lists flattened."""
    flat: list[Any] = []
    for arg in [*node.args, *node.kwargs.values()]:
        flat.extend(arg if isinstance(arg, (list, tuple)) else [arg])
    return flat


class _OneOperator(torch.nn.Module):
    """Calls one operator with the node's arguments, tensors given as inputs."""

    def __init__(self, node: torch.fx.Node) -> None:
        super().__init__()
        self.target = node.target
        self.args_, self.kwargs_ = node.args, dict(node.kwargs)

    def forward(self, *tensors: torch.Tensor) -> Any:
        supply = iter(tensors)

        def fill(arg: Any) -> Any:
            if isinstance(arg, torch.fx.Node):
                return next(supply)
            if isinstance(arg, (list, tuple)):
                return type(arg)(fill(a) for a in arg)
            return arg

        args = [fill(a) for a in self.args_]
        kwargs = {k: fill(v) for k, v in self.kwargs_.items()}
        return self.target(*args, **kwargs)


def single_node_program(node: torch.fx.Node, lower: Lower) -> torch.export.ExportedProgram | None:
    """The node alone, captured and decomposed with its operator's torch decomposition;
    None when its shapes are dynamic or torch cannot do it."""
    examples = []
    for arg in flat_args(node):
        if not isinstance(arg, torch.fx.Node):
            continue
        val = arg.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
            return None
        examples.append(torch.zeros(tuple(val.shape), dtype=val.dtype))
    try:
        with torch_deprecations_ignored():  # torch's, about its own tree specs
            program = torch.export.export(_OneOperator(node), tuple(examples), strict=False)
            return lower(program, [node.target])
    except Exception:  # no fallback then; the original finding stands
        return None
