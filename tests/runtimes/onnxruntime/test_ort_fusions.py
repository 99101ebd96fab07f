"""``optimize="onnxruntime"``: causal LMs exported with their cache and fused for ONNX Runtime
(GroupQueryAttention, rotary embeddings, RMS norms), equal to eager in ONNX Runtime, run by
onnxruntime-genai; the rewrite rules on hand-built graphs; the findings of what did not fuse."""

from __future__ import annotations

import collections
import copy
import importlib.util
import inspect
import json
import warnings

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxruntime
import pytest
import torch
import transformers
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.gqa_packed_qkv import fuse_qkv_gqa

import dynamo_onnx
import hf_models
from cli_runner import run_cli
from conftest import line_of
from dynamo_onnx.passes.metadata import MODULE_PATH, PACKED
from dynamo_onnx.runtimes.onnxruntime.fusion_pass import layer_spans
from dynamo_onnx.runtimes.onnxruntime.fusions import canonical_dims
from dynamo_onnx.runtimes.onnxruntime.packing import (
    PackedQKVOfSlices,
    PackedQKVOfSplit,
    PackProjectionsStep,
    pack_projections,
)
from sarif_tools import ROOT  # the top of the checkout

_spec = importlib.util.spec_from_file_location(
    "llm_generate", ROOT / "examples" / "llm_generate.py"
)
llm_generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llm_generate)

#: hf_models' decoder with a head size of 16: ONNX Runtime's GroupQueryAttention takes
#: multiples of 16 only.
DECODER = {**hf_models.DECODER, "hidden_size": 64, "intermediate_size": 128, "use_cache": True}
#: (batch, new tokens, past): a prefill, one token after a past, a chunk after a past. GQA
#: runs several new tokens after a past at batch 1 only (as the builder's model does).
SHAPES = [(3, 4, 0), (3, 1, 7), (1, 5, 2)]


def _model(name: str) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**DECODER)).eval()
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**DECODER)).eval()
    if name == "phi3":
        config = transformers.Phi3Config(**DECODER, pad_token_id=0)
        return transformers.Phi3ForCausalLM(config).eval()
    if name == "mistral":
        config = transformers.MistralConfig(**DECODER, sliding_window=4)
        return transformers.MistralForCausalLM(config).eval()
    if name == "gemma3":  # a sliding layer, then a full one (transformers' default: 5 then 1)
        layers = ["sliding_attention", "full_attention"]
        config = transformers.Gemma3TextConfig(
            **DECODER, head_dim=16, sliding_window=4, layer_types=layers
        )
        return transformers.Gemma3ForCausalLM(config).eval()
    assert name == "gemma2", name
    config = transformers.Gemma2Config(**DECODER, head_dim=16, sliding_window=4)
    return transformers.Gemma2ForCausalLM(config).eval()


def _export(model, **options):
    return dynamo_onnx.export(
        model, (), kwargs=llm_generate.example_inputs(model), optimize="onnxruntime", **options
    )


def _exported_with_no_warning(name: str):
    """(name, model, program) of ``_export``; any DynamoOnnxWarning fails the test."""
    model = _model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # no warning at all
        program = _export(model)
    return name, model, program


@pytest.fixture(scope="module")
def fused_exports():
    """name -> ``_exported_with_no_warning(name)``, made once: the tests read, verify and
    save it (none optimizes it again or changes its weights)."""
    made: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in made:
            made[name] = _exported_with_no_warning(name)
        return made[name]

    return get


@pytest.fixture(scope="module", params=["llama", "qwen2", "phi3"])
def fused(request, fused_exports):
    return fused_exports(request.param)


def _layer_of(node: ir.Node) -> str:
    """``model.layers.3`` for a node of that layer's modules."""
    module = node.metadata_props.get(MODULE_PATH, "")
    return ".".join(module.split(".")[:3]) if module.startswith("model.layers.") else module


def _ops(program) -> collections.Counter:
    return collections.Counter(node.op_type for node in program.model.graph)


