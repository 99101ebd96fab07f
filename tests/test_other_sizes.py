"""A dimension declared dynamic works at every size, or verification says in words which
size does not and why: never ONNX Runtime's C++ text as a failed run (DO600)."""

from __future__ import annotations

import pytest
import torch
from onnxscript import opset18 as op

import dynamo_onnx
from conftest import line_of


class SqueezesBatch(torch.nn.Module):
    def forward(self, x):
        return x.squeeze(0) * 2  # marker: squeeze


class TwoOnly(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:  # marker: branch
            return x * 2
        return x - 1


class Doubles(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2  # marker: relu


def _findings(program, *rules):
    return [f for f in program.diagnostics.findings if f.rule.id in rules]


@pytest.mark.parametrize("spelling", ["dynamic_axes", "dynamic_shapes"])
def test_squeezing_a_dynamic_dimension_changes_nothing_at_sizes_above_one(spelling):
    # torch squeezes a named dimension only at size 1; ONNX Squeeze fails at any other
    # size ("Dimension of input 0 must be 1 instead of 3"): torch.onnx's model does.
    model = SqueezesBatch()
    spec = (
        {"dynamic_axes": {"x": {0: "batch"}}, "input_names": ["x"]}
        if spelling == "dynamic_axes"
        else {"dynamic_shapes": ({0: "batch"},)}
    )
    program = dynamo_onnx.export(model, (torch.randn(3, 8),), verify=True, **spec)
    assert "Squeeze" not in {n.op_type for n in program.model.graph}
    for n in (3, 5):
        x = torch.randn(n, 8)
        torch.testing.assert_close(program(x)[0], model(x))
    assert _findings(program, "DO602") and not _findings(program, "DO600", "DO601", "DO604")


def test_a_size_one_example_of_a_squeezed_dimension_is_a_mismatch_in_words():
    model = SqueezesBatch()
    program = dynamo_onnx.export(
        model, (torch.randn(1, 8),), dynamic_axes={"x": {0: "b"}}, input_names=["x"], verify=True
    )
    assert _findings(program, "DO129")
    assert not _findings(program, "DO600")
    (mismatch,) = _findings(program, "DO601")
    assert "shapes differ: [1, 8] vs [8]" in mismatch.message
    assert "traced with `x` [2, 8]" in mismatch.message
    assert "treats size 1 apart" in mismatch.message
    # the ONNX model is the traced one: right at every size but the one eager treats apart
    for n in (2, 5):
        x = torch.randn(n, 8)
        torch.testing.assert_close(program(x)[0], model(x))


def test_a_widened_dimension_the_model_fixes_at_two_is_captured_as_given():
    # traced at 2, `if x.shape[0] == 2` would fix the batch at 2: the ONNX model would
    # refuse the example itself. It is captured at the example's size instead (DO105).
    model = TwoOnly()
    x = torch.randn(1, 8)
    program = dynamo_onnx.export(
        model, (x,), dynamic_axes={"x": {0: "b"}}, input_names=["x"], verify=True
    )
    assert _findings(program, "DO105") and not _findings(program, "DO129")
    assert not _findings(program, "DO600", "DO601")
    assert list(program.model.graph.inputs[0].shape) == [1, 8]
    torch.testing.assert_close(program(x)[0], model(x))


def test_a_model_that_does_not_run_at_another_size_says_so_at_the_users_line():
    def relu_of_two_rows(x):  # an ONNX function written for the traced batch of 2
        return op.Relu(op.Reshape(x, op.Constant(value_ints=[2, 8])))

    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(relu_of_two_rows, "aten", "relu")
    model = Doubles()
    x = torch.randn(2, 8)
    program = dynamo_onnx.export(model, (x,), dynamic_shapes=({0: "batch"},), registry=registry)
    torch.testing.assert_close(program(x)[0], model(x))  # right at the traced size
    program.verify((x,))  # a warning, not a failed run
    assert not _findings(program, "DO600", "DO602")  # nor "every output matches"
    (finding,) = _findings(program, "DO604")
    assert finding.level.name == "WARNING"
    assert (finding.primary.path, finding.primary.line) == (
        __file__,
        line_of(Doubles.forward, "marker: relu"),
    )
    message = finding.message
    assert message.startswith(
        "The ONNX model, traced with `x` [2, 8], does not run with inputs `x` [3, 8], another "
        "size of dimensions declared dynamic: its `Reshape` node"
    )
    assert "cannot be reshaped to the requested shape" in message
    assert "`Reshape` node" in message and "`aten.relu.default`" in message
    assert "onnxruntime::" not in message and "[ONNXRuntimeError]" not in message
    assert "Fix: " not in message  # a warning: the fix is the rule's, in the reports
    assert "leave the dimension out of dynamic_shapes" in finding.rule.fix


class SqueezesSome(torch.nn.Module):
    def forward(self, x):
        return x.squeeze((0, 1)) + x.squeeze(1)


def test_a_squeeze_keeps_the_dimensions_of_size_one():
    model = SqueezesSome()
    program = dynamo_onnx.export(model, (torch.randn(3, 1, 8),), dynamic_shapes=({0: "b"},))
    assert "Squeeze" in {n.op_type for n in program.model.graph}  # dimension 1 still goes
    for n in (3, 4):
        x = torch.randn(n, 1, 8)
        torch.testing.assert_close(program(x)[0], model(x))
        assert program(x)[0].shape == (n, 8)
