"""Small-config transformers models (random weights, no downloads) with example inputs, for
the tests that export real architectures. Each builder returns (model in eval mode, args,
kwargs, dynamic_shapes by input name: batch and sequence dynamic)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import transformers

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any], dict[str, Any]]

#: A transformer decoder small enough to export in about a second.
DECODER = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,
    "use_cache": False,
}
ENCODER = {
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,
}
TEXT = {"input_ids": {0: "batch", 1: "sequence"}}
TEXT_MASK = {**TEXT, "attention_mask": {0: "batch", 1: "sequence"}}


def _ids(batch: int = 2, length: int = 7) -> torch.Tensor:
    return torch.randint(1, 100, (batch, length))


def _text(model: torch.nn.Module, mask: bool = False) -> Built:
    ids = _ids()
    kwargs = {"attention_mask": torch.ones_like(ids)} if mask else {}
    return model.eval(), (ids,), kwargs, TEXT_MASK if mask else TEXT


def gpt2() -> Built:
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    return _text(transformers.GPT2Model(config))


def bert() -> Built:
    return _text(transformers.BertModel(transformers.BertConfig(**ENCODER)), mask=True)


def roberta() -> Built:
    config = transformers.RobertaConfig(**{**ENCODER, "max_position_embeddings": 72})
    return _text(transformers.RobertaModel(config), mask=True)


def distilbert() -> Built:
    config = transformers.DistilBertConfig(
        n_layers=2, n_heads=2, dim=32, hidden_dim=64, vocab_size=100, max_position_embeddings=64
    )
    return _text(transformers.DistilBertModel(config), mask=True)


def llama() -> Built:
    return _text(transformers.LlamaModel(transformers.LlamaConfig(**DECODER)))


def mistral() -> Built:
    return _text(transformers.MistralModel(transformers.MistralConfig(**DECODER)))


def qwen2() -> Built:
    return _text(transformers.Qwen2Model(transformers.Qwen2Config(**DECODER)))


def phi3() -> Built:
    config = transformers.Phi3Config(**DECODER, pad_token_id=0)
    return _text(transformers.Phi3Model(config))


def gemma() -> Built:
    config = transformers.GemmaConfig(**DECODER, head_dim=8)
    return _text(transformers.GemmaModel(config))


def t5() -> Built:
    config = transformers.T5Config(
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        d_model=32,
        d_kv=16,
        d_ff=64,
        vocab_size=100,
        use_cache=False,
    )
    kwargs = {"input_ids": _ids(), "decoder_input_ids": _ids(length=5)}
    spec = {
        "input_ids": {0: "batch", 1: "sequence"},
        "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
    }
    return transformers.T5Model(config).eval(), (), kwargs, spec


def vit() -> Built:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    pixels = torch.randn(2, 3, 32, 32)
    return transformers.ViTModel(config).eval(), (pixels,), {}, {"pixel_values": {0: "batch"}}


#: A Whisper small enough to export in about a second.
WHISPER = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "num_mel_bins": 16,
    "max_source_positions": 32,
    "max_target_positions": 32,
    "vocab_size": 100,
    "use_cache": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
}


def whisper() -> Built:
    config = transformers.WhisperConfig(**WHISPER)
    features = torch.randn(2, 16, 64)  # 64 frames = 2 * max_source_positions
    kwargs = {"input_features": features, "decoder_input_ids": _ids(length=5)}
    spec = {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "sequence"}}
    return transformers.WhisperModel(config).eval(), (), kwargs, spec


#: name -> builder, every architecture the trust tests export.
MODELS: dict[str, Callable[[], Built]] = {
    "gpt2": gpt2,
    "bert": bert,
    "roberta": roberta,
    "distilbert": distilbert,
    "llama": llama,
    "mistral": mistral,
    "qwen2": qwen2,
    "phi3": phi3,
    "gemma": gemma,
    "t5": t5,
    "vit": vit,
    "whisper": whisper,
}


#: The causal LMs exported with their KV cache (test_llm_cache, test_spec_forms).
CAUSAL_LMS = ("llama", "qwen2", "mistral", "gemma2", "phi3", "gpt2", "mixtral")


def causal_lm(name: str) -> transformers.PreTrainedModel:
    """A small causal LM of architecture ``name`` that generates with its cache, in eval
    mode; the same weights every call (seeded)."""
    torch.manual_seed(0)
    decoder = {**DECODER, "use_cache": True}
    if name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder))
    elif name == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**decoder))
    elif name == "mistral":
        config = transformers.MistralConfig(**decoder, sliding_window=4)
        model = transformers.MistralForCausalLM(config)
    elif name == "gemma2":  # sliding layers (window 4) between full ones: the past crosses it
        config = transformers.Gemma2Config(**decoder, head_dim=8, sliding_window=4)
        model = transformers.Gemma2ForCausalLM(config)
    elif name == "phi3":
        model = transformers.Phi3ForCausalLM(transformers.Phi3Config(**decoder, pad_token_id=0))
    elif name == "mixtral":
        config = transformers.MixtralConfig(**decoder, num_local_experts=4, num_experts_per_tok=2)
        model = transformers.MixtralForCausalLM(config)
    else:
        assert name == "gpt2", name
        config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100)
        model = transformers.GPT2LMHeadModel(config)
    return model.eval()


@contextlib.contextmanager
def registered_cache() -> Iterator[None]:
    """transformers' ``register_dynamic_cache_export_support()`` for the block only: the
    registration is global, and the other tests take the cache as a leaf."""
    from torch.fx import _pytree as fx_pytree
    from torch.utils import _pytree
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    cls = transformers.DynamicCache
    already = cls in _pytree.SUPPORTED_NODES
    register_dynamic_cache_export_support()
    try:
        yield
    finally:
        if not already:
            _pytree._deregister_pytree_node(cls)
            fx_pytree._deregister_pytree_flatten_spec(cls)
