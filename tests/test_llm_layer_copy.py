"""export-llm's checks after a streamed save run on a layer copy when the whole folder would
cost more memory than the export (issue 44): the copy keeps the first layer of each kind and
the checkpoint's tensors for them; onnxruntime-genai checks it (DO533, its failure the
folder's DO514), and it is compared with eager transformers (DO534)."""

from __future__ import annotations

import json
import re
import threading
import warnings

import numpy as np
import pytest
import torch
import transformers

import dynamo_onnx
import dynamo_onnx.llm_copy
import hf_models
from cli_runner import run_cli
from dynamo_onnx.diagnostics import Level
from dynamo_onnx.integrations import layer_copy_of, load_streamed_folder
from dynamo_onnx.llm_copy import checks_a_copy
from dynamo_onnx.reports import ReportingContext
from test_export_llm_cli import _generate, _tokenizer

og = pytest.importorskip("onnxruntime_genai")

#: A decoder with a GroupQueryAttention head size (16) onnxruntime-genai runs on the CPU.
SMALL = {**hf_models.DECODER, "hidden_size": 64}


def _save(path, model) -> None:
    model.eval().to(torch.bfloat16).save_pretrained(path)
    _tokenizer().save_pretrained(path)


def _streamed(path):
    folder = load_streamed_folder(ReportingContext(subject=str(path)), path)
    assert folder is not None
    return folder


def test_the_decision_is_the_weights_against_the_room_under_the_peak():
    gb = 10**9
    # 0.49B fp32 measured: 1.97 GB of weights, 0.57 GB held after a save that peaked at
    # 0.98; a one-layer copy holds 0.70 GB in float32
    assert checks_a_copy(int(1.97 * gb), int(0.70 * gb), int(0.98 * gb), int(0.57 * gb))
    assert not checks_a_copy(int(0.3 * gb), int(0.1 * gb), int(0.98 * gb), int(0.57 * gb))
    assert checks_a_copy(int(1.1 * gb), int(0.7 * gb), gb, None)  # resident unknown
    # the int4 folder (0.53 GB) holds less than its copy in float32: checked whole
    assert not checks_a_copy(int(0.53 * gb), int(0.70 * gb), int(1.12 * gb), int(0.6 * gb))


def _llama(layers):
    config = transformers.LlamaConfig(**{**SMALL, "num_hidden_layers": layers})
    return transformers.LlamaForCausalLM(config)


def _gemma3():
    """Five sliding layers then a full one: the copy keeps layers 0 and 5, not 0-5."""
    config = transformers.Gemma3TextConfig(
        **{**SMALL, "num_hidden_layers": 7}, head_dim=16, sliding_window=4
    )
    return transformers.Gemma3ForCausalLM(config)


def _llama4():
    """Mixture-of-experts every second layer (``moe_layers``, an index list) and no rotary
    every fourth (``no_rope_layers``, one entry per layer): a copy of layers 0, 1 and 3
    would make its third layer dense, so the copy is layers 0-3 of 8."""
    config = transformers.Llama4TextConfig(
        **{**SMALL, "num_hidden_layers": 8},
        head_dim=16,
        intermediate_size_mlp=64,
        num_local_experts=2,
        interleave_moe_layer_step=2,
    )
    return transformers.Llama4ForCausalLM(config)


@pytest.mark.parametrize(
    ("build", "kept", "layer_types"),
    [
        (lambda: _llama(3), (0,), None),
        (_gemma3, (0, 5), ["sliding_attention", "full_attention"]),
        (_llama4, (0, 1, 2, 3), None),
    ],
    ids=["llama", "gemma3", "llama4"],
)
def test_the_copy_keeps_the_first_layer_of_each_kind(build, kept, layer_types, tmp_path):
    torch.manual_seed(0)
    model = build()
    _save(tmp_path, model)
    folder = _streamed(tmp_path)
    copy_of = layer_copy_of(folder)
    assert copy_of.kept == kept and copy_of.layers == model.config.num_hidden_layers
    config = copy_of.folder.model.config
    assert config.num_hidden_layers == len(kept)
    copied = sum(p.numel() for p in copy_of.folder.model.parameters())
    assert copy_of.float32_bytes == 4 * copied < 4 * sum(p.numel() for p in model.parameters())
    if layer_types is not None:
        assert config.layer_types == layer_types
    # the copy's layer i reads the model's layer kept[i]
    checkpoint, sources = copy_of.folder.checkpoint, copy_of.folder.sources
    for i, layer in enumerate(kept):
        read = checkpoint.stored(sources[f"model.layers.{i}.self_attn.o_proj.weight"])
        assert read.name == f"model.layers.{layer}.self_attn.o_proj.weight"
    # the head too (tied in Gemma 3: the embedding's tensor)
    assert checkpoint.stored(sources["lm_head.weight"]).name == folder.sources["lm_head.weight"]


