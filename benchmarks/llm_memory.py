"""Peak memory and wall time of ``export-llm`` against onnxruntime-genai's model builder on
checkpoints of real sizes (issue 44), each command in a fresh process, one at a time.

Two random-weight Llama checkpoints saved in bfloat16 as real ones are (hidden 2048, GQA
16/4, intermediate 5632, vocab 32000): 8 layers (0.49B parameters, 0.98 GB) and 24 layers
(1.21B, 2.43 GB), written shard by shard (never a float32 copy). For each, fp32 and int4,
``dynamo-onnx export-llm`` and ``python -m onnxruntime_genai.models.builder``; the peak
resident memory is the child's own (``os.wait4``'s rusage, as ``/usr/bin/time -v``
reports it). Then an estimate for an 8B model from the measured cost per weight byte.

    python benchmarks/llm_memory.py [--workdir /tmp/llm-memory] [--small]

Writes benchmarks/results/llm_memory.{json,md}; docs/performance.md shows the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_file

from dynamo_onnx.files import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results"
LLAMA = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
SMALL = {**LLAMA, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 1000}
#: Layers of the two checkpoints.
LAYERS = (8, 24)
#: Llama-3-8B's parameters and sizes, for the estimate.
EIGHT_B = {
    "parameters": 8.03e9,
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_key_value_heads": 8,
    "num_attention_heads": 32,
}
SHARD_BYTES = 1_000_000_000


def save_checkpoint(path: Path, config: dict[str, Any], layers: int) -> dict[str, float]:
    """A bfloat16 checkpoint of random weights, one shard at a time, with its index."""
    llama = transformers.LlamaConfig(**config, num_hidden_layers=layers, dtype="bfloat16")
    llama.architectures = ["LlamaForCausalLM"]  # what the builder dispatches on
    with torch.device("meta"):
        shapes = {n: t.shape for n, t in transformers.LlamaForCausalLM(llama).state_dict().items()}
    path.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        if size >= SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += shape.numel() * 2
    weight_map, total = {}, 0
    for number, names in enumerate(shards, 1):
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name in names:
            if name.endswith("norm.weight"):
                tensors[name] = torch.ones(shapes[name], dtype=torch.bfloat16)
            else:
                random = torch.randn(shapes[name], generator=generator) * 0.02
                tensors[name] = random.to(torch.bfloat16)
            weight_map[name] = file
            total += tensors[name].numel() * 2
        save_file(tensors, path / file, metadata={"format": "pt"})
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    llama.save_pretrained(path)
    _save_tokenizer(path)
    return {"parameters": sum(s.numel() for s in shapes.values()), "bytes": total}


def _save_tokenizer(path: Path) -> None:
    """A byte-level BPE tokenizer trained here (the builder needs one; no download)."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    bpe.train_from_iterator(["the cat sat on the mat"] * 10, trainer)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(path)


#: Runs the command given and prints its own CPU seconds and peak RSS (KiB) last. A child of this process
#: would report this process's resident memory at the fork as its peak (Linux keeps the
#: high-water mark across fork and exec), and this one holds the checkpoint it just built:
#: the command measured is the child of this launcher, which holds almost nothing.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "print(f'cpu-s {usage.ru_utime + usage.ru_stime:.1f}', flush=True)\n"
    "print(f'peak-kib {usage.ru_maxrss}', flush=True)\n"
    "code = os.waitstatus_to_exitcode(status)\n"
    "sys.exit(code if code >= 0 else 128 - code)\n"
)


def measured(command: list[str]) -> dict[str, Any]:
    """Run ``command``; its wall time, its own CPU time (user and system: on a shared
    machine, what the wall time would be alone, less the waits for the disk) and peak RSS
    (Linux reports KiB)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.run(
            [sys.executable, "-c", LAUNCHER, *command], stdout=out, stderr=subprocess.STDOUT
        )
        seconds = time.perf_counter() - start
        out.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
    peak = next(
        (int(line.split()[1]) for line in reversed(lines) if line.startswith("peak-kib ")), 0
    )
    cpu = next(
        (float(line.split()[1]) for line in reversed(lines) if line.startswith("cpu-s ")), 0.0
    )
    result: dict[str, Any] = {"wall_s": round(seconds, 1), "cpu_s": cpu, "peak_rss_gb": peak / 1e6}
    if proc.returncode:
        result["failed"] = "\n".join(lines[-5:])
    return result


def commands(hf: Path, work: Path, precision: str) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "dynamo-onnx": [py, "-m", "dynamo_onnx.cli", "export-llm", str(hf), "--quiet"]
        + ["-o", str(work / f"ours-{precision}"), "--precision", precision],
        "builder": [py, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-e", "cpu"]
        + ["-o", str(work / f"builder-{precision}"), "-p", precision]
        + ["-c", str(work / "builder-cache")],
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| checkpoint | precision | dynamo-onnx peak RSS / wall | builder peak RSS / wall |",
        "| --- | --- | --- | --- |",
    ]
    for row in results["rows"]:
        cells = []
        for tool in ("dynamo-onnx", "builder"):
            run = row[tool]
            cpu = f" ({run['cpu_s']:.0f} s CPU)" if run.get("cpu_s") else ""
            cells.append(
                "failed"
                if "failed" in run
                else f"{run['peak_rss_gb']:.2f} GB / {run['wall_s']:.0f} s{cpu}"
            )
        checkpoint = f"{row['parameters'] / 1e9:.2f}B ({row['bytes'] / 1e9:.2f} GB bf16)"
        lines.append(f"| {checkpoint} | {row['precision']} | {cells[0]} | {cells[1]} |")
    estimate = results.get("estimate")
    if estimate:
        lines += [
            "",
            f"8B estimate (fp32, from the measured cost per weight byte): dynamo-onnx about "
            f"{estimate['wall_s']:.0f} s, peak RSS about {estimate['peak_rss_gb']:.1f} GB.",
        ]
    return "\n".join(lines) + "\n"


def copy_parameters(config: dict[str, Any]) -> int:
    """Parameters of export-llm's one-layer copy of a Llama (embedding, LM head, one layer):
    what its checks after the save hold in float32 (DO533/DO534)."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    kv = hidden * config["num_key_value_heads"] // config["num_attention_heads"]
    layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * config["intermediate_size"]
    return 2 * vocab * hidden + layer


