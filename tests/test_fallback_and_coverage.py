"""The decomposition fallback, coverage figures, and locations inside plain functions."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level
from test_unsupported_operators import twice


def logit_model(x):
    return torch.logit(x, eps=1e-6) * 2  # marker: logit


def test_operator_whose_function_fails_is_translated_through_its_decomposition():
    x = torch.rand(3, 5)
    program = dynamo_onnx.export(logit_model, (x,))
    torch.testing.assert_close(program(x)[0], logit_model(x), atol=1e-5, rtol=1e-5)
    (note,) = program.diagnostics.by_rule("decomposition-fallback")
    assert note.level == Level.NOTE
    assert note.properties["op"] == "aten::logit"
    assert "its ONNX function failed" in note.message
    assert "`aten::log" in note.message  # what it was decomposed into
    assert note.primary.line == line_of(logit_model, "marker: logit")
    assert not program.diagnostics.by_rule("operator-translation-failed")
    operators = {o.op: o for o in program.diagnostics.summary.operators}
    assert operators["aten::logit"].function == "torch decomposition"
    assert program.diagnostics.by_rule("operator-coverage")[0].message.startswith(
        f"{len(operators)} of {len(operators)}"
    )
    names = [n.name for n in program.model.graph]
    assert len(names) == len(set(names)), "subgraph node names are prefixed, never clash"


def test_function_whose_body_rejects_the_input_type_decomposes_instead():
    """torch_lib's ``mH`` is an ``Einsum``, which ONNX has no bool for: ONNX type inference
    of the body rejects it at translation and the node decomposes (a ``Transpose``)."""

    def transposed(x):
        return x.mH

    x = torch.rand(2, 3, 4) > 0.5
    program = dynamo_onnx.export(transposed, (x,))
    torch.testing.assert_close(program(x)[0], x.mH)
    (note,) = program.diagnostics.by_rule("decomposition-fallback")
    assert note.properties["op"] == "aten::mH"
    assert "InputTypeError" in note.message
    assert "Einsum" not in [n.op_type for n in program.model.graph]
    floats = torch.rand(2, 3, 4)  # the function serves the types it takes
    assert not dynamo_onnx.export(transposed, (floats,)).diagnostics.by_rule(
        "decomposition-fallback"
    )


def test_decomposition_into_a_list_of_one_tensor_stays_a_list():
    """``nonzero(as_tuple=True)`` of a 0-d tensor: one index tensor, still a tuple."""

    def indices(x):
        return torch.nonzero(x, as_tuple=True)

    for value in (2.0, 0.0):
        x = torch.tensor(value)
        program = dynamo_onnx.export(indices, (x,))
        (got,) = program(x)
        torch.testing.assert_close(got, indices(x)[0])


def test_an_input_returned_as_is_keeps_its_name_and_type():
    """torch_lib's ``logsumexp`` of a 0-d tensor returns its input: the integer input stays
    the graph's int64 input and the float result is a Cast of it."""

    def lse(x):
        return torch.logsumexp(x, 0)

    x = torch.tensor(3)
    program = dynamo_onnx.export(lse, (x,))
    (graph_input,) = program.model.graph.inputs
    assert (graph_input.name, graph_input.dtype.name) == ("x", "INT64")
    torch.testing.assert_close(program(x)[0], lse(x))


def three_unsupported(a, b):
    distances = torch.special.modified_bessel_k0(a.abs() + 1)  # marker: bessel
    running = torch.special.bessel_j0(a)  # marker: bessel_j0
    return twice(distances).sum() + running.sum()  # marker: twice


def test_three_distinct_unsupported_operators_give_three_findings_and_coverage():
    args = (torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(dynamo_onnx.UnsupportedOperatorError) as info:
        dynamo_onnx.export(three_unsupported, args)
    findings = info.value.diagnostics.by_rule("unsupported-operator")
    found = {f.properties["op"]: f.primary.line for f in findings}
    assert found == {
        "aten::special_modified_bessel_k0": line_of(three_unsupported, "marker: bessel"),
        "aten::special_bessel_j0": line_of(three_unsupported, "marker: bessel_j0"),
        "dxtest::twice": line_of(three_unsupported, "marker: twice"),
    }
    assert all(f.properties["has_decomposition"] is False for f in findings)
    (coverage,) = info.value.diagnostics.by_rule("operator-coverage")
    total = coverage.properties["total"]
    assert coverage.properties["translated"] == total - 3
    assert f"3 operator(s) have no ONNX function ({total - 3} of {total} distinct" in str(
        info.value
    )


@pytest.mark.parametrize("opset", [18, 20, 23])
def test_complex_model_at_each_opset_runs_in_onnx_runtime(opset):
    def spectrum(x):
        return torch.view_as_real(torch.fft.fft(x)).abs()

    x = torch.randn(3, 8)
    program = dynamo_onnx.export(spectrum, (x,), opset_version=opset)
    assert program.model_proto.opset_import[0].version == opset
    torch.testing.assert_close(program(x)[0], spectrum(x), atol=1e-5, rtol=1e-5)
