"""``dynamo-onnx export-llm HF_DIR -o OUT``: a folder ``save_pretrained`` wrote in, a folder
onnxruntime-genai runs out (model, external data, genai_config.json, the tokenizer), with
transformers' greedy tokens; a folder that is not a causal LM is DO507."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tokenizers
import torch
import transformers
from tokenizers import decoders, models, pre_tokenizers, trainers

import dynamo_onnx
import hf_models
from cli_runner import run_cli

og = pytest.importorskip("onnxruntime_genai")


def _tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here (no download), 60 tokens: within the
    small model's vocabulary of 100."""
    bpe = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["the cat sat on the mat", "a dog and a cat", "onnx runtime generates tokens"]
    trainer = trainers.BpeTrainer(vocab_size=100, special_tokens=["<unk>", "<s>", "</s>"])
    bpe.train_from_iterator(corpus * 20, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory):
    """A Llama of head size 16 (what GroupQueryAttention takes on the CPU; real ones have
    64 or 128) saved with its tokenizer."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**hf_models.DECODER, "hidden_size": 64})
    model = transformers.LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    tokenizer = _tokenizer()
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


def fresh_process(*args: str) -> subprocess.CompletedProcess:
    """``dynamo-onnx ARGS`` in a process of its own, for what only one shows: what reaches
    standard error from transformers' loading (its progress bar and logger)."""
    return subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )


def test_export_llm_writes_a_folder_genai_runs_with_transformers_greedy_tokens(
    saved_llama, tmp_path
):
    path, model, tokenizer = saved_llama
    out = tmp_path / "onnx"  # created by the command
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"exported {path} in ")
    assert "0 error(s), 0 warning(s)" in proc.stdout  # a clean Llama: no warning
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "genai_config.json",
        "generation_config.json",  # read into genai_config.json's search, and copied
        "model.onnx",
        "model.onnx.data",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert f"wrote {out}: {', '.join(files)}" in proc.stdout
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (path / name).read_bytes()
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["type"] == "llama"
    # fused for ONNX Runtime by default: one GroupQueryAttention per layer, one buffer
    assert _ops(out)["GroupQueryAttention"] == model.config.num_hidden_layers
    assert config["search"]["past_present_share_buffer"] is True

    text = "the cat sat on a mat"
    prompt = tokenizer(text, return_tensors="pt")["input_ids"]
    eager = model.generate(prompt, max_new_tokens=8, do_sample=False)[0, prompt.shape[1] :]
    assert _generate(out, text, prompt) == eager.tolist()  # both stop at the same end, if any

    # --optimize-for none: the plain model, which generates the same
    plain = tmp_path / "plain"
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(plain), "--optimize-for", "none")
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout
    assert _ops(plain)["GroupQueryAttention"] == 0 and _ops(plain)["Softmax"] == 2
    assert (
        json.loads((plain / "genai_config.json").read_text())["search"].get(
            "past_present_share_buffer", False
        )
        is False
    )
    assert _generate(plain, text, prompt) == eager.tolist()


def _ops(folder) -> collections.Counter:
    graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    return collections.Counter(n.op_type for n in graph.node)


