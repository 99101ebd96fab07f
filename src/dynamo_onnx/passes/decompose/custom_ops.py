"""Custom operators with a Python implementation, traced through to ATen operators.

An operator registered with ``torch.library`` (``torch.library.custom_op`` or
``Library.impl``) stays one node in the captured graph, and torch's decomposition table
knows nothing of it. When the registry has no ONNX function for it, the dispatcher still has
its implementation: ``torch.library.get_kernel`` returns the kernel the CPU would run, and a
kernel registered from Python says so in its debug text (``registered at .../file.py:12``).
Given to ``run_decompositions`` as the operator's decomposition, that kernel runs on the
tracer's tensors, so the torch calls in its body become ATen nodes the registry translates.

Kernels registered from C++ are never traced through: they read tensor memory the tracer
does not have. A registered ONNX function always wins: such operators are left alone. The
operators of ``torch.onnx.ops`` are never traced through either: they name ONNX nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.context import exception_frames, exception_summary
from dynamo_onnx.diagnostics.findings import Location
from dynamo_onnx.foreign_text import kernel_registered_in_python
from dynamo_onnx.passes.fx import graph_modules, has_decomposition, is_higher_order
from dynamo_onnx.passes.metadata import node_source
from dynamo_onnx.registry import OnnxRegistry, target_name

__all__ = [
    "TracedThrough",
    "python_kernel",
    "python_kernels",
    "report_traced",
    "report_untraceable",
]

#: The namespaces of torch's own operators: never custom, decomposed by torch's table.
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "higher_order", "_c10d_functional"})
#: The namespaces of ``torch.onnx.ops``: their kernels are placeholders (``symbolic``'s zeros)
#: or torch's reference for an ONNX operator, which the registry translates or the
#: decomposition table lowers (``torch.onnx.ops.aten_decompositions()``): never traced.
_ONNX_NAMESPACES = frozenset({"onnx", "onnx_symbolic"})
_NEVER_TRACED = _TORCH_NAMESPACES | _ONNX_NAMESPACES


@dataclasses.dataclass(frozen=True)
class TracedThrough:
    """The custom operators whose Python kernels decomposition may run, and where each is called."""

    kernels: dict[Any, Callable[..., Any]]
    #: Operator -> the user's lines calling it (first call first).
    calls: dict[Any, list[Location | None]]

    def __bool__(self) -> bool:
        return bool(self.kernels)


def python_kernel(op: Any) -> Callable[..., Any] | None:
    """The operator's CPU kernel as a callable, if it was registered from Python."""
    try:
        kernel = torch.library.get_kernel(op, "CPU")
    except (RuntimeError, ValueError):
        return None
    if not kernel_registered_in_python(repr(kernel)):
        return None
    keys = torch.DispatchKeySet(torch.DispatchKey.CPU)

    def traced(*args: Any, **kwargs: Any) -> Any:
        return kernel.call_boxed(keys, *args, **kwargs)

    return traced


def python_kernels(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, registry: OnnxRegistry
) -> TracedThrough:
    """The custom operators in ``ep`` with no ONNX function and a Python kernel."""
    kernels: dict[Any, Callable[..., Any]] = {}
    calls: dict[Any, list[Location | None]] = {}
    rejected: set[Any] = set()
    for gm in graph_modules(ep):
        for node in gm.graph.nodes:
            op = node.target
            namespace = getattr(op, "namespace", None)  # an OpOverload's, e.g. "mylib"
            if node.op != "call_function" or not isinstance(namespace, str):
                continue
            if op in rejected or namespace in _NEVER_TRACED or is_higher_order(op):
                continue
            if op not in kernels:
                kernel = None
                if not registry.supports(op) and not has_decomposition(op):
                    kernel = python_kernel(op)
                if kernel is None:
                    rejected.add(op)
                    continue
                kernels[op] = kernel
            calls.setdefault(op, []).append(node_source(ctx, node).primary)
    return TracedThrough(kernels, calls)


def _name(op: Any) -> str:
    """``ns::name`` for the default overload, ``ns::name.overload`` otherwise."""
    name = target_name(op)
    return name.removesuffix(".default")


def report_traced(ctx: DiagnosticContext, through: TracedThrough) -> None:
    """One DO204 note per operator whose Python implementation the ONNX model computes."""
    for op, lines in through.calls.items():
        ctx.record(
            "custom-op-traced-through",
            locations=[lines[0]],
            related=[line for line in lines[1:] if line is not None],
            operator=_name(op),
            count=len(lines),
        )


def report_untraceable(ctx: DiagnosticContext, through: TracedThrough, exc: Exception) -> None:
    """One DO205 note per operator when running their Python kernels under the tracer failed."""
    frames = exception_frames(exc)
    kernel_line = ctx.user_frame(frames)  # the line of the kernel's body that stopped tracing
    for op, lines in through.calls.items():
        ctx.record(
            "custom-op-not-traceable",
            locations=[lines[0]],
            related=[kernel_line] if kernel_line is not None else [],
            stack=frames,
            operator=_name(op),
            where=ctx.display(kernel_line) if kernel_line is not None else "its body",
            cause=exception_summary(exc),
        )
