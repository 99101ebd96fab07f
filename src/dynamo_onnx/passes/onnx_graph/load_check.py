"""The load-check pass: the model we hand back loads in ONNX Runtime, or the export fails
naming the ONNX node, its FX node and the user's line.

A translation bug (two types bound to one type parameter, a subgraph reusing a value name, a
bias of the wrong shape) otherwise surfaces later, at load or run time, far from its cause.
ONNX Runtime decides: a model the strict ONNX checker rejects but ONNX Runtime loads (a
declared shape the checker's inference contradicts) is handed back with a DO410 warning naming the node and
the checker's complaint. A model with nodes of a custom domain (``torch.onnx.ops.symbolic``,
reported by translation as DO310) is checked by the ONNX checker only: ONNX Runtime refuses
any node it has no kernel for, and the model is what the user asked for. The check copies no weights: the session loads the model with its
weights as graph inputs (:func:`weights_as_inputs`), so fake weights and a 7B model are
checked like any other (``onnx_tools.loading``); nor the nodes' metadata, which neither
the checker nor ONNX Runtime reads.
"""

from __future__ import annotations

from typing import ClassVar

import onnx
import onnx_ir as ir
import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_frames, exception_summary
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.onnx_tools.loading import load_refusal, node_metadata_left_out, weights_as_inputs
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.domains import custom_domain_nodes
from dynamo_onnx.passes.metadata import node_error_fields
from dynamo_onnx.passes.model import eager_run, runs_eagerly

__all__ = ["LoadCheckPass"]


class LoadCheckPass:
    """onnx.checker (full) and an ONNX Runtime session on the exported model."""

    name: ClassVar[str] = PassName.LOAD_CHECK
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model = state.onnx_model
        assert model is not None
        with weights_as_inputs(model), node_metadata_left_out(model):
            # serialized once, for the checker and ONNX Runtime (each would otherwise)
            data = ir.to_proto(model).SerializeToString()
        complaint: Exception | None = None
        try:
            onnx.checker.check_model(data, full_check=True)
        except Exception as exc:  # ONNX Runtime decides below
            complaint = exc
        if custom_domain_nodes(model):
            self._complain(ctx, model, complaint)  # ONNX Runtime would refuse the domain
            return state
        # Loading is what is checked (types, shapes, a kernel for every node); ONNX
        # Runtime's graph optimizations would only cost time (the weights are inputs here,
        # so there is nothing to fold anyway).
        exc = load_refusal(data, graph_optimizations=False)
        if exc is not None:
            location, fields = node_error_fields(ctx, model, exc)
            if type(exc).__name__ != "NotImplemented":
                _fail_if_inputs_rejected(ctx, state, location)
                ctx.fail("model-invalid", SerializationError, location, **fields)
            # ONNX Runtime's NOT_IMPLEMENTED: a valid model, with a kernel this runtime lacks.
            ctx.record("runtime-kernel-missing", locations=[location], **fields)
            return state
        self._complain(ctx, model, complaint)
        return state

    @staticmethod
    def _complain(ctx: DiagnosticContext, model: ir.Model, complaint: Exception | None) -> None:
        """DO410 for what the strict checker said of a model that is handed back."""
        if complaint is not None:
            location, fields = node_error_fields(ctx, model, complaint)
            ctx.record("model-checker-complaint", locations=[location], **fields)


def _fail_if_inputs_rejected(
    ctx: DiagnosticContext, state: ExportState, where: Location | None
) -> None:
    """DO127 when the model itself refuses the example inputs in eager PyTorch (a float16
    input to a float32 ``Linear``): torch.export's fake tensors let such a call through,
    and blaming our ONNX function for it (DO407's fix) would send the user the wrong way.
    Run only once the model is refused, and only on a module with real weights."""
    model = state.checked.model
    if not isinstance(model, torch.nn.Module) or not runs_eagerly(model):
        return
    error = eager_run(model, tuple(state.checked.args), dict(state.checked.kwargs)).error
    if error is None:
        return
    frames = exception_frames(error)
    location = ctx.user_frame(frames) or where or ctx.call_site
    ctx.fail(
        "example-inputs-do-not-fit",
        SerializationError,
        location,
        stack=frames,
        properties={"exception": type(error).__name__},
        source=ctx.display(location) if location else "an unknown line",
        cause=exception_summary(error),
    )
