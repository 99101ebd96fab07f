"""``dynamo-onnx export-llm WHISPER_DIR -o OUT``: a Whisper checkpoint in, the folder
onnxruntime-genai's ``whisper`` type runs out (encoder, decoder, genai_config.json,
audio_processor_config.json, tokenizer and feature extractor), generating transformers'
greedy tokens from a waveform with the processor files the folder carries; int4 too."""

from __future__ import annotations

import collections
import json
import pathlib
import re
import sys
import wave

import numpy as np
import onnx
import onnxruntime  # onnxruntime_genai needs it loaded first
import pytest
import tokenizers
import torch
import transformers
from tokenizers import decoders, models, pre_tokenizers, trainers

import dynamo_onnx
from cli_runner import run_cli

# the checkpoint's special tokens, prompt and rate are those make bench-whisper uses
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from whisper_genai import PROMPT, RATE, SPECIAL

og = pytest.importorskip("onnxruntime_genai")

#: samples of silence at each end: half an FFT window, where genai's STFT pads the clip
#: otherwise than WhisperFeatureExtractor (docs/llm.md, "Whisper")
SILENT_EDGE = 200


def _tokenizer() -> transformers.WhisperTokenizerFast:
    """A byte-level BPE tokenizer trained here (no download) with Whisper's special tokens
    first (ids 0-8), 265 tokens."""
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=90, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["the cat sat on the mat", "a dog and a cat"] * 20, trainer)
    end = SPECIAL[0]
    return transformers.WhisperTokenizerFast(
        tokenizer_object=bpe, bos_token=end, eos_token=end, unk_token=end, pad_token=end
    )


@pytest.fixture(scope="module")
def saved_whisper(tmp_path_factory):
    """A 2+2-layer Whisper of width 64 with weights large enough (init_std 0.2) that its
    greedy tokens vary, saved as a checkpoint is: weights, tokenizer, and the feature
    extractor's preprocessor_config.json. Its generation config suppresses no token
    (onnxruntime-genai applies no suppress list)."""
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    config = transformers.WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=64,
        init_std=0.2,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        decoder_start_token_id=1,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    model = transformers.WhisperForConditionalGeneration(config).eval()
    path = tmp_path_factory.mktemp("whisper")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    transformers.WhisperFeatureExtractor(feature_size=80).save_pretrained(path)
    return path, model, tokenizer


@pytest.fixture(scope="module")
def fp32_folder(saved_whisper, tmp_path_factory):
    path = saved_whisper[0]
    out = tmp_path_factory.mktemp("exported") / "whisper-onnx"
    sarif = out.parent / "whisper.sarif"
    proc = run_cli(out.parent, "export-llm", str(path), "-o", str(out), "--sarif", str(sarif))
    assert proc.returncode == 0, proc.stderr
    return out, proc


def _waveform(seconds: float, silent_edge: int, seed: int = 0) -> np.ndarray:
    """A tone with noise, faded in and out over 0.1 s, its first and last ``silent_edge``
    samples zero, as 16-bit PCM reads back."""
    n = int(RATE * seconds)
    t = np.arange(n) / RATE
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(seed).standard_normal(n)
    x = x * np.minimum(1, np.minimum(np.arange(n), n - 1 - np.arange(n)) / 1600)
    if silent_edge:
        x[:silent_edge] = x[n - silent_edge :] = 0
    return (np.clip(x, -1, 1) * 32767).astype(np.int16)


def _wav(path, pcm: np.ndarray) -> np.ndarray:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768


def _genai(folder, wav_path, max_length: int) -> tuple[list[int], np.ndarray]:
    """onnxruntime-genai's greedy tokens for the clip (after the prompt), and the log-mel
    features its processor computed from the folder's audio_processor_config.json."""
    model = og.Model(str(folder))
    inputs = model.create_multimodal_processor()([PROMPT], audios=og.Audios.open(str(wav_path)))
    features = inputs["audio_features"].as_numpy().copy()
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=max_length, batch_size=1)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], features


