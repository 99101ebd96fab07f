"""The dynamic-shape spec of a model that takes transformers caches, in the flat inputs the
export takes (``past_key_values_0_key``...).

The caller spells the spec by ``forward``'s parameters; a cache's entry is in any of the
forms :func:`~dynamo_onnx.integrations.transformers.spec_forms.cache_specs` reads (one spec for every
tensor, transformers' keys-then-values nesting, one per tensor in layer order). With no
spec, the dims get the names onnxruntime-genai and Optimum use: ``batch_size``,
``sequence_length``, ``total_sequence_length`` (the attention mask),
``past_sequence_length`` and, for the cross-attention of an encoder-decoder cache,
``encoder_sequence_length``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from dynamo_onnx.integrations.transformers.caches import CacheInputs, cache_parts, is_cache
from dynamo_onnx.integrations.transformers.spec_forms import cache_specs

__all__ = ["cache_dynamic_shapes", "flat_spec", "widen_decoding_example"]

_TOKENS = frozenset({"input_ids", "position_ids", "token_type_ids", "decoder_input_ids"})


def cache_dynamic_shapes(
    cache: Any, batch: str = "batch_size", past: str = "past_sequence_length"
) -> list[dict[int, str]]:
    """The spec of a cache's tensors, one entry per tensor in layer order (``k0, v0, k1,
    v1...``): batch and past length dynamic, a sliding-window layer's past named apart
    (``sliding_<past>``), the cross-attention of an encoder-decoder cache by
    ``encoder_sequence_length``. ``dynamic_shapes={"cache": <this>}`` (``past_key_values``
    before transformers 5.24); the other forms a cache's spec takes are in docs/llm.md."""
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
    """The caller's spec (by parameter name, already checked; or None for the default
    names) by the export's flat inputs."""
    given = spec if isinstance(spec, Mapping) else {}
    per_cache: dict[str, list[Any]] = {}
    flat: dict[str, Any] = {}
    for parameter, position, onnx_name, tensor in inputs.parts(bound):
        value = bound[parameter]
        entry = given.get(parameter)
        if is_cache(value):
            if parameter not in per_cache:
                per_cache[parameter] = (
                    cache_dynamic_shapes(value)
                    if spec is None
                    else cache_specs(entry, value, parameter)
                )
            entries = per_cache[parameter]
            one = entries[position] if position < len(entries) else None
        elif spec is None:
            one = _default(parameter, tensor)
        elif isinstance(value, torch.Tensor):
            one = entry
        else:  # a container of tensors (``encoder_outputs=(hidden,)``): by leaf
            one = entry[position] if isinstance(entry, (list, tuple)) else entry
        flat[inputs.key(onnx_name)] = one
    return {k: flat.get(k) for k in inputs.names}


def _repeat(value: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cat([value, value], dim=dim)


def widen_decoding_example(
    flat: Mapping[str, torch.Tensor], names: Mapping[str, str], spec: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], list[tuple[str, int]]]:
    """The flat example with a batch, a number of new tokens and a past of at least 2.

    torch.export makes a size of 0 or 1 in the example a constant, and the most natural
    example of an LLM is exactly that: one prompt (batch 1), one new token, or an empty
    past. Traced as given, the ONNX model would take only that. Each such size is made 2
    consistently across the inputs: the batch repeated; a second new token (the next
    position, one more mask column); two more past positions (zeros the mask covers).
    Returns the widened inputs and the (input, dim) of each size made larger. Only
    dimensions the spec makes dynamic are widened.
    """
    flat = dict(flat)
    widened: list[tuple[str, int]] = []
    ids = flat.get("input_ids", flat.get("decoder_input_ids"))
    ids_key = "input_ids" if "input_ids" in flat else "decoder_input_ids"
    mask_key = next((k for k in ("attention_mask", "decoder_attention_mask") if k in flat), None)

    def dynamic(key: str, dim: int) -> bool:
        entry = spec.get(key)
        return isinstance(entry, Mapping) and entry.get(dim) is not None

    if ids is None or ids.dim() != 2:
        return flat, widened
    if ids.shape[0] == 1 and dynamic(ids_key, 0):
        for key, value in flat.items():
            if value.dim() and value.shape[0] == 1 and dynamic(key, 0):
                flat[key] = _repeat(value, 0)
        widened.append((ids_key, 0))
    past_keys = [
        k for k in flat if names[k].startswith("past_key_values.") and ".encoder." not in names[k]
    ]
    if ids.shape[1] == 1 and dynamic(ids_key, 1):
        flat[ids_key] = _repeat(flat[ids_key], 1)
        if "position_ids" in flat:
            position = flat["position_ids"]
            flat["position_ids"] = torch.cat([position, position + 1], dim=1)
        if mask_key is not None:
            flat[mask_key] = torch.cat([flat[mask_key], flat[mask_key][:, -1:]], dim=1)
        widened.append((ids_key, 1))
    past = {flat[k].shape[2] for k in past_keys if flat[k].dim() == 4}
    if past and min(past) < 2 and all(dynamic(k, 2) for k in past_keys):
        for key in past_keys:
            value = flat[key]
            extra = torch.zeros(*value.shape[:2], 2, value.shape[3], dtype=value.dtype)
            flat[key] = torch.cat([extra, value], dim=2)
        if mask_key is not None:
            mask = flat[mask_key]
            flat[mask_key] = torch.cat([torch.ones_like(mask[:, :2]), mask], dim=1)
        if "position_ids" in flat:
            flat["position_ids"] = flat["position_ids"] + 2
        widened.append((past_keys[0], 2))
    return flat, widened
