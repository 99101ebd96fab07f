"""The ``type`` a ``genai_config.json`` gives onnxruntime-genai, by transformers'
``model_type``.

onnxruntime-genai (0.18) picks its model class by this name, and each class fixes the
inputs and outputs it reads. Every type it lists as a large language model, except
``gpt2``, is its decoder-only class, which reads the names this exporter writes
(``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values.%d.key`` /
``present.%d.key``, each mapped in the file); ``gpt2`` is a class of its own that reads
another cache layout ("Model input was not found"), and a family it has no type for
(``mixtral``) is refused ("Unsupported model_type in config.json"). So a family keeps its
name where genai knows it under that name with our contract, and takes the generic
``decoder`` type otherwise. Each entry has a test that generates transformers' greedy
tokens with a folder of it: llama and qwen2 in tests/integrations/transformers/test_llm_cache.py, mistral, gemma2
and gemma3_text in tests/runtimes/onnxruntime/test_ort_fusions.py, gpt2 and the default (Mixtral) in
tests/test_llm_folder_checks.py.
"""

from __future__ import annotations

__all__ = ["DECODER", "GENAI_TYPES", "genai_type"]

#: onnxruntime-genai's decoder-only type with no family behavior of its own.
DECODER = "decoder"

#: transformers' model_type -> onnxruntime-genai's type, for the families tested to
#: generate transformers' greedy tokens under that type.
GENAI_TYPES: dict[str, str] = {
    "llama": "llama",
    "qwen2": "qwen2",
    "mistral": "mistral",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3_text",
    "gpt2": DECODER,  # genai's gpt2 type reads one past tensor per layer, not ours
}


def genai_type(model_type: str) -> str:
    """The type onnxruntime-genai runs our decoder of ``model_type`` under."""
    return GENAI_TYPES.get(model_type, DECODER)