def test_export_llm_writes_a_whisper_folder_genai_runs_with_transformers_greedy_tokens(
    saved_whisper, fp32_folder, tmp_path
):
    path, model, tokenizer = saved_whisper
    out, proc = fp32_folder
    assert "0 error(s), 0 warning(s)" in proc.stdout
    # nothing transformers or torch said while exporting: the command's own lines only
    # (each pass's progress, which export-llm prints unless --quiet)
    ours = re.compile(r"  [a-z-]+: (\w+ in \d+\.\d\d s|\d+% \(.*\))")
    assert [line for line in proc.stderr.splitlines() if not ours.fullmatch(line)] == []
    assert "save: 100%" in proc.stderr
    # the run's one record: the summary of the models written, in the SARIF log
    log = json.loads((out.parent / "whisper.sarif").read_text())
    summaries = [r for run in log["runs"] for r in run["results"] if r["ruleId"] == "DO540"]
    assert [r["message"]["text"] for r in summaries] == [
        "Wrote encoder.onnx, decoder.onnx for onnxruntime-genai's whisper type; "
        "not written: none (every model was exported)."
    ]
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "audio_processor_config.json",
        "decoder.onnx",
        "decoder.onnx.data",
        "encoder.onnx",
        "encoder.onnx.data",
        "genai_config.json",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["type"] == "whisper"
    for part in ("encoder", "decoder"):  # the names genai reads are the models' own
        graph = onnx.load(out / config["model"][part]["filename"], load_external_data=False).graph
        inputs = {i.name for i in graph.input}
        outputs = {o.name for o in graph.output}
        for key, name in {**config["model"][part]["inputs"]}.items():
            assert (name % 0 if "%d" in name else name) in inputs, key
        for key, name in config["model"][part]["outputs"].items():
            assert (name % 1 if "%d" in name else name) in outputs, key
    assert len(config["model"]["decoder"]["inputs"]) == 5  # no encoder_hidden_states input
    decoder_inputs = onnx.load(out / "decoder.onnx", load_external_data=False).graph.input
    assert [d.dim_param or d.dim_value for d in decoder_inputs[1].type.tensor_type.shape.dim] == [
        "batch_size",
        model.config.decoder_attention_heads,
        "past_sequence_length",
        model.config.d_model // model.config.decoder_attention_heads,
    ]
    # fused for ONNX Runtime: each cross-attention reads the encoder's keys and values as
    # they come in, no Transpose of them at every step (cross_cache.py)
    decoder = onnx.load(out / "decoder.onnx", load_external_data=False).graph
    attention = [list(n.input) for n in decoder.node if n.op_type == "MultiHeadAttention"]
    for layer in range(model.config.decoder_layers):
        assert [f"past_key_cross_{layer}", f"past_value_cross_{layer}"] in [
            a[1:3] for a in attention
        ]
    assert not [n for n in decoder.node if n.op_type == "Transpose"]

    wav_path = tmp_path / "clip.wav"
    audio = _wav(wav_path, _waveform(2.0, SILENT_EDGE))
    prompt = tokenizer.convert_tokens_to_ids(SPECIAL[1:3] + [SPECIAL[4], SPECIAL[8]])
    tokens, features = _genai(out, wav_path, max_length=len(prompt) + 16)
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(out)
    expected = extractor(audio, sampling_rate=RATE, return_tensors="pt").input_features
    np.testing.assert_allclose(features, expected.numpy(), atol=1e-4)
    eager = model.generate(
        expected, decoder_input_ids=torch.tensor([prompt]), max_new_tokens=16, do_sample=False
    )
    assert tokens[: len(prompt)] == prompt
    new = tokens[len(prompt) :]
    assert new == eager[0, -len(new) :].tolist()
    assert len(set(new)) > 3  # a model whose tokens vary: the comparison can fail


def test_genai_log_mel_differs_at_a_clip_edges_unless_they_are_silent(fp32_folder, tmp_path):
    """genai's STFT pads a clip's ends otherwise than WhisperFeatureExtractor's centered
    reflection: the first two frames and the clip's last frame differ; silence over half
    a window at each end makes them equal (docs/llm.md)."""
    out = fp32_folder[0]
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(out)
    for silent, frames in ((0, {0, 1, 200}), (SILENT_EDGE, set())):
        wav_path = tmp_path / f"edge{silent}.wav"
        audio = _wav(wav_path, _waveform(2.0, silent, seed=1))
        model = og.Model(str(out))
        inputs = model.create_multimodal_processor()([PROMPT], audios=og.Audios.open(str(wav_path)))
        genai = inputs["audio_features"].as_numpy()
        expected = extractor(audio, sampling_rate=RATE, return_tensors="np").input_features
        per_frame = np.abs(genai - expected).max(axis=(0, 1))
        assert set(np.nonzero(per_frame > 1e-3)[0].tolist()) <= frames | {201}
        assert frames <= set(np.nonzero(per_frame > 1e-3)[0].tolist())
        assert np.delete(per_frame, sorted(frames | {201})).max() < 1e-4


def test_an_int4_whisper_folder_loads_and_generates(saved_whisper, tmp_path):
    path, model, _ = saved_whisper
    out = tmp_path / "int4"
    program = dynamo_onnx.export_llm(path, out, precision="int4")
    (summary,) = program.diagnostics.by_rule("DO540")
    assert summary.message.startswith(
        "Wrote encoder.onnx, decoder.onnx for onnxruntime-genai's `whisper` type; not written: none"
    )
    for name in ("encoder.onnx", "decoder.onnx"):
        graph = onnx.load(out / name, load_external_data=False).graph
        assert collections.Counter(n.op_type for n in graph.node)["MatMulNBits"] > 0, name
    wav_path = tmp_path / "clip.wav"
    _wav(wav_path, _waveform(1.0, SILENT_EDGE))
    tokens, _ = _genai(out, wav_path, max_length=12)
    assert len(tokens) == 12 and tokens[:4] == [1, 2, 4, 8]
    assert all(0 <= t < model.config.vocab_size for t in tokens)


