"""``genai_config.json``: what onnxruntime-genai needs beside a causal LM's ONNX model to
generate with it (``onnxruntime_genai.Model(directory)``).

Written from the transformers config of the model that was exported and the ONNX model's
own input and output names, for a model exported with its KV cache under the names
onnxruntime-genai uses (``past_key_values.%d.key``, ``present.%d.key``).
"""

from __future__ import annotations

import json
from typing import Any

import onnx_ir as ir

__all__ = ["FILENAME", "dumps", "genai_config"]

FILENAME = "genai_config.json"


def _token(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) else None


def genai_config(model: ir.Model, config: Any, filename: str) -> dict[str, Any] | None:
    """The configuration of ``model`` (saved as ``filename``) for onnxruntime-genai, or None
    when it is not a decoder exported with its cache under onnxruntime-genai's names."""
    inputs = [v.name for v in model.graph.inputs]
    outputs = [v.name for v in model.graph.outputs]
    model_type = getattr(config, "model_type", None)
    if (
        not model_type
        or "input_ids" not in inputs
        or "past_key_values.0.key" not in inputs
        or "logits" not in outputs
        or "present.0.key" not in outputs
    ):
        return None
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // heads
    context = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", 2048
    )
    names = {
        "input_ids": "input_ids",
        **{n: n for n in ("attention_mask", "position_ids") if n in inputs},
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    decoder: dict[str, Any] = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": filename,
        "head_size": head_size,
        "hidden_size": config.hidden_size,
        "inputs": names,
        "outputs": {
            "logits": "logits",
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
        "num_attention_heads": heads,
        "num_hidden_layers": config.num_hidden_layers,
        "num_key_value_heads": kv_heads,
    }
    eos = _token(config, "eos_token_id")
    pad = _token(config, "pad_token_id")
    tokens = {"bos_token_id": _token(config, "bos_token_id"), "eos_token_id": eos}
    tokens["pad_token_id"] = pad if pad is not None else eos
    return {
        "model": {
            # onnxruntime-genai reads numbers: an id the config does not give is left out
            **{k: v for k, v in tokens.items() if v is not None},
            "context_length": context,
            "decoder": decoder,
            "type": model_type,
            "vocab_size": config.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,  # the presents grow by the new tokens
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def dumps(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=4) + "\n"
