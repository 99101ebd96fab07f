"""Real models exported, run in ONNX Runtime, and compared with eager PyTorch."""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel, SeedModel, SmallCNN, first_output
from dynamo_onnx.diagnostics import Level


def _check(program, model, args, kwargs=None, atol=1e-4):
    with torch.no_grad():
        expected = first_output(model(*args, **(kwargs or {})))
    actual = program(*args, **(kwargs or {}))[0]
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=atol, rtol=atol)


def test_seed_mlp_through_dynamo_export():
    model = MLPModel()
    x = torch.rand((97, 8), dtype=torch.float32)
    program = dynamo_onnx.dynamo_export(model, x)
    _check(program, model, (x,), atol=1e-5)
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert [i.name for i in program.model_proto.graph.input] == ["tensor_x"]
    rules = [f.rule.id for f in program.diagnostics.findings]
    assert "DO102" in rules and "DO302" in rules
    assert program.diagnostics.success is True
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]


def test_seed_my_model_with_keyword_bias():
    model = SeedModel()
    args = (torch.randn(2, 2, 2),)
    program = dynamo_onnx.dynamo_export(model, *args, bias=3.0)
    with torch.no_grad():
        expected = model(*args, bias=3.0)
    (actual,) = program(*args, bias=3.0)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    # The float keyword is a constant of the graph, not an ONNX input.
    assert len(program.model_proto.graph.input) == 1


def test_small_cnn():
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 16, 16)
    program = dynamo_onnx.export(model, (x,), optimize=False)  # the translation itself
    _check(program, model, (x,))
    op_types = {n.op_type for n in program.model_proto.graph.node}
    assert {"Conv", "BatchNormalization", "MaxPool", "Relu"} <= op_types


def test_export_accepts_a_plain_callable_and_an_exported_program():
    def fn(x, y):
        return torch.sin(x) * y + 1

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    program = dynamo_onnx.export(fn, (x, y))
    torch.testing.assert_close(program(x, y)[0], fn(x, y), atol=1e-6, rtol=1e-6)
    ep = torch.export.export(MLPModel(), (torch.randn(5, 8),))
    program = dynamo_onnx.export(ep)
    assert program.diagnostics.by_rule("DO102")[0].message.startswith(
        "Captured the model with the given ExportedProgram"
    )


def test_implicit_type_promotion_is_made_explicit():
    class Mixed(torch.nn.Module):
        def forward(self, ints, floats, mask):
            scaled = ints / 2  # int64 / int -> float32
            total = (ints + floats) * mask  # int64 + float32, times bool
            return scaled, total, torch.cumsum(mask, 0)

    args = (
        torch.arange(6).reshape(2, 3),
        torch.randn(2, 3),
        torch.tensor([[True, False, True]] * 2),
    )
    model = Mixed()
    program = dynamo_onnx.export(model, args)
    for actual, expected in zip(program(*args), model(*args)):
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)
    assert program.diagnostics.by_rule("type-promotion-inserted")


def test_nodes_keep_their_origin_in_metadata():
    program = dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),))
    gemms = [n for n in program.model.graph if n.metadata_props.get("namespace") == "fc1"]
    assert gemms, "nodes of fc1 carry its module path"
    props = gemms[0].metadata_props
    assert props["pkg.dynamo_onnx.fx_node_name"].startswith("linear")
    assert "examples/mlp.py" in props["pkg.dynamo_onnx.stack_trace"]
    assert "aten.linear" in props["pkg.dynamo_onnx.fx_node"]


def test_export_options_dynamic_shapes_true_makes_the_batch_dynamic():
    model = MLPModel()
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    program = dynamo_onnx.dynamo_export(model, torch.rand(97, 8), export_options=options)
    (graph_input,) = program.model.graph.inputs
    assert isinstance(graph_input.shape[0], ir.SymbolicDim)
    assert graph_input.shape[1] == 8  # required by fc0: kept static
    for batch in (1, 3, 64):
        x = torch.rand(batch, 8)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_export_options_diagnostic_options_reach_the_context():
    options = dynamo_onnx.ExportOptions(
        diagnostic_options=dynamo_onnx.DiagnosticOptions(verbosity_level=logging.WARNING)
    )
    program = dynamo_onnx.dynamo_export(MLPModel(), torch.rand(3, 8), export_options=options)
    assert program.diagnostics.options.verbosity_level == logging.WARNING
    assert program.diagnostics.visible() == []


def test_unsupported_export_options_are_rejected_not_ignored():
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="fake_context"):
        dynamo_onnx.dynamo_export(
            MLPModel(),
            torch.rand(3, 8),
            export_options=dynamo_onnx.ExportOptions(fake_context=object()),
        )
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="export_options"):
        dynamo_onnx.dynamo_export(
            MLPModel(), torch.rand(3, 8), export_options={"dynamic_shapes": True}
        )


class R3DBlock(torch.nn.Module):
    """The stem and a residual block of torchvision's r3d_18: Conv3d without bias, BatchNorm3d,
    ReLU, and the residual add (torchvision itself has no CPU build here)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv3d(3, 8, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
            torch.nn.BatchNorm3d(8),
            torch.nn.ReLU(inplace=True),
        )
        self.conv1 = torch.nn.Conv3d(8, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm3d(8)
        self.conv2 = torch.nn.Conv3d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm3d(8)

    def forward(self, x):
        x = self.stem(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


def test_r3d_stem_and_block_load_and_match_eager():
    model = R3DBlock().eval()
    with torch.no_grad():  # non-trivial running statistics
        for bn in (model.stem[1], model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 4, 16, 16)
    program = dynamo_onnx.export(model, (x,))
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-4, rtol=1e-4)
