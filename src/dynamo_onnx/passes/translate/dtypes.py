"""DO309: tensors whose torch dtype no ONNX type can hold, found before translating.

Quantized tensors (``qint8``...), bit-packed ones (``bits8``...) and odd-width integers
(``uint1``, ``int3``...) have no ONNX type. Without this check the first such value
would stop translation with ``KeyError: torch.qint8``; here every node producing or
reading one is a finding at the user's line that created it, then the pass fails once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext, Finding, Location
from dynamo_onnx.errors import TranslationError
from dynamo_onnx.passes.fx import graph_modules
from dynamo_onnx.passes.metadata import node_source
from dynamo_onnx.registry import target_name
from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE, has_onnx_dtype

__all__ = ["check_dtypes", "dtype_finding"]


def _dtypes(value: Any) -> list[torch.dtype]:
    if isinstance(value, torch.Tensor):
        return [value.dtype]
    if isinstance(value, torch.dtype):
        return [value]
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _dtypes(v)]
    return []


def _foreign_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The first dtype of the node's value or arguments that ONNX cannot hold. A value may
    be complex32 (stored as float16 pairs), but a cast to it has no ONNX type to name."""
    values = _dtypes(node.meta.get("val"))
    found = next((d for d in values if not has_onnx_dtype(d)), None)
    if found is None and node.op == "call_function":
        arguments = _dtypes(list(node.args)) + _dtypes(list(node.kwargs.values()))
        found = next((d for d in arguments if d not in TORCH_TO_ONNX_DTYPE), None)
    return found


def _what(node: torch.fx.Node, inputs: dict[str, str]) -> str:
    if node.op == "placeholder":
        return inputs.get(node.name, f"input `{node.name}`")
    return f"FX node `{node.name}`"


def dtype_finding(
    ctx: DiagnosticContext,
    node: torch.fx.Node,
    dtype: torch.dtype,
    what: str | None = None,
    fallback: Location | None = None,
) -> Finding:
    """DO309 for one node (weights and inputs, which have no line, point at ``fallback``:
    the model's class)."""
    source = node_source(ctx, node)
    location = source.primary or fallback
    return ctx.record(
        "dtype-not-in-onnx",
        locations=[location],
        stack=source.frames,
        properties={
            "fx_node": node.name,
            "dtype": str(dtype),
            "op": target_name(node.target) if node.op == "call_function" else node.name,
        },
        dtype=str(dtype),
        what=what or f"FX node `{node.name}`",
        source=ctx.display(location),
    )


def check_dtypes(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, model_location: Location | None
) -> None:
    """Record DO309 for each node with a dtype ONNX lacks, and raise once if any.

    A weight or input has no stack of its own: its finding points at the model's class."""
    inputs = {
        spec.arg.name: f"{spec.kind.name.lower().replace('_', ' ')} `{spec.target or spec.arg.name}`"
        for spec in ep.graph_signature.input_specs
        if hasattr(spec.arg, "name")
    }
    findings: list[Finding] = []
    dtypes: set[str] = set()
    for gm in graph_modules(ep):
        for node in gm.graph.nodes:
            dtype = _foreign_dtype(node)
            if dtype is not None:
                dtypes.add(str(dtype))
                findings.append(
                    dtype_finding(ctx, node, dtype, _what(node, inputs), model_location)
                )
    if len(findings) == 1:
        ctx.raise_for(findings, TranslationError, findings[0].message)
    if findings:
        names = ", ".join(sorted(dtypes))
        ctx.raise_for(
            findings,
            TranslationError,
            f"{len(findings)} values are {names} tensors, which ONNX has no type for:\n"
            + "\n".join(f"  - {f.message}" for f in findings),
        )
