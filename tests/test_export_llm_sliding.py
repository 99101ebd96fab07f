"""``export-llm`` on folders of models with sliding windows (Mistral, Gemma 2, Gemma 3, Qwen2
with ``use_sliding_window``): each sliding layer one GroupQueryAttention with its
``local_window_size``, ``genai_config.json`` written, and onnxruntime-genai generating
transformers' greedy tokens after a prompt longer than the window; in int4 the folder loads
and generates. The example step crosses the window, whatever its size (a window of 8, just
above the default example's 7 tokens, included)."""

from __future__ import annotations

import collections
import json
import warnings

import numpy as np
import onnx
import pytest
import torch
import transformers

import dynamo_onnx
import hf_models
from cli_runner import run_cli

og = pytest.importorskip("onnxruntime_genai")

#: hf_models' decoder with a head size of 16 (what GroupQueryAttention takes on the CPU).
DECODER = {**hf_models.DECODER, "hidden_size": 64, "intermediate_size": 128, "use_cache": True}
#: The test window: real configs have 4096 (Mistral, Gemma 2) or 512 (Gemma 3).
WINDOW = 16
#: A prompt longer than the window twice over, and the greedy tokens after it.
PROMPT, NEW = 40, 10


def _model(name: str, window: int = WINDOW) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    if name == "mistral":
        config = transformers.MistralConfig(**DECODER, sliding_window=window)
        return transformers.MistralForCausalLM(config).eval()
    if name == "gemma2":  # sliding then full, with the attention's soft cap
        config = transformers.Gemma2Config(**DECODER, head_dim=16, sliding_window=window)
        return transformers.Gemma2ForCausalLM(config).eval()
    if name == "gemma3":
        layers = ["sliding_attention", "full_attention"]
        config = transformers.Gemma3TextConfig(
            **DECODER, head_dim=16, sliding_window=window, layer_types=layers
        )
        return transformers.Gemma3ForCausalLM(config).eval()
    if name == "gpt_oss":  # attention sinks (which GroupQueryAttention does not take here)
        config = transformers.GptOssConfig(
            **DECODER,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=window,
            layer_types=["sliding_attention", "full_attention"],
        )
        return transformers.GptOssForCausalLM(config).eval()
    assert name == "qwen2", name
    config = transformers.Qwen2Config(
        **DECODER, use_sliding_window=True, sliding_window=window, max_window_layers=0
    )
    return transformers.Qwen2ForCausalLM(config).eval()


def _sliding(model: transformers.PreTrainedModel) -> list[bool]:
    cache = transformers.DynamicCache(config=model.config)
    return [getattr(layer, "is_sliding", False) for layer in cache.layers]


def _export(name, model, tmp_path, how: str, *options: str):
    """The saved folder of ``model`` through ``export-llm`` (the command or the function);
    the output folder."""
    source, out = tmp_path / name, tmp_path / f"{name}-onnx"
    model.save_pretrained(source)
    if how == "cli":
        proc = run_cli(tmp_path, "export-llm", str(source), "-o", str(out), *options)
        assert proc.returncode == 0, proc.stderr
        assert "0 error(s), 0 warning(s)" in proc.stdout, proc.stdout
    else:
        precision = options[1] if options else "fp32"
        program = dynamo_onnx.export_llm(source, out, precision=precision)
        ids = [f.rule.id for f in program.diagnostics.findings]
        assert "DO415" not in ids and "DO503" not in ids, ids
    return out


def _gqa_attribute(folder, name: str, default: float) -> list[float]:
    """``name`` of each GroupQueryAttention of the folder's model, in node order."""
    graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    found = []
    for node in graph.node:
        if node.op_type == "GroupQueryAttention":
            attribute = next((a for a in node.attribute if a.name == name), None)
            found.append(
                default if attribute is None else onnx.helper.get_attribute_value(attribute)
            )
    return found


def _ops(folder) -> collections.Counter:
    graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    return collections.Counter(n.op_type for n in graph.node)


def _prompt() -> torch.Tensor:
    torch.manual_seed(3)
    return torch.randint(1, DECODER["vocab_size"], (1, PROMPT))


def _greedy(model, prompt: torch.Tensor) -> np.ndarray:
    ones = torch.ones_like(prompt)
    tokens = model.generate(
        prompt, attention_mask=ones, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
    )
    return tokens[0].numpy()


