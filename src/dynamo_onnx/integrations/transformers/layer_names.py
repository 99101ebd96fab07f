"""The layer index in the names of a transformers decoder's exported graph: its weights
(``model.layers.3.self_attn.qkv_proj.weight``, ``transformer.h.3.attn.c_attn.weight``) and
its cache inputs and outputs (``past_key_values.3.key``, ``present.3.value``), read and
rewritten for :mod:`dynamo_onnx.onnx_tools.layer_repeat`."""

from __future__ import annotations

import re

__all__ = ["layer_of", "renamed"]

#: The decoder's layer lists (``model.layers``, GPT-2's ``transformer.h``...) and the cache's
#: graph inputs and outputs; the first index in a name is its layer (an expert's index
#: comes after it).
_LAYER = re.compile(
    r"(?:(?:^|\.)(?:layers|h|blocks|layer)\.|^(?:past_key_values|present|past)\.)(\d+)(?=\.|$)"
)


def layer_of(name: str) -> int | None:
    """The layer whose weight, past or present ``name`` is; None for a name of no layer."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match is not None else None


def renamed(name: str, layer: int) -> str:
    """``name`` with its layer index replaced by ``layer``."""
    match = _LAYER.search(name)
    if match is None:
        raise ValueError(f"{name!r} names no layer")
    start, end = match.span(1)
    return f"{name[:start]}{layer}{name[end:]}"
