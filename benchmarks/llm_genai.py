"""Our LLM folders against onnxruntime-genai's model builder, generating with
``onnxruntime_genai.Generator`` in one run (``make bench-llm``).

For each model (``--models``; all three by default), random weights of one size (hidden
1024, 8 layers, 16 heads, 4 KV heads, vocab 32000) saved with ``save_pretrained`` with a
byte-level BPE tokenizer trained here (nothing is downloaded): Llama; Mistral with a sliding
window of 256 (its tokens are compared at a prompt of 512, past the window); Qwen3 (q/k
norms). From each, the script builds

- the builder's folders: ``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT
  -p fp32|int4 -e cpu``;
- ours: ``dynamo-onnx export-llm HF_DIR -o OUT [--precision int4]``, and the same with
  ``--optimize-for onnxruntime`` when this version has it (a line says it is skipped
  otherwise);

each command in its own process, timed end to end (load, export, save: the export time of
each). A builder folder that fails to build or to load is a "builder failed" row with its
error, and ours are then shown without a ratio. Then, in one process, every folder generates greedily with
``onnxruntime_genai.Generator`` at prompts of 128 and 512 tokens, 32 new tokens, in
alternating turns (folder order reversed every run, so both see the same machine load):
prefill ms (``append_tokens``) and decode ms per token (``generate_next_token``), in wall
time and in CPU time of the process (with one thread, the work done: on a shared machine the
wall time also counts the waits for a core, and swings more than the gaps). Also: node
counts by op type, and token agreement (fp32 folders against transformers' greedy tokens;
each int4 folder against its own fp32 folder: the share of the 32 tokens equal, and the
tokens before the first difference). Each ONNX Runtime session runs on one thread (the
machine is shared: one thread is the stable figure).

Last, the plain export's own overhead: GPT-2 124M (random weights from transformers'
default config) exported by ``dynamo_onnx.export(optimize=False)`` against
``torch.export.export`` alone on the same model and input, each in fresh processes, in
alternating order.

Only ratios within one run compare; the results go to benchmarks/results/llm_genai.json and
.md (docs/performance.md shows the table).

    python benchmarks/llm_genai.py [--workdir DIR] [--runs 3] [--gpt2-repeats 3]
        [--models llama mistral qwen3] [--small]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dynamo_onnx.files import atomic_write_text

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PROMPTS = (128, 512)
NEW_TOKENS = 32
#: The prompts of the agreement measure (and of the timing: the first of them).
AGREEMENT_PROMPTS = 4
LLAMA = {
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "intermediate_size": 2816,  # Llama's 2.75 x hidden
    "max_position_embeddings": 2048,
}
#: ``--small``: the same script in a minute, to check it runs (its figures mean nothing).
SMALL = {
    **LLAMA,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "intermediate_size": 128,
}
#: Mistral's window: under the longest prompt, so its tokens are compared past it.
WINDOW = 256


@dataclasses.dataclass(frozen=True)
class BenchModel:
    """One model of the bench: transformers' ``model_type``, what it adds to the size's
    fields, and the prompt length its tokens are compared at."""

    model_type: str
    fields: dict[str, Any]
    agreement_prompt: int = PROMPTS[0]

    def config(self, size: dict[str, Any]) -> dict[str, Any]:
        head_dim = size["hidden_size"] // size["num_attention_heads"]
        fields = {k: head_dim if v == "head_dim" else v for k, v in self.fields.items()}
        return {**size, **fields}


MODELS = {
    "llama": BenchModel("llama", {}),
    "mistral": BenchModel("mistral", {"sliding_window": WINDOW}, agreement_prompt=PROMPTS[-1]),
    "qwen3": BenchModel("qwen3", {"head_dim": "head_dim"}),
}


# -- the checkpoint -------------------------------------------------------------------------


def save_checkpoint(path: Path, config: dict[str, Any], model_type: str = "llama") -> None:
    """The random-weight model and a tokenizer trained here (the builder needs one)."""
    import tokenizers
    import torch
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    torch.manual_seed(0)
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    model.save_pretrained(path)
    bpe = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(["the cat sat on the mat"] * 10, trainer)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(path)


# -- building the folders ---------------------------------------------------------------------


def _commands(hf: Path, work: Path) -> dict[str, list[str]]:
    py = sys.executable
    builder = [py, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-e", "cpu"]
    ours = [py, "-m", "dynamo_onnx.cli", "export-llm", str(hf)]
    optimized = ["--optimize-for", "onnxruntime"]
    commands = {}
    for precision in ("fp32", "int4"):
        out = work / f"builder-{precision}"
        commands[f"builder {precision}"] = [
            *builder,
            *("-o", str(out), "-p", precision, "-c", str(work / "builder-cache")),
        ]
        commands[f"dynamo-onnx {precision}"] = [  # the plain export, without the fusions
            *ours,
            *("-o", str(work / f"ours-{precision}"), "--precision", precision),
            *("--optimize-for", "none"),
        ]
        commands[f"dynamo-onnx+ort {precision}"] = [
            *ours,
            *("-o", str(work / f"ours-ort-{precision}"), "--precision", precision, *optimized),
        ]
    return commands


def _output_dir(command: list[str]) -> Path:
    return Path(command[command.index("-o") + 1])


def _load_problem(folder: Path) -> str | None:
    """Why onnxruntime-genai cannot load ``folder``, or None when it can."""
    import onnxruntime_genai as og

    try:
        og.Model(str(folder))
    except Exception as error:  # the reason is the cell's text
        return f"onnxruntime-genai cannot load it: {str(error).strip().splitlines()[0][:200]}"
    return None


def build(hf: Path, work: Path, log: Any) -> dict[str, dict[str, Any]]:
    """Each folder by its command in a fresh process: the wall time, or why it was skipped."""
    built: dict[str, dict[str, Any]] = {}
    for name, command in _commands(hf, work).items():
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode == 2 and "`optimize` is 'onnxruntime'" in proc.stderr:
            print(f"{name}: skipped, this version has no --optimize-for onnxruntime", file=log)
            built[name] = {"skipped": "no --optimize-for onnxruntime in this version"}
            continue
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            print(f"{name}: FAILED ({proc.returncode})\n{tail}", file=log)
            built[name] = {"failed": tail}
            continue
        problem = _load_problem(_output_dir(command))
        if problem:
            print(f"{name}: FAILED: {problem}", file=log)
            built[name] = {"failed": problem}
            continue
        print(f"{name}: built in {seconds:.1f} s", file=log)
        built[name] = {"export_s": seconds, "folder": str(_output_dir(command))}
    return built


def op_counts(folder: Path) -> dict[str, int]:
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return dict(collections.Counter(n.op_type for n in model.graph.node).most_common())


def one_thread(folder: Path) -> None:
    """Both kinds of folder run their sessions on one thread (the machine is shared)."""
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options["intra_op_num_threads"] = 1
    options["inter_op_num_threads"] = 1
    path.write_text(json.dumps(config, indent=4))


# -- generating -------------------------------------------------------------------------------


def _prompts(length: int, count: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(length)
    return [rng.integers(3, 1000, length).tolist() for _ in range(count)]


def _generate(model: Any, prompt: list[int]) -> tuple[float, float, list[int], float, float]:
    """(prefill ms, decode ms per token, the new tokens, and the two in CPU ms of this
    process), greedy; always NEW_TOKENS steps (``min_length``: an end-of-sequence token does
    not stop one folder early). The sessions run on one thread, so the CPU time is the work
    done whatever else the machine runs; the wall time also counts the waits for a core."""
    import numpy as np
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    total = len(prompt) + NEW_TOKENS
    params.set_search_options(max_length=total, min_length=total, do_sample=False)
    generator = og.Generator(model, params)
    start, cpu = time.perf_counter(), time.process_time()
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    prefill, prefill_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    steps = 0
    while not generator.is_done():
        generator.generate_next_token()
        steps += 1
    decode = (time.perf_counter() - start) / max(steps, 1)
    decode_cpu = (time.process_time() - cpu) / max(steps, 1)
    assert steps == NEW_TOKENS, steps
    tokens = generator.get_sequence(0)[len(prompt) :].tolist()
    return prefill * 1e3, decode * 1e3, tokens, prefill_cpu * 1e3, decode_cpu * 1e3


#: What ``timings`` records of each run: wall ms, then CPU ms of this process.
_TIMES = ("prefill_ms", "decode_ms", "prefill_cpu_ms", "decode_cpu_ms")


def timings(folders: dict[str, Path], runs: int, log: Any) -> dict[str, Any]:
    """Median prefill and decode ms of every folder at each prompt length, alternating."""
    import onnxruntime_genai as og

    models = {name: og.Model(str(path)) for name, path in folders.items()}
    result: dict[str, Any] = {}
    for length in PROMPTS:
        (prompt,) = _prompts(length, 1)
        names = []
        for name in models:  # a warm-up each: first-run allocations are not the figure
            try:
                _generate(models[name], prompt)
            except RuntimeError as error:  # the builder's Mistral past its window
                why = str(error).strip().splitlines()[0][:300]
                print(f"prompt {length}: {name}: FAILED: {why}", file=log)
                result.setdefault(name, {})[str(length)] = {"failed": why}
                continue
            names.append(name)
        samples: dict[str, dict[str, list[float]]] = {n: {key: [] for key in _TIMES} for n in names}
        for run in range(runs):
            for name in names if run % 2 == 0 else names[::-1]:
                prefill, decode, _, prefill_cpu, decode_cpu = _generate(models[name], prompt)
                for key, value in zip(_TIMES, (prefill, decode, prefill_cpu, decode_cpu)):
                    samples[name][key].append(value)
        for name in names:
            figures = {k: statistics.median(v) for k, v in samples[name].items()}
            result.setdefault(name, {})[str(length)] = figures
            print(
                f"prompt {length}: {name}: prefill {figures['prefill_ms']:.1f} ms "
                f"(CPU {figures['prefill_cpu_ms']:.1f}), decode {figures['decode_ms']:.2f} "
                f"ms/token (CPU {figures['decode_cpu_ms']:.2f})",
                file=log,
            )
    return result


def agreement(folders: dict[str, Path], hf: Path, length: int = PROMPTS[0]) -> dict[str, Any]:
    """Greedy tokens at prompts of ``length``: each fp32 folder against transformers, each
    int4 folder against its own fp32 folder (share equal; tokens before the first
    difference)."""
    import onnxruntime_genai as og
    import torch
    import transformers

    prompts = _prompts(length, AGREEMENT_PROMPTS)
    tokens, result = {}, {}
    for name, path in folders.items():
        model = og.Model(str(path))
        try:
            tokens[name] = [_generate(model, p)[2] for p in prompts]
        except RuntimeError as error:  # as in timings(): the cell says why
            result[name] = {"failed": str(error).strip().splitlines()[0][:300]}
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(hf, local_files_only=True)
    with torch.no_grad():
        eager = [
            hf_model.generate(
                torch.tensor([p]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
            )[0, len(p) :].tolist()
            for p in prompts
        ]
    for name, got in tokens.items():
        family, precision = name.rsplit(" ", 1)
        reference = eager if precision == "fp32" else tokens.get(f"{family} fp32")
        if reference is None:
            continue
        equal = sum(a == b for g, r in zip(got, reference) for a, b in zip(g, r))
        prefix = [
            next((i for i, (a, b) in enumerate(zip(g, r)) if a != b), len(r))
            for g, r in zip(got, reference)
        ]
        result[name] = {
            "against": "transformers" if precision == "fp32" else f"{family} fp32",
            "equal_share": equal / (len(prompts) * NEW_TOKENS),
            "mean_prefix": statistics.mean(prefix),
            "identical_sequences": sum(g == r for g, r in zip(got, reference)),
        }
    return result


def _argmax(folder: Path, sequences: list[list[int]], head_size: int) -> Any:
    """The most likely next token at every position of each sequence, by ONNX Runtime
    alone on the folder's model (one pass over each sequence from an empty past)."""
    import numpy as np

    from dynamo_onnx.io.sessions import inference_session

    session = inference_session(folder / "model.onnx", threads=1)
    found = []
    for sequence in sequences:
        ids = np.array([sequence], dtype=np.int64)
        feeds: dict[str, Any] = {}
        for meta in session.get_inputs():
            if meta.name == "input_ids":
                feeds[meta.name] = ids
            elif meta.name == "attention_mask":
                feeds[meta.name] = np.ones_like(ids)
            elif meta.name == "position_ids":
                feeds[meta.name] = np.arange(ids.shape[1], dtype=np.int64)[None]
            else:  # an empty past: [batch, kv heads, 0, head size]
                feeds[meta.name] = np.zeros((1, meta.shape[1], 0, head_size), np.float32)
        (logits,) = session.run(["logits"], feeds)
        found.append(logits[0].argmax(-1))
    return np.concatenate(found)


