"""Names of a program's inputs and outputs read from its tree specs, for a program the caller
captured with a cache registered as a pytree node.

``torch.export.export`` after transformers' ``register_dynamic_cache_export_support()``
names the cache's placeholders after the path to them (``past_key_values_key_cache_0``) and
leaves the outputs named after FX nodes (``linear_14``, ``cat_7``). The specs still hold the
paths: ``['past_key_values', 'key_cache', 0]`` is layer 0's keys, ``['logits']`` the logits.
From them the ONNX model gets the names onnxruntime-genai and Optimum use, as it does when
the model itself is exported (``past_key_values.0.key``, ``logits``, ``present.0.key``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["cache_suffix", "input_names", "output_names"]

#: A cache's tensors in a registered flattening: ``key_cache``/``value_cache`` (transformers),
#: ``keys``/``values`` (its layers), followed by the layer's index.
_KIND = re.compile(r"^(key|value)s?(_cache)?$")
#: The parameters and output fields that hold a transformers cache.
CACHE_FIELDS = frozenset({"past_key_values", "cache"})


def cache_suffix(path: tuple[str, ...]) -> str | None:
    """``0.key`` for a path through a cache field to layer 0's keys, else None."""
    for start, part in enumerate(path):
        if part not in CACHE_FIELDS:
            continue
        rest = path[start + 1 :]
        for i, step in enumerate(rest[:-1]):
            kind = _KIND.match(step)
            if kind and rest[i + 1].isdigit():
                return f"{rest[i + 1]}.{kind.group(1)}"
    return None


def input_names(paths: Sequence[tuple[str, ...]]) -> list[str | None] | None:
    """The runtime name of each tensor input by its path (``past_key_values.0.key`` for
    ``['past_key_values', 'key_cache', 0]``; None for an input of no cache), or None when
    no input is a cache's."""
    suffixes = [cache_suffix(path) for path in paths]
    if not any(suffixes):
        return None
    return [f"past_key_values.{suffix}" if suffix else None for suffix in suffixes]


def output_names(paths: Sequence[tuple[str, ...]]) -> list[str] | None:
    """The outputs' names by their paths in the output spec, when a cache is among them:
    ``logits``, ``present.0.key``...; None otherwise (FX names stay)."""
    suffixes = [cache_suffix(p) for p in paths]
    if not any(suffixes):
        return None
    names = [
        f"present.{suffix}" if suffix else ".".join(path) or "output"
        for path, suffix in zip(paths, suffixes)
    ]
    return names if len(set(names)) == len(names) else None
