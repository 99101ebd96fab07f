"""``export_llm`` reads a safetensors checkpoint one tensor at a time as it writes the ONNX
weights (issue 44): the folder is the one the in-memory export wrote, byte for byte, from
one file or from shards with their index; tied weights, computed buffers (rotary inverse
frequencies) and packed or quantized weights come out right; the checkpoint is checked
from its headers as the in-memory load checks it (DO513, DO507: the same messages)."""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch
import transformers

import dynamo_onnx
import hf_models
from dynamo_onnx.integrations.transformers.hf_folder import example_inputs
from test_export_llm_cli import _generate, _ops, _tokenizer

og = pytest.importorskip("onnxruntime_genai")

#: A decoder with a GroupQueryAttention head size (16) onnxruntime-genai runs on the CPU.
SMALL = {**hf_models.DECODER, "hidden_size": 64}


def _save(path, model, **kwargs) -> None:
    """``model`` saved as real checkpoints are: bfloat16, with a tokenizer."""
    model.to(torch.bfloat16).save_pretrained(path, **kwargs)
    _tokenizer().save_pretrained(path)


@pytest.fixture(scope="module")
def bf16_llama(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama_bf16")
    _save(path, transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)).eval())
    return path


def _in_memory(folder, out, precision):
    """What export_llm wrote before it streamed: the model loaded in float32, exported,
    optimized for ONNX Runtime, quantized, saved."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32
    ).eval()
    program = dynamo_onnx.export(model, (), kwargs=example_inputs(model), optimize="onnxruntime")
    program.quantize(precision)
    out.mkdir()
    program.save(out / "model.onnx", external_data=True)
    return (out / "model.onnx.data").read_bytes()


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_the_streamed_export_writes_the_bytes_of_the_in_memory_export(
    bf16_llama, tmp_path, precision
):
    program = dynamo_onnx.export_llm(bf16_llama, tmp_path / "out", precision=precision)
    (note,) = program.diagnostics.by_rule("DO532")  # the weights were read as written
    assert note.properties["read"] == 2 + 2 * 9 + 1  # every checkpoint tensor, once counted
    data = (tmp_path / "out" / "model.onnx.data").read_bytes()
    assert data == _in_memory(bf16_llama, tmp_path / "memory", precision)
    assert f"{len(data) / 1e9:.2f}" == note.properties["written"]
    invocation = program.diagnostics.to_sarif()["runs"][0]["invocations"][0]
    figures = invocation["properties"]["weights"]  # beside the timings: they vary too
    assert figures["bytesWritten"] == len(data) and figures["checkpointTensorsRead"] == 21
    assert 0 < figures["peakRssBytes"] < 8e9
    ops = [n.op_type for n in program.model.graph]
    # per layer q/k/v packed, o, gate/up packed, down; and the LM head
    assert ops.count("MatMulNBits") == (0 if precision == "fp32" else 2 * 4 + 1)


def test_a_sharded_checkpoint_with_its_index_exports_the_same_bytes(bf16_llama, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(bf16_llama, dtype=torch.bfloat16)
    sharded = tmp_path / "sharded"
    _save(sharded, model, max_shard_size="40KB")
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 1 and (sharded / "model.safetensors.index.json").is_file()
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index.values()) == set(shards)
    dynamo_onnx.export_llm(sharded, tmp_path / "from_shards")
    dynamo_onnx.export_llm(bf16_llama, tmp_path / "from_one")
    assert (tmp_path / "from_shards" / "model.onnx.data").read_bytes() == (
        tmp_path / "from_one" / "model.onnx.data"
    ).read_bytes()


def _qwen3_tied():
    config = transformers.Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=True)
    return transformers.Qwen3ForCausalLM(config)


def _mistral_sliding():
    return transformers.MistralForCausalLM(transformers.MistralConfig(**SMALL, sliding_window=4))


def _llama_rope_theta():
    """Rotary inverse frequencies of another base: a buffer computed, never saved."""
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, rope_theta=500.0))


@pytest.mark.parametrize(
    "build", [_qwen3_tied, _mistral_sliding, _llama_rope_theta], ids=lambda f: f.__name__[1:]
)
def test_tied_and_computed_weights_generate_transformers_tokens(build, tmp_path):
    torch.manual_seed(0)
    saved = tmp_path / "hf"
    _save(saved, build().eval())
    names = set(safetensors.torch.load_file(saved / "model.safetensors"))
    if build is _qwen3_tied:
        assert "lm_head.weight" not in names  # the head reads the embedding's tensor
    assert not any("inv_freq" in n for n in names)  # computed when the model is built
    program = dynamo_onnx.export_llm(saved, tmp_path / "onnx")
    assert program.diagnostics.by_rule("DO532")
    assert not [f for f in program.diagnostics.findings if f.level.name == "WARNING"]
    eager = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    text = "the cat sat on the mat and a dog"  # longer than the sliding window
    prompt = tokenizer(text, return_tensors="pt")["input_ids"]
    expected = eager.generate(prompt, max_new_tokens=8, do_sample=False)[0, prompt.shape[1] :]
    assert _generate(tmp_path / "onnx", text, prompt) == expected.tolist()
    # int4 as today: per layer q/k/v packed, o, gate/up packed, down; and the LM head (a
    # tied one reads the embedding transposed), each one MatMulNBits
    dynamo_onnx.export_llm(saved, tmp_path / "int4", precision="int4")
    assert _ops(tmp_path / "int4")["MatMulNBits"] == 2 * 4 + 1
    og.Model(str(tmp_path / "int4"))  # onnxruntime-genai loads it


def _edited(source, target, edit) -> None:
    """A copy of the folder ``source`` whose checkpoint ``edit`` changed."""
    target.mkdir()
    for path in source.iterdir():
        if path.name != "model.safetensors":
            (target / path.name).write_bytes(path.read_bytes())
    tensors = safetensors.torch.load_file(source / "model.safetensors")
    edit(tensors)
    safetensors.torch.save_file(tensors, target / "model.safetensors", metadata={"format": "pt"})


def test_a_checkpoint_without_a_weight_is_do513_before_the_export(bf16_llama, tmp_path):
    _edited(bf16_llama, tmp_path / "hf", lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    message = str(info.value)
    assert "[DO513 checkpoint-mismatch]" in message
    assert "1 tensor(s) the model needs are not in it (`model.layers.1.mlp.up_proj.weight`)" in (
        message
    )
    assert not (tmp_path / "onnx").exists()  # nothing written


def test_a_weight_of_another_shape_is_do513(bf16_llama, tmp_path):
    def widen(tensors):
        tensors["model.norm.weight"] = torch.ones(65, dtype=torch.bfloat16)

    _edited(bf16_llama, tmp_path / "hf", widen)
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    assert info.value.rule_id == "DO513"
    assert "`model.norm.weight` (stored [65], model [64])" in str(info.value)
    assert not (tmp_path / "onnx").exists()


def test_a_checkpoint_tensor_the_model_does_not_use_is_do513(bf16_llama, tmp_path):
    """An error, as in memory: a trained tensor the export would drop without a word."""

    def add(tensors):
        tensors["model.layers.2.mlp.up_proj.weight"] = torch.zeros(4, 4, dtype=torch.bfloat16)

    _edited(bf16_llama, tmp_path / "hf", add)
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    assert info.value.rule_id == "DO513"
    assert "1 tensor(s) in it belong to no part of the model" in str(info.value)
    assert "`model.layers.2.mlp.up_proj.weight`" in str(info.value)
    assert not (tmp_path / "onnx").exists()


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("spelling", ["file", "folder", "str"])
def test_apply_weights_reads_a_safetensors_checkpoint_after_a_fake_mode_export(tmp_path, spelling):
    """The seed API's fake mode, completed from a checkpoint on disk: the weights are read
    (and converted from bfloat16) when the model is saved, never all held."""
    torch.manual_seed(0)
    real = _mlp().eval()
    state = {name: t.to(torch.bfloat16) for name, t in real.state_dict().items()}
    folder = tmp_path / "weights"
    folder.mkdir()
    safetensors.torch.save_file(state, folder / "model.safetensors")
    path = {"file": folder / "model.safetensors", "folder": folder, "str": str(folder)}[spelling]
    with dynamo_onnx.enable_fake_mode() as fake_context:
        model, example = _mlp(), torch.randn(2, 8)
    options = dynamo_onnx.ExportOptions(fake_context=fake_context)
    program = dynamo_onnx.dynamo_export(model, example, export_options=options)
    program.apply_weights(path)
    assert not program.fake_weights()
    program.save(tmp_path / "model.onnx")
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 8)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    real.load_state_dict({name: t.float() for name, t in state.items()})
    torch.testing.assert_close(torch.from_numpy(got), real(x).detach())


def test_apply_weights_of_a_checkpoint_of_other_shapes_is_do404(tmp_path):
    torch.manual_seed(0)
    state = {n: t for n, t in _mlp().state_dict().items()}
    state["2.weight"] = torch.zeros(5, 16)
    safetensors.torch.save_file(state, tmp_path / "model.safetensors")
    with dynamo_onnx.enable_fake_mode() as fake_context:
        model, example = _mlp(), torch.randn(2, 8)
    options = dynamo_onnx.ExportOptions(fake_context=fake_context)
    program = dynamo_onnx.dynamo_export(model, example, export_options=options)
    with pytest.raises(
        dynamo_onnx.OnnxExporterError, match=r"DO404.*2\.weight has shape \[5, 16\]"
    ):
        program.apply_weights(tmp_path)
    with pytest.raises(dynamo_onnx.OnnxExporterError, match="holds no safetensors checkpoint"):
        program.apply_weights(tmp_path / "nothing")
