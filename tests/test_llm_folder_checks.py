"""``export-llm`` makes folders true to the checkpoint, or refuses: a checkpoint missing a
tensor (DO513), an encoder or an encoder-decoder (DO507) are refused before anything is
written; genai_config.json keeps every end-of-sequence id and the generation config's
search; GPT-2 and Mixtral get the onnxruntime-genai type that runs them; the written folder
is checked by generating with onnxruntime-genai (DO514); a sliding-window model that is not
fused still makes a folder it runs, and a folder without its file is a warning (DO515)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import safetensors.torch
import tokenizers
import torch
import transformers

import dynamo_onnx
import hf_models
from cli_runner import run_cli
from dynamo_onnx.diagnostics import Level
from dynamo_onnx.integrations.transformers import genai, genai_types, hf_folder, streamed
from dynamo_onnx.integrations.transformers.checkpoint import key_report
from dynamo_onnx.io.checkpoint import open_checkpoint
from dynamo_onnx.llm_folder import FolderCheck, FolderCheckPass
from dynamo_onnx.passes.base import run_pipeline
from dynamo_onnx.reports import ReportingContext

og = pytest.importorskip("onnxruntime_genai")

PROMPT = [5, 17, 42, 8, 23]
#: A Llama of head size 16 (what GroupQueryAttention takes on the CPU), its LM head tied
#: to the embedding as many small checkpoints are; weights wide enough that its greedy
#: tokens are not one token repeated.
LLAMA = {
    **hf_models.DECODER,
    "hidden_size": 64,
    "tie_word_embeddings": True,
    "initializer_range": 0.5,
}


def _save(model: torch.nn.Module, path) -> None:
    model.save_pretrained(path)


def _greedy(model: torch.nn.Module, new: int = 8) -> list[int]:
    prompt = torch.tensor([PROMPT])
    out = model.generate(prompt, max_new_tokens=new, do_sample=False)
    return out[0, len(PROMPT) :].tolist()


def _genai_greedy(folder, new: int = 8) -> list[int]:
    """onnxruntime-genai's greedy tokens after PROMPT, up to ``new`` or an eos id."""
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + new, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray([PROMPT], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return generator.get_sequence(0)[len(PROMPT) :].tolist()


def _llama(**overrides) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA, **overrides)).eval()


# -- the load is checked -------------------------------------------------------------------


@pytest.fixture(scope="module")
def missing_tensor(tmp_path_factory):
    """A Llama checkpoint whose file lost one tensor."""
    path = tmp_path_factory.mktemp("missing")
    _save(_llama(), path)
    weights = safetensors.torch.load_file(path / "model.safetensors")
    del weights["model.layers.1.mlp.down_proj.weight"]
    safetensors.torch.save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


def test_a_checkpoint_missing_a_tensor_is_do513_naming_it_and_nothing_is_written(
    missing_tensor, tmp_path
):
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(missing_tensor), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == f"export-llm of {missing_tensor} failed: 1 error(s), 0 warning(s)\n"
    assert "[DO513 checkpoint-mismatch]" in proc.stderr
    assert "`model.layers.1.mlp.down_proj.weight`" in proc.stderr
    # the LM head tied to the embedding is filled on purpose: named as such, not missing
    assert "not counted: tied weights" in proc.stderr
    assert "`lm_head.weight` is `model.embed_tokens.weight`" in proc.stderr
    assert not out.exists()
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:  # the API says the same
        dynamo_onnx.export_llm(missing_tensor, out)
    assert info.value.rule_id == "DO513"
    assert "1 tensor(s) the model needs are not in it" in str(info.value)
    assert not out.exists()


