"""The passes of the work after an export, each alone: verification (given a runner, not a
program), session, apply-weights, save."""

from __future__ import annotations

import dataclasses
import os

import onnx
import onnx_ir as ir
import pytest
import torch
from helpers import Tiny, three_nodes

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.passes.onnx_graph.weights import ApplyWeightsPass, WeightsRequest
from dynamo_onnx.passes.save import SavePass, SaveRequest
from dynamo_onnx.passes.session import SessionPass, SessionRequest, default_session
from dynamo_onnx.passes.verify import VerifyPass, VerifyRequest, compare
from dynamo_onnx.tensors import torch_tensor_to_ir


def test_compare_gives_the_figures_of_allclose():
    expected = torch.tensor([1.0, 2.0])
    close = compare(0, "y", torch.tensor([1.0, 2.001]), expected, atol=1e-2, rtol=0)
    far = compare(0, "y", torch.tensor([1.0, 2.5]), expected, atol=1e-2, rtol=0)
    assert close.ok and not far.ok and far.max_abs == pytest.approx(0.5)
    shape = compare(0, "y", torch.zeros(3), expected, atol=1, rtol=1)
    assert not shape.ok and "shapes differ" in shape.detail


def _verify(run, reference, ep=None) -> DiagnosticContext:
    ctx = DiagnosticContext()
    x = torch.randn(2, 4)
    request = VerifyRequest(three_nodes(), ep, run, (x,), None, reference, second_shape=False)
    VerifyPass()(ctx, request)
    return ctx


def test_verification_compares_what_the_runner_returns_with_the_reference():
    model = Tiny().eval()
    ctx = _verify(lambda x: [model(x).detach()], model)
    (note,) = ctx.by_rule("DO602")
    assert note.properties["on_values"] == 1
    ctx = _verify(lambda x: [model(x).detach() + 1], model)
    (warning,) = ctx.by_rule("DO601")
    assert warning.properties["max_abs"] == pytest.approx(1.0)


def _fake_model() -> ir.Model:
    model = three_nodes()
    meta = torch.empty(3, device="meta")
    model.graph.register_initializer(ir.Value(name="w", const_value=torch_tensor_to_ir(meta, "w")))
    return model


def test_the_session_pass_refuses_fake_weights_at_the_models_code():
    ctx = DiagnosticContext()
    where = Location("/src/model.py", 12, "forward")
    with pytest.raises(dynamo_onnx.FakeWeightsError):
        SessionPass()(ctx, SessionRequest(_fake_model(), model_location=where))
    assert ctx.by_rule("DO403")[0].primary == where


def test_the_session_pass_hands_the_serialized_model_to_the_initializer():
    seen = []
    request = SessionRequest(three_nodes(), initializer=lambda m: seen.append(m) or "session")
    result = SessionPass()(DiagnosticContext(), request)
    assert result.session == "session" and isinstance(seen[0], bytes)
    assert onnx.load_from_string(seen[0]).graph.node[0].op_type == "Relu"


def test_apply_weights_replaces_initializers_in_place_or_names_every_problem():
    model = _fake_model()
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.WeightsMismatchError) as info:
        ApplyWeightsPass()(ctx, WeightsRequest(model, {"w": torch.zeros(4), "v": torch.zeros(1)}))
    assert "not weights of this model: v" in str(info.value)
    assert "w has shape [4], the model's is [3]" in str(info.value)
    ApplyWeightsPass()(ctx, WeightsRequest(model, {"w": torch.ones(3)}))
    assert model.graph.initializers["w"].const_value.numpy().tolist() == [1.0, 1.0, 1.0]


def test_save_writes_atomically_or_fails_before_writing(tmp_path):
    path = tmp_path / "m.onnx"
    SavePass()(DiagnosticContext(), SaveRequest(three_nodes(), path))
    assert onnx.load(str(path)).graph.output[0].name == "y"
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    ctx = DiagnosticContext()
    with pytest.raises(dynamo_onnx.SaveError):
        SavePass()(ctx, SaveRequest(three_nodes(), tmp_path / "missing" / "m.onnx"))
    assert ctx.by_rule("DO406")


def test_save_writes_a_familys_files_beside_the_model_as_text_or_bytes(tmp_path):
    """A model family's files (a runtime's configuration as text, a tokenizer's model as
    bytes) are written beside the model, byte for byte."""
    binary = bytes(range(256))
    beside = {"config.json": '{"type": "x"}\n', "tokenizer.model": binary}
    SavePass()(DiagnosticContext(), SaveRequest(three_nodes(), tmp_path / "m.onnx", beside=beside))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "m.onnx", "tokenizer.model"]
    assert (tmp_path / "config.json").read_text() == '{"type": "x"}\n'
    assert (tmp_path / "tokenizer.model").read_bytes() == binary


def test_the_verify_pass_returns_a_new_request_and_leaves_its_input_alone():
    x = torch.randn(2, 3)
    request = VerifyRequest(
        three_nodes(), None, lambda *a: [torch.relu(x).mean(-1, keepdim=True)], (x,),
        reference=lambda x: torch.relu(x).mean(-1, keepdim=True), second_shape=False,
    )  # fmt: skip
    result = VerifyPass()(DiagnosticContext(), request)
    assert request.comparisons == () and [c.ok for c in result.comparisons] == [True]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.comparisons = result.comparisons  # type: ignore[misc]


def test_every_session_is_made_by_one_factory_with_one_options_policy(tmp_path):
    """Our own sessions log nothing and take the threads asked for; the caller's session
    options are used as given; the CPU unless providers are named; a path or bytes."""
    import onnxruntime as ort

    model = three_nodes()
    data = ir.to_proto(model).SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    x = torch.randn(2, 3).numpy()
    expected = torch.relu(torch.from_numpy(x)).mean(-1, keepdim=True).numpy()
    for given in (data, path, str(path)):
        session = inference_session(given, threads=1)
        options = session.get_session_options()
        assert options.log_severity_level == 4 and options.intra_op_num_threads == 1
        assert session.get_providers() == ["CPUExecutionProvider"]
        (got,) = session.run(None, {"x": x})
        assert abs(got - expected).max() < 1e-6
    loading = inference_session(data, graph_optimizations=False).get_session_options()
    assert loading.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    mine = ort.SessionOptions()
    mine.log_severity_level, mine.intra_op_num_threads = 1, 2
    options = dynamo_onnx.ONNXRuntimeOptions(session_options=[mine])
    kept = inference_session(data, options, threads=1).get_session_options()
    assert (kept.log_severity_level, kept.intra_op_num_threads) == (1, 2)
    assert default_session(data).get_session_options().log_severity_level == 4
