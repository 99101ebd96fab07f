"""What the multimodal families share: the unit a folder is exported in (one ONNX model of
it), how a checkpoint says its family, and how a config's token ids are written.

Whisper's folder (:mod:`.whisper_folder`) and Qwen2.5-VL's (:mod:`.qwen2_5_vl_folder`) each
hand ``export_multimodal``'s loop their parts; what they share lives here so neither family
imports the other's module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

__all__ = ["ModelPart", "is_model_type", "token_ids"]


@dataclasses.dataclass(frozen=True)
class ModelPart:
    """One ONNX model of a multimodal folder: what to export and how its I/O is named."""

    filename: str
    module: Any  # a torch.nn.Module calling transformers' code
    args: tuple[Any, ...]
    input_names: list[str]
    output_names: list[str]
    dynamic_shapes: dict[str, Any]


def is_model_type(path: str | os.PathLike[str], model_type: str) -> bool:
    """Whether ``path`` holds a checkpoint of ``model_type`` (its ``config.json`` says so)."""
    config = pathlib.Path(path) / "config.json"
    try:
        return json.loads(config.read_text()).get("model_type") == model_type
    except (OSError, ValueError, AttributeError):
        return False


def token_ids(value: Any) -> int | list[int] | None:
    """A config's token id as genai_config.json writes it: one id, a list of several, or
    None (entries that are not ids dropped)."""
    if isinstance(value, (list, tuple)):
        ids = [int(v) for v in value if isinstance(v, int)]
        return ids if len(ids) > 1 else (ids[0] if ids else None)
    return int(value) if isinstance(value, int) else None
