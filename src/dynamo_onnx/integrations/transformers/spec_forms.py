"""The forms a transformers cache's dynamic-shape spec takes.

Users write a cache's spec the ways the tools they come from flatten it: one spec for all
of its tensors, transformers' ``register_dynamic_cache_export_support()`` nesting
(``[[k0..kL-1], [v0..vL-1]]``), the flat list of onnx-diagnostic and of
:func:`~dynamo_onnx.integrations.transformers.dynamic_shapes.cache_dynamic_shapes`
(``[k0, v0, k1, v1, ...]``), and for an encoder-decoder cache one entry per side. Each is
read into one spec per tensor, in :func:`cache_parts` order; an entry that fits none raises
:class:`~dynamo_onnx.specs.messages.SpecMismatch` with the forms this cache takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynamo_onnx.integrations.transformers.caches import cache_parts
from dynamo_onnx.specs.messages import (
    SpecMismatch,
    describe,
    first_tensor_spec,
    fits_tensor,
    literal,
)

__all__ = ["CACHE_EXAMPLE", "cache_expected", "cache_specs"]

#: What a message suggests for a cache when the caller's spec holds nothing usable.
CACHE_EXAMPLE = '{0: "batch_size", 2: "past_sequence_length"}'


def _layers(cache: Any) -> int:
    """The number of layers of a cache (of its self-attention for an encoder-decoder)."""
    inner = getattr(cache, "self_attention_cache", cache)
    return len(getattr(inner, "layers", ()))


def _encoder_decoder(cache: Any) -> bool:
    return hasattr(cache, "self_attention_cache") and hasattr(cache, "cross_attention_cache")


def _interleave(keys: Sequence[Any], values: Sequence[Any]) -> list[Any]:
    """``[k0..], [v0..]`` -> ``[k0, v0, k1, v1, ...]`` (the cache's tensor order)."""
    return [spec for pair in zip(keys, values) for spec in pair]


def _registration_form(entry: Any, ranks: Sequence[int]) -> list[Any] | None:
    """transformers' registration nesting, ``[[k0..kL-1], [v0..vL-1]]``, in tensor order."""
    layers = len(ranks) // 2
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
        return None
    keys, values = entry
    if not all(isinstance(side, (list, tuple)) and len(side) == layers for side in entry):
        return None
    flat = _interleave(keys, values)
    return flat if all(fits_tensor(s, r) for s, r in zip(flat, ranks)) else None


def _encoder_decoder_form(entry: Any, cache: Any) -> list[Any] | None:
    """``[self-attention's spec, cross-attention's spec]``, each in a cache's forms."""
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
        return None
    sides = (cache.self_attention_cache, cache.cross_attention_cache)
    try:
        mine, cross = (cache_specs(e, side) for e, side in zip(entry, sides))
    except SpecMismatch:
        return None
    merged: list[Any] = []
    for layer in range(_layers(cache)):
        merged += mine[2 * layer : 2 * layer + 2] + cross[2 * layer : 2 * layer + 2]
    return merged


def cache_expected(cache: Any) -> str:
    """The forms a cache's spec takes, with this cache's numbers."""
    count, layers = len(cache_parts(cache)), _layers(cache)
    one = f"one spec for all of its tensors (a dict of dims such as {CACHE_EXAMPLE})"
    flat = f"a flat list of {count} specs (layer 0's keys and values, then layer 1's...)"
    if _encoder_decoder(cache):
        return f"{one}, 2 specs (self-attention, cross-attention) in those forms, or {flat}"
    registration = (
        f"2 lists of {layers} specs (keys, then values: transformers' "
        "register_dynamic_cache_export_support nesting)"
    )
    return f"{one}, {registration}, or {flat}"


def cache_specs(entry: Any, cache: Any, parameter: str = "past_key_values") -> list[Any]:
    """The spec of every tensor of ``cache``, in :func:`cache_parts` order, from the entry
    the caller wrote for it in any of its forms; :class:`SpecMismatch` if it fits none."""
    ranks = [t.dim() for _, t in cache_parts(cache)]
    if all(fits_tensor(entry, r) for r in ranks):
        return [entry] * len(ranks)  # one spec for every tensor (None: all static)
    forms = (
        [_encoder_decoder_form(entry, cache)]
        if _encoder_decoder(cache)
        else [_registration_form(entry, ranks)]
    )
    if isinstance(entry, (list, tuple)) and len(entry) == len(ranks):
        if all(fits_tensor(s, r) for s, r in zip(entry, ranks)):
            forms.append(list(entry))  # flat, in tensor order
    for found in forms:
        if found is not None:
            return found
    example = first_tensor_spec(entry, ranks[0] if ranks else 4)
    raise SpecMismatch(
        parameter,
        cache_expected(cache),
        describe(entry),
        f'dynamic_shapes={{"{parameter}": {literal(example) if example else CACHE_EXAMPLE}}}',
    )