def test_a_checkpoint_with_a_tensor_of_another_shape_is_do513(tmp_path):
    path = tmp_path / "hf"
    _save(_llama(), path)
    weights = safetensors.torch.load_file(path / "model.safetensors")
    weights["model.norm.weight"] = torch.ones(32)  # hidden size 64 in config.json
    safetensors.torch.save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export_llm(path, tmp_path / "out")
    assert info.value.rule_id == "DO513"
    assert "`model.norm.weight` (stored [32], model [64])" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_with_tensors_of_no_part_of_the_model_is_do513(tmp_path):
    """config.json edited to one layer beside the weights of two: the second layer's
    tensors would be dropped without a word."""
    path = tmp_path / "hf"
    _save(_llama(), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert "[DO513 checkpoint-mismatch]" in proc.stderr
    assert "9 tensor(s) in it belong to no part of the model" in proc.stderr
    assert "`model.layers.1.input_layernorm.weight`" in proc.stderr
    assert not (tmp_path / "out").exists()


def _bert(path):
    transformers.BertModel(transformers.BertConfig(**hf_models.ENCODER)).save_pretrained(path)
    return "BertLMHeadModel attends both ways"


def _headless_llama(path):
    config = transformers.LlamaConfig(**{**LLAMA, "tie_word_embeddings": False})
    transformers.LlamaModel(config).save_pretrained(path)
    return (
        "the checkpoint holds no LM head (`lm_head.weight` missing; it was saved from LlamaModel)"
    )


def _t5(path):
    config = transformers.T5Config(num_layers=1, num_heads=2, d_model=32, d_kv=16, d_ff=64)
    transformers.T5ForConditionalGeneration(config).save_pretrained(path)
    return "it is an encoder-decoder model (t5"


@pytest.mark.parametrize("make", [_bert, _headless_llama, _t5])
def test_a_folder_that_is_not_a_whole_decoder_is_do507_before_anything_is_written(make, tmp_path):
    path = tmp_path / "hf"
    cause = make(path)
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == f"export-llm of {path} failed: 1 error(s), 0 warning(s)\n"
    assert "[DO507 hf-folder-unusable]" in proc.stderr and cause in proc.stderr
    assert not out.exists()
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export_llm(path, out)
    assert info.value.rule_id == "DO507" and cause in str(info.value)
    assert not out.exists()


def _edit_checkpoint(path, edit) -> None:
    weights = safetensors.torch.load_file(path / "model.safetensors")
    edit(weights)
    safetensors.torch.save_file(weights, path / "model.safetensors", metadata={"format": "pt"})


def _without_a_tensor(path):
    _save(_llama(), path)
    _edit_checkpoint(path, lambda w: w.pop("model.layers.1.mlp.down_proj.weight"))


def _with_another_shape(path):
    _save(_llama(), path)
    _edit_checkpoint(path, lambda w: w.update({"model.norm.weight": torch.ones(32)}))


def _with_an_extra_layer(path):
    _save(_llama(), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))


def _refusal(load, path) -> tuple[str, str]:
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        load(ReportingContext(None, subject=str(path)), path)
    return info.value.rule_id, str(info.value)


@pytest.mark.parametrize(
    "make",
    [_without_a_tensor, _with_another_shape, _with_an_extra_layer, _bert, _headless_llama, _t5],
)
def test_the_streamed_load_refuses_a_folder_as_the_in_memory_load_does(make, tmp_path):
    """export-llm streams a safetensors checkpoint (issue 44) and loads other folders in
    memory: both refuse a folder with the same rule and the same words, the streamed one
    from the checkpoint's headers and the meta model alone."""
    path = tmp_path / "hf"
    make(path)
    assert open_checkpoint(path) is not None  # export_llm streams this folder
    streamed_refusal = _refusal(streamed.load_streamed, path)
    assert streamed_refusal == _refusal(hf_folder.load, path)
    assert streamed_refusal[0] in {"DO507", "DO513"}


def test_key_report_counts_a_tied_weight_only_when_its_source_is_missing_too():
    tied = {"lm_head.weight": "model.embed_tokens.weight"}
    report = key_report({"lm_head.weight"}, (), (), tied)
    assert report.problem is None and report.tied == tied
    report = key_report({"lm_head.weight", "model.embed_tokens.weight"}, (), (), tied)
    assert report.missing == {"lm_head.weight", "model.embed_tokens.weight"}
    report = key_report((), {"extra.weight"}, [("model.norm.weight", (32,), (64,))], {})
    assert report.mismatched == {"model.norm.weight": "(stored [32], model [64])"}
    assert "`extra.weight`" in report.problem and "`model.norm.weight`" in report.problem


def _a_load_that_warns(monkeypatch, loader: str) -> None:
    """The folder's loader records a warning in export_llm's context, as a family's loader
    may (today's only fail: DO507, DO513), then loads as it does."""
    import dynamo_onnx.llm_folder as llm_folder

    real = getattr(llm_folder, loader)

    def load(ctx, path):
        ctx.record(
            "weights-left-in-float", left=1, quantizable=2, precision="int4", names="lm_head"
        )
        return real(ctx, path)

    monkeypatch.setattr(llm_folder, loader, load)


