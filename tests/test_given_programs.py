"""An ExportedProgram the caller captured is exported as it is: copied (never changed), with
the names torch.export gave it, whatever the module it came from."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx

BATCH = torch.export.Dim("batch", min=2, max=64)


def _builtins():
    """torch.nn modules whose ``forward`` takes ``input`` (a Python builtin's name)."""
    return {
        "sequential": (
            torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)),
            lambda n: (torch.randn(n, 4),),
        ),
        "linear": (torch.nn.Linear(4, 3), lambda n: (torch.randn(n, 4),)),
        "layer-norm": (torch.nn.LayerNorm(6), lambda n: (torch.randn(n, 6),)),
        "lstm": (torch.nn.LSTM(4, 5, batch_first=True), lambda n: (torch.randn(n, 7, 4),)),
    }


def _leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [leaf for item in out for leaf in _leaves(item)]


@pytest.mark.parametrize("name", sorted(_builtins()))
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-batch"])
def test_a_program_of_a_torch_nn_builtin_exports_and_matches_eager(name, dynamic):
    model, inputs = _builtins()[name]
    model.eval()
    shapes = ({0: BATCH},) if dynamic else None
    ep = torch.export.export(model, inputs(3), dynamic_shapes=shapes)
    before = str(ep.graph)
    program = dynamo_onnx.export(ep)
    assert str(ep.graph) == before  # the caller's program is not changed
    assert [v.name for v in program.model.graph.inputs] == ["input"]
    assert not [f for f in program.diagnostics.findings if f.level.name in ("WARNING", "ERROR")]
    for n in (3, 5) if dynamic else (3,):
        args = inputs(n)
        with torch.no_grad():
            expected = _leaves(model(*args))
        actual = program(*args)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)


def test_a_program_of_multihead_attention_exports_and_matches_eager():
    model = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.randn(3, 5, 8)
    ep = torch.export.export(model, (q, q, q), dynamic_shapes=({0: BATCH},) * 3)
    program = dynamo_onnx.export(ep)
    assert [v.name for v in program.model.graph.inputs] == ["query", "key", "value"]
    for n in (3, 6):
        x = torch.randn(n, 5, 8)
        with torch.no_grad():
            expected = model(x, x, x)
        for actual, wanted in zip(program(x, x, x), expected, strict=True):
            torch.testing.assert_close(actual, wanted, atol=1e-5, rtol=1e-4)


def test_each_spelling_of_the_call_exports_the_program():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    x = torch.randn(3, 4)
    ep = torch.export.export(model, (x,))
    expected = model(x)
    for program in (
        dynamo_onnx.export(ep),
        dynamo_onnx.export(ep, (x,)),
        dynamo_onnx.export(ep, (x,), dynamo=True, verify=True),
        dynamo_onnx.dynamo_export(ep, x),
    ):
        torch.testing.assert_close(program(x)[0], expected, atol=1e-6, rtol=1e-5)
        assert not program.diagnostics.by_rule("capture-failed")


class _ConvPool(torch.nn.Module):
    """make compat's seed 46 case 225: max_pool1d makes torch.export fix a Dim.AUTO length."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, stride=1, padding=1)

    def forward(self, x):
        return torch.nn.functional.max_pool1d(self.conv(x), 2)


def test_a_dimension_the_program_fixed_stays_static():
    """A ``Dim.AUTO`` torch.export specialized is a number in the program (its guard refuses
    any other length): the ONNX input keeps it static, and ONNX Runtime refuses another
    length as the program does, where torch.onnx names it as a symbol ``"11"``. The batch
    the program keeps dynamic stays dynamic, and no warning is given."""
    import onnx_ir as ir

    model = _ConvPool().eval()
    auto = torch.export.Dim.AUTO
    ep = torch.export.export(
        model, (torch.randn(3, 4, 11),), dynamic_shapes={"x": {0: auto, 2: auto}}
    )
    program = dynamo_onnx.export(ep, opset_version=18)
    batch, channels, length = program.model.graph.inputs[0].shape.dims
    assert isinstance(batch, ir.SymbolicDim) and batch.value is not None
    assert (channels, length) == (4, 11)
    assert not [f for f in program.diagnostics.findings if f.level.name in ("WARNING", "ERROR")]
    x = torch.randn(5, 4, 11)
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-4)
    with pytest.raises(Exception, match="Got: 6 Expected: 11"):
        program(torch.randn(5, 4, 6))
    with pytest.raises(Exception, match="11"):  # the program's own guard
        ep.module()(torch.randn(5, 4, 6))
