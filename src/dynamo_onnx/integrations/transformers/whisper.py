"""Whisper as onnxruntime-genai's ``whisper`` type runs it: an encoder and a decoder step.

onnxruntime-genai runs speech recognition as two models: the encoder takes the log-mel
features and returns its hidden states with every decoder layer's cross-attention keys and
values, computed once per clip; the decoder takes the tokens, its self-attention cache and
those cross keys/values, and returns the logits and the grown cache. The two modules here
are that contract around transformers' own ``WhisperForConditionalGeneration``: they call
its encoder, its cross-attention projections and its forward with an
``EncoderDecoderCache`` whose cross part is marked computed, so the exported graphs are
transformers' code as it ships, and only the I/O is laid out the runtime's way (the names
of onnxruntime-genai's model builder: ``past_key_self_%d``, ``present_key_cross_%d``...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from dynamo_onnx.integrations.transformers.caches import cache_parameter

__all__ = [
    "DECODER_FILENAME",
    "ENCODER_FILENAME",
    "DecoderNames",
    "WhisperDecoderStep",
    "WhisperEncoderStep",
    "decoder_example",
    "decoder_shapes",
    "encoder_example",
    "encoder_shapes",
]

ENCODER_FILENAME = "encoder.onnx"
DECODER_FILENAME = "decoder.onnx"
#: The example decoding step: BATCH clips, NEW tokens after a past of PAST. Neither is 0
#: or 1, which torch.export would make constants.
BATCH, NEW, PAST = 2, 3, 4


@dataclasses.dataclass(frozen=True)
class DecoderNames:
    """The I/O names of the two models for ``layers`` decoder layers (onnxruntime-genai's
    ``genai_config.json`` gives them as ``%d`` patterns)."""

    layers: int
    audio_features: str = "audio_features"
    hidden_states: str = "hidden_states"
    input_ids: str = "input_ids"
    logits: str = "logits"
    past_key_self: str = "past_key_self_%d"
    past_value_self: str = "past_value_self_%d"
    past_key_cross: str = "past_key_cross_%d"
    past_value_cross: str = "past_value_cross_%d"
    present_key_self: str = "present_key_self_%d"
    present_value_self: str = "present_value_self_%d"
    present_key_cross: str = "present_key_cross_%d"
    present_value_cross: str = "present_value_cross_%d"

    def each(self, pattern: str) -> list[str]:
        return [pattern % i for i in range(self.layers)]

    def encoder_inputs(self) -> list[str]:
        return [self.audio_features]

    def encoder_outputs(self) -> list[str]:
        return [
            self.hidden_states,
            *self.each(self.present_key_cross),
            *self.each(self.present_value_cross),
        ]

    def decoder_inputs(self) -> list[str]:
        return [
            self.input_ids,
            *self.each(self.past_key_self),
            *self.each(self.past_value_self),
            *self.each(self.past_key_cross),
            *self.each(self.past_value_cross),
        ]

    def decoder_outputs(self) -> list[str]:
        return [
            self.logits,
            *self.each(self.present_key_self),
            *self.each(self.present_value_self),
        ]


def _heads(config: Any) -> tuple[int, int]:
    heads = config.decoder_attention_heads
    return heads, config.d_model // heads


def _cross_states(layer: Any, hidden: torch.Tensor, heads: int, head_dim: int) -> tuple:
    """A decoder layer's cross-attention keys and values of the encoder's output, as
    ``WhisperAttention`` computes them when its cache is empty (its ``k_proj``, ``v_proj``,
    viewed per head)."""
    shape = (hidden.shape[0], -1, heads, head_dim)
    attention = layer.encoder_attn
    key = attention.k_proj(hidden).view(shape).transpose(1, 2).contiguous()
    value = attention.v_proj(hidden).view(shape).transpose(1, 2).contiguous()
    return key, value


class WhisperEncoderStep(torch.nn.Module):
    """``audio_features`` → the encoder's hidden states, then every decoder layer's
    cross-attention keys and values: what onnxruntime-genai runs once per clip."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, audio_features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        whisper = self.model.model
        hidden = whisper.encoder(audio_features).last_hidden_state
        heads, head_dim = _heads(self.model.config)
        pairs = [_cross_states(layer, hidden, heads, head_dim) for layer in whisper.decoder.layers]
        return (hidden, *(k for k, _ in pairs), *(v for _, v in pairs))


class WhisperDecoderStep(torch.nn.Module):
    """One decoding step of ``WhisperForConditionalGeneration`` with its caches as tensors:
    ``input_ids``, the self-attention past (keys of every layer, then values), the
    cross-attention keys and values the encoder step computed → logits and the presents.

    The cross part of transformers' ``EncoderDecoderCache`` is filled and marked computed
    (its ``is_updated``), so ``WhisperAttention`` reads it instead of projecting the encoder's
    output again; the encoder output passed along only says "there is cross-attention" and
    is never read, so it is not an input of the graph."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers
        self.cache_parameter = cache_parameter(model)

    def forward(self, input_ids: torch.Tensor, *caches: torch.Tensor) -> tuple[torch.Tensor, ...]:
        import transformers  # only a transformers model reaches here

        n = self.layers
        self_keys, self_values = caches[:n], caches[n : 2 * n]
        cross_keys, cross_values = caches[2 * n : 3 * n], caches[3 * n :]
        own, cross = transformers.DynamicCache(), transformers.DynamicCache()
        for layer in range(n):
            own.update(self_keys[layer], self_values[layer], layer)
            cross.update(cross_keys[layer], cross_values[layer], layer)
        cache = transformers.EncoderDecoderCache(own, cross)
        for layer in range(n):
            cache.is_updated[layer] = True
        # never read (the cross keys and values come from the cache): it only has to exist
        encoder_outputs = (cross_keys[0],)
        out = self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=encoder_outputs,
            use_cache=True,
            **{self.cache_parameter: cache},
        )
        # the model grew ``own`` in place: its layers are the presents
        keys = [own.layers[i].keys for i in range(n)]
        values = [own.layers[i].values for i in range(n)]
        return (out.logits, *keys, *values)


def encoder_example(config: Any, batch: int = BATCH) -> tuple[torch.Tensor]:
    frames = 2 * config.max_source_positions  # the encoder's two convolutions halve it once
    return (torch.randn(batch, config.num_mel_bins, frames),)


def decoder_example(
    config: Any, batch: int = BATCH, new: int = NEW, past: int = PAST
) -> tuple[torch.Tensor, ...]:
    heads, head_dim = _heads(config)
    n = config.decoder_layers
    own = [torch.randn(batch, heads, past, head_dim) for _ in range(2 * n)]
    cross = [torch.randn(batch, heads, config.max_source_positions, head_dim) for _ in range(2 * n)]
    ids = torch.randint(0, config.vocab_size, (batch, new))
    return (ids, *own, *cross)


def encoder_shapes() -> dict[str, Any]:
    """The encoder's dynamic shapes: any number of clips (30 s each: the frames are fixed)."""
    return {"audio_features": {0: "batch_size"}}


def decoder_shapes(names: DecoderNames) -> dict[str, Any]:
    """The decoder's dynamic shapes: any batch, new tokens and past (0 at the first step);
    the cross keys and values have the encoder's fixed length."""
    batch = torch.export.Dim("batch_size")
    own = {0: batch, 2: torch.export.Dim("past_sequence_length")}
    cross = {0: batch}
    n = names.layers
    return {
        "input_ids": {0: batch, 1: torch.export.Dim("sequence_length")},
        "caches": tuple([own] * (2 * n) + [cross] * (2 * n)),
    }
