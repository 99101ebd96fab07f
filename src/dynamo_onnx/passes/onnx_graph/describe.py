"""What the reports say of an exported model: size, inputs and outputs."""

from __future__ import annotations

import onnx_ir as ir

from dynamo_onnx.diagnostics.summary import ExportSummary, ModelSummary, ValueSummary
from dynamo_onnx.io.onnx_file import weights_nbytes

__all__ = ["describe_into", "describe_model", "describe_value"]


def describe_model(model: ir.Model) -> ModelSummary:
    """Nodes, weights, functions and opsets of the model."""
    graph = model.graph
    return ModelSummary(
        nodes=len(graph),
        initializers=len(graph.initializers),
        weights_bytes=weights_nbytes(model),
        functions=len(model.functions),
        opsets=dict(sorted(model.opset_imports.items())),
    )


def describe_value(value: ir.Value) -> ValueSummary:
    """A graph input or output: name, dtype and shape as text."""
    dims = [str(d) for d in value.shape] if value.shape is not None else ["?"]
    dtype = value.dtype.name.lower() if value.dtype is not None else "?"
    return ValueSummary(value.name or "", dtype, "[" + ", ".join(dims) + "]")


def describe_into(summary: ExportSummary, model: ir.Model) -> None:
    """Describe ``model`` in the reports' summary: called after the last pass that changed
    it, so the reports describe the model that was saved and is run."""
    summary.model = describe_model(model)
    summary.inputs = [describe_value(v) for v in model.graph.inputs]
    summary.outputs = [describe_value(v) for v in model.graph.outputs]
