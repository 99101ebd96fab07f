"""Decomposition: the captured program is lowered to ATen operators we can translate.

The table is torch.export's default decompositions minus every operator the registry can
translate, so ``aten.gelu`` stays ``gelu`` (one ONNX function) instead of ten primitives.

Two rewrites make the result translatable:

* Before decomposing, ``aten.view`` becomes ``aten.reshape``. torch 2.13 re-traces the graph
  with fake tensors; some decompositions (attention) yield other strides than at capture,
  and a ``view`` that was valid then fails ("Cannot view a tensor with shape ... and strides
  ..."), which breaks GPT-2 and T5. ONNX has no strides: both become ``Reshape``.
* After decomposing, explicit casts replace ATen's implicit type promotion, because ONNX
  operators require matching input types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.exporter.registry import OnnxRegistry

__all__ = ["run", "lower"]

_CAST = torch.ops.prims.convert_element_type.default
# Operators whose job is the cast itself.
_CASTS = frozenset({_CAST, torch.ops.aten._to_copy.default})

# Inputs that take part in no promotion: condition and mask arguments.
_NON_PROMOTING_ARGS: dict[Any, frozenset[int]] = {
    torch.ops.aten.where.self: frozenset({0}),
    torch.ops.aten.where.ScalarOther: frozenset({0}),
    torch.ops.aten.where.ScalarSelf: frozenset({0}),
    torch.ops.aten.masked_fill.Scalar: frozenset({1}),
    torch.ops.aten.masked_fill.Tensor: frozenset({1}),
}


# Reductions that accumulate bool and integer inputs in int64 (ATen promotes implicitly).
_ACCUMULATING = frozenset(
    {
        torch.ops.aten.cumsum.default,
        torch.ops.aten.cumprod.default,
        torch.ops.aten.sum.default,
        torch.ops.aten.sum.dim_IntList,
        torch.ops.aten.prod.default,
        torch.ops.aten.prod.dim_int,
    }
)


def _graph_modules(ep: torch.export.ExportedProgram) -> list[torch.fx.GraphModule]:
    return [m for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]


def _rewrite_views(ep: torch.export.ExportedProgram) -> int:
    count = 0
    for gm in _graph_modules(ep):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.view.default:
                node.target = torch.ops.aten.reshape.default
                count += 1
        gm.recompile()
    return count


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _promotion_dtype(node: torch.fx.Node, positions: list[int]) -> torch.dtype | None:
    """The dtype the promoting inputs must share, or None when nothing needs a cast."""
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return None
    tensors = [_val(node.args[i]) for i in positions]
    dtypes = {t.dtype for t in tensors}
    if out.dtype != torch.bool and not out.is_complex():
        # Arithmetic: inputs are computed in the output's dtype (int / int -> float too).
        target = out.dtype
    else:
        # Comparisons: inputs are promoted among themselves, scalars included.
        if len(dtypes) <= 1:
            return None
        probe = [torch.empty((1,) if t.dim() else (), dtype=t.dtype, device="meta") for t in tensors]
        target = probe[0].dtype
        for other in probe[1:]:
            target = torch.promote_types(target, other.dtype)
    return None if dtypes == {target} else target


def _insert_type_promotion(gm: torch.fx.GraphModule) -> int:
    """Cast the tensor inputs of pointwise operators to the dtype ATen computes in."""
    count = 0
    for node in list(gm.graph.nodes):
        target = node.target
        if node.op != "call_function" or not hasattr(target, "tags"):
            continue
        if target in _CASTS or node.kwargs.get("dtype") is not None:
            continue
        if target in _ACCUMULATING:
            positions = [0]
            out = node.meta.get("val")
            dtype = out.dtype if isinstance(out, torch.Tensor) else None
            if dtype is None or _val(node.args[0]).dtype == dtype:
                continue
        elif torch.Tag.pointwise in target.tags:
            skip = _NON_PROMOTING_ARGS.get(target, frozenset())
            positions = [
                i
                for i, a in enumerate(node.args)
                if i not in skip and isinstance(_val(a), torch.Tensor)
            ]
            if not positions or any(_val(node.args[i]).is_complex() for i in positions):
                continue
            dtype = _promotion_dtype(node, positions)
        else:
            continue
        if dtype is None:
            continue
        args = list(node.args)
        for i in positions:
            arg = args[i]
            if _val(arg).dtype == dtype:
                continue
            with gm.graph.inserting_before(node):
                cast = gm.graph.call_function(_CAST, (arg, dtype))
            cast.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            cast.meta["val"] = _val(arg).to(dtype)
            args[i] = cast
            count += 1
        node.args = tuple(args)
    if count:
        gm.recompile()
    return count


def lower(
    ep: torch.export.ExportedProgram, registry: OnnxRegistry, also: Iterable[Any] = ()
) -> tuple[torch.export.ExportedProgram, int, int]:
    """Decompose ``ep`` (and the operators in ``also``, even if registered).

    Returns the program, the number of views rewritten and of casts inserted.
    """
    views = _rewrite_views(ep)
    ep = ep.run_decompositions(registry.decomposition_table(also))
    casts = sum(_insert_type_promotion(gm) for gm in _graph_modules(ep))
    return ep, views, casts


def run(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, registry: OnnxRegistry
) -> torch.export.ExportedProgram:
    """Decompose ``ep`` into operators the registry can translate."""
    ep, views, casts = lower(ep, registry)
    if views:
        ctx.record("view-rewritten-as-reshape", count=views)
    if casts:
        ctx.record("type-promotion-inserted", count=casts)
    return ep
