"""``genai_config.json``: what onnxruntime-genai needs beside a causal LM's ONNX model to
generate with it (``onnxruntime_genai.Model(directory)``).

Written from the transformers config of the model that was exported and the ONNX model's
own input and output names, for a model exported with its KV cache under the names
onnxruntime-genai uses (``past_key_values.%d.key``, ``present.%d.key``). The special
tokens and the search options are the checkpoint's: its generation config (what
``model.generate`` uses: every end-of-sequence id, the sampling settings) before its model
config.
"""

from __future__ import annotations

import json
from typing import Any

import onnx_ir as ir

from dynamo_onnx.integrations.transformers.genai_types import genai_type

__all__ = ["FILENAME", "dumps", "genai_config", "search_options"]

FILENAME = "genai_config.json"


def _ids(value: Any) -> list[int]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _token_ids(name: str, *sources: Any) -> list[int]:
    """The ids ``name`` has in the first of ``sources`` that gives any (a generation
    config, then the model config)."""
    for source in sources:
        found = _ids(getattr(source, name, None)) if source is not None else []
        if found:
            return found
    return []


def special_tokens(config: Any, generation: Any | None) -> dict[str, int | list[int]]:
    """bos, eos and pad ids as ``generate`` reads them: every end-of-sequence id (a list
    stays a list: Llama 3 ends a turn with either of two), pad falling back to the first
    eos. onnxruntime-genai reads numbers: an id neither config gives is left out."""
    tokens: dict[str, int | list[int]] = {}
    bos = _token_ids("bos_token_id", generation, config)
    eos = _token_ids("eos_token_id", generation, config)
    pad = _token_ids("pad_token_id", generation, config) or eos
    if bos:
        tokens["bos_token_id"] = bos[0]
    if eos:
        tokens["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    if pad:
        tokens["pad_token_id"] = pad[0]
    return tokens


def search_options(generation: Any | None, vocab_size: int, context: int) -> dict[str, Any]:
    """The search options of a generation config (``generation_config.json``): sampling,
    temperature, top-k, top-p, repetition penalty and max length where it sets them,
    greedy search over the whole context otherwise. A top-k it leaves unset under
    sampling is no limit, as in transformers: the vocabulary."""
    given = generation.to_diff_dict() if generation is not None else {}
    sample = bool(given.get("do_sample", False))
    options: dict[str, Any] = {
        "do_sample": sample,
        "max_length": given.get("max_length") or context,
        "repetition_penalty": float(given.get("repetition_penalty") or 1.0),
        "temperature": float(given.get("temperature") or 1.0),
        "top_k": int(given.get("top_k") or (vocab_size if sample else 1)),
        "top_p": float(given.get("top_p") or 1.0),
    }
    return options


def genai_config(
    model: ir.Model, config: Any, filename: str, generation: Any | None = None
) -> dict[str, Any] | None:
    """The configuration of ``model`` (saved as ``filename``) for onnxruntime-genai, or None
    when it is not a decoder exported with its cache under onnxruntime-genai's names.
    ``generation`` is the model's ``GenerationConfig``, when it has one."""
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
    return {
        "model": {
            **special_tokens(config, generation),
            "context_length": context,
            "decoder": decoder,
            "type": genai_type(model_type),
            "vocab_size": config.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "early_stopping": True,
            "length_penalty": 1.0,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,  # the presents grow by the new tokens
            **search_options(generation, config.vocab_size, context),
        },
    }


def dumps(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=4) + "\n"