def top1_agreement(folders: dict[str, Path], head_size: int) -> dict[str, float]:
    """Teacher-forced top-1 agreement of each int4 model with its own fp32 model: both run
    on the same sequences (AGREEMENT_PROMPTS of 128 + 32 tokens), and the share of
    positions whose most likely next token is the same. Unlike greedy generation, one
    different token does not change every later input, so this measures the quantization
    and not the chaos after a first difference."""
    sequences = _prompts(PROMPTS[0] + NEW_TOKENS, AGREEMENT_PROMPTS)
    result = {}
    for name, path in folders.items():
        family, precision = name.rsplit(" ", 1)
        reference = folders.get(f"{family} fp32")
        if precision == "fp32" or reference is None:
            continue
        mine, theirs = _argmax(path, sequences, head_size), _argmax(reference, sequences, head_size)
        result[name] = float((mine == theirs).mean())
    return result


# -- GPT-2: the plain export against torch.export.export --------------------------------------


#: The exports of GPT-2 timed in turn: ours with ``optimize=False``, ``torch.export.export``
#: alone (capture, which ours includes) and torch.onnx's with ``optimize=False``.
GPT2_KINDS = ("dynamo-onnx", "torch.export.export", "torch.onnx")


def _process_cpu_s() -> float:
    """CPU seconds of this process, all threads: on a shared machine the wall time also
    counts the waits for a core, this does not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Collections:
    """Python's garbage collections while it is installed (``gc.callbacks``): how many of
    each generation and the CPU seconds of this thread they took. A full collection (0.3 s
    of CPU over GPT-2's heap) fires when CPython's heuristic says so, inside one exporter's
    timed call or just after it: the report shows it apart (docs/performance.md)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.thread_time()
            return
        generation = info["generation"]
        self.counts[generation] += 1
        self.seconds[generation] += time.thread_time() - self._start


#: How many small lists :func:`_first_full_after` builds at most after the timed call.
_AFTER_LISTS = 200_000


def _first_full_after() -> dict[str, Any]:
    """What the export left the caller: how many small long-lived lists the caller can build
    before CPython's next full collection, and that collection's CPU seconds. A collection
    the export made due fires after a few hundred; ``None`` when none fired within
    :data:`_AFTER_LISTS` (docs/performance.md, "The overhead beyond capture", third round)."""
    import gc

    built = [0]
    fired: list[tuple[int, float]] = []
    start = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2 or fired:
            return
        if phase == "start":
            start[0] = time.thread_time()
        else:
            fired.append((built[0], time.thread_time() - start[0]))

    gc.callbacks.append(watch)
    kept = []
    for index in range(_AFTER_LISTS):
        built[0] = index
        kept.append([index])
        if fired:
            break
    gc.callbacks.remove(watch)
    return {"lists": fired[0][0], "cpu_s": fired[0][1]} if fired else {"lists": None}


def gpt2_worker(kind: str) -> dict[str, Any]:
    """One export of GPT-2 124M in this (fresh) process: its wall and CPU seconds, the
    garbage collections inside it, and for dynamo-onnx the seconds of each pass and what the
    export spent outside them (the exporter's imports before the first pass, the end of the
    pipeline after the last)."""
    import gc
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    sys.path.insert(0, str(HERE))
    from models import gpt2

    torch.manual_seed(0)
    model, args = gpt2()
    result: dict[str, Any] = {}
    collections = _Collections()
    gc.callbacks.append(collections)
    if kind == "dynamo-onnx":
        import dynamo_onnx

        start, cpu = time.perf_counter(), _process_cpu_s()
        program = dynamo_onnx.export(model, args, opset_version=20, optimize=False)
        result["passes_s"] = {p.name: p.duration_s for p in program.diagnostics.passes}
    elif kind == "torch.onnx":
        start, cpu = time.perf_counter(), _process_cpu_s()
        torch.onnx.export(model, args, dynamo=True, optimize=False, opset_version=20)
    else:
        start, cpu = time.perf_counter(), _process_cpu_s()
        torch.export.export(model, args, strict=False)
    result["export_s"] = time.perf_counter() - start
    result["cpu_s"] = _process_cpu_s() - cpu
    gc.callbacks.remove(collections)
    result["gc_collections"] = collections.counts
    result["gc_full_s"] = collections.seconds[2]
    result["gc_young_s"] = collections.seconds[0] + collections.seconds[1]
    result["full_after"] = _first_full_after()
    if "passes_s" in result:
        result["passes_s"]["outside the passes"] = result["export_s"] - sum(
            result["passes_s"].values()
        )
    return result


def gpt2_overhead(repeats: int, log: Any) -> dict[str, Any]:
    """:data:`GPT2_KINDS` each in ``repeats`` fresh processes, in turns whose order is
    reversed every repeat: medians of the wall and CPU seconds, our export's ratios to the
    others, and the median seconds of each of our passes."""
    sys.path.insert(0, str(HERE))
    from workers import compile_bytecode

    compile_bytecode()
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in GPT2_KINDS}
    for repeat in range(repeats):
        for kind in GPT2_KINDS if repeat % 2 == 0 else GPT2_KINDS[::-1]:
            proc = subprocess.run(
                [sys.executable, __file__, "--gpt2-worker", kind],
                capture_output=True,
                text=True,
                check=True,
            )
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[kind].append(run)
            print(
                f"GPT-2 124M, {kind}: {run['export_s']:.2f} s (CPU {run['cpu_s']:.2f} s)", file=log
            )
    medians = {k: statistics.median(r["export_s"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    ours = runs["dynamo-onnx"]
    passes = {
        name: statistics.median(r["passes_s"][name] for r in ours) for name in ours[0]["passes_s"]
    }
    return {
        "seconds": {k: [r["export_s"] for r in v] for k, v in runs.items()},
        "median_s": medians,
        "median_cpu_s": cpu,
        "ratio": medians["dynamo-onnx"] / medians["torch.export.export"],
        "ratio_torch_onnx": medians["dynamo-onnx"] / medians["torch.onnx"],
        "cpu_ratio": cpu["dynamo-onnx"] / cpu["torch.export.export"],
        "cpu_ratio_torch_onnx": cpu["dynamo-onnx"] / cpu["torch.onnx"],
        "passes_s": passes,
        "gc_full_s": {k: statistics.median(r["gc_full_s"] for r in v) for k, v in runs.items()},
        "gc_full_runs": {k: sum(r["gc_collections"][2] > 0 for r in v) for k, v in runs.items()},
        "gc_young_s": {k: statistics.median(r["gc_young_s"] for r in v) for k, v in runs.items()},
        "full_after": {k: [r["full_after"]["lists"] for r in v] for k, v in runs.items()},
    }


# -- the report -------------------------------------------------------------------------------


def _top(ops: dict[str, int], count: int = 4) -> str:
    shown = ", ".join(f"{op} {n}" for op, n in list(ops.items())[:count])
    return shown + ("..." if len(ops) > count else "")


def markdown(results: dict[str, Any]) -> str:
    """A table per model (its heading says where its tokens are compared), then GPT-2's line."""
    lines = []
    for name, result in results["models"].items():
        lines += [
            f"**{name}** ({_describe(result['config'])}; tokens at prompts of "
            f"{result['agreement_prompt']}):",
            "",
            *model_table(result),
            "",
        ]
    gpt2 = results.get("gpt2")
    if gpt2:
        lines += [gpt2_line(gpt2)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _describe(config: dict[str, Any]) -> str:
    text = f"hidden {config['hidden_size']}, {config['num_hidden_layers']} layers"
    if config.get("sliding_window"):
        text += f", window {config['sliding_window']}"
    return text


def _failed_cell(name: str, info: dict[str, Any]) -> str:
    """A folder that was not built or does not load: the builder's says so, with the line
    that says why (ours then generate alone, without a ratio)."""
    if "skipped" in info:
        return info["skipped"]
    lines = [line.strip() for line in info["failed"].splitlines() if line.strip()]
    return f"{_who_failed(name)}: {_escaped(lines[-1] if lines else '')}"


def model_table(result: dict[str, Any]) -> list[str]:
    folders = result["folders"]
    times = result["timings"]
    agree = result["agreement"]
    lines = [
        "| folder | export s | nodes | "
        + " | ".join(f"prefill {p} ms | decode {p} ms/token" for p in PROMPTS)
        + " | tokens |",
        "| --- " * (4 + 2 * len(PROMPTS)) + "|",
    ]
    for name, info in folders.items():
        if "folder" not in info:
            lines.append(f"| {name} | {_failed_cell(name, info)} |" + " |" * (2 + 2 * len(PROMPTS)))
            continue
        precision = name.rsplit(" ", 1)[1]
        base = times.get(f"builder {precision}")
        export_base = folders.get(f"builder {precision}", {}).get("export_s")
        cells = [name, _with_ratio(info["export_s"], export_base, "{:.1f}")]
        ops = info["ops"]
        cells.append(f"{sum(ops.values())} ({_top(ops)})")
        for length in map(str, PROMPTS):
            theirs = base.get(length) if base else None
            cells += _time_cells(name, times[name][length], theirs, ("prefill_ms", "decode_ms"))
        a = agree.get(name)
        if a and "failed" in a:
            text = f"{_who_failed(name)}: {_escaped(a['failed'])}"
        elif a:
            text = (
                f"greedy: {a['equal_share']:.0%} equal to {a['against']} (the first "
                f"{a['mean_prefix']:.1f} of {NEW_TOKENS} on average)"
            )
        else:
            text = ""
        top1 = result.get("top1", {}).get(name)
        if top1 is not None:
            text += f"; top-1 {top1:.1%} of fp32's (teacher-forced)"
        cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", *_cpu_table(folders, times)]


def gpt2_line(gpt2: dict[str, Any]) -> str:
    """The report's lines for :func:`gpt2_overhead`'s result (bench-llm's and make bench's):
    the ratios, then the split of our export by pass."""
    med, cpu = gpt2["median_s"], gpt2["median_cpu_s"]
    count = len(gpt2["seconds"]["dynamo-onnx"])
    split = ", ".join(f"{name} {s:.2f}" for name, s in gpt2["passes_s"].items() if s >= 0.005)
    return (
        f"GPT-2 124M, `dynamo_onnx.export(optimize=False)` against "
        f"`torch.export.export(strict=False)` alone: {med['dynamo-onnx']:.2f} s / "
        f"{med['torch.export.export']:.2f} s, **{gpt2['ratio']:.2f}x**; against "
        f"`torch.onnx.export(dynamo=True, optimize=False)`: {med['torch.onnx']:.2f} s, "
        f"**{gpt2['ratio_torch_onnx']:.2f}x** (medians of {count} fresh processes each, "
        f"alternating; in CPU time of the process {cpu['dynamo-onnx']:.2f} s / "
        f"{cpu['torch.export.export']:.2f} s / {cpu['torch.onnx']:.2f} s, "
        f"{gpt2['cpu_ratio']:.2f}x and {gpt2['cpu_ratio_torch_onnx']:.2f}x).\n\n"
        f"Our export by pass (median wall seconds): {split}.{_collections_line(gpt2, count)}"
    )


def _collections_line(gpt2: dict[str, Any], count: int) -> str:
    """Python's full garbage collections inside each timed call, and the young ones."""
    if "gc_full_s" not in gpt2:
        return ""
    cells = ", ".join(
        f"{kind} {gpt2['gc_full_runs'][kind]} of {count} runs "
        f"(median {gpt2['gc_full_s'][kind]:.2f} s CPU; young ones {gpt2['gc_young_s'][kind]:.2f} s)"
        for kind in GPT2_KINDS
    )
    line = f"\n\nA full garbage collection inside the timed call: {cells}."
    if "full_after" in gpt2:
        after = ", ".join(
            f"{kind} "
            + "/".join("none" if n is None else f"{n:,}" for n in gpt2["full_after"][kind])
            for kind in GPT2_KINDS
        )
        line += (
            f" The caller's first full collection after the call, in small lists built "
            f"(none within {_AFTER_LISTS:,}): {after}."
        )
    return line


def _cpu_table(folders: dict[str, Any], times: dict[str, Any]) -> list[str]:
    """The same runs in CPU time of the one-thread process: on a shared machine the wall
    time also counts the waits for a core, which this does not."""
    lines = [
        "CPU time of the same runs (the process, one ORT thread):",
        "",
        "| folder | "
        + " | ".join(f"prefill {p} CPU ms | decode {p} CPU ms/token" for p in PROMPTS)
        + " |",
        "| --- " * (1 + 2 * len(PROMPTS)) + "|",
    ]
    for name in folders:
        if name not in times:
            continue
        base = times.get(f"builder {name.rsplit(' ', 1)[1]}")
        cells = [name]
        for length in map(str, PROMPTS):
            theirs = base.get(length) if base else None
            keys = ("prefill_cpu_ms", "decode_cpu_ms")
            cells += _time_cells(name, times[name][length], theirs, keys)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _who_failed(name: str) -> str:
    return "builder failed" if name.startswith("builder") else "FAILED"


def _escaped(text: str) -> str:
    return text[:200].replace("|", "\\|")


def _time_cells(
    name: str, mine: dict[str, Any], theirs: dict[str, Any] | None, keys: tuple[str, str]
) -> list[str]:
    """A prefill and a decode cell, with the ratio to the builder's where its folder ran at
    this length; a folder that failed at it says so (and ours then stand alone)."""
    if "failed" in mine:
        return [f"{_who_failed(name)}: {_escaped(mine['failed'])}", ""]
    if theirs is not None and "failed" in theirs:
        theirs = None
    forms = ("{:.1f}", "{:.2f}")
    return [
        _with_ratio(mine[key], theirs[key] if theirs else None, form)
        for key, form in zip(keys, forms)
    ]


def _with_ratio(value: float, base: float | None, form: str) -> str:
    text = form.format(value)
    if base and value is not base:
        text += f" ({value / base:.2f}x)"
    return text


def bench_model(name: str, size: dict[str, Any], work: Path, runs: int, log: Any) -> dict[str, Any]:
    """One model's folders, timings and token agreement."""
    model = MODELS[name]
    config = model.config(size)
    hf = work / "hf"
    if not (hf / "config.json").exists():
        save_checkpoint(hf, config, model.model_type)
    print(f"-- {name}", file=log)
    folders = build(hf, work, log)
    ready = {n: Path(i["folder"]) for n, i in folders.items() if "folder" in i}
    for folder_name, path in ready.items():
        folders[folder_name]["ops"] = op_counts(path)
        one_thread(path)
    head_size = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return {
        "config": config,
        "agreement_prompt": model.agreement_prompt,
        "folders": folders,
        "timings": timings(ready, runs, log),
        "agreement": agreement(ready, hf, model.agreement_prompt),
        "top1": top1_agreement(ready, head_size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="keep the folders here (default: a temporary one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gpt2-repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="tiny models: checks the script")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--gpt2-worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=str(RESULTS / "llm_genai.json"))
    parser.add_argument("--markdown", default=str(RESULTS / "llm_genai.md"))
    args = parser.parse_args()
    if args.gpt2_worker:
        print(json.dumps(gpt2_worker(args.gpt2_worker)))
        return
    log = sys.stderr
    size = SMALL if args.small else LLAMA
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        models = {
            name: bench_model(name, size, work / name, args.runs, log) for name in args.models
        }
        results = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "prompts": list(PROMPTS),
            "new_tokens": NEW_TOKENS,
            "runs": args.runs,
            "models": models,
            "gpt2": gpt2_overhead(args.gpt2_repeats, log) if args.gpt2_repeats else None,
        }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")
    table = markdown(results)
    atomic_write_text(args.markdown, table)
    print(table)


if __name__ == "__main__":
    main()
