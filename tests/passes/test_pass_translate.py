"""The translation pass alone, on a tiny program: an ONNX model ONNX Runtime runs."""

from __future__ import annotations

import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from helpers import Tiny, program_state

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.translate import TranslatePass


class Bessel(torch.nn.Module):
    """``special_bessel_j0`` has no ONNX function (and torch no decomposition)."""

    def forward(self, x):
        return torch.special.bessel_j0(x)


def test_translation_gives_a_model_with_the_programs_inputs_weights_and_outputs():
    model, x = Tiny().eval(), torch.randn(2, 4)
    ctx = DiagnosticContext()
    result = TranslatePass()(ctx, program_state(model, (x,)))
    onnx_model = result.onnx_model
    assert onnx_model is not None
    assert [v.name for v in onnx_model.graph.inputs] == ["x"]
    assert set(onnx_model.graph.initializers) == {"linear.weight", "linear.bias"}
    assert ctx.by_rule("DO302")[0].properties == {"translated": 2, "total": 2}
    onnx_model.opset_imports[""] = 18  # the finalize pass adds the imports
    session = ort.InferenceSession(ir.to_proto(onnx_model).SerializeToString())
    (out,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), model(x).detach())


def test_an_operator_without_a_function_fails_with_its_rule():
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.UnsupportedOperatorError) as info:
        TranslatePass()(ctx, program_state(Bessel(), (torch.randn(3),)))
    assert info.value.rule_id == "DO301"
    assert "aten::special_bessel_j0" in str(info.value)
