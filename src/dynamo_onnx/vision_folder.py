"""``export_vision``: a Qwen2.5-VL checkpoint on disk in, a folder onnxruntime-genai's
``qwen2_5_vl`` type runs out (``vision.onnx``, ``embedding.onnx``, ``model.onnx``, the
runtime's configuration files, the tokenizer's and the image processor's files).

The models are exported, quantized and saved one after the other as a speech folder's are
(:func:`dynamo_onnx.speech_folder.export_speech`: the same loop, the same DO540 summary of
the models written and not written); what differs is the family's folder
(:class:`~dynamo_onnx.integrations.VisionFolder`): which models, their examples, names and
runtime files. ``export_llm`` sends a vision-language checkpoint here, so
``dynamo-onnx export-llm QWEN2_5_VL_DIR -o OUT`` is the command.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynamo_onnx.speech_folder import export_speech

if TYPE_CHECKING:
    from dynamo_onnx.integrations import VisionFolder
    from dynamo_onnx.options import DiagnosticOptions
    from dynamo_onnx.program import ONNXProgram

__all__ = ["export_vision"]


def export_vision(
    folder: VisionFolder,
    output_dir: str | os.PathLike[str],
    *,
    precision: str,
    optimize: bool | str,
    block_size: int,
    symmetric: bool,
    accuracy_level: int,
    progress: Callable[[Any], None] | None,
    diagnostic_options: DiagnosticOptions | None,
    source_root: str | os.PathLike[str] | None,
    verbose: bool | None,
) -> ONNXProgram:
    """Export each model of ``folder`` and write the folder; returns the decoder's
    program, whose diagnostics also hold the vision and embedding models' warnings and
    the DO540 summary. Arguments are :func:`~dynamo_onnx.export_llm`'s."""
    return export_speech(
        folder,  # type: ignore[arg-type]  (the same protocol: parts, runtime files, files)
        output_dir,
        precision=precision,
        optimize=optimize,
        block_size=block_size,
        symmetric=symmetric,
        accuracy_level=accuracy_level,
        progress=progress,
        diagnostic_options=diagnostic_options,
        source_root=source_root,
        verbose=verbose,
    )