def estimate(rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, float] | None:
    """The 8B fp32 export's time and peak from the two fp32 rows. Time: the larger row's
    plus the measured cost per weight byte (the difference of the two rows over their
    difference in bytes, capture included, so it errs long) times the bytes to add. Peak:
    the larger row's plus the larger of two growths: the largest tensor's (Llama-3's
    embedding, 128256 x 4096, read in bfloat16 and held in float32 while written) and the
    layer copy's (its float32 weights, held by the checks after the save)."""
    fp32 = [r for r in rows if r["precision"] == "fp32" and "failed" not in r["dynamo-onnx"]]
    if len(fp32) != 2:
        return None
    small, large = sorted(fp32, key=lambda r: r["bytes"])
    per_byte = (large["dynamo-onnx"]["wall_s"] - small["dynamo-onnx"]["wall_s"]) / (
        large["bytes"] - small["bytes"]
    )
    eight_b_bytes = 2 * EIGHT_B["parameters"]  # bfloat16 on disk
    largest_here = 2 * config_vocab(large) * config_hidden(large)
    largest_8b = 2 * EIGHT_B["vocab_size"] * EIGHT_B["hidden_size"]
    copy_growth = 4 * (copy_parameters(EIGHT_B) - copy_parameters(config))
    growth = max(3 * (largest_8b - largest_here), copy_growth)
    return {
        "wall_s": large["dynamo-onnx"]["wall_s"] + per_byte * (eight_b_bytes - large["bytes"]),
        "peak_rss_gb": large["dynamo-onnx"]["peak_rss_gb"] + growth / 1e9,
        "per_byte_s": per_byte,
    }


def config_vocab(row: dict[str, Any]) -> int:
    return int(row.get("vocab_size", LLAMA["vocab_size"]))


def config_hidden(row: dict[str, Any]) -> int:
    return int(row.get("hidden_size", LLAMA["hidden_size"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="keep the checkpoints here (default: a temporary one)")
    parser.add_argument("--small", action="store_true", help="tiny checkpoints: checks the script")
    parser.add_argument("--precisions", default="fp32,int4")
    parser.add_argument("--layers", default=",".join(map(str, LAYERS)), help="checkpoints to run")
    parser.add_argument("--json", default=str(RESULTS / "llm_memory.json"))
    parser.add_argument("--markdown", default=str(RESULTS / "llm_memory.md"))
    args = parser.parse_args()
    config = SMALL if args.small else LLAMA
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        for layers in (int(n) for n in args.layers.split(",")):
            hf = work / f"llama-{layers}"
            info_file = hf / "checkpoint.json"
            if not info_file.exists():
                info = save_checkpoint(hf, config, layers)
                info_file.write_text(json.dumps(info))
            info = json.loads(info_file.read_text())
            for precision in args.precisions.split(","):
                row: dict[str, Any] = {
                    "layers": layers,
                    "precision": precision,
                    "vocab_size": config["vocab_size"],
                    "hidden_size": config["hidden_size"],
                    **info,
                }
                for tool, command in commands(hf, work / f"out-{layers}", precision).items():
                    row[tool] = measured(command)
                    print(f"{layers} layers {precision} {tool}: {row[tool]}", file=sys.stderr)
                rows.append(row)
    results = {"machine": {"cpus": os.cpu_count()}, "llama": config, "rows": rows}
    results["estimate"] = estimate(rows, config)
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")
    table = markdown(results)
    atomic_write_text(args.markdown, table)
    print(table)


if __name__ == "__main__":
    main()
