"""Export a small Llama with its KV cache, then generate with the ONNX model alone.

The model is built from a small config (random weights, no download). The export takes the
cache as it is (a ``DynamicCache``): the ONNX model's inputs are ``input_ids``,
``attention_mask``, ``position_ids`` and ``past_key_values.<i>.key|value``; its outputs
``logits`` and ``present.<i>.key|value``. Generation runs in ONNX Runtime only: a prefill
with an empty past (length 0), then one token at a time, feeding the presents back. The
tokens equal ``model.generate(do_sample=False)``.

    python examples/llm_generate.py [directory]
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import transformers

import dynamo_onnx

NEW_TOKENS = 8


def small_llama() -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).eval()


def cache_parameter(model: transformers.PreTrainedModel) -> str:
    """The name ``forward`` takes the cache by: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The cache a model returned (``output.cache``, or ``output.past_key_values`` before
    transformers 5.24)."""
    found = getattr(output, "cache", None)
    return found if found is not None else output.past_key_values


def example_inputs(
    model: transformers.PreTrainedModel, batch: int = 2, new: int = 3, past: int = 4
):
    """Inputs of one decoding step: ``new`` tokens after a past of ``past``."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache = transformers.DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        shape = (batch, heads, past, head_dim)
        cache.update(torch.randn(shape), torch.randn(shape), layer)
    return {
        "input_ids": torch.randint(1, config.vocab_size, (batch, new)),
        "attention_mask": torch.ones(batch, past + new, dtype=torch.int64),
        "position_ids": torch.arange(past, past + new).expand(batch, new),
        cache_parameter(model): cache,
        "use_cache": True,
    }


def generate(session: ort.InferenceSession, prompt: np.ndarray, steps: int) -> np.ndarray:
    """Greedy generation with the ONNX model: prefill with an empty past, then decode."""
    feeds = {i.name: i for i in session.get_inputs()}
    batch, length = prompt.shape
    past = {
        name: np.zeros((batch, meta.shape[1], 0, meta.shape[3]), dtype=np.float32)
        for name, meta in feeds.items()
        if name.startswith("past_key_values.")
    }
    tokens, ids, seen = [], prompt, 0
    for _ in range(steps):
        new = ids.shape[1]
        outputs = session.run(
            None,
            {
                "input_ids": ids,
                "attention_mask": np.ones((batch, seen + new), dtype=np.int64),
                "position_ids": np.arange(seen, seen + new, dtype=np.int64)[None].repeat(batch, 0),
                **past,
            },
        )
        names = [o.name for o in session.get_outputs()]
        result = dict(zip(names, outputs))
        ids = result["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(ids)
        past = {
            name.replace("present.", "past_key_values."): v
            for name, v in result.items()
            if name.startswith("present.")
        }
        seen += new
    return np.concatenate(tokens, axis=1)


def main(directory: str) -> None:
    model = small_llama()
    program = dynamo_onnx.export(model, (), kwargs=example_inputs(model))
    path = os.path.join(directory, "llama.onnx")
    program.save(path)
    print("inputs: ", [v.name for v in program.model.graph.inputs])
    print("outputs:", [v.name for v in program.model.graph.outputs])

    prompt = torch.randint(1, model.config.vocab_size, (1, 5))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    onnx_tokens = generate(session, prompt.numpy(), NEW_TOKENS)
    eager = model.generate(
        prompt, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS
    )
    eager_tokens = eager[:, prompt.shape[1] :].numpy()
    print("ONNX Runtime:", onnx_tokens.tolist())
    print("transformers:", eager_tokens.tolist())
    if not np.array_equal(onnx_tokens, eager_tokens):
        sys.exit("the ONNX model generated other tokens than transformers")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