def _generate(folder, text, prompt) -> list[int]:
    """onnxruntime-genai's greedy tokens after ``prompt`` (its tokenizer agreeing)."""
    genai_model = og.Model(str(folder))
    assert og.Tokenizer(genai_model).encode(text).tolist() == prompt[0].tolist()
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=prompt.shape[1] + 8, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(prompt.numpy().astype(np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return generator.get_sequence(0)[prompt.shape[1] :].tolist()


def _not_a_causal_lm(path):
    transformers.ViTConfig(hidden_size=32, num_hidden_layers=1).save_pretrained(path)
    return "Unrecognized configuration class"


def _config_without_weights(path):
    transformers.LlamaConfig(**hf_models.DECODER).save_pretrained(path)
    return "no file named model.safetensors"


def _empty(path):
    path.mkdir()
    return "it has no config.json (it holds nothing)"


def _a_file(path):
    path.write_text("{}")
    return "it is a file, not a folder"


def _missing(path):
    return "it does not exist"


@pytest.mark.parametrize(
    "make", [_missing, _a_file, _empty, _config_without_weights, _not_a_causal_lm]
)
def test_a_folder_that_is_not_a_causal_lm_is_do507_with_transformers_reason(make, tmp_path):
    path = tmp_path / "hf"
    cause = make(path)
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr  # the user's mistake: a usage error
    assert proc.stdout == f"export-llm of {path} failed: 1 error(s), 0 warning(s)\n"
    assert f"[DO507 hf-folder-unusable] `{path}` is not a Hugging Face causal LM folder " in (
        proc.stderr
    )
    assert cause in proc.stderr and "Traceback" not in proc.stderr
    assert "Fix: Give the folder save_pretrained wrote" in proc.stderr
    assert not (tmp_path / "out").exists()
    verbosity = transformers.utils.logging.get_verbosity()
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:  # the API says the same
        dynamo_onnx.export_llm(path, tmp_path / "out")
    assert str(info.value).startswith("[DO507 hf-folder-unusable]") and cause in str(info.value)
    assert transformers.utils.logging.get_verbosity() == verbosity  # quiet while loading only


def test_a_bad_precision_fails_before_the_model_is_loaded(tmp_path):
    proc = run_cli(
        tmp_path, "export-llm", str(tmp_path), "-o", str(tmp_path / "o"), "--precision", "int3"
    )
    assert proc.returncode == 2 and "invalid choice: 'int3'" in proc.stderr  # argparse's
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export_llm(tmp_path / "missing", tmp_path / "o", precision="int3")
    assert str(info.value).startswith("[DO109 invalid-option] `precision` is 'int3'")


def test_export_llm_optimized_for_onnxruntime_in_int4_is_one_gqa_per_layer_genai_runs(
    tmp_path,
):
    """``--optimize-for onnxruntime --precision int4``, as the builder's int4 folder: one
    GroupQueryAttention per layer (a head size of 16, which GQA takes on the CPU), every
    weight MatMul a MatMulNBits, past and present sharing one buffer, and onnxruntime-genai
    generates from it; a runtime this version does not know is DO109 before any loading."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**hf_models.DECODER, "hidden_size": 64})
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "hf")
    _tokenizer().save_pretrained(tmp_path / "hf")
    out = tmp_path / "onnx"
    proc = run_cli(
        tmp_path, "export-llm", str(tmp_path / "hf"), "-o", str(out),
        "--optimize-for", "onnxruntime", "--precision", "int4",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    ops = collections.Counter(n.op_type for n in graph.node)
    layers = config.num_hidden_layers
    assert ops["GroupQueryAttention"] == layers, ops
    assert ops["MatMulNBits"] == 4 * layers + 1, ops  # qkv, o, gate_up, down (packed); lm_head
    genai = json.loads((out / "genai_config.json").read_text())
    assert genai["search"]["past_present_share_buffer"] is True
    genai_model = og.Model(str(out))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=12, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(np.array([[1, 5, 9, 2]], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    assert len(generator.get_sequence(0)) == 12

    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "o", optimize="tensorrt")
    assert str(info.value).startswith("[DO109 invalid-option] `optimize` is 'tensorrt'")
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def llama_with_a_nan(tmp_path_factory):
    """A Llama saved with a NaN in one weight (a fine-tune gone wrong), and a config whose
    beginning-of-sequence id is outside its vocabulary (transformers warns while loading
    it; onnxruntime-genai checks only end-of-sequence ids, so the folder still runs)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        **{**hf_models.DECODER, "hidden_size": 64}, bos_token_id=500, eos_token_id=2
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    path = tmp_path_factory.mktemp("nan_llama")
    model.save_pretrained(path)
    return path


def test_export_llm_writes_the_reports_and_gates_on_warnings_with_the_folder_written(
    llama_with_a_nan, tmp_path
):
    """``--sarif``/``--report``/``--warnings-as-errors`` as ``export`` takes them: exit 3, the
    folder written all the same, both reports with the warning as an error; without the
    gate, exit 0 and the warning listed. transformers' own remarks and progress bar while
    loading are not printed (a fresh process: transformers' handler holds the real
    stderr)."""
    out, sarif, report = tmp_path / "gated", tmp_path / "llm.sarif", tmp_path / "llm.md"
    proc = fresh_process(  # transformers' own handler writes to the real stderr
        "export-llm", str(llama_with_a_nan), "-o", str(out),
        "--sarif", str(sarif), "--report", str(report), "--warnings-as-errors",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    first, folder = proc.stdout.splitlines()
    assert first == (
        f"exported {llama_with_a_nan}, but warnings are errors: 1 error(s), 0 warning(s); "
        f"wrote SARIF {sarif}, report {report}"
    )
    # the weights written and the peak memory of the streamed save (issue 44)
    files = f"wrote {out}: genai_config.json, generation_config.json, model.onnx, model.onnx.data"
    assert re.fullmatch(
        re.escape(files) + r" \(\d+\.\d\d GB of weights, peak memory \d+\.\d\d GB\)", folder
    )
    assert "[DO401 non-finite-weights]" in proc.stderr
    assert "[transformers]" not in proc.stderr and "vocabulary" not in proc.stderr
    assert "Loading weights" not in proc.stderr  # transformers' progress bar is not ours
    log = json.loads(sarif.read_text())
    from dynamo_onnx.reports import sarif as sarif_module

    sarif_module.validate(log)
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DO401"]
    assert result["level"] == "error"  # a warning made an error by the gate
    assert "down_proj" in result["message"]["text"]
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    text = report.read_text()
    assert "DO401" in text and "warnings as errors" in text
    ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])  # loads

    proc = run_cli(
        tmp_path, "export-llm", str(llama_with_a_nan), "-o", str(tmp_path / "plain"), "--quiet"
    )
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 1 warning(s)" in proc.stdout
    assert "  warning DO401 non-finite-weights " in proc.stderr


def test_export_llm_under_warnings_as_errors_raises_after_writing_the_folder(
    llama_with_a_nan, tmp_path
):
    """The API's spelling of ``--warnings-as-errors``: the error comes after the folder is
    written, with the program, whose diagnostics hold the warning as an error."""
    out = tmp_path / "api"
    gate = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)
    with pytest.raises(dynamo_onnx.WarningsAsErrorsError) as info:
        dynamo_onnx.export_llm(llama_with_a_nan, out, diagnostic_options=gate)
    assert str(info.value).startswith("[DO401 non-finite-weights]")
    assert info.value.program.diagnostics.by_rule("DO401")
    assert sorted(p.name for p in out.iterdir()) == [
        "genai_config.json",
        "generation_config.json",
        "model.onnx",
        "model.onnx.data",
    ]


def test_a_failed_export_llm_still_writes_the_reports(tmp_path):
    """DO507 (no model in the folder): exit 2, and the SARIF log and the report asked for
    say so, as for any failed export."""
    sarif, report = tmp_path / "f.sarif", tmp_path / "f.md"
    empty = tmp_path / "hf"
    empty.mkdir()
    proc = run_cli(
        tmp_path, "export-llm", str(empty), "-o", str(tmp_path / "out"),
        "--sarif", str(sarif), "--report", str(report),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.startswith(f"export-llm of {empty} failed: 1 error(s), 0 warning(s); ")
    log = json.loads(sarif.read_text())
    assert [r["ruleId"] for r in log["runs"][0]["results"] if r["level"] == "error"] == ["DO507"]
    assert "DO507" in report.read_text()
    assert not (tmp_path / "out").exists()


def test_transformers_loads_the_folder_as_saved(saved_llama):
    """The fixture's folder is what the tests above mean by one: the model reloads equal."""
    path, model, _ = saved_llama
    again = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    ids = torch.randint(3, 100, (1, 5))
    torch.testing.assert_close(again(ids).logits, model(ids).logits)
