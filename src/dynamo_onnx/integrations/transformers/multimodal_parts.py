"""The unit a multimodal folder is exported in: one ONNX model of it, shared by the families.

Whisper's folder (:mod:`.whisper_folder`) and Qwen2.5-VL's (:mod:`.qwen2_5_vl_folder`) each
hand ``export_speech``'s loop their parts; the type lives here so neither family imports
the other's module.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ModelPart"]


@dataclasses.dataclass(frozen=True)
class ModelPart:
    """One ONNX model of a multimodal folder: what to export and how its I/O is named."""

    filename: str
    module: Any  # a torch.nn.Module calling transformers' code
    args: tuple[Any, ...]
    input_names: list[str]
    output_names: list[str]
    dynamic_shapes: dict[str, Any]
