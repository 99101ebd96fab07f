"""onnx_ir passes run as the steps of one of our passes, each step's ``modified`` recorded.

onnx_ir's ``PassBase.__call__`` returns ``PassResult(model, modified)``; run here, each
step's result is recorded in the running pass's record (``ctx.record_step``), so the SARIF
invocation says which steps of finalize, opset-conversion and module-functions changed the
model instead of dropping it; and the local functions a step inlined (DO413), which the
opset conversion and the optimization both report.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext

__all__ = ["report_inlined", "run_steps"]


def run_steps(
    ctx: DiagnosticContext, model: ir.Model, steps: Sequence[ir.passes.PassBase]
) -> ir.passes.PassResult:
    """Run ``steps`` on ``model`` in order, each given the model the previous returned;
    the result: the last model, and whether any step modified it."""
    modified = False
    for step in steps:
        result = step(model)
        ctx.record_step(type(step).__name__, result.modified)
        model, modified = result.model, modified or result.modified
    return ir.passes.PassResult(model, modified)


def report_inlined(
    ctx: DiagnosticContext, before: set[ir.OperatorIdentifier], model: ir.Model, reason: str
) -> None:
    """DO413 for the local functions in ``before`` that ``model`` no longer has."""
    gone = sorted(before - set(model.functions))
    if gone:
        names = [f"{domain}::{name}" for domain, name, _ in gone]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        ctx.record("local-functions-inlined", count=len(gone), functions=shown, reason=reason)