@pytest.mark.parametrize("loader", ["load_streamed_folder", "load_folder"])
def test_a_warning_of_the_load_is_in_the_programs_record_and_the_sarif_on_success(
    loader, monkeypatch, tmp_path
):
    """export_llm loads the folder in a context of its own before the export opens the
    program's: what the load records joins the program's record (first, as it came first),
    its SARIF and the caller's warnings, from the API and from the command line."""
    path = tmp_path / "llama"
    _save(_llama(), path)
    if loader == "load_folder":  # a .bin checkpoint: loaded in memory, not streamed
        (path / "model.safetensors").unlink()
        torch.save(_llama().state_dict(), path / "pytorch_model.bin")
    _a_load_that_warns(monkeypatch, loader)
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="DO509"):
        program = dynamo_onnx.export_llm(path, tmp_path / "api", optimize=True)
    assert program.diagnostics.findings[0].rule.id == "DO509"
    assert program.diagnostics.success
    log = program.diagnostics.to_sarif()
    assert [r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "DO509"] == ["warning"]
    sarif = tmp_path / "llm.sarif"
    proc = run_cli(
        tmp_path, "export-llm", str(path), "-o", str(tmp_path / "cli"),
        "--optimize-for", "none", "--sarif", str(sarif),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    assert "DO509" in [r["ruleId"] for r in results]


# -- genai_config.json true to the checkpoint ----------------------------------------------


@pytest.fixture(scope="module")
def llama3_style(tmp_path_factory):
    """A Llama whose turn ends with either of two ids (the second one it generates greedily
    after PROMPT), with a generation config that samples."""
    tokens = _greedy(_llama())
    stop = tokens[3]
    # genai is done at once after a prompt ending in an eos id: none in the prompt
    assert tokens.index(stop) == 3 and stop not in PROMPT
    first = next(t for t in range(3, 100) if t not in tokens and t not in PROMPT)
    model = _llama(eos_token_id=[first, stop], bos_token_id=1, pad_token_id=0)
    path = tmp_path_factory.mktemp("llama3")
    _save(model, path)
    generation = transformers.GenerationConfig(
        do_sample=True,
        temperature=0.6,
        top_k=20,
        top_p=0.9,
        repetition_penalty=1.1,
        max_length=48,
        eos_token_id=[first, stop],
        bos_token_id=1,
        pad_token_id=0,
    )
    generation.save_pretrained(path)
    return path, model, [first, stop]


def test_genai_config_keeps_every_eos_id_and_the_generation_config(llama3_style, tmp_path):
    path, model, eos = llama3_style
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == eos
    assert config["model"]["bos_token_id"] == 1 and config["model"]["pad_token_id"] == 0
    search = config["search"]
    assert search["do_sample"] is True and search["max_length"] == 48
    assert (search["temperature"], search["top_k"], search["top_p"]) == (0.6, 20, 0.9)
    assert search["repetition_penalty"] == 1.1
    copied = (out / "generation_config.json").read_bytes()
    assert copied == (path / "generation_config.json").read_bytes()
    # greedy, both stop at the second end-of-turn id, as generate does
    eager = _greedy(model)
    assert eager[-1] == eos[1] and len(eager) == 4
    # genai ends its sequence before the eos id it stops at (search.cpp: done, not appended)
    assert _genai_greedy(out) == eager[:-1]


def test_export_llm_api_writes_the_same_genai_config(llama3_style, tmp_path):
    path, _, eos = llama3_style
    program = dynamo_onnx.export_llm(path, tmp_path, optimize=True)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    config = json.loads((tmp_path / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == eos and config["search"]["top_k"] == 20
    assert (tmp_path / "generation_config.json").is_file()


def test_program_save_writes_the_models_eos_ids_and_generation_config_too(tmp_path):
    """The other spelling: a model exported in memory and saved (no folder read), its
    generation config set by the user."""
    model = _llama(eos_token_id=[2, 7])
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.7
    program = dynamo_onnx.export(model, (), kwargs=hf_folder.example_inputs(model))
    program.save(tmp_path / "model.onnx")
    config = json.loads((tmp_path / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == [2, 7] and config["model"]["pad_token_id"] == 2
    assert config["search"]["do_sample"] is True and config["search"]["temperature"] == 0.7
    assert config["search"]["top_k"] == 100  # unset under sampling: no limit, as in transformers


def _tokenizer_with_a_pad() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer (no download) whose pad token is id 3."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3, "the": 4, "cat": 5}
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def test_a_pad_id_neither_config_gives_is_the_tokenizers(tmp_path):
    model = _llama()  # bos 1, eos 2, no pad id
    assert model.config.pad_token_id is None and model.generation_config.pad_token_id is None
    path = tmp_path / "hf"
    _save(model, path)
    _tokenizer_with_a_pad().save_pretrained(path)
    dynamo_onnx.export_llm(path, tmp_path / "out", optimize=True)
    config = json.loads((tmp_path / "out" / "genai_config.json").read_text())["model"]
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 3)
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_search_options_without_a_generation_config_are_greedy_over_the_context():
    options = genai.search_options(None, vocab_size=100, context=64)
    assert options["do_sample"] is False and options["top_k"] == 1
    assert options["max_length"] == 64
    sampling = transformers.GenerationConfig(do_sample=True)  # top_k unset: no limit
    assert genai.search_options(sampling, vocab_size=100, context=64)["top_k"] == 100


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [*genai_types.GENAI_TYPES.items(), ("mixtral", "decoder"), ("olmo2", "decoder")],
)
def test_every_genai_type_is_one_genai_knows(model_type, expected, tmp_path):
    """onnxruntime-genai takes the type (its model class is made, then fails on the missing
    model file, not on the type); the folders of each are generated in the tests named in
    genai_types' docstring and below."""
    assert genai_types.genai_type(model_type) == expected
    config = {
        "model": {
            "type": expected,
            "vocab_size": 100,
            "context_length": 64,
            "eos_token_id": 2,
            "pad_token_id": 2,
            "decoder": {
                "filename": "absent.onnx",
                "head_size": 16,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_hidden_layers": 1,
                "num_key_value_heads": 2,
                "inputs": {"input_ids": "input_ids"},
                "outputs": {"logits": "logits"},
            },
        },
        "search": {"max_length": 64},
    }
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(Exception) as info:  # genai raises its own types
        og.Model(str(tmp_path))
    assert "Unsupported model_type" not in str(info.value)


# -- families genai runs under another type ------------------------------------------------


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        vocab_size=100,
        n_positions=64,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=0.2,
    )
    return transformers.GPT2LMHeadModel(config)


def _mixtral() -> torch.nn.Module:
    config = transformers.MixtralConfig(
        **{**LLAMA, "use_cache": True}, num_local_experts=4, num_experts_per_tok=2
    )
    return transformers.MixtralForCausalLM(config)


@pytest.mark.parametrize("spelling", ["cli", "api"])
@pytest.mark.parametrize("make", [_gpt2, _mixtral])
def test_a_family_genai_types_otherwise_generates_transformers_greedy_tokens_in_genai(
    make, spelling, tmp_path
):
    """GPT-2 (genai's gpt2 type reads another cache) and Mixtral (no genai type) run as
    genai's generic decoder, which reads the names the exporter writes."""
    torch.manual_seed(0)
    model = make().eval()
    path, out = tmp_path / "hf", tmp_path / "out"
    _save(model, path)
    if spelling == "cli":
        proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        assert "0 error(s), 0 warning(s)" in proc.stdout
    else:
        program = dynamo_onnx.export_llm(path, out)
        assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    assert json.loads((out / "genai_config.json").read_text())["model"]["type"] == "decoder"
    eager = _greedy(model)
    assert len(set(eager)) > 1  # not one token repeated
    assert _genai_greedy(out) == eager


# -- the written folder is checked with onnxruntime-genai ---------------------------------


@pytest.fixture(scope="module")
def eos_outside_vocab(tmp_path_factory):
    """A tiny GPT-2 keeping GPT-2's ids (50256) in a vocabulary of 100: transformers runs
    it, onnxruntime-genai refuses the id."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=4, n_embd=64, vocab_size=100)
    path = tmp_path_factory.mktemp("gpt2")
    _save(transformers.GPT2LMHeadModel(config).eval(), path)
    return path


def test_a_folder_genai_cannot_run_is_do514_with_its_message(eos_outside_vocab, tmp_path):
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(eos_outside_vocab), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(f"export-llm of {eos_outside_vocab} failed: 1 error(s)")
    assert "[DO514 runtime-folder-check-failed] onnxruntime-genai could not generate" in (
        proc.stderr
    )
    assert "eos_token_id (50256) must be in range [0, 100)" in proc.stderr  # genai's own
    assert f"the ONNX model `{out / 'model.onnx'}` is kept" in proc.stderr
    assert (out / "model.onnx").is_file() and not (out / "genai_config.json").exists()


def test_a_folder_genai_cannot_run_raises_verification_error_from_the_api(
    eos_outside_vocab, tmp_path
):
    with pytest.raises(dynamo_onnx.VerificationError) as info:
        dynamo_onnx.export_llm(eos_outside_vocab, tmp_path, optimize=True)
    assert info.value.rule_id == "DO514" and "must be in range" in str(info.value)
    assert (tmp_path / "model.onnx").is_file()
    assert not (tmp_path / "genai_config.json").exists()


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.MistralConfig(**{**LLAMA, "sliding_window": 4})
    path = tmp_path_factory.mktemp("mistral")
    _save(transformers.MistralForCausalLM(config).eval(), path)
    return path


def test_a_sliding_window_model_exported_unfused_is_a_folder_genai_runs(mistral, tmp_path):
    """Unfused (``--optimize-for none``), a sliding layer keeps its whole cache in the
    plain model and the window is the mask's: genai_config.json is written, no warning,
    and onnxruntime-genai generates transformers' tokens past the window of 4."""
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(mistral), "-o", str(out), "--optimize-for", "none")
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout, proc.stdout + proc.stderr
    config = json.loads((out / genai.FILENAME).read_text())
    assert config["search"]["past_present_share_buffer"] is False
    model = transformers.MistralForCausalLM.from_pretrained(mistral).eval()
    new = 12  # 5 + 12 tokens: three times the window
    assert _genai_greedy(out, new) == _greedy(model, new)


def test_a_folder_without_the_runtimes_file_is_a_do515_warning(mistral, tmp_path):
    """What the folder check says when a family could not write the runtime's file (no
    transformers model reaches it today: a sliding layer has the plain fallback): a
    warning naming the folder and the family's reason."""
    out = tmp_path / "out"
    program = dynamo_onnx.export_llm(mistral, out, optimize=True)  # unfused, from the API
    assert not program.diagnostics.by_rule("DO515")
    (out / genai.FILENAME).unlink()
    saved = hf_folder.load(program.diagnostics, mistral)
    reasons = {genai.FILENAME: "the reason it was not written."}
    run_pipeline(program.diagnostics, [FolderCheckPass()], FolderCheck(out, saved, reasons))
    (finding,) = program.diagnostics.by_rule("DO515")
    assert finding.level == Level.WARNING
    assert "is not a folder onnxruntime-genai runs" in finding.message
    assert "genai_config.json is not written): the reason it was not written. The ONNX" in (
        finding.message
    )


# -- onnxruntime-genai not importable: the folder is written, and said to be unchecked -----


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    _save(_llama(), path)
    return path


def _not_installed(monkeypatch, tmp_path) -> None:
    """``import onnxruntime_genai`` fails as when it is not installed."""
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)


