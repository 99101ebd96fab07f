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
from collections.abc import Iterator
from typing import Any

__all__ = ["cache_suffix", "leaf_paths", "output_names"]

#: A cache's tensors in a registered flattening: ``key_cache``/``value_cache`` (transformers),
#: ``keys``/``values`` (its layers), followed by the layer's index.
_KIND = re.compile(r"^(key|value)s?(_cache)?$")
#: The parameters and output fields that hold a transformers cache.
CACHE_FIELDS = frozenset({"past_key_values", "cache"})


def _keys(spec: Any) -> list[str]:
    """The name of each child of a spec node: its key where the node has keys, else its
    position."""
    n, context = spec.num_children, spec.context
    if isinstance(context, (list, tuple)):
        if len(context) == n and all(isinstance(k, str) for k in context):
            return list(context)
        first = context[0] if context else None
        if isinstance(first, (list, tuple)) and len(first) == n:
            if all(isinstance(k, str) for k in first):
                return list(first)
    return [str(i) for i in range(n)]


def leaf_paths(spec: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every leaf of a ``TreeSpec``, in flattening order."""
    if spec.is_leaf():
        yield prefix
        return
    for i, key in enumerate(_keys(spec)):
        yield from leaf_paths(spec.child(i), (*prefix, key))


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


def output_names(spec: Any) -> list[str] | None:
    """The outputs' names from the output spec, when a cache is among them: ``logits``,
    ``present.0.key``...; None otherwise (FX names stay)."""
    paths = list(leaf_paths(spec))
    suffixes = [cache_suffix(p) for p in paths]
    if not any(suffixes):
        return None
    names = [
        f"present.{suffix}" if suffix else ".".join(path) or "output"
        for path, suffix in zip(paths, suffixes)
    ]
    return names if len(set(names)) == len(names) else None
