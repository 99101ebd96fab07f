"""Hand-built inputs for the per-pass tests: a checked request, a tiny ExportedProgram, a
three-node ONNX model. No full export: a failure names the pass."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.base import CaptureRecord, CheckedRequest, ExportRequest, ExportState
from dynamo_onnx.passes.validate import ValidatePass
from dynamo_onnx.specs import ShapeRequest


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.linear(x))


def validated(model: Any, args: tuple[Any, ...] = (), **request: Any) -> ExportState:
    """The state after the validate pass, as the export would have it."""
    return ValidatePass()(DiagnosticContext(), ExportState(ExportRequest(model, args, **request)))


def program_state(
    model: torch.nn.Module, args: tuple[Any, ...], dynamic_shapes: Any = None, **shapes: Any
) -> ExportState:
    """A state holding a program torch.export captured directly (no capture pass);
    ``shapes``: the :class:`ShapeRequest`'s other fields (``requested``, ``declared``...)."""
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
    bound = dict(zip(["x", "y", "z"], args))
    request = CheckedRequest(
        model,
        args,
        bound=bound,
        registry=dynamo_onnx.OnnxRegistry(),
        shapes=ShapeRequest(spec=dynamic_shapes, inputs=tuple(bound), **shapes),
    )
    capture = CaptureRecord("torch.export.export", request.shapes)
    return ExportState(
        ExportRequest(model, args), checked=request, capture=capture, exported_program=ep
    )


def three_nodes(opset: int = 18) -> ir.Model:
    """x [2, 3] -> Relu -> ReduceMean(axes from Constant -> Reshape) -> y [2, 1]."""
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    relu = ir.node("Relu", [x])
    axes = ir.node("Constant", [], attributes={"value": ir.tensor([-1], dtype=ir.DataType.INT64)})
    shape = ir.node("Constant", [], attributes={"value": ir.tensor([1], dtype=ir.DataType.INT64)})
    reshaped = ir.node("Reshape", [axes.outputs[0], shape.outputs[0]])
    mean = ir.node("ReduceMean", [relu.outputs[0], reshaped.outputs[0]], attributes={"keepdims": 1})
    y = mean.outputs[0]
    y.name, y.shape, y.dtype = "y", ir.Shape([2, 1]), ir.DataType.FLOAT
    graph = ir.Graph(
        [x], [y], nodes=[relu, axes, shape, reshaped, mean], name="g", opset_imports={"": opset}
    )
    return ir.Model(graph, ir_version=10)
