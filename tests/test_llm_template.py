"""export-llm exports a streamed checkpoint as a template of a few layers whose layers the
ONNX graph repeats (issue 44's wall time): the folder is the whole export's (the same
weight bytes, transformers' tokens from onnxruntime-genai, the int4 folder's MatMulNBits),
each repeated layer reading its own tensors (DO401 names its weight); DO536 says so, DO537
why the model was exported whole when the template is refused."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers

import dynamo_onnx
import hf_models
from cli_runner import run_cli
from dynamo_onnx import llm_template
from dynamo_onnx.integrations import copy_family_values
from dynamo_onnx.integrations.transformers.hf_folder import example_inputs
from test_export_llm_cli import _generate, _ops, _tokenizer
from test_streamed_export_llm import _in_memory  # the whole export, in memory

og = pytest.importorskip("onnxruntime_genai")

#: A decoder with a GroupQueryAttention head size (16) onnxruntime-genai runs on the CPU,
#: deep enough for its template (layers 0, 1 and 2) to be shorter than it.
SMALL = {**hf_models.DECODER, "hidden_size": 64, "num_hidden_layers": 5}
TEXT = "the cat sat on the mat and a dog"  # longer than the sliding window


def _save(path, model, norms=True, **kwargs) -> None:
    """``model`` saved as real checkpoints are: bfloat16, with a tokenizer, its norms'
    weights and its biases drawn (``norms``) as trained ones differ from layer to layer
    (transformers starts them at one or zero, and the optimizer merges equal tensors into
    one)."""
    if norms:
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "norm" in name:
                    parameter.normal_(1.0, 0.2)
                elif name.endswith("bias"):
                    parameter.normal_(0.0, 0.2)
    model.eval().to(torch.bfloat16).save_pretrained(path, **kwargs)
    _tokenizer().save_pretrained(path)


def _llama(**extra):
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, **extra))


def _qwen3():
    config = transformers.Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=True)
    return transformers.Qwen3ForCausalLM(config)


def _mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(**SMALL, sliding_window=4))


def _qwen2():
    """q, k and v with biases, small enough for the optimizer to read (and packing to
    rename)."""
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL))


#: Gemma 2 and 3 alternate a sliding layer and a full one: 7 layers for a template of 5
#: (layer 0, two of each kind) to be shorter than the model.
ALTERNATING = {**SMALL, "num_hidden_layers": 7, "head_dim": 16, "sliding_window": 4}


def _gemma2():
    """``1 + weight`` norms, folded by the optimizer into constants of their own."""
    return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**ALTERNATING))


def _gemma3():
    """Gemma 2's norms, and q/k norms."""
    layers = ["sliding_attention", "full_attention"] * 3 + ["sliding_attention"]
    config = transformers.Gemma3TextConfig(**ALTERNATING, layer_types=layers)
    return transformers.Gemma3ForCausalLM(config)


def _eager_tokens(folder):
    eager = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = transformers.AutoTokenizer.from_pretrained(folder)(TEXT, return_tensors="pt")
    ids = prompt["input_ids"]
    expected = eager.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :]
    return eager, ids, expected.tolist()


def _repeated(program, layers, kept="0, 1, 2"):
    (note,) = program.diagnostics.by_rule("DO536")
    assert note.message == (
        f"The model's {layers} layers were made by repeating a template of "
        f"{len(kept.split(', '))} (layers {kept}) in the ONNX graph."
    )
    assert not program.diagnostics.by_rule("DO537")


def _gpt_oss():
    """Attention sinks and a router whose small weights the optimizer folds; sliding
    attention GroupQueryAttention does not fuse with sinks (DO503), so the folder is the
    plain fallback's (every layer its whole cache)."""
    layers = ["sliding_attention", "full_attention"] * 3 + ["sliding_attention"]
    config = transformers.GptOssConfig(
        **{**ALTERNATING, "sliding_window": 16, "intermediate_size": 128},
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=layers,
    )
    return transformers.GptOssForCausalLM(config)


#: The template of each model built: its layers and the layers it keeps.
TEMPLATES = {"_gemma2": (7, "0, 1, 2, 3, 4"), "_gemma3": (7, "0, 1, 2, 3, 4")}


