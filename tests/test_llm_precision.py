"""int4 and int8 folders of a small Llama: every MatMul with a weight becomes MatMulNBits
(the count taken from the float model), the weights go to the external data file, and
onnxruntime-genai loads the folder and generates."""

from __future__ import annotations

import collections
import copy
import json

import numpy as np
import onnx
import pytest
import torch
import transformers

import dynamo_onnx
import hf_models
from dynamo_onnx.defaults import QUANTIZATION_BLOCK_SIZE
from dynamo_onnx.integrations.transformers import hf_folder
from dynamo_onnx.runtimes.onnxruntime.quantize import quantizable_matmuls

og = pytest.importorskip("onnxruntime_genai")

NEW_TOKENS = 8


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory):
    model = hf_models.causal_lm("llama")
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    return path, model


def _weight_matmuls(model: onnx.ModelProto) -> int:
    """MatMuls of the float model whose second input is a weight, as is or transposed
    (torch_lib's ``linear``): what the quantizer must turn into MatMulNBits."""
    weights = {t.name for t in model.graph.initializer}
    transposed = {
        n.output[0] for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in weights
    }
    return sum(
        1
        for n in model.graph.node
        if n.op_type == "MatMul" and (n.input[1] in weights or n.input[1] in transposed)
    )


@pytest.fixture(scope="module")
def llama_program(saved_llama):
    """The float export of the Llama (test_program_quantize quantizes it in place, after
    float_weight_matmuls counted its MatMuls)."""
    _, model = saved_llama
    return dynamo_onnx.export(model, (), kwargs=hf_folder.example_inputs(model))


@pytest.fixture(scope="module")
def float_weight_matmuls(saved_llama, llama_program):
    _, model = saved_llama
    count = _weight_matmuls(llama_program.model_proto)
    layers = model.config.num_hidden_layers
    assert count == 7 * layers + 1  # q, k, v, o, gate, up, down per layer, and the LM head
    return count


def _generate(folder, prompt: torch.Tensor) -> list[int]:
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=prompt.shape[1] + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt.numpy().astype(np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return generator.get_sequence(0)[prompt.shape[1] :].tolist()


@pytest.mark.parametrize(("precision", "bits"), [("int4", 4), ("int8", 8)])
def test_a_quantized_folder_loads_in_genai_generates_and_quantizes_every_weight_matmul(
    saved_llama, float_weight_matmuls, precision, bits, tmp_path
):
    path, model = saved_llama
    # the plain folder (the command's --optimize-for none): each projection its own MatMul
    program = dynamo_onnx.export_llm(path, tmp_path, precision=precision, optimize=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "genai_config.json",
        "generation_config.json",
        "model.onnx",
        "model.onnx.data",
    ]
    saved = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False)
    quantized = [n for n in saved.graph.node if n.op_type == "MatMulNBits"]
    assert len(quantized) == float_weight_matmuls
    for node in quantized:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert (attributes["bits"], attributes["block_size"]) == (bits, QUANTIZATION_BLOCK_SIZE)
    # every weight but the smallest (at most 256 bytes: ir.save keeps them inline) is in
    # model.onnx.data, as a float model's weights are
    weights = {t.name: t for t in saved.graph.initializer}
    inline = [n.input[1] for n in quantized if weights[n.input[1]].raw_data]
    external = [
        n.input[1]
        for n in quantized
        if weights[n.input[1]].data_location == onnx.TensorProto.EXTERNAL
    ]
    assert external and len(external) + len(inline) == len(quantized)
    assert all(len(weights[name].raw_data) <= 256 for name in inline)
    (note,) = program.diagnostics.by_rule("DO506")
    assert f"Quantized {float_weight_matmuls} MatMul weights to {precision}" in note.message
    config = json.loads((tmp_path / "genai_config.json").read_text())
    assert config["model"]["decoder"]["filename"] == "model.onnx"

    torch.manual_seed(1)
    prompts = [torch.randint(3, 100, (1, 6)) for _ in range(4)]
    same = 0
    for prompt in prompts:
        tokens = _generate(tmp_path, prompt)
        assert len(tokens) == NEW_TOKENS and all(0 <= t < 100 for t in tokens)
        eager = model.generate(
            prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
        )
        same += tokens == eager[0, prompt.shape[1] :].tolist()
    # a random 2-layer model's logits are close together, so rounding flips some greedy
    # tokens; 8 bits keep most sequences (3 of 4 here), and 4 bits keep some (1 of 4)
    assert same >= (2 if bits == 8 else 1)


def test_program_quantize_spellings_and_an_unknown_precision(
    saved_llama, llama_program, float_weight_matmuls
):
    _, model = saved_llama
    program = llama_program  # counted as a float model first: float_weight_matmuls
    nodes = len(program.model.graph)
    program.quantize("fp32")  # nothing to do
    assert len(program.model.graph) == nodes
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        program.quantize("int2")
    assert str(info.value).startswith("[DO109 invalid-option] `precision` is 'int2'")
    program.quantize(precision="int8", block_size=16, accuracy_level=0)
    nbits = [n for n in program.model.graph if n.op_type == "MatMulNBits"]
    assert {(n.attributes["bits"].value, n.attributes["block_size"].value) for n in nbits} == {
        (8, 16)
    }
    assert all("accuracy_level" not in n.attributes for n in nbits)  # 0: left unset
    inputs = hf_folder.example_inputs(model)
    want = model(**copy.deepcopy(inputs)).logits.detach()
    got = program(**inputs)[0]
    error = (got - want).abs().max().item()
    assert 0 < error < 0.02 * want.abs().max().item()  # 8-bit weights, float activations


def test_an_int4_folder_optimized_for_onnxruntime_quantizes_the_packed_projections(tmp_path):
    """q, k, v and gate, up packed before quantization (as the builder does): one
    MatMulNBits each, GroupQueryAttention reads q, k, v packed, and genai generates."""
    torch.manual_seed(0)
    decoder = {**hf_models.DECODER, "hidden_size": 64, "intermediate_size": 128, "use_cache": True}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder))
    model.eval().save_pretrained(tmp_path / "hf")
    fused = dynamo_onnx.export(
        model, (), kwargs=hf_folder.example_inputs(model), optimize="onnxruntime"
    )
    quantizable = quantizable_matmuls(fused.model)
    assert quantizable == 4 * model.config.num_hidden_layers + 1  # qkv, o, gate_up, down; head

    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "out", precision="int4")
    # (optimized for ONNX Runtime: export_llm's default)
    saved = onnx.load(str(tmp_path / "out" / "model.onnx"), load_external_data=False)
    ops = collections.Counter(n.op_type for n in saved.graph.node)
    assert ops["MatMulNBits"] == quantizable
    assert ops["MatMul"] == ops["FusedMatMul"] == 0  # no weight left in float
    widths = collections.Counter(
        onnx.helper.get_attribute_value(a)
        for n in saved.graph.node
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "N"
    )
    head_size = 64 // model.config.num_attention_heads
    heads = model.config.num_attention_heads + 2 * model.config.num_key_value_heads
    assert widths[heads * head_size] == widths[2 * 128] == model.config.num_hidden_layers
    gqa = [n for n in saved.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == model.config.num_hidden_layers
    assert all(n.input[1] == n.input[2] == "" for n in gqa)  # the packed-QKV form
    (note,) = program.diagnostics.by_rule("DO506")
    assert f"Quantized {quantizable} MatMul weights to int4" in note.message
    tokens = _generate(tmp_path / "out", torch.randint(3, 100, (1, 6)))
    assert len(tokens) == NEW_TOKENS and all(0 <= t < 100 for t in tokens)
