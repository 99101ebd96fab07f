"""The dynamic-shape spec of a model that takes transformers caches, in the flat inputs the
export takes (``past_key_values_0_key``...).

The caller spells the spec by ``forward``'s parameters; a cache's entry is one spec for
every tensor of it (``{0: "batch", 2: "past"}``) or one per tensor, in layer order. With no
spec, the dims get the names onnxruntime-genai and Optimum use: ``batch_size``,
``sequence_length``, ``total_sequence_length`` (the attention mask),
``past_sequence_length`` and, for the cross-attention of an encoder-decoder cache,
``encoder_sequence_length``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.export import pytree

from dynamo_onnx.io.caches import CacheInputs, cache_parts, is_cache

__all__ = ["cache_dynamic_shapes", "flat_spec"]

_TOKENS = frozenset({"input_ids", "position_ids", "token_type_ids", "decoder_input_ids"})


def cache_dynamic_shapes(
    cache: Any, batch: str = "batch_size", past: str = "past_sequence_length"
) -> list[dict[int, str]]:
    """The spec of a cache's tensors, one entry per tensor in layer order: batch and past
    length dynamic (the cross-attention of an encoder-decoder cache by
    ``encoder_sequence_length``). ``dynamic_shapes={"past_key_values": <this>}``."""
    return [{0: batch, 2: _past_name(cache, suffix, past)} for suffix, _ in cache_parts(cache)]


def _past_name(cache: Any, suffix: str, past: str) -> str:
    """The past length's name for one tensor: a sliding-window layer holds at most its
    window, a length of its own (the same name would tell runtimes the sizes are equal)."""
    if ".encoder." in suffix:
        return "encoder_sequence_length"
    layers = getattr(cache, "layers", None) or getattr(
        getattr(cache, "self_attention_cache", None), "layers", []
    )
    index = int(suffix.split(".", 1)[0])
    sliding = index < len(layers) and getattr(layers[index], "is_sliding", False)
    return f"sliding_{past}" if sliding else past


def _default(name: str, value: torch.Tensor) -> dict[int, str] | None:
    if value.dim() == 0:
        return None
    if name in _TOKENS and value.dim() == 2:
        return {0: "batch_size", 1: "sequence_length"}
    if name in ("attention_mask", "decoder_attention_mask") and value.dim() == 2:
        return {0: "batch_size", 1: "total_sequence_length"}
    return {0: "batch_size"}


def flat_spec(spec: Any, bound: Mapping[str, Any], inputs: CacheInputs) -> dict[str, Any]:
    """The caller's spec (or the default names) by the export's flat inputs."""
    given = spec if isinstance(spec, Mapping) else {}
    flat: dict[str, Any] = {}
    for name, value in bound.items():
        entry = given.get(name) if spec is not None else None
        if is_cache(value):
            parts = cache_parts(value)
            if spec is None:
                entry = cache_dynamic_shapes(value)
            if isinstance(entry, Mapping) or entry is None:
                entries = [entry] * len(parts)
            else:
                entries = list(entry)
            for (suffix, _), one in zip(parts, entries):
                flat[f"{name}_{suffix}".replace(".", "_")] = one
        elif isinstance(value, torch.Tensor):
            flat[name] = _default(name, value) if spec is None else entry
        else:  # a container of tensors (``encoder_outputs=(hidden,)``): by leaf
            leaves, _ = pytree.tree_flatten(value)
            entries = list(entry) if isinstance(entry, (list, tuple)) else [entry] * len(leaves)
            for index, (leaf, one) in enumerate(zip(leaves, entries)):
                if isinstance(leaf, torch.Tensor):
                    default = _default(name, leaf) if spec is None else one
                    flat[f"{name}_{index}"] = default
    return {k: flat.get(k) for k in inputs.names}