@pytest.mark.parametrize(
    "build",
    [_llama, _qwen3, _mistral, _qwen2, _gemma2, _gemma3],
    ids=lambda f: f.__name__[1:],
)
def test_the_repeated_template_is_the_whole_export(build, tmp_path):
    torch.manual_seed(0)
    saved = tmp_path / "hf"
    _save(saved, build())
    program = dynamo_onnx.export_llm(saved, tmp_path / "onnx")
    layers, kept = TEMPLATES.get(build.__name__, (5, "0, 1, 2"))
    _repeated(program, layers, kept)
    assert not [f for f in program.diagnostics.findings if f.level.name == "WARNING"]
    data = (tmp_path / "onnx" / "model.onnx.data").read_bytes()
    assert data == _in_memory(saved, tmp_path / "whole", "fp32")
    (streamed,) = program.diagnostics.by_rule("DO532")  # every checkpoint tensor read
    assert streamed.properties["read"] == len(
        safetensors.torch.load_file(saved / "model.safetensors")
    )
    config = json.loads((tmp_path / "onnx" / "genai_config.json").read_text())
    assert config["model"]["decoder"]["num_hidden_layers"] == layers
    eager, prompt, expected = _eager_tokens(saved)
    assert _generate(tmp_path / "onnx", TEXT, prompt) == expected
    # the program returned runs the whole model: its inputs are every layer's cache (the
    # program captured was the template's, so none is kept)
    assert program.exported_program is None
    inputs = example_inputs(eager, batch=1)
    with torch.no_grad():
        want = eager(**copy_family_values(inputs)).logits
    got = program(**inputs)[0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("build", [_llama, _qwen2], ids=lambda f: f.__name__[1:])
def test_the_int4_folder_is_the_whole_int4_export(build, tmp_path):
    torch.manual_seed(0)
    _save(tmp_path / "hf", build())
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "int4", precision="int4")
    _repeated(program, 5)
    # per layer q/k/v packed, o, gate/up packed, down; and the LM head
    assert _ops(tmp_path / "int4")["MatMulNBits"] == 4 * 5 + 1
    data = (tmp_path / "int4" / "model.onnx.data").read_bytes()
    assert data == _in_memory(tmp_path / "hf", tmp_path / "whole", "int4")
    og.Model(str(tmp_path / "int4"))  # onnxruntime-genai loads it


def test_a_sharded_checkpoint_through_the_command_line(tmp_path):
    torch.manual_seed(0)
    _save(tmp_path / "one", _llama())
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "one", dtype=torch.bfloat16
    )
    _save(tmp_path / "sharded", model, norms=False, max_shard_size="40KB")
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1
    sarif = tmp_path / "log.sarif"
    out = tmp_path / "from_shards"
    proc = run_cli(
        tmp_path, "export-llm", str(tmp_path / "sharded"), "-o", str(out), "--sarif", str(sarif)
    )
    assert proc.returncode == 0, proc.stderr
    run = json.loads(sarif.read_text())["runs"][0]
    (note,) = [r for r in run["results"] if r["ruleId"] == "DO536"]
    assert note["level"] == "note"
    assert "5 layers were made by repeating a template of 3" in note["message"]["text"]
    # the log describes the model written: every layer's cache
    inputs = [v["name"] for v in run["properties"]["inputs"]]
    outputs = [v["name"] for v in run["properties"]["outputs"]]
    assert inputs[-2:] == ["past_key_values.4.key", "past_key_values.4.value"]
    assert outputs[-2:] == ["present.4.key", "present.4.value"]
    dynamo_onnx.export_llm(tmp_path / "one", tmp_path / "from_one")
    assert (out / "model.onnx.data").read_bytes() == (
        tmp_path / "from_one" / "model.onnx.data"
    ).read_bytes()


def test_layers_whose_norms_the_optimizer_merged_are_exported_whole(tmp_path):
    """transformers starts every norm at one: the optimizer merges the equal tensors, so a
    repeated layer would read the template's; the model is exported whole (DO537)."""
    torch.manual_seed(0)
    _save(tmp_path / "hf", _llama(), norms=False)
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    assert not program.diagnostics.by_rule("DO536")
    (note,) = program.diagnostics.by_rule("DO537")
    assert note.level.name == "NOTE"
    assert note.message.startswith(
        "The model's 5 layers were exported whole, not repeated from a template: the "
        "optimization merged template layer 0's weight `model.layers.0."
    )
    assert "with equal weights of other layers (read by template layers 0, 1" in note.message
    _, prompt, expected = _eager_tokens(tmp_path / "hf")
    assert _generate(tmp_path / "onnx", TEXT, prompt) == expected


def test_a_model_no_deeper_than_its_template_is_exported_whole(tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**SMALL, "num_hidden_layers": 3})
    _save(tmp_path / "hf", transformers.LlamaForCausalLM(config))
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    (note,) = program.diagnostics.by_rule("DO537")
    assert note.message.endswith("a template would hold all 3 layers.")