def test_each_layer_is_one_gqa_with_its_rotary_and_two_fused_norms(fused):
    name, model, program = fused
    layers = model.config.num_hidden_layers
    ops = _ops(program)
    assert ops["GroupQueryAttention"] == layers
    gqa = [n for n in program.model.graph if n.op_type == "GroupQueryAttention"]
    assert all(n.attributes.get_int("do_rotary") == 1 for n in gqa)  # the RotaryEmbedding pair
    assert {n.inputs[7].name for n in gqa} == {gqa[0].inputs[7].name}  # one cos cache shared
    cos = gqa[0].inputs[7].const_value
    head_size = model.config.hidden_size // model.config.num_attention_heads
    assert cos is not None and cos.shape == (model.config.max_position_embeddings, head_size // 2)
    # input and post-attention norms, the final one: the first plain, the others with the add
    assert ops["SimplifiedLayerNormalization"] == 1
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * layers
    for unfused in ("Softmax", "Neg", "ReduceMean", "Sqrt", "Cos", "Sin", "Trilu"):
        assert ops[unfused] == 0, (unfused, ops)
    assert len(program.model.graph) < 45  # from about 230 nodes (the Llama: 752)
    (summary,) = program.diagnostics.by_rule("DO502")
    assert f"0 of {4 * layers + 1} attention, norm and rotary blocks unfused" in summary.message
    # four MatMuls a layer (q/k/v, o, gate/up, down), packed by dynamo-onnx (Phi-3 packs
    # q, k, v and gate, up itself), and GQA reads the packed q/k/v (key, value inputs empty)
    for layer in range(layers):
        in_layer = [n for n in program.model.graph if _layer_of(n) == f"model.layers.{layer}"]
        assert sum(n.op_type in ("MatMul", "FusedMatMul") for n in in_layer) == 4
    assert all(n.inputs[1] is None and n.inputs[2] is None for n in gqa)
    if name != "phi3":  # named as the builder names them
        weights = {n.inputs[1].name for n in program.model.graph if n.op_type == "MatMul"}
        assert {
            "model.layers.0.self_attn.qkv_proj.weight",
            "model.layers.0.mlp.gate_up_proj.weight",
        } <= weights
    ours = "" if name == "phi3" else ", 2 packed MatMul"
    matmuls = 4 if name == "phi3" else 2
    assert (
        f"model.layers.0: {matmuls} FusedMatMul, 1 GroupQueryAttention, "
        f"1 SimplifiedLayerNormalization, 1 SkipSimplifiedLayerNormalization{ours};"
        in summary.message
    )
    # a layer's input norm takes the residual add of the layer before: the skip form
    assert (
        f"model.layers.1: {matmuls} FusedMatMul, 1 GroupQueryAttention, "
        f"2 SkipSimplifiedLayerNormalization{ours};" in summary.message
    )
    unfused = ("DO503", "DO504", "DO505", "DO543")  # the rotary fused: no note that it cannot
    assert not [f for f in program.diagnostics.findings if f.rule.id in unfused]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "batch{}-new{}-past{}".format(*s))
