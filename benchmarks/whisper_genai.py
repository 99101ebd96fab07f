"""Our Whisper folders against onnxruntime-genai's model builder's, both run by
onnxruntime-genai in one process (``make bench-whisper``).

From one random-weight Whisper of whisper-tiny's shape saved with ``save_pretrained`` (d_model
384, 4 encoder and 4 decoder layers, 6 heads, FFN 1536, vocab 51865, 80 mel bins, with a
byte-level BPE tokenizer holding Whisper's special tokens and the feature extractor's
``preprocessor_config.json``: nothing is downloaded), the script builds

- the builder's folders: ``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT
  -p fp32|int4 -e cpu``;
- ours: ``dynamo-onnx export-llm HF_DIR -o OUT [--precision int4]``;

each command in its own process, timed end to end. Then, in one process, every folder
transcribes the same clip (a tone with noise, 10 s, silent edges) with
``onnxruntime_genai.Generator``: the processor's features (``audio_processor_config.json``),
then the first token (``set_inputs`` and the first ``generate_next_token``: the encoder and
the prompt's step) and the decode ms per token of the 31 next, in alternating turns (folder
order reversed every run), one ORT thread per session, wall and CPU time of the process.
Token agreement: fp32 folders against transformers' ``generate`` on the extractor's features;
each int4 folder against its own fp32 folder.

Only ratios within one run compare; the results go to benchmarks/results/whisper_genai.json
and .md (docs/performance.md shows the table).

    python benchmarks/whisper_genai.py [--workdir DIR] [--runs 3] [--small]
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

from dynamo_onnx.files import atomic_write_text

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
NEW_TOKENS = 32
RATE = 16000
SPECIAL = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|notimestamps|>",
]
PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
WHISPER_TINY = {
    "d_model": 384,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 6,
    "decoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "decoder_ffn_dim": 1536,
    "vocab_size": 51865,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}
#: ``--small``: the same script in a minute, to check it runs (its figures mean nothing).
SMALL = {
    **WHISPER_TINY,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "vocab_size": 1000,
}


def save_checkpoint(path: Path, shape: dict[str, int]) -> None:
    import tokenizers
    import torch
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["the cat sat on the mat", "a dog and a cat"] * 20, trainer)
    end = SPECIAL[0]
    tokenizer = transformers.WhisperTokenizerFast(
        tokenizer_object=bpe, bos_token=end, eos_token=end, unk_token=end, pad_token=end
    )
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        **shape,
        init_std=0.2,  # greedy tokens that vary, so agreement means something
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        decoder_start_token_id=1,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    transformers.WhisperForConditionalGeneration(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    transformers.WhisperFeatureExtractor(feature_size=shape["num_mel_bins"]).save_pretrained(path)


def clip(path: Path, seconds: float = 10.0) -> Any:
    """A tone with noise, faded, its first and last 200 samples silent, as 16-bit PCM."""
    import numpy as np

    n = int(RATE * seconds)
    t = np.arange(n) / RATE
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(0).standard_normal(n)
    x = x * np.minimum(1, np.minimum(np.arange(n), n - 1 - np.arange(n)) / 1600)
    x[:200] = x[n - 200 :] = 0
    pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768


def _commands(hf: Path, work: Path) -> dict[str, list[str]]:
    builder = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-e", "cpu"]
    ours = [sys.executable, "-m", "dynamo_onnx.cli", "export-llm", str(hf)]
    commands = {}
    for precision in ("fp32", "int4"):
        out = work / f"builder-{precision}"
        commands[f"builder {precision}"] = [*builder, "-o", str(out), "-p", precision]
        out = work / f"ours-{precision}"
        commands[f"dynamo-onnx {precision}"] = [*ours, "-o", str(out), "--precision", precision]
    return commands


def build(hf: Path, work: Path, log: Any) -> dict[str, dict[str, Any]]:
    built: dict[str, dict[str, Any]] = {}
    for name, command in _commands(hf, work).items():
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            print(f"{name}: FAILED ({proc.returncode})\n{tail}", file=log)
            built[name] = {"failed": tail}
            continue
        print(f"{name}: built in {seconds:.1f} s", file=log)
        built[name] = {"export_s": seconds, "folder": command[command.index("-o") + 1]}
    return built


def one_thread(folder: Path) -> None:
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    for part in ("encoder", "decoder"):
        options = config["model"][part].setdefault("session_options", {})
        options["intra_op_num_threads"] = 1
        options["inter_op_num_threads"] = 1
    path.write_text(json.dumps(config, indent=4))


def op_counts(folder: Path) -> dict[str, int]:
    import onnx

    counts: collections.Counter[str] = collections.Counter()
    for name in ("encoder.onnx", "decoder.onnx"):
        model = onnx.load(str(folder / name), load_external_data=False)
        counts.update(n.op_type for n in model.graph.node)
    return dict(counts.most_common())


def transcribe(model: Any, wav: Path) -> dict[str, Any]:
    """One greedy transcription: the times of its steps and its tokens."""
    import onnxruntime_genai as og

    clock, cpu = time.perf_counter(), time.process_time()
    inputs = model.create_multimodal_processor()([PROMPT], audios=og.Audios.open(str(wav)))
    features = (time.perf_counter() - clock, time.process_time() - cpu)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=4 + NEW_TOKENS, batch_size=1)
    generator = og.Generator(model, params)
    clock, cpu = time.perf_counter(), time.process_time()
    generator.set_inputs(inputs)
    generator.generate_next_token()
    first = (time.perf_counter() - clock, time.process_time() - cpu)
    clock, cpu = time.perf_counter(), time.process_time()
    steps = 0
    while not generator.is_done():
        generator.generate_next_token()
        steps += 1
    decode = ((time.perf_counter() - clock) / steps, (time.process_time() - cpu) / steps)
    tokens = [int(t) for t in generator.get_sequence(0)][4:]
    return {"features": features, "first": first, "decode": decode, "tokens": tokens}


def eager_tokens(hf: Path, audio: Any) -> list[int]:
    import torch
    import transformers

    model = transformers.WhisperForConditionalGeneration.from_pretrained(hf).eval()
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(hf)
    features = extractor(audio, sampling_rate=RATE, return_tensors="pt").input_features
    prompt = torch.tensor([[1, 2, 4, 8]])
    out = model.generate(features, decoder_input_ids=prompt, max_new_tokens=NEW_TOKENS)
    return out[0, -NEW_TOKENS:].tolist()


def _share(a: list[int], b: list[int]) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(len(b), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="whisper-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    hf = work / "whisper"
    if not (hf / "config.json").exists():
        save_checkpoint(hf, SMALL if args.small else WHISPER_TINY)
    built = build(hf, work, sys.stderr)
    wav = work / "clip.wav"
    audio = clip(wav)
    eager = eager_tokens(hf, audio)
    import onnxruntime  # noqa: F401 - onnxruntime_genai needs it loaded first
    import onnxruntime_genai as og

    names = [n for n, b in built.items() if "folder" in b]
    models = {}
    for name in names:
        one_thread(Path(built[name]["folder"]))
        models[name] = og.Model(built[name]["folder"])
        transcribe(models[name], wav)  # warm-up
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for run in range(args.runs):
        for name in names if run % 2 == 0 else names[::-1]:
            runs[name].append(transcribe(models[name], wav))
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.platform(),
        "shape": SMALL if args.small else WHISPER_TINY,
        "runs": args.runs,
        "folders": {},
    }
    for name in names:
        row: dict[str, Any] = {
            "export_s": built[name]["export_s"],
            "ops": op_counts(Path(built[name]["folder"])),
        }
        for key in ("features", "first", "decode"):
            row[f"{key}_ms"] = statistics.median(r[key][0] for r in runs[name]) * 1000
            row[f"{key}_cpu_ms"] = statistics.median(r[key][1] for r in runs[name]) * 1000
        tokens = runs[name][0]["tokens"]
        precision = name.split()[-1]
        reference = (
            eager if precision == "fp32" else runs[name.replace("int4", "fp32")][0]["tokens"]
        )
        row["agreement"] = _share(tokens, reference)
        row["against"] = "transformers" if precision == "fp32" else name.replace("int4", "fp32")
        results["folders"][name] = row
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / "whisper_genai.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(RESULTS / "whisper_genai.md", markdown(results))
    print(markdown(results))


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| folder | export s | nodes (both models) | features ms | first token ms (encoder + prompt) | decode ms/token | CPU first ms | CPU decode ms/token | tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    folders = results["folders"]
    for name, row in folders.items():
        base = folders.get("builder " + name.split()[-1])

        def ratio(key: str, row=row, base=base, name=name) -> str:
            if base is None or name.startswith("builder"):
                return f"{row[key]:.1f}"
            return f"{row[key]:.1f} ({row[key] / base[key]:.2f}x)"

        ops = ", ".join(f"{k} {v}" for k, v in list(row["ops"].items())[:4])
        total = sum(row["ops"].values())
        lines.append(
            f"| {name} | {ratio('export_s')} | {total} ({ops}...) | {row['features_ms']:.1f} "
            f"| {ratio('first_ms')} | {ratio('decode_ms')} | {ratio('first_cpu_ms')} "
            f"| {ratio('decode_cpu_ms')} | {row['agreement']:.0%} equal to {row['against']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
