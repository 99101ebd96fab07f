"""The optimization pass: the onnxscript optimizer on the exported model, in place.

Constant folding and the elimination of redundancies. The optimizer fails on weights that
live on the meta device ("Cannot copy out of meta tensor"), so fake weights are hidden from
it while it runs: ``optimize()`` works before and after ``apply_weights``.
"""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir

from dynamo_onnx.defaults import TORCHLIB_OPSET
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError, OptimizationError
from dynamo_onnx.onnx_tools.fake_weights import fake_weights_hidden
from dynamo_onnx.onnx_tools.older_opsets import drop_newer_attributes
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.logs import ONNX_IR_CHATTER, dropped
from dynamo_onnx.passes.onnx_graph.steps import report_inlined

__all__ = ["OptimizePass", "count_nodes"]


def run_optimizer(model: ir.Model) -> None:
    """``onnx_tools.optimizer_pipeline.run_optimizer``, imported when a model is optimized:
    onnxscript's optimizer and rewriter load with it, which an export without optimization
    never needs."""
    from dynamo_onnx.onnx_tools import optimizer_pipeline

    optimizer_pipeline.run_optimizer(model)


def count_nodes(model: ir.Model) -> int:
    """Nodes of the main graph and of every function."""
    return len(model.graph) + sum(len(f) for f in model.functions.values())


class OptimizePass:
    """``ir.Model`` -> the same model, optimized (DO501 records the node counts)."""

    name: ClassVar[str] = PassName.OPTIMIZATION
    error_type: ClassVar[type[OnnxExporterError]] = OptimizationError
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, model: ir.Model) -> ir.Model:
        with dropped(*ONNX_IR_CHATTER):  # onnx_ir's remarks while it optimizes are not the user's
            return self._run(ctx, model)

    def _run(self, ctx: DiagnosticContext, model: ir.Model) -> ir.Model:
        before = count_nodes(model)
        functions = set(model.functions)
        with fake_weights_hidden(model):
            run_optimizer(model)
        drop_newer_attributes(
            model, model.opset_imports.get("", TORCHLIB_OPSET)
        )  # its Split at opset 17
        ctx.record("model-optimized", before=before, after=count_nodes(model))
        report_inlined(
            ctx,
            functions,
            model,
            "the optimizer inlines functions to fold and rewrite across calls; "
            "export with optimize=False to keep them",
        )
        return model
