"""Export a Llama model at Llama-2-7B sizes in fake mode; print peak RSS and time.

Target (issue 6): under 1.5 GB peak RSS. The weights would take 27 GB in float32; in fake
mode they are meta tensors and the ONNX file is saved without initializers. With
``--cache``, the causal LM is exported as it generates: one decoding step with its KV cache
(a ``DynamicCache`` of fake tensors), the inputs and outputs named as onnxruntime-genai
expects (docs/llm.md).

    python benchmarks/llama_fake.py [--layers 32] [--cache] [--out /tmp/llama7b.onnx]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
import warnings

import torch
import transformers
from models import decoding_step

import dynamo_onnx


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--cache", action="store_true", help="a causal LM with its KV cache")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "llama7b_fake.onnx"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    config = transformers.LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_attention_heads=32,
        num_key_value_heads=32,
        num_hidden_layers=args.layers,
        vocab_size=32000,
        max_position_embeddings=4096,
        use_cache=args.cache,
    )
    start_rss = peak_rss_mb()
    t0 = time.perf_counter()
    with dynamo_onnx.enable_fake_mode() as fake_context:
        if args.cache:
            model = transformers.LlamaForCausalLM(config).eval()
            inputs = decoding_step(config, past=128)
        else:
            model = transformers.LlamaModel(config).eval()
            inputs = {"input_ids": torch.randint(0, 32000, (1, 128))}
    built = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    options = dynamo_onnx.ExportOptions(fake_context=fake_context)
    program = dynamo_onnx.dynamo_export(model, **inputs, export_options=options)
    exported = time.perf_counter()
    program.save(args.out, include_initializers=False, keep_initializers_as_inputs=True)
    saved = time.perf_counter()
    passes = ", ".join(f"{p.name} {p.duration_s:.1f} s" for p in program.diagnostics.passes)
    kind = "LlamaForCausalLM with its KV cache" if args.cache else "Llama"
    print(
        f"model: {kind}, {args.layers} layers, hidden 4096, {params / 1e9:.2f} B parameters (fake)"
    )
    print(f"inputs: {len(program.model.graph.inputs)}, outputs: {len(program.model.graph.outputs)}")
    print(
        f"build {built - t0:.1f} s, export {exported - built:.1f} s ({passes}), save {saved - exported:.1f} s"
    )
    print(f"ONNX: {len(program.model.graph)} nodes, {os.path.getsize(args.out) / 1e6:.1f} MB file")
    print(f"peak RSS {peak_rss_mb():.0f} MiB (at start {start_rss:.0f} MiB); target < 1536 MiB")


if __name__ == "__main__":
    main()