def test_a_one_layer_model_has_no_copy(tmp_path):
    _save(tmp_path, _llama(1))
    assert layer_copy_of(_streamed(tmp_path)) is None


@pytest.fixture
def copy_checked(monkeypatch):
    """The copy taken whatever the size: a tiny checkpoint's folder is checked whole."""
    monkeypatch.setattr(dynamo_onnx.llm_copy, "checks_a_copy", lambda *sizes: True)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama")
    _save(path, _llama(3))
    return path


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_the_folder_is_checked_on_a_copy_and_compared_with_eager(
    llama, tmp_path, copy_checked, precision
):
    out = tmp_path / "out"
    program = dynamo_onnx.export_llm(llama, out, precision=precision)
    (note,) = program.diagnostics.by_rule("DO533")
    assert note.properties["kept"] == 1 and note.properties["layers"] == 3
    assert note.properties["precision"] == precision
    assert "checked on a copy with 1 of the model's 3 layers (layers 0)" in note.message
    (match,) = program.diagnostics.by_rule("DO534")
    assert match.properties["count"] == 3  # logits, layer 0's present key and value
    assert match.properties["max_abs"] < 1e-4
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    assert not list(out.glob(".layer_copy_*"))  # the copy's folder, beside it, is removed
    assert (
        json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["num_hidden_layers"]
        == 3
    )  # the folder is the whole model's
    if precision == "fp32":
        eager = transformers.AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32)
        text = "the cat sat on the mat"
        prompt = transformers.AutoTokenizer.from_pretrained(llama)(text, return_tensors="pt")
        ids = prompt["input_ids"]
        expected = eager.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :]
        assert _generate(out, text, ids) == expected.tolist()


def test_without_a_copy_the_whole_folder_is_checked(llama, tmp_path):
    """A tiny checkpoint's weights fit under the export's peak: no copy, no note."""
    program = dynamo_onnx.export_llm(llama, tmp_path / "out")
    assert not program.diagnostics.by_rule("DO533")
    assert not program.diagnostics.by_rule("DO534")


def test_the_copy_genai_cannot_run_is_the_folders_do514(tmp_path, copy_checked):
    """An end id outside the vocabulary: transformers runs the model, onnxruntime-genai
    refuses the copy's folder, and the folder written loses its genai_config.json."""
    torch.manual_seed(0)
    model = _llama(3)
    model.config.eos_token_id = 5000
    model.generation_config.eos_token_id = 5000
    _save(tmp_path / "hf", model)
    out = tmp_path / "out"
    with pytest.raises(dynamo_onnx.VerificationError) as info:
        dynamo_onnx.export_llm(tmp_path / "hf", out)
    assert info.value.rule_id == "DO514"
    message = str(info.value)
    assert f"onnxruntime-genai could not generate from `{out}`" in message
    assert "eos_token_id (5000) must be in range [0, 100)" in message
    assert (out / "model.onnx").is_file() and not (out / "genai_config.json").exists()
    assert not list(out.glob(".layer_copy_*"))
    rules = [f.rule.id for f in info.value.diagnostics.findings]
    assert rules.index("DO533") < rules.index("DO514")


def test_a_sliding_and_a_full_layer_are_copied_and_match_eager(tmp_path, copy_checked):
    """Gemma 2 alternates sliding and full layers: the copy keeps one of each, exported and
    compared as the model was (its sliding layer's window in the fused attention)."""
    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        **{**SMALL, "num_hidden_layers": 3}, head_dim=16, sliding_window=4
    )
    _save(tmp_path / "hf", transformers.Gemma2ForCausalLM(config))
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "out")
    (note,) = program.diagnostics.by_rule("DO533")
    assert (note.properties["kept"], note.properties["indices"]) == (2, "0, 1")
    (match,) = program.diagnostics.by_rule("DO534")
    assert match.properties["count"] == 1 + 2 * 2  # logits, each layer's key and value
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]


def _held(model) -> dict[torch.dtype, int]:
    """Bytes of the model's tensors by dtype (a shared one once)."""
    seen, held = set(), {}
    for t in [*model.parameters(), *model.buffers()]:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            held[t.dtype] = held.get(t.dtype, 0) + t.numel() * t.element_size()
    return held