@pytest.mark.parametrize(
    ("build", "weight"),
    [
        (_qwen2, "self_attn.k_proj.bias"),  # packed with q and v's
        (_gemma3, "input_layernorm.weight"),  # folded into 1 + weight
        (_gemma3, "self_attn.q_norm.weight"),
    ],
    ids=["qwen2-bias", "gemma3-norm", "gemma3-q-norm"],
)
def test_a_nan_in_a_repeated_layers_folded_or_packed_weight_names_it(build, weight, tmp_path):
    """Layer 6 is no layer of Gemma 3's template (0-4), layer 4 none of Qwen2's (0-2):
    the values its small weight makes (packed, folded) are computed from its own tensor,
    whose NaN DO401 names."""
    torch.manual_seed(0)
    model = build()
    layer = model.config.num_hidden_layers - 1
    _save(tmp_path / "hf", model)
    state = safetensors.torch.load_file(tmp_path / "hf" / "model.safetensors")
    name = f"model.layers.{layer}.{weight}"
    state[name][0] = float("nan")
    safetensors.torch.save_file(state, tmp_path / "hf" / "model.safetensors", {"format": "pt"})
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    assert program.diagnostics.by_rule("DO536")
    (nan,) = program.diagnostics.by_rule("DO401")
    assert f"`{name}`" in nan.message
    assert nan.properties["count"] == 1


def test_a_nan_in_a_repeated_layer_names_that_layers_weight(tmp_path):
    """Layer 4 is no layer of the template (0, 1, 2): its weights are read through layer
    2's lazy tensors, redirected; DO401 names layer 4's weight, and the redirect holds in
    a thread that evaluates a weight (a writer may)."""
    torch.manual_seed(0)
    model = _llama()
    with torch.no_grad():
        model.model.layers[4].mlp.down_proj.weight[0, :3] = float("nan")
    _save(tmp_path / "hf", model)
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    _repeated(program, 5)
    (nan,) = program.diagnostics.by_rule("DO401")
    assert "`model.layers.4.mlp.down_proj.weight`" in nan.message
    assert nan.properties["count"] == 3
    stored = safetensors.torch.load_file(tmp_path / "hf" / "model.safetensors")
    tensor = program.model.graph.initializers["model.layers.3.mlp.down_proj.weight"].const_value
    got = {}
    worker = threading.Thread(target=lambda: got.setdefault("value", tensor.numpy()))
    worker.start()
    worker.join()
    want = stored["model.layers.3.mlp.down_proj.weight"].float().numpy()
    np.testing.assert_array_equal(got["value"], want)


def test_the_plain_sliding_fallback_goes_through_the_template(tmp_path):
    """Without fusions a sliding model is exported as the plain fallback (every layer its
    whole cache, the window in the mask): its template is made with whole windows too, its
    layers repeated, and the folder generates transformers' tokens."""
    torch.manual_seed(0)
    _save(tmp_path / "hf", _mistral())
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx", optimize=True)
    _repeated(program, 5)
    config = json.loads((tmp_path / "onnx" / "genai_config.json").read_text())
    assert config["model"]["decoder"]["num_hidden_layers"] == 5
    assert not [f for f in program.diagnostics.findings if f.level.name == "WARNING"]
    _, prompt, expected = _eager_tokens(tmp_path / "hf")
    assert _generate(tmp_path / "onnx", TEXT, prompt) == expected


def test_gpt_oss_goes_through_the_template(tmp_path, monkeypatch):
    """GPT-OSS's sinks and router weights are folded by the optimizer: each repeated
    layer computes its own, and the folder is the one the whole model's export writes (the
    template refused, as it was before), byte for byte; genai's tokens are transformers'."""
    torch.manual_seed(0)
    model = _gpt_oss()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("sinks"):
                parameter.normal_(0.0, 0.5)
    _save(tmp_path / "hf", model)
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    _repeated(program, 7, "0, 1, 2, 3, 4")
    _, prompt, expected = _eager_tokens(tmp_path / "hf")
    assert _generate(tmp_path / "onnx", TEXT, prompt) == expected
    monkeypatch.setattr(llm_template, "layer_template_of", lambda folder: "refused here")
    whole = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "whole")
    assert whole.diagnostics.by_rule("DO537")
    data = (tmp_path / "onnx" / "model.onnx.data").read_bytes()
    assert data == (tmp_path / "whole" / "model.onnx.data").read_bytes()
