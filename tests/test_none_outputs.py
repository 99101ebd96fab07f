"""A ``None`` among the outputs is dropped, as torch.onnx does: the ONNX model has one output
per tensor, ``program(...)`` returns those, ``output_names`` name them in order, and a DO311
note at the return line says which positions were dropped."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level

X = torch.randn(3, 4)
BATCH = ({0: "batch"},)


class TupleWithNone(torch.nn.Module):
    def forward(self, x):
        return x + 1, None, x * 2  # the return


class DictWithNone(torch.nn.Module):
    def forward(self, x):
        return {"a": x + 1, "b": None, "c": [None, x * 3]}  # the return


def _tensors(out):
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensors(v)]
    return [out] if isinstance(out, torch.Tensor) else []


CASES = {
    "tuple": (TupleWithNone, "output[1]"),
    "dict": (DictWithNone, "output['b'], output['c'][0]"),
}
CALLS = {
    "export": lambda m: dynamo_onnx.export(m, (X,), dynamic_shapes=BATCH, verify=True),
    "dynamo_export": lambda m: dynamo_onnx.dynamo_export(
        m, X, export_options=dynamo_onnx.ExportOptions(dynamic_shapes=True)
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("how", sorted(CALLS))
def test_none_outputs_are_dropped_with_a_note_at_the_return(case, how):
    model_type, positions = CASES[case]
    model = model_type()
    program = CALLS[how](model)
    assert len(program.model_proto.graph.output) == 2
    for rows in (3, 6):
        x = torch.randn(rows, 4)
        actual = program(x)
        expected = _tensors(model(x))
        assert len(actual) == len(expected) == 2
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
    (note,) = program.diagnostics.by_rule("none-output-dropped")
    assert note.level == Level.NOTE
    assert note.primary.line == line_of(model_type.forward, "the return")
    assert f"returns None at {positions} " in note.message
    assert "its 2 output(s) are the tensors" in note.message
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]


@pytest.mark.parametrize(
    ("names", "expected"),
    [(["y", "z"], ["y", "z"]), (["o0", "o1", "o2"], ["o0", "o1"]), (["only"], ["only", "mul"])],
)
def test_output_names_name_the_kept_outputs_in_order_as_torch_onnx_does(names, expected):
    program = dynamo_onnx.export(TupleWithNone(), (X,), output_names=names, dynamo=True)
    assert [o.name for o in program.model_proto.graph.output] == expected


def test_more_names_than_outputs_and_nones_is_still_an_error():
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="4 names for 2 graph"):
        dynamo_onnx.export(TupleWithNone(), (X,), output_names=["a", "b", "c", "d"])


def test_a_non_none_constant_output_still_fails():
    class ReturnsText(torch.nn.Module):
        def forward(self, x):
            return x, "text"

    with pytest.raises(dynamo_onnx.CaptureError, match="DO110"):
        dynamo_onnx.export(ReturnsText(), (X,))