def test_logits_and_presents_match_eager(fused, shape):
    _, model, program = fused
    inputs = llm_generate.example_inputs(model, *shape)
    got = program(**inputs)
    out = model(**copy.deepcopy(inputs))
    layers = llm_generate.output_cache(out).layers
    want = [out.logits] + [t for layer in layers for t in (layer.keys, layer.values)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def test_verify_compares_the_fused_model_with_eager(fused):
    _, model, program = fused
    program.verify((), llm_generate.example_inputs(model, 1, 3, 4))
    ids = [f.rule.id for f in program.diagnostics.findings]
    assert "DO602" in ids and "DO601" not in ids and "DO604" not in ids


def test_several_new_tokens_after_a_past_at_batch_two_are_gqas_limit_and_say_so(fused):
    _, model, program = fused
    with pytest.raises(dynamo_onnx.VerificationError, match="DO600") as info:
        program.verify((), llm_generate.example_inputs(model, 2, 3, 4))
    assert "batch_size must be 1 when sequence_length > 1 and past context is given" in str(
        info.value
    )


@pytest.fixture(scope="module", params=["mistral", "gemma2", "gemma3"])
def sliding(request):
    return _exported_with_no_warning(request.param)


def _sliding_layers(model) -> list[bool]:
    """Which layers attend through a window: Gemma 2 alternates, Mistral's all do (Gemma 3's
    configuration here: a sliding layer, then a full one)."""
    types = getattr(model.config, "layer_types", None)
    if types is None:
        return [True] * model.config.num_hidden_layers
    return [kind == "sliding_attention" for kind in types]


def test_sliding_window_layers_fuse_into_gqa_with_their_window(sliding):
    name, model, program = sliding
    config = model.config
    gqa = [n for n in program.model.graph if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == config.num_hidden_layers
    windows = [n.attributes.get_int("local_window_size", -1) for n in gqa]
    assert windows == [config.sliding_window if s else -1 for s in _sliding_layers(model)]
    assert _sliding_layers(model) == ([True, True] if name == "mistral" else [True, False])
    if name != "mistral":  # query_pre_attn_scalar and Gemma 2's attn_logit_softcapping
        scales = [n.attributes.get_float("scale") for n in gqa]
        assert scales == pytest.approx([config.query_pre_attn_scalar**-0.5] * len(gqa))
        caps = {n.attributes.get_float("softcap", 0.0) for n in gqa}
        assert caps == {config.attn_logit_softcapping or 0.0}
    ops = _ops(program)
    for unfused in ("Softmax", "Tanh", "Slice", "Greater", "Neg"):
        # Gemma 2's final logits are soft-capped too (outside the attention)
        assert ops[unfused] == (1 if unfused == "Tanh" and name == "gemma2" else 0), unfused
    # every present is its GroupQueryAttention's whole cache, past + new, under one name
    sliding_present = [v for v in program.model.graph.outputs if v.name.startswith("present.0.")]
    assert all(v.producer().op_type == "GroupQueryAttention" for v in sliding_present)
    assert [str(d) for d in sliding_present[0].shape] == [
        "batch_size",
        "2",
        "past_sequence_length + sequence_length",
        "16",
    ]
    past = next(v for v in program.model.graph.inputs if v.name == "past_key_values.0.key")
    assert str(past.shape[2]) == "past_sequence_length"
    (note,) = program.diagnostics.by_rule("DO510")
    layers = "model.layers.0-1" if name == "mistral" else "model.layers.0"
    assert f"with a sliding window of 4 token(s) ({layers}) keep their whole cache" in (
        note.message
    )
    assert "`present.0.key`, `present.0.value`" in note.message
    assert ("`present.1.key`" in note.message) == (name == "mistral")
    if name == "gemma3":  # its q/k norms go into GroupQueryAttention's inputs: no warning
        assert ops["SimplifiedLayerNormalization"] >= 4
    assert not program.diagnostics.by_rule("DO503")


def _whole_past_feeds(model, batch, new, past):
    """ONNX Runtime's feeds with every layer's whole past, and transformers' inputs with the
    same past given through ``cache.update`` (a sliding layer keeps its last window - 1)."""
    config = model.config
    kv, size = config.num_key_value_heads, config.head_dim
    torch.manual_seed(past)
    pasts = [
        (torch.randn(batch, kv, past, size), torch.randn(batch, kv, past, size))
        for _ in range(config.num_hidden_layers)
    ]
    cache = transformers.DynamicCache(config=config)
    for layer, (keys, values) in enumerate(pasts):
        cache.update(keys.clone(), values.clone(), layer)
    ids = torch.randint(1, config.vocab_size, (batch, new))
    mask = torch.ones(batch, past + new, dtype=torch.int64)
    positions = torch.arange(past, past + new).expand(batch, new)
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
    for layer, (keys, values) in enumerate(pasts):
        feeds[f"past_key_values.{layer}.key"] = keys
        feeds[f"past_key_values.{layer}.value"] = values
    eager = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
    return {k: v.numpy() for k, v in feeds.items()}, {**eager, "past_key_values": cache}


@pytest.mark.parametrize(
    "shape", [*SHAPES, (1, 3, 9)], ids=lambda s: "batch{}-new{}-past{}".format(*s)
)
def test_sliding_logits_match_eager_and_presents_hold_the_whole_cache(sliding, shape):
    _, model, program = sliding
    batch, new, past = shape
    window = model.config.sliding_window
    feeds, inputs = _whole_past_feeds(model, *shape)
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString())
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    out = model(**inputs, use_cache=True)
    np.testing.assert_allclose(got["logits"], out.logits.detach().numpy(), atol=1e-4, rtol=1e-4)
    assert past + new > window or shape != (1, 3, 9)  # one shape beyond the window
    for layer, kept in enumerate(llm_generate.output_cache(out).layers):
        for kind, tensor in (("key", kept.keys), ("value", kept.values)):
            whole = got[f"present.{layer}.{kind}"]
            assert whole.shape[2] == past + new  # every token, sliding layers too
            np.testing.assert_array_equal(
                whole[:, :, :past], feeds[f"past_key_values.{layer}.{kind}"]
            )
            # transformers' present (a sliding layer's last window - 1) is its end
            length = tensor.shape[2]
            assert length == (
                min(past + new, window - 1) if _sliding_layers(model)[layer] else past + new
            )
            np.testing.assert_allclose(
                whole[:, :, -length:], tensor.detach().numpy(), atol=1e-5, rtol=1e-5
            )


@pytest.mark.parametrize("shape", [(1, 3, 2), (1, 1, 7)], ids=["within", "beyond"])
def test_a_sliding_models_cache_is_fed_whole_and_verify_compares_the_presents_end(sliding, shape):
    """A cache object's sliding layers hold their window: fed at the end of the whole past
    (the model reads nothing before it); the presents compared on eager's last tokens."""
    _, model, program = sliding
    inputs = llm_generate.example_inputs(model, *shape)
    got = program(**inputs)
    out = model(**copy.deepcopy(inputs))
    torch.testing.assert_close(got[0], out.logits.detach(), atol=1e-4, rtol=1e-4)
    batch, new, past = shape
    for whole, kept in zip(
        got[1:], [t for la in llm_generate.output_cache(out).layers for t in (la.keys, la.values)]
    ):
        assert whole.shape[2] == past + new
        torch.testing.assert_close(whole[:, :, -kept.shape[2] :], kept, atol=1e-5, rtol=1e-5)
    program.verify((), inputs)
    ids = [f.rule.id for f in program.diagnostics.findings]
    assert "DO601" not in ids and "DO604" not in ids
    assert ids[-1] == "DO602"


def _greedy(model, prompt: torch.Tensor, new: int) -> torch.Tensor:
    """transformers' greedy sequence: ``prompt`` and exactly ``new`` tokens."""
    ones = torch.ones_like(prompt)
    return model.generate(
        prompt, attention_mask=ones, max_new_tokens=new, min_new_tokens=new, do_sample=False
    )


def _genai_sequence(og, folder, prompt: torch.Tensor, length: int) -> np.ndarray:
    """onnxruntime-genai's greedy sequence of ``length`` tokens from ``folder``."""
    generator_model = og.Model(str(folder))
    params = og.GeneratorParams(generator_model)
    params.set_search_options(max_length=length, do_sample=False)
    generator = og.Generator(generator_model, params)
    generator.append_tokens(prompt.numpy().astype(np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return np.asarray(generator.get_sequence(0))


def test_genai_generates_transformers_greedy_tokens_beyond_the_window(sliding, tmp_path):
    og = pytest.importorskip("onnxruntime_genai")
    name, model, program = sliding
    program.save(tmp_path / "model.onnx")
    config = json.loads((tmp_path / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    assert config["model"]["type"] == model.config.model_type  # gemma3_text for Gemma 3
    assert "sliding_window" not in config["model"]["decoder"]  # every layer's cache whole
    torch.manual_seed(3)
    prompt = torch.randint(1, 100, (1, 6))
    eager = _greedy(model, prompt, 10)
    assert eager.shape[1] == 16 > 3 * model.config.sliding_window
    np.testing.assert_array_equal(_genai_sequence(og, tmp_path, prompt, 16), eager[0].numpy())


def test_genai_generates_transformers_greedy_tokens_from_the_fused_folder(tmp_path, fused_exports):
    og = pytest.importorskip("onnxruntime_genai")
    _, model, program = fused_exports("llama")
    program.save(tmp_path / "model.onnx")
    config = json.loads((tmp_path / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    prompt = torch.randint(1, 100, (1, 6))
    eager = _greedy(model, prompt, 10)
    np.testing.assert_array_equal(_genai_sequence(og, tmp_path, prompt, 16), eager[0].numpy())


def test_an_attention_gqa_cannot_take_is_a_finding_at_its_line_with_the_reason():
    """Fused into MultiHeadAttention instead: the note DO511, never a warning (a job that
    gates on warnings passes), at the attention's line, with the matcher's reason."""
    model = hf_models.causal_lm("llama")  # head size 8
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # no warning at all
        program = _export(model)
    assert not program.diagnostics.by_rule("DO503")
    findings = program.diagnostics.by_rule("DO511")
    assert {f.level.name for f in findings} == {"NOTE"}
    assert [f.properties["module"] for f in findings] == [
        "model.layers.0.self_attn",
        "model.layers.1.self_attn",
    ]
    finding = findings[0]
    assert "The head size is 8: ONNX Runtime's GroupQueryAttention takes multiples of 16" in (
        finding.message
    )
    assert "fused into MultiHeadAttention, not GroupQueryAttention" in finding.message
    assert f"It is {finding.properties['nodes']} nodes" in finding.message
    assert finding.properties["nodes"] > 0
    forward = inspect.unwrap(transformers.models.llama.modeling_llama.LlamaAttention.forward)
    assert finding.primary is not None
    assert finding.primary.path == inspect.getsourcefile(forward)
    assert finding.primary.line == line_of(forward, "attention_interface(")
    # what it stays, and the model is still right
    inputs = llm_generate.example_inputs(model, 2, 3, 4)
    got = program(**inputs)
    torch.testing.assert_close(
        got[0], model(**copy.deepcopy(inputs)).logits.detach(), atol=1e-4, rtol=1e-4
    )


def test_qwen3s_query_and_key_norms_fuse_with_no_false_finding():
    """Qwen 3 normalizes q and k per head (``q_norm``, ``k_norm`` inside the attention): they
    fuse into SimplifiedLayerNormalization, and the GQA rewrite then remakes those nodes with
    the attention's origin. A block whose computing nodes are gone is fused, not a DO504 that
    says "it stays 0 nodes"."""
    torch.manual_seed(0)
    config = transformers.Qwen3Config(**DECODER, head_dim=16)
    model = transformers.Qwen3ForCausalLM(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # no warning at all
        program = _export(model)
    layers = config.num_hidden_layers
    ops = _ops(program)
    assert ops["GroupQueryAttention"] == layers
    # per layer q_norm and k_norm, and the first input norm; the others take a residual
    assert ops["SimplifiedLayerNormalization"] == 2 * layers + 1
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * layers
    assert ops["ReduceMean"] == 0
    (summary,) = program.diagnostics.by_rule("DO502")
    assert f"0 of {6 * layers + 1} attention, norm and rotary blocks unfused" in summary.message
    inputs = llm_generate.example_inputs(model, 3, 1, 7)
    out = model(**copy.deepcopy(inputs))
    torch.testing.assert_close(program(**inputs)[0], out.logits.detach(), atol=1e-4, rtol=1e-4)


def test_an_attention_fused_into_a_submodules_node_says_what_it_became():
    """GPT-2's attention fuses into MultiHeadAttention (no rotary embedding: the GQA rules
    do not match), a node whose origin is ``attn.c_proj``, a submodule: the finding names it
    and its reason, never "stays 0 nodes (none)"."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=100, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # a note, no warning
        program = _export(model)
    assert not program.diagnostics.by_rule("DO503")
    findings = program.diagnostics.by_rule("DO511")
    assert [f.properties["module"] for f in findings] == [
        "transformer.h.0.attn",
        "transformer.h.1.attn",
    ]
    for finding in findings:
        assert "fused into MultiHeadAttention, not GroupQueryAttention" in finding.message
        assert "expected RotaryEmbedding" in finding.message  # the matcher's reason
        assert finding.properties["nodes"] > 1  # what stays around the fused node
    ops = _ops(program)
    assert ops["MultiHeadAttention"] == 2 and ops["GroupQueryAttention"] == 0
    assert not program.diagnostics.by_rule("DO504")  # its layer norms fused
    inputs = llm_generate.example_inputs(model, 2, 3, 4)
    out = model(**copy.deepcopy(inputs))
    torch.testing.assert_close(program(**inputs)[0], out.logits.detach(), atol=1e-4, rtol=1e-4)


def test_optimize_takes_true_false_or_a_runtime():
    model = torch.nn.Linear(4, 3)
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="DO109") as info:
        dynamo_onnx.export(model, (torch.randn(2, 4),), optimize="tensorrt")
    assert "'onnxruntime'" in str(info.value)
    program = dynamo_onnx.export(model, (torch.randn(2, 4),), optimize="onnxruntime")
    (summary,) = program.diagnostics.by_rule("DO502")
    assert "0 of 0 attention, norm and rotary blocks unfused" in summary.message


def test_program_optimize_for_onnxruntime_after_a_plain_export():
    model = _model("llama")
    program = dynamo_onnx.export(model, (), kwargs=llm_generate.example_inputs(model))
    assert _ops(program)["GroupQueryAttention"] == 0
    program.optimize("onnxruntime")
    layers = model.config.num_hidden_layers
    assert _ops(program)["GroupQueryAttention"] == layers
    packed = [n for n in program.model.graph if n.metadata_props.get(PACKED)]
    assert sorted(n.metadata_props[PACKED] for n in packed) == sorted(
        ["q_proj, k_proj, v_proj", "gate_proj, up_proj"] * layers
    )


def test_the_cli_optimizes_for_onnxruntime(tmp_path):
    factory = tmp_path / "factory.py"
    factory.write_text(
        "import torch\n"
        "def model():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 3))\n"
        "def inputs():\n"
        "    return (torch.randn(2, 4),)\n"
    )
    out = tmp_path / "m.onnx"
    sarif = tmp_path / "m.sarif"
    done = run_cli(
        tmp_path,
        "export",
        f"{factory}:model",
        "--inputs",
        f"{factory}:inputs",
        "-o",
        str(out),
        "--sarif",
        str(sarif),
        "--optimize-for",
        "onnxruntime",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    assert any(r["ruleId"] == "DO502" for r in results)


# -- the rules on hand-built graphs ----------------------------------------------------------

FLOAT = ir.DataType.FLOAT


def _count(model: ir.Model, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph)


def test_the_summary_writes_runs_of_layers_as_spans():
    assert layer_spans(
        ["model.layers.1", "model.layers.2", "model.layers.3", "model.layers.5"]
    ) == ("model.layers.1-3, model.layers.5")
    assert layer_spans(["lm_head", "model.layers.0"]) == "model.layers.0, lm_head"


def _reshape_graph(result: list[int | str]) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", 4, "S", 8]))
    shape = ir.Value(
        name="shape", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(result)])
    )
    reshape = ir.node("Reshape", [x, shape])
    reshape.outputs[0].shape = ir.Shape(result)
    reshape.outputs[0].type = ir.TensorType(FLOAT)
    reshape.outputs[0].name = "y"
    graph = ir.Graph([x, shape], reshape.outputs, nodes=[reshape], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def test_equal_sums_of_dimensions_are_written_alike_and_names_are_left_alone():
    model = _reshape_graph(["B", 4, "sequence_length + past_sequence_length", 8])
    model.graph.inputs[0].shape = ir.Shape(
        ["batch-size", 4, "past_sequence_length + sequence_length", 8]
    )
    assert canonical_dims(model) == 1
    assert [str(d) for d in model.graph.outputs[0].shape] == [
        "B",
        "4",
        "past_sequence_length + sequence_length",
        "8",
    ]
    assert str(model.graph.inputs[0].shape[0]) == "batch-size"
    assert canonical_dims(model) == 0


# -- packing projections of one input ---------------------------------------------------------


def _initializer(name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        shape=ir.Shape(array.shape),
    )
    value.const_value = ir.tensor(array, name=name)
    return value


def _projections_graph() -> ir.Model:
    """A layer's q, k, v of ``x`` (torch_lib's ``MatMul(x, Transpose(W))``, biases on q and v
    only), and what must stay: a MatMul of a computed weight, one of another input, and one
    whose output is the graph's."""
    rng = np.random.default_rng(0)
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", "S", 8]))
    y = ir.Value(name="y", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", 8]))
    computed = ir.Value(name="computed", type=ir.TensorType(FLOAT), shape=ir.Shape([8, 3]))
    initializers, nodes, outputs = [], [], []
    for part, width, bias in (("q", 8, True), ("k", 4, False), ("v", 4, True)):
        weight = _initializer(
            f"layer.{part}_proj.weight", rng.standard_normal((width, 8), np.float32)
        )
        initializers.append(weight)
        nodes.append(ir.node("Transpose", [weight], {"perm": [1, 0]}))
        nodes.append(ir.node("MatMul", [x, nodes[-1].outputs[0]]))
        if bias:
            b = _initializer(f"layer.{part}_proj.bias", rng.standard_normal(width, np.float32))
            initializers.append(b)
            nodes.append(ir.node("Add", [nodes[-1].outputs[0], b]))
        nodes.append(ir.node("Relu", [nodes[-1].outputs[0]]))
        outputs.append(nodes[-1].outputs[0])
    other = _initializer("other.weight", rng.standard_normal((8, 5), np.float32))
    head = _initializer("head.weight", rng.standard_normal((8, 6), np.float32))
    initializers += [other, head]
    nodes += [
        ir.node("MatMul", [x, computed]),
        ir.node("MatMul", [y, other]),
        ir.node("MatMul", [x, head]),
    ]
    outputs += [n.outputs[0] for n in nodes[-3:]]
    for i, value in enumerate(outputs):
        value.name = f"out{i}"
    graph = ir.Graph(
        [x, y, computed], outputs, nodes=nodes, initializers=initializers, opset_imports={"": 18}
    )
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    proto = ir.to_proto(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_projections_of_one_input_are_one_matmul_and_a_split_computing_the_same():
    model = _projections_graph()
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((2, 3, 8), np.float32),
        "y": rng.standard_normal((2, 8), np.float32),
        "computed": rng.standard_normal((8, 3), np.float32),
    }
    want = _run(model, feeds)
    assert PackProjectionsStep()(model).modified
    ops = collections.Counter(n.op_type for n in model.graph)
    # q, k, v: one MatMul, one Add (k adds zeros), one Split; the three others as they were
    assert (ops["MatMul"], ops["Add"], ops["Split"], ops["Transpose"]) == (4, 1, 1, 0)
    (split,) = [n for n in model.graph if n.op_type == "Split"]
    assert ir.convenience.get_const_tensor(split.inputs[1]).numpy().tolist() == [8, 4, 4]
    packed = split.inputs[0].producer().inputs[0].producer()
    assert packed.inputs[1].name == "layer.qkv_proj.weight"
    assert packed.inputs[1].shape == ir.Shape([8, 16])  # [K, N], as MatMul reads it
    bias = split.inputs[0].producer().inputs[1]
    assert bias.name == "layer.qkv_proj.bias"
    np.testing.assert_array_equal(bias.const_value.numpy()[8:12], np.zeros(4, np.float32))
    assert set(model.graph.initializers) == {
        "layer.qkv_proj.weight",
        "layer.qkv_proj.bias",
        "other.weight",
        "head.weight",
    }
    got = _run(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert not PackProjectionsStep()(model).modified  # nothing left to pack


def test_projections_of_inputs_of_their_own_are_left_alone():
    model = _projections_graph()
    # q's and k's input is another value now: v is alone
    z = ir.Value(name="z", type=ir.TensorType(FLOAT), shape=ir.Shape(["B", "S", 8]))
    model.graph.inputs.append(z)
    matmuls = [n for n in model.graph if n.op_type == "MatMul"]
    matmuls[0].replace_input_with(0, z)
    matmuls[1].replace_input_with(0, z)
    assert pack_projections(model) == 1  # q and k of z, not v with the computed weight
    (split,) = [n for n in model.graph if n.op_type == "Split"]
    assert ir.convenience.get_const_tensor(split.inputs[1]).numpy().tolist() == [8, 4]


def _gqa_graph(sizes: list[int], form: str = "split") -> ir.Model:
    """``GroupQueryAttention(q, k, v, past...)`` of ``q, k, v = Split(qkv)`` (or three
    ``Slice`` nodes, Phi-3's form): 2 heads, 1 KV head of 16, a window of 3, the rotary
    embedding applied by the attention, as onnxscript's GQA rule and ours write it."""
    qkv = ir.Value(name="qkv", type=ir.TensorType(FLOAT), shape=ir.Shape([1, "S", 64]))
    past = [
        ir.Value(name=f"past_{kind}", type=ir.TensorType(FLOAT), shape=ir.Shape([1, 1, "P", 16]))
        for kind in ("key", "value")
    ]
    int32 = ir.TensorType(ir.DataType.INT32)
    seqlens = ir.Value(name="seqlens_k", type=int32, shape=ir.Shape([1]))
    total = ir.Value(name="total_sequence_length", type=int32, shape=ir.Shape([]))
    angles = np.arange(16, dtype=np.float32)[:, None] * 0.1 ** np.arange(8, dtype=np.float32)
    cos, sin = _initializer("cos", np.cos(angles)), _initializer("sin", np.sin(angles))
    initializers = [cos, sin]
    if form == "split":
        widths = _initializer("widths", np.array(sizes, np.int64))
        initializers.append(widths)
        nodes = [ir.node("Split", [qkv, widths], {"axis": -1}, num_outputs=3)]
        parts = list(nodes[0].outputs)
    else:
        ends = np.cumsum(sizes)
        nodes = []
        for i, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
            bounds = [
                _initializer(f"{name}{i}", np.array([v], np.int64))
                for name, v in (("start", start), ("end", end), ("axis", 2), ("step", 1))
            ]
            initializers += bounds
            nodes.append(ir.node("Slice", [qkv, *bounds]))
            nodes[-1].outputs[0].shape = ir.Shape([1, "S", int(end - start)])  # its check reads
        parts = [n.outputs[0] for n in nodes]
    gqa = ir.node(
        "GroupQueryAttention",
        [*parts, *past, seqlens, total, cos, sin],
        {
            "num_heads": 2,
            "kv_num_heads": 1,
            "local_window_size": 3,
            "do_rotary": 1,
            "rotary_interleaved": 0,
        },
        domain="com.microsoft",
        num_outputs=3,
    )
    for value, name in zip(gqa.outputs, ("attention", "present_key", "present_value")):
        value.name = name
    graph = ir.Graph(
        [qkv, *past, seqlens, total],
        gqa.outputs,
        nodes=[*nodes, gqa],
        initializers=initializers,
        opset_imports={"": 18, "com.microsoft": 1},
    )
    return ir.Model(graph, ir_version=10)


def _gqa_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    new, past = 3, 2
    return {
        "qkv": rng.standard_normal((1, new, 64), np.float32),
        "past_key": rng.standard_normal((1, 1, past, 16), np.float32),
        "past_value": rng.standard_normal((1, 1, past, 16), np.float32),
        "seqlens_k": np.array([past + new - 1], np.int32),
        "total_sequence_length": np.array(past + new, np.int32),
    }


@pytest.mark.parametrize(
    ("form", "rule"), [("split", PackedQKVOfSplit), ("slices", PackedQKVOfSlices)]
)
def test_gqa_of_a_split_qkv_takes_it_packed_with_its_attributes_and_the_same_values(form, rule):
    model = _gqa_graph([32, 16, 16], form)
    feeds = _gqa_feeds()
    want = _run(model, feeds)
    assert pattern.RewriteRuleSet([rule.rule()]).apply_to_model(model) == 1
    common_passes.RemoveUnusedNodesPass()(model)
    (gqa,) = model.graph
    assert gqa.op_type == "GroupQueryAttention"
    assert gqa.inputs[0].name == "qkv" and gqa.inputs[1] is None and gqa.inputs[2] is None
    assert [v.name for v in gqa.inputs[3:]] == [
        "past_key",
        "past_value",
        "seqlens_k",
        "total_sequence_length",
        "cos",
        "sin",
    ]
    assert gqa.attributes.get_int("local_window_size") == 3
    got = _run(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_onnxscripts_packed_qkv_rule_drops_the_window_ours_keeps():
    """Why fusions.py runs PackedQKVOfSlices instead of onnxscript's ``fuse_qkv_gqa``: if
    this fails, onnxscript keeps the attributes and its rule can come back."""
    model = _gqa_graph([32, 16, 16], "slices")
    assert fuse_qkv_gqa(model) == 1
    (gqa,) = [n for n in model.graph if n.op_type == "GroupQueryAttention"]
    assert gqa.inputs[1] is None and "local_window_size" not in gqa.attributes


@pytest.mark.parametrize("sizes", [[16, 32, 16], [32, 8, 24]])
def test_a_split_that_is_not_q_k_v_of_the_heads_stays(sizes):
    model = _gqa_graph(sizes)
    assert pattern.RewriteRuleSet([PackedQKVOfSplit.rule()]).apply_to_model(model) == 0
    assert [n.op_type for n in model.graph] == ["Split", "GroupQueryAttention"]