def _genai(folder, prompt: torch.Tensor) -> np.ndarray:
    genai_model = og.Model(str(folder))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=prompt.shape[1] + NEW, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(prompt.numpy().astype(np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return np.asarray(generator.get_sequence(0))


@pytest.mark.parametrize(
    ("name", "how", "window"),
    [
        ("mistral", "cli", WINDOW),
        ("gemma2", "api", WINDOW),
        ("gemma3", "cli", WINDOW),
        ("qwen2", "api", WINDOW),
        # just above the default example step's 4 + 3 tokens: traced below its window, the
        # model ran at a total of 7 tokens only
        ("mistral", "api", 8),
    ],
)
def test_sliding_layers_fuse_with_their_window_and_genai_generates_transformers_tokens(
    name, how, window, tmp_path
):
    model = _model(name, window)
    out = _export(name, model, tmp_path, how)
    assert _gqa_attribute(out, "local_window_size", -1) == [
        window if s else -1 for s in _sliding(model)
    ]
    # Gemma 2's soft-capped scores: GroupQueryAttention's softcap, in every layer
    cap = getattr(model.config, "attn_logit_softcapping", None) or 0.0
    assert _gqa_attribute(out, "softcap", 0.0) == [cap] * len(_sliding(model))
    assert (cap > 0) == (name == "gemma2")
    config = json.loads((out / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    prompt = _prompt()
    eager = _greedy(model, prompt)
    assert eager.shape[0] == PROMPT + NEW > 2 * window
    np.testing.assert_array_equal(_genai(out, prompt), eager)


@pytest.mark.parametrize(
    ("name", "how"), [("gemma2", "cli"), ("mistral", "api"), ("gemma3", "cli")]
)
def test_an_int4_sliding_folder_loads_and_generates(name, how, tmp_path):
    model = _model(name)
    out = _export(name, model, tmp_path, how, "--precision", "int4")
    ops = _ops(out)
    assert ops["MatMulNBits"] > 0 and ops["GroupQueryAttention"] == len(_sliding(model)), ops
    assert len(_genai(out, _prompt())) == PROMPT + NEW


def _genai_config(folder) -> dict:
    return json.loads((folder / "genai_config.json").read_text())


def _unfused_at_their_lines(program, module_file: str, reason: str) -> None:
    """Each unfused attention a DO503/DO511 at its line in ``module_file``, saying
    ``reason``; no DO415/DO515 (the folder is one genai runs)."""
    ids = [f.rule.id for f in program.diagnostics.findings]
    assert "DO415" not in ids and "DO515" not in ids, ids
    unfused = [f for f in program.diagnostics.findings if f.rule.id in ("DO503", "DO511")]
    assert unfused
    for finding in unfused:
        assert reason in finding.message, finding.message
        assert finding.locations[0].path.endswith(module_file)


def test_sliding_layers_gqa_cannot_take_still_make_a_folder_genai_runs(tmp_path):
    """A head size of 8 (GroupQueryAttention takes multiples of 16): the sliding attentions
    stay unfused, each a finding at its line with the reason, and the folder is the plain
    fallback, every layer's cache whole and the window the mask's: onnxruntime-genai runs
    it and generates transformers' tokens past the window."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        **{**hf_models.DECODER, "use_cache": True}, sliding_window=WINDOW
    )
    model = transformers.MistralForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "hf")
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "onnx")
    _unfused_at_their_lines(program, "modeling_mistral.py", "The head size is 8")
    assert len(program.diagnostics.by_rule("DO503") + program.diagnostics.by_rule("DO511")) == 2
    out = tmp_path / "onnx"
    assert _genai_config(out)["search"]["past_present_share_buffer"] is False
    assert _ops(out)["GroupQueryAttention"] == 0
    prompt = _prompt()
    np.testing.assert_array_equal(_genai(out, prompt), _greedy(model, prompt))


@pytest.mark.parametrize("how", ["cli", "api"])
def test_gpt_oss_sinks_unfused_still_make_a_folder_genai_runs_past_its_window(how, tmp_path):
    """GPT-OSS: its attention sinks keep GroupQueryAttention out (DO503 at the attention's
    line), and its sliding layer (window 16, layer 0) keeps its whole cache in the plain
    model: genai_config.json is written (the ``decoder`` type, no shared buffer) and
    onnxruntime-genai generates transformers' greedy tokens after a 40-token prompt."""
    model = _model("gpt_oss")
    source, out = tmp_path / "hf", tmp_path / "onnx"
    model.save_pretrained(source)
    if how == "cli":
        proc = run_cli(tmp_path, "export-llm", str(source), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        assert "DO503" in proc.stderr and "DO515" not in proc.stderr, proc.stderr
        assert "modeling_gpt_oss.py" in proc.stderr
    else:
        with warnings.catch_warnings(record=True) as issued:
            warnings.simplefilter("always")
            program = dynamo_onnx.export_llm(source, out)
        _unfused_at_their_lines(program, "modeling_gpt_oss.py", "is not fused")
        # the Python warnings are those of the folder's model, not also the fused try's
        shown = [str(w.message) for w in issued if "DO503" in str(w.message)]
        assert len(shown) == len(program.diagnostics.by_rule("DO503")) == 2, shown
    config = _genai_config(out)
    assert config["model"]["type"] == "decoder"
    assert config["search"]["past_present_share_buffer"] is False
    inputs = onnx.load(out / "model.onnx", load_external_data=False).graph.input
    lengths = {
        i.name: i.type.tensor_type.shape.dim[2].dim_param for i in inputs if "past" in i.name
    }
    assert len(set(lengths.values())) == 1, lengths  # the sliding layer's past is whole
    prompt = _prompt()
    eager = _greedy(model, prompt)
    assert eager.shape[0] == PROMPT + NEW > 2 * WINDOW
    np.testing.assert_array_equal(_genai(out, prompt), eager)


def test_a_window_longer_than_the_context_still_makes_a_folder_genai_runs(tmp_path):
    """A window of 100 in a model of 64 positions: the example step crosses the window all
    the same (past the context), and the runtime check after writing asks for one token
    after a short prompt, not after the example's 102 tokens (beyond genai's context)."""
    model = _model("mistral", 100)
    assert model.config.max_position_embeddings == 64
    out = _export("mistral", model, tmp_path, "api")
    assert _gqa_attribute(out, "local_window_size", -1) == [100, 100]
    prompt = _prompt()
    np.testing.assert_array_equal(_genai(out, prompt), _greedy(model, prompt))
