"""ONNXProgram: saving atomically, the ModelProto, and running in ONNX Runtime."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel
from dynamo_onnx.io import protowriter


@pytest.fixture(scope="module")
def program():
    return dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),))


def test_saved_model_loads_and_runs_in_onnx_runtime(program, tmp_path):
    path = tmp_path / "m.onnx"
    program.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"], "no temporary files left"
    onnx.checker.check_model(str(path), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(4, 8)
    (out,) = session.run(None, {"tensor_x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), program(x)[0])


@pytest.mark.parametrize("external_data", [False, True])
def test_failed_save_keeps_the_earlier_file_intact(program, tmp_path, monkeypatch, external_data):
    path = tmp_path / "m.onnx"
    program.save(path, external_data=external_data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken_ir_save(model, destination, **kwargs):
        with open(destination, "wb") as handle:
            handle.write(b"half a model")
        raise OSError("disk full")

    def broken_stream(model, file):
        file.write(b"half a model")
        raise OSError("disk full")

    # inline weights are streamed by our writer; external data goes through ir.save
    monkeypatch.setattr(ir, "save", broken_ir_save)
    monkeypatch.setattr(protowriter, "write_model", broken_stream)
    with pytest.raises(OSError, match="disk full"):
        program.save(path, external_data=external_data)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == before, "the earlier files are intact and the partial one is cleaned up"


def test_save_external_data_and_initializer_layouts(program, tmp_path):
    linear = torch.nn.Linear(64, 64)
    big = dynamo_onnx.export(linear, (torch.randn(2, 64),))
    big.save(tmp_path / "ext.onnx", external_data=True)
    # Tensors above 256 bytes go to the data file; the 256-byte bias stays inline.
    assert (tmp_path / "ext.onnx.data").stat().st_size == 64 * 64 * 4
    session = ort.InferenceSession(str(tmp_path / "ext.onnx"), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 64)
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), linear(x), atol=1e-5, rtol=1e-5)
    program.save(
        tmp_path / "bare.onnx", include_initializers=False, keep_initializers_as_inputs=True
    )
    bare = onnx.load(str(tmp_path / "bare.onnx"))
    assert not bare.graph.initializer
    assert {"fc0.weight", "fc3.bias"} <= {i.name for i in bare.graph.input}
    # The in-memory model is unchanged by the temporary layouts.
    assert len(program.model.graph.initializers) == 8
    assert [i.name for i in program.model.graph.inputs] == ["tensor_x"]


def test_save_rejects_what_is_neither_a_path_nor_a_file_object(program):
    with pytest.raises(TypeError, match="file path or a binary file object"):
        program.save(42)


def test_model_proto_and_session_lifecycle(program):
    proto = program.model_proto
    assert isinstance(proto, onnx.ModelProto)
    assert proto.opset_import[0].version == 20  # torch.onnx.export's default
    assert proto.producer_name == "dynamo-onnx"
    x = torch.randn(4, 8)
    first = program(x)[0]
    program.release()
    torch.testing.assert_close(program(x)[0], first)  # session recreated lazily


def test_session_initializer_options_and_release(program):
    seen = []

    def initializer(model):
        seen.append(type(model).__name__)
        return ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    x = torch.randn(4, 8)
    expected = program(x)[0]
    program.initialize_inference_session(initializer)
    torch.testing.assert_close(program(x)[0], expected)
    assert seen == ["bytes"]
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = 1
    options = dynamo_onnx.ONNXRuntimeOptions(
        session_options=session_options, execution_providers=["CPUExecutionProvider"]
    )
    program.initialize_inference_session(options=options)
    assert program._session.get_session_options().intra_op_num_threads == 1
    assert program._session.get_providers() == ["CPUExecutionProvider"]
    program.release()
    assert program._session is None
    torch.testing.assert_close(program(x)[0], expected)  # lazily recreated
    with pytest.raises(TypeError, match="either an initializer or options"):
        program.initialize_inference_session(initializer, options=options)


def test_the_runtime_fusions_load_only_when_a_program_is_fused():
    """onnxscript's ORT fusions build their patterns when imported: an export, optimized or
    not, does not import them; ``optimize("onnxruntime")`` does."""
    import subprocess
    import sys

    script = (
        "import sys, torch, dynamo_onnx\n"
        "program = dynamo_onnx.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),))\n"
        "fusions = 'onnxscript.rewriter.ort_fusions'\n"
        "print(fusions in sys.modules)\n"
        "program.optimize('onnxruntime')\n"
        "print(fusions in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.split() == ["False", "True"], proc.stderr