@pytest.mark.parametrize(
    ("dtype", "tied"),
    [
        (torch.bfloat16, False),
        (torch.bfloat16, True),
        (torch.float16, False),
        (torch.float32, False),
    ],
    ids=["bf16", "bf16-tied", "fp16", "fp32"],
)
def test_the_eager_copy_keeps_a_16_bit_vocabulary_and_gives_the_float32_logits(
    tmp_path, monkeypatch, dtype, tied
):
    """Issue 44's int4 peak: the eager twin's embedding and head stay as the checkpoint
    stores them (16-bit) and are widened where used; its outputs are the float32 twin's."""
    from dynamo_onnx.integrations.transformers import narrow_vocab

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        **{**SMALL, "num_hidden_layers": 3, "vocab_size": 5000}, tie_word_embeddings=tied
    )
    model = transformers.LlamaForCausalLM(config)
    model.eval().to(dtype).save_pretrained(tmp_path)
    copy_of = layer_copy_of(_streamed(tmp_path))
    monkeypatch.setattr(narrow_vocab, "HEAD_ROWS", 1024)  # several chunks of the 5000 rows
    eager = dynamo_onnx.integrations.layer_copy_to_eager(copy_of, False)
    monkeypatch.setattr(narrow_vocab, "NARROW_DTYPES", ())  # the float32 twin
    wide = dynamo_onnx.integrations.layer_copy_to_eager(copy_of, False)
    matrix = 5000 * 64
    if dtype == torch.float32:
        assert _held(eager.model) == _held(wide.model)
    else:
        assert _held(eager.model)[dtype] == matrix * 2 * (1 if tied else 2)
        assert _held(eager.model)[torch.float32] == _held(wide.model)[
            torch.float32
        ] - matrix * 4 * (1 if tied else 2)
        assert eager.model.dtype == torch.float32
    got = dynamo_onnx.llm_copy._eager_outputs(eager.model, eager.inputs)
    expected = dynamo_onnx.llm_copy._eager_outputs(wide.model, wide.inputs)
    assert got.logits.dtype == torch.float32 and got.logits.shape[-1] == 5000
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
    for a, b in zip(got.past_key_values.layers, expected.past_key_values.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def _peak_in(line: str) -> float:
    return float(re.search(r"peak memory (\d+\.\d\d) GB", line).group(1))


@pytest.fixture
def check_holds_more(monkeypatch):
    """The runtime's check of the folder (or of its copy) holds, while it runs, 100 MB more
    than the command's peak so far: what a check of a large folder does."""
    from dynamo_onnx import llm_folder
    from dynamo_onnx.llm_copy import resident_bytes
    from dynamo_onnx.llm_stream import peak_rss_bytes

    check = llm_folder.FolderCheckPass.__call__

    def holding(self, ctx, request):
        held = torch.ones((peak_rss_bytes() - resident_bytes() + 100_000_000) // 4)
        try:
            return check(self, ctx, request)
        finally:
            del held

    monkeypatch.setattr(llm_folder.FolderCheckPass, "__call__", holding)


@pytest.mark.parametrize("on_copy", [True, False], ids=["copy", "whole"])
def test_the_command_gives_its_peak_after_the_checks_and_the_copys_notes(
    llama, tmp_path, monkeypatch, check_holds_more, on_copy
):
    """``dynamo-onnx export-llm``: the copy's checks (forced here: a tiny folder is checked
    whole) are DO533 and DO534 in the SARIF; the summary line and the SARIF invocation give
    the peak after the runtime's check, above the save's in DO532, copy or not."""
    if on_copy:
        monkeypatch.setattr(dynamo_onnx.llm_copy, "checks_a_copy", lambda *sizes: True)
    out, sarif = tmp_path / "out", tmp_path / "llm.sarif"
    proc = run_cli(tmp_path, "export-llm", str(llama), "-o", str(out), "--sarif", str(sarif))
    assert proc.returncode == 0, proc.stderr
    first, folder = proc.stdout.splitlines()
    assert first.startswith(f"exported {llama} in ")
    assert first.endswith(f": 0 error(s), 0 warning(s); wrote SARIF {sarif}")
    assert folder.startswith(f"wrote {out}: genai_config.json, ")
    assert not list(out.glob(".layer_copy_*"))
    # the progress (plain lines: not a terminal): the copy's export, beside the save, is
    # quiet; the save's lines, then the verification's
    lines = proc.stderr.splitlines()
    names = [m.group(1) for m in map(re.compile(r"^  ([a-z-]+):").match, lines) if m]
    after = names[names.index("save") :]
    assert after == ["save"] * (len(after) - 1) + ["verification"], proc.stderr
    assert sum(line.startswith("  save: 100%") for line in lines) == 1
    log = json.loads(sarif.read_text())
    run = log["runs"][0]
    rules = [r["ruleId"] for r in run["results"]]
    if on_copy:
        assert rules.count("DO533") == 1 and rules.count("DO534") == 1
        (note,) = [r for r in run["results"] if r["ruleId"] == "DO533"]
        assert (
            "checked on a copy with 1 of the model's 3 layers (layers 0)"
            in (note["message"]["text"])
        )
    else:
        assert "DO533" not in rules and "DO534" not in rules
    (streamed,) = [r for r in run["results"] if r["ruleId"] == "DO532"]
    saved_peak = _peak_in(streamed["message"]["text"])
    command_peak = _peak_in(folder)
    assert command_peak >= saved_peak + 0.09  # the check's 100 MB over the save's peak
    figures = run["invocations"][0]["properties"]["weights"]
    assert f"{figures['peakRssBytes'] / 1e9:.2f}" == f"{command_peak:.2f}"


def test_a_session_without_prepacking_holds_no_copy_of_the_weights(tmp_path):
    """The copy's comparison session (issue 44): ONNX Runtime's packed copies of the MatMul
    weights were its peak; unpacked, the external data stays the file's memory map, read
    as a run needs it."""
    import gc

    from dynamo_onnx.io.sessions import inference_session
    from dynamo_onnx.llm_copy import resident_bytes

    program = dynamo_onnx.export(
        torch.nn.Linear(2048, 8192, bias=False), (torch.randn(3, 2048),), dynamo=True
    )  # a 64 MB weight
    program.save(tmp_path / "model.onnx", external_data=True)
    del program
    gc.collect()
    grown = {}
    for prepacking in (True, False):
        before = resident_bytes()
        session = inference_session(tmp_path / "model.onnx", prepacking=prepacking)
        grown[prepacking] = resident_bytes() - before
        out = session.run(None, {session.get_inputs()[0].name: np.ones((3, 2048), np.float32)})
        assert out[0].shape == (3, 8192)
        del session
        gc.collect()
    assert grown[True] > 48e6 and grown[False] < 16e6


def test_a_model_that_reads_its_embeddings_weight_runs_on_the_16_bit_twin(tmp_path, monkeypatch):
    """Llama 4 moves its ids to ``embed_tokens.weight.device``: the 16-bit twin's ``weight``
    is the float32 table, and the outputs are the float32 twin's."""
    from dynamo_onnx.integrations.transformers import narrow_vocab

    torch.manual_seed(0)
    _save(tmp_path, _llama4())
    copy_of = layer_copy_of(_streamed(tmp_path))
    eager = dynamo_onnx.integrations.layer_copy_to_eager(copy_of, False)
    assert isinstance(eager.model.get_input_embeddings(), narrow_vocab.WideningEmbedding)
    monkeypatch.setattr(narrow_vocab, "NARROW_DTYPES", ())
    wide = dynamo_onnx.integrations.layer_copy_to_eager(copy_of, False)
    got = dynamo_onnx.llm_copy._eager_outputs(eager.model, eager.inputs)
    expected = dynamo_onnx.llm_copy._eager_outputs(wide.model, wide.inputs)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)


def _copy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == dynamo_onnx.llm_copy.THREAD_NAME]


