"""The decompose pass: the captured program is lowered to ATen operators we can translate.

The table is torch.export's default decompositions minus every operator the registry can
translate, so ``aten.gelu`` stays ``gelu`` (one ONNX function) instead of ten primitives.
The re-trace is skipped when it is not needed (``plan``); either way the graph gets the same
rewrites (``rewrites``), and finding DO203 says which way was taken and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import DecompositionError, OnnxExporterError
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.decompose.custom_ops import (
    python_kernels,
    report_traced,
    report_untraceable,
)
from dynamo_onnx.passes.decompose.plan import retrace_reason
from dynamo_onnx.passes.decompose.rewrites import (
    bypass_lifted_copies,
    cast_symbolic_operands,
    functionalize_inplace,
    insert_type_promotion,
    recompile_all,
    rewrite_aliases,
    rewrite_views,
    squeeze_only_size_one,
    static_reshape_sizes,
)
from dynamo_onnx.passes.fx import graph_modules
from dynamo_onnx.passes.logs import torch_deprecations_ignored
from dynamo_onnx.registry import OnnxRegistry

__all__ = ["DecomposePass", "lower", "retrace_reason"]


def lower(
    ep: torch.export.ExportedProgram,
    registry: OnnxRegistry,
    also: Iterable[Any] = (),
    through: Mapping[Any, Callable[..., Any]] | None = None,
    opset: int | None = None,
) -> tuple[torch.export.ExportedProgram, int, int]:
    """Decompose ``ep`` (and the operators in ``also``, even if registered; the custom
    operators in ``through`` by their Python kernels) for an export to ``opset``.

    Returns the program, the number of views rewritten and of casts inserted.
    """
    views = rewrite_views(ep)
    table = registry.decomposition_table(also, opset)
    table.update(through or {})
    ep = ep.run_decompositions(table)
    casts = sum(insert_type_promotion(gm) + cast_symbolic_operands(gm) for gm in graph_modules(ep))
    return ep, views, casts


class DecomposePass:
    """ExportedProgram -> ExportedProgram of operators the registry can translate."""

    name: ClassVar[str] = PassName.DECOMPOSITION
    error_type: ClassVar[type[OnnxExporterError]] = DecompositionError
    #: The captured program's graph is rewritten in place (aliases, lifted copies, casts,
    #: reshape sizes) before any re-trace: the program is capture's own copy, never the
    #: caller's, and copying it again would cost a graph copy per export.
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        with (
            torch_deprecations_ignored()
        ):  # torch's deprecation warnings about its own tree specs are not the user's
            return self._run(ctx, state)

    def _run(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        ep, registry, opset = state.exported_program, state.checked.registry, state.checked.opset
        assert ep is not None and registry is not None
        # the rewrites change the graphs; their code is generated once, when it is next
        # needed (a re-trace runs it) or at the end
        changed = rewrite_aliases(ep, recompile=False) + bypass_lifted_copies(ep, recompile=False)
        made_functional = functionalize_inplace(ep, recompile=False)
        changed += made_functional
        reason = retrace_reason(ep, registry, opset)
        ctx.record(
            "decomposition-plan",
            properties={"retraced": reason is not None},
            plan=(
                f"re-traced with torch.export's decompositions because {reason}"
                if reason is not None
                else "not re-traced: the captured graph is functional and every operator in "
                "it is translatable"
                + (
                    f" ({made_functional} in-place operator(s) on the graph's own tensors "
                    "made out-of-place)"
                    if made_functional
                    else ""
                )
            ),
        )
        if reason is None:
            views = 0
            casts = sum(
                insert_type_promotion(gm, recompile=False)
                + cast_symbolic_operands(gm, recompile=False)
                for gm in graph_modules(ep)
            )
            changed += casts
        else:
            if changed:
                recompile_all(ep)
            ep, views, casts = self._lower(ctx, ep, registry, opset)
            changed = 0
        for gm in graph_modules(ep):
            changed += static_reshape_sizes(gm, recompile=False)
            changed += squeeze_only_size_one(gm, recompile=False)
        if changed:
            recompile_all(ep)
        if views:
            ctx.record("view-rewritten-as-reshape", count=views)
        if casts:
            ctx.record("type-promotion-inserted", count=casts)
        return state.replace(exported_program=ep, captured_program=state.exported_program)

    @staticmethod
    def _lower(
        ctx: DiagnosticContext,
        ep: torch.export.ExportedProgram,
        registry: OnnxRegistry,
        opset: int | None,
    ) -> tuple[torch.export.ExportedProgram, int, int]:
        """Re-trace, running custom operators' Python kernels (DO204); when one of them
        cannot be traced (DO205), re-trace again keeping them as they are."""
        through = python_kernels(ctx, ep, registry)
        if not through:
            return lower(ep, registry, opset=opset)
        try:
            lowered = lower(ep, registry, through=through.kernels, opset=opset)
        except Exception as exc:  # the kernel's own error: translation names the operator
            report_untraceable(ctx, through, exc)
            return lower(ep, registry, opset=opset)
        report_traced(ctx, through)
        return lowered
