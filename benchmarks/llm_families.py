"""The causal LM families of ``make llm-compat`` (benchmarks/llm_compat.py): for each, a tiny
random-weight configuration of the family's transformers class that keeps what makes the
family itself (its sliding windows, LongRoPE, multipliers, NoPE layers, experts), with
windows shorter than the compared prompt so that generation crosses them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

__all__ = ["FAMILIES", "PROMPT_LENGTH", "WINDOW", "Family", "by_name", "save_folder"]

#: Every sliding window of the matrix, in tokens: well under the prompt.
WINDOW = 16
#: The prompt compared, in tokens: longer than any window and than LongRoPE's original
#: context (so its long factors are used).
PROMPT_LENGTH = 40
#: LongRoPE's original context: under the prompt, so generation runs on the long factors.
LONGROPE_ORIGINAL = 32
#: The model's vocabulary (the tokenizer's 100 tokens are within it). At 128 the model
#: builder's folders compute other logits than transformers from the first position on; at
#: 1000 the same Llama's agree.
VOCABULARY = 1000
#: The context of every family.
CONTEXT = 128
#: The tokenizer's specials (trained in :func:`_tokenizer`): <unk> 0, <s> 1, </s> 2.
SPECIALS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
#: The weights' standard deviation: transformers' default 0.02 makes a tiny model whose
#: attention is nearly uniform, so its tokens hardly depend on positions (a LongRoPE or a
#: window changes none of them); at 0.1 they do.
INITIALIZER_RANGE = 0.1
#: A decoder small enough to export in seconds; head size 16, which GroupQueryAttention takes
#: on the CPU.
DECODER: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": VOCABULARY,
    "max_position_embeddings": CONTEXT,
    "initializer_range": INITIALIZER_RANGE,
    **SPECIALS,
}
HEAD_DIM = {"head_dim": 16}
EXPERTS = {"num_local_experts": 4, "num_experts_per_tok": 2}


def _longrope(**scales: float) -> dict[str, Any]:
    """Phi-3's LongRoPE with factors that differ (the long ones are used past 32 tokens);
    ``scales``: PhiMoE's ``short_mscale`` and ``long_mscale``."""
    half = DECODER["hidden_size"] // DECODER["num_attention_heads"] // 2
    return {
        "original_max_position_embeddings": LONGROPE_ORIGINAL,
        "rope_parameters": {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 0.5 * i for i in range(half)],
            "original_max_position_embeddings": LONGROPE_ORIGINAL,
            **scales,
        },
    }


#: GPT-OSS's YaRN, scaled from an original context under the prompt.
YARN = {
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 4.0,
        "original_max_position_embeddings": LONGROPE_ORIGINAL,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    }
}


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the matrix: transformers' ``model_type`` and the configuration's fields."""

    name: str
    model_type: str
    fields: dict[str, Any]
    #: what the row exercises beyond a plain decoder (shown in the table)
    feature: str = ""

    def config(self) -> Any:
        import transformers

        return transformers.AutoConfig.for_model(self.model_type, **self.fields)


FAMILIES: tuple[Family, ...] = (
    Family("llama", "llama", DECODER),
    Family("mistral", "mistral", {**DECODER, "sliding_window": WINDOW}, f"window {WINDOW}"),
    Family("qwen2", "qwen2", DECODER),
    Family(
        "qwen2-window",
        "qwen2",
        {**DECODER, "use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
        f"window {WINDOW} on layer 1",
    ),
    Family("qwen3", "qwen3", {**DECODER, **HEAD_DIM}, "q/k norms"),
    # a 4k Phi-3: its original context is its context (the builder reads a difference as
    # LongRoPE)
    Family("phi3", "phi3", {**DECODER, "original_max_position_embeddings": CONTEXT}),
    Family("phi3-longrope", "phi3", {**DECODER, **_longrope()}, "LongRoPE past 32 tokens"),
    Family("gemma", "gemma", {**DECODER, **HEAD_DIM}),
    Family(
        "gemma2",
        "gemma2",
        {**DECODER, **HEAD_DIM, "sliding_window": WINDOW},
        f"window {WINDOW} every other layer, soft-capping",
    ),
    Family(
        "gemma3-text",
        "gemma3_text",
        {
            **DECODER,
            **HEAD_DIM,
            "sliding_window": WINDOW,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        f"window {WINDOW} on layer 0, q/k norms",
    ),
    Family(
        "gpt2",
        "gpt2",
        {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": CONTEXT, "vocab_size": VOCABULARY}
        | {"bos_token_id": 1, "eos_token_id": 2, "initializer_range": INITIALIZER_RANGE},
        "Conv1D, learned positions",
    ),
    Family(
        "granite",
        "granite",
        {
            **DECODER,
            "embedding_multiplier": 12.0,
            "residual_multiplier": 0.22,
            "attention_multiplier": 0.0078125,
            "logits_scaling": 8.0,
        },
        "multipliers",
    ),
    Family("olmo", "olmo", {**DECODER, "clip_qkv": 8.0}, "clip_qkv"),
    Family("smollm3", "smollm3", {**DECODER, "no_rope_layer_interval": 2}, "NoPE on layer 1"),
    # head size 32: its half rotation has 8 cache columns, GroupQueryAttention's least
    Family("nemotron", "nemotron", {**DECODER, "head_dim": 32}, "half rotary, relu2"),
    Family("mixtral", "mixtral", {**DECODER, **EXPERTS}, "4 experts, top 2"),
    Family(
        "phimoe",
        "phimoe",
        {**DECODER, **EXPERTS, **_longrope(short_mscale=1.2, long_mscale=1.2)},
        "4 experts, top 2, LongRoPE",
    ),
    Family(
        "gpt-oss",
        "gpt_oss",
        {
            **DECODER,
            **HEAD_DIM,
            **EXPERTS,
            **YARN,
            "sliding_window": WINDOW,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        f"4 experts, sinks, YaRN, window {WINDOW} on layer 0",
    ),
)


def by_name(names: list[str] | None) -> list[Family]:
    if not names:
        return list(FAMILIES)
    known = {f.name: f for f in FAMILIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(known)}")
    return [known[n] for n in names]


def _tokenizer() -> Any:
    """A byte-level BPE tokenizer trained here (no download), 100 tokens: within the
    model's vocabulary (onnxruntime-genai and the builder both need one)."""
    import tokenizers
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["the cat sat on the mat", "a dog and a cat", "onnx runtime generates tokens"]
    trainer = trainers.BpeTrainer(vocab_size=100, special_tokens=["<unk>", "<s>", "</s>"])
    bpe.train_from_iterator(corpus * 20, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def save_folder(family: Family, path: Path) -> Any:
    """The family's random-weight model (seeded) and the tokenizer, ``save_pretrained`` to
    ``path``; returns the model, in eval mode."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(family.config()).eval()
    model.save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return model