def test_a_whisper_folder_whose_extractor_is_not_16_khz_is_do507(saved_whisper, tmp_path):
    path = saved_whisper[0]
    other = tmp_path / "whisper-8k"
    other.mkdir()
    for source in path.iterdir():
        (other / source.name).write_bytes(source.read_bytes())
    transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=8000).save_pretrained(other)
    proc = run_cli(tmp_path, "export-llm", str(other), "-o", str(tmp_path / "never"))
    assert proc.returncode == 2
    assert "[DO507 hf-folder-unusable]" in proc.stderr
    assert "samples at 8000 Hz" in proc.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(("batch", "new", "past"), [(1, 4, 0), (3, 1, 5)])
def test_the_decoder_model_computes_transformers_step_at_other_sizes(
    saved_whisper, fp32_folder, batch, new, past
):
    """A prefill on an empty past (genai's first step) and one token after a past, at
    batches the export did not see: logits and presents equal to the eager step's."""
    from dynamo_onnx.integrations.transformers.whisper import (
        WhisperDecoderStep,
        WhisperEncoderStep,
        decoder_example,
    )

    model = saved_whisper[1]
    out = fp32_folder[0]
    example = decoder_example(model.config, batch=batch, new=new, past=past)
    with torch.no_grad():
        # the cross keys and values of real clips, from the encoder step
        encoded = WhisperEncoderStep(model)(torch.randn(batch, 80, 3000))
        layers = model.config.decoder_layers
        inputs = (*example[: 1 + 2 * layers], *encoded[1:])
        expected = WhisperDecoderStep(model)(*inputs)
    session = onnxruntime.InferenceSession(str(out / "decoder.onnx"))
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
    assert [o.name for o in session.get_outputs()][:3] == [
        "logits",
        "present_key_self_0",
        "present_key_self_1",
    ]
    for ours, eager in zip(got, expected):
        np.testing.assert_allclose(ours, eager.numpy(), rtol=1e-4, atol=1e-4)


def test_the_feature_extractor_is_read_from_either_file_a_checkpoint_carries(tmp_path):
    """preprocessor_config.json (the Hub's checkpoints) or transformers 5's
    processor_config.json: audio_processor_config.json takes the extractor's numbers."""
    from dynamo_onnx.diagnostics import DiagnosticContext
    from dynamo_onnx.integrations import load_speech_folder

    config = transformers.WhisperConfig(
        vocab_size=300,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        num_mel_bins=128,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        decoder_start_token_id=1,
    )
    extractor = transformers.WhisperFeatureExtractor(feature_size=128, hop_length=160)
    for save in ("preprocessor", "processor"):
        path = tmp_path / save
        transformers.WhisperForConditionalGeneration(config).save_pretrained(path)
        if save == "preprocessor":
            extractor.save_pretrained(path)
        else:
            transformers.WhisperProcessor(extractor, _tokenizer()).save_pretrained(path)
        folder = load_speech_folder(DiagnosticContext(), path)
        assert {f.name for f in folder.files_to_copy} >= {f"{save}_config.json"}
        audio = json.loads(folder.runtime_files()["audio_processor_config.json"])
        steps = {
            s["operation"]["type"]: s["operation"] for s in audio["feature_extraction"]["sequence"]
        }
        assert list(steps) == ["AudioDecoder", "STFTNorm", "LogMelSpectrum"]
        assert steps["LogMelSpectrum"]["attrs"] == {
            "chunk_size": 30,
            "hop_length": 160,
            "n_fft": 400,
            "n_mel": 128,
        }
        assert steps["STFTNorm"]["attrs"] == {"n_fft": 400, "frame_length": 400, "hop_length": 160}
        genai = json.loads(folder.runtime_files()["genai_config.json"])["model"]
        assert genai["encoder"]["num_hidden_layers"] == 1
        assert genai["vocab_size"] == 300


def test_the_plain_whisper_folder_generates_the_same_tokens(saved_whisper, fp32_folder, tmp_path):
    """``--optimize-for none`` (``export_llm(..., optimize=True)``): no fused operator, the
    same tokens as the fused folder."""
    path = saved_whisper[0]
    plain = tmp_path / "plain"
    proc = run_cli(tmp_path, "export-llm", str(path), "-o", str(plain), "--optimize-for", "none")
    assert proc.returncode == 0, proc.stderr
    for name in ("encoder.onnx", "decoder.onnx"):
        graph = onnx.load(plain / name, load_external_data=False).graph
        assert not [n for n in graph.node if n.domain == "com.microsoft"], name
    wav_path = tmp_path / "clip.wav"
    _wav(wav_path, _waveform(1.5, SILENT_EDGE, seed=2))
    fused, _ = _genai(fp32_folder[0], wav_path, max_length=20)
    assert _genai(plain, wav_path, max_length=20)[0] == fused