def _save_events(hook):
    """A progress callable that calls ``hook`` at the model's first "save" progress event
    (the main thread's save: the copy's export is quiet)."""
    seen = []

    def progress(event) -> None:
        if event.kind == "progress" and event.pass_name == "save" and not seen:
            seen.append(event)
            hook()

    return progress


def test_the_copys_checks_run_while_the_model_is_saved_and_record_as_after_it(
    llama, tmp_path, monkeypatch
):
    """The copy's checks run in their thread during the model's save; the record is the
    one of a folder checked after its save: the whole folder's findings and passes, then
    DO533 and DO534 after the save's DO532, and the verification pass last. The caller's
    warnings filters and collector thresholds are theirs again after."""
    import gc

    import dynamo_onnx.llm_folder
    from dynamo_onnx.llm_stream import report_streamed

    whole = dynamo_onnx.export_llm(llama, tmp_path / "whole")
    monkeypatch.setattr(dynamo_onnx.llm_copy, "checks_a_copy", lambda *sizes: True)
    during_save: list[list[str]] = []

    def reported(*args):  # right after the model's save, before the copy's checks joined
        during_save.append(_copy_threads())
        report_streamed(*args)

    monkeypatch.setattr(dynamo_onnx.llm_folder, "report_streamed", reported)
    filters, thresholds = list(warnings.filters), gc.get_threshold()
    program = dynamo_onnx.export_llm(llama, tmp_path / "copy")
    assert during_save == [[dynamo_onnx.llm_copy.THREAD_NAME]]
    assert not _copy_threads()
    assert (list(warnings.filters), gc.get_threshold()) == (filters, thresholds)
    rules = [f.rule.id for f in program.diagnostics.findings]
    whole_rules = [f.rule.id for f in whole.diagnostics.findings]
    assert rules == [*whole_rules, "DO533", "DO534"]
    assert whole_rules[-1] == "DO532"
    assert [p.name for p in program.diagnostics.passes] == [
        p.name for p in whole.diagnostics.passes
    ]
    assert program.diagnostics.passes[-1].name == "verification"
    (match,) = program.diagnostics.by_rule("DO534")
    assert match.locations == [program.model_location]
    (note,) = program.diagnostics.by_rule("DO533")
    written = (tmp_path / "copy" / "model.onnx.data").stat().st_size
    assert note.properties["weights"] == f"{written / 1e9:.2f}"
    assert program.diagnostics.measurements["weights"]["bytesWritten"] == written