def _broken_wheel(monkeypatch, tmp_path) -> None:
    """The module is found but its import fails, as a wheel whose native library does not
    load: a look-up (``find_spec``) says it is there, only the import says it is not."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "onnxruntime_genai.py").write_text(
        "raise ImportError('libonnxruntime-genai.so: cannot open shared object file')\n"
    )
    monkeypatch.delitem(sys.modules, "onnxruntime_genai")
    monkeypatch.syspath_prepend(str(shadow))


@pytest.mark.parametrize("unimportable", [_not_installed, _broken_wheel])
def test_without_genai_the_cli_writes_the_folder_with_a_do516_warning_in_the_summary(
    unimportable, llama, tmp_path, monkeypatch
):
    unimportable(monkeypatch, tmp_path)
    out = tmp_path / "out"
    proc = run_cli(tmp_path, "export-llm", str(llama), "-o", str(out), "--sarif", "out.sarif")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s), 1 warning(s)" in proc.stdout, proc.stdout
    (line,) = [line for line in proc.stderr.splitlines() if "DO516" in line]
    assert "warning DO516 runtime-folder-unchecked" in line
    assert f"`{out}` was not checked with onnxruntime-genai: `import onnxruntime_genai` fails" in (
        line
    )
    # the folder is whole: only the check is missing
    assert (out / genai.FILENAME).is_file() and (out / "model.onnx").is_file()
    sarif = json.loads((tmp_path / "out.sarif").read_text())
    results = sarif["runs"][0]["results"]
    assert [r["level"] for r in results if r["ruleId"] == "DO516"] == ["warning"]


def test_without_genai_warnings_as_errors_exits_3_with_the_folder_written(
    llama, tmp_path, monkeypatch
):
    _not_installed(monkeypatch, tmp_path)
    out = tmp_path / "out"
    args = ("export-llm", str(llama), "-o", str(out), "--warnings-as-errors")
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "warnings are errors: 1 error(s), 0 warning(s)" in proc.stdout, proc.stdout
    assert (out / genai.FILENAME).is_file()


def test_without_genai_the_api_warns_do516_and_records_it(llama, tmp_path, monkeypatch):
    _not_installed(monkeypatch, tmp_path)
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="DO516"):
        program = dynamo_onnx.export_llm(llama, tmp_path, optimize=True)
    (finding,) = program.diagnostics.by_rule("DO516")
    assert finding.level == Level.WARNING
    assert "No module named" in finding.message or "halted" in finding.message
    assert [f.rule.id for f in program.diagnostics.findings if f.level >= Level.WARNING] == [
        "DO516"
    ]