@pytest.mark.parametrize("copy_fails", [False, True], ids=["copy-ok", "copy-fails"])
@pytest.mark.parametrize("stop", ["disk-full", "ctrl-c"])
def test_a_save_that_fails_stops_the_copys_checks_and_wins(
    llama, tmp_path, copy_checked, monkeypatch, stop, copy_fails
):
    """The disk full under the model's save (DO406 save-failed), or Ctrl-C during it: that
    is raised, once the copy's export beside it ended (no thread left, its folder removed),
    with no model.onnx.data half written and none of the copy's findings; a copy that
    fails too is not the one raised."""
    import errno

    saving = threading.Event()
    if copy_fails:

        def failing(*args):  # once the model's save failed: both failed
            saving.wait(timeout=60)
            raise RuntimeError("the copy's export failed")

        monkeypatch.setattr(dynamo_onnx.llm_copy, "_export_copy", failing)

    running: list[list[str]] = []

    def hook():
        running.append(_copy_threads())  # the copy's checks run: the case tested
        saving.set()
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "out"
    expected = KeyboardInterrupt if stop == "ctrl-c" else dynamo_onnx.SaveError
    with pytest.raises(expected) as raised:
        dynamo_onnx.export_llm(llama, out, progress=_save_events(hook))
    assert running == [[dynamo_onnx.llm_copy.THREAD_NAME]]
    assert not _copy_threads()
    assert not list(out.glob(".layer_copy_*"))
    assert not (out / "model.onnx.data").exists() and not (out / "model.onnx").exists()
    if stop == "disk-full":
        assert raised.value.rule_id == "DO406"  # save-failed
        assert "No space left on device" in str(raised.value)
        rules = [f.rule.id for f in raised.value.diagnostics.findings]
        assert "DO533" not in rules and "DO534" not in rules


@pytest.mark.parametrize("where", ["export", "comparison"])
def test_a_copy_check_that_fails_is_raised_after_the_save(
    llama, tmp_path, copy_checked, monkeypatch, where
):
    """The copy's export (in its thread, beside the save) or its comparison with eager
    (after the save) raising: raised once the model's save ended, its folder whole
    (model.onnx.data of every weight), the copy's thread ended and its folder removed."""
    first = dynamo_onnx.export_llm(llama, tmp_path / "first")
    assert first.diagnostics.by_rule("DO534")

    saving = threading.Event()

    def failing(*args):  # the copy's export fails while the model is saved
        saving.wait(timeout=60)
        raise dynamo_onnx.VerificationError("the copy's session failed")

    target = "_export_copy" if where == "export" else "_compare_with_eager"
    monkeypatch.setattr(dynamo_onnx.llm_copy, target, failing)
    running: list[list[str]] = []

    def hook():
        running.append(_copy_threads())
        saving.set()

    out = tmp_path / "out"
    with pytest.raises(dynamo_onnx.VerificationError, match="the copy's session failed"):
        dynamo_onnx.export_llm(llama, out, progress=_save_events(hook))
    assert running == [[dynamo_onnx.llm_copy.THREAD_NAME]]  # it ran beside the save
    assert not _copy_threads()
    assert not list(out.glob(".layer_copy_*"))
    written = (tmp_path / "first" / "model.onnx.data").read_bytes()
    assert (out / "model.onnx.data").read_bytes() == written
