"""``export_multimodal``: a checkpoint of several models on disk in, a folder onnxruntime-genai
runs out: Whisper's (``encoder.onnx``, ``decoder.onnx``, the feature extractor's
configuration) for its ``whisper`` type, Qwen2.5-VL's (``vision.onnx``, ``embedding.onnx``,
``model.onnx``, the image processor's configuration) for its ``qwen2_5_vl`` type; the
runtime's configuration and the tokenizer's files beside them.

Each model is the public ``export`` of a module its family builds around transformers'
own code (``integrations``: the family's folder says which models, their examples, names
and runtime files), then ``ONNXProgram.quantize`` and ``save``; the one-line summary of
the run (DO540) lists the models written and not written. ``export_llm`` sends such a
checkpoint here, so ``dynamo-onnx export-llm WHISPER_OR_VL_DIR -o OUT`` is the command.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynamo_onnx.diagnostics import Level
from dynamo_onnx.errors import OnnxExporterError, WarningsAsErrorsError
from dynamo_onnx.exporter import export, raise_warnings_gate
from dynamo_onnx.files import atomic_write_bytes, atomic_write_text
from dynamo_onnx.integrations import SpeechFolder, VisionFolder

if TYPE_CHECKING:
    from dynamo_onnx.options import DiagnosticOptions
    from dynamo_onnx.program import ONNXProgram

__all__ = ["export_multimodal"]


def export_multimodal(
    folder: SpeechFolder | VisionFolder,
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
    """Export each model of ``folder`` and write the folder; returns the last model's
    program, whose diagnostics also hold the earlier models' warnings and errors and the
    DO540 summary. Arguments are :func:`~dynamo_onnx.export_llm`'s."""
    out = pathlib.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    programs: list[tuple[str, ONNXProgram]] = []
    gate: WarningsAsErrorsError | None = None
    for part in folder.parts():
        try:
            program = export(
                part.module,
                part.args,
                input_names=part.input_names,
                output_names=part.output_names,
                dynamic_shapes=part.dynamic_shapes,
                optimize=optimize,
                progress=progress,
                diagnostic_options=diagnostic_options,
                source_root=source_root,
                verbose=verbose,
            )
        except WarningsAsErrorsError as error:  # the folder is still made, then this is raised
            gate, program = error, error.program  # type: ignore[assignment]
        except OnnxExporterError as error:
            _carry(programs, error.diagnostics)
            _summarize(error.diagnostics, [name for name, _ in programs], part.filename, folder)
            raise
        program.quantize(
            precision, block_size=block_size, symmetric=symmetric, accuracy_level=accuracy_level
        )
        program.save(out / part.filename, external_data=True)
        programs.append((part.filename, program))
    for name, text in folder.runtime_files().items():
        atomic_write_text(out / name, text)
    for source in folder.files_to_copy:
        atomic_write_bytes(out / source.name, source.read_bytes())
    last = programs[-1][1]
    _carry(programs[:-1], last.diagnostics)
    record = getattr(folder, "record_findings", None)  # the folder's own (a processor's)
    if record is not None:
        record(last.diagnostics)
    _summarize(last.diagnostics, [name for name, _ in programs], None, folder)
    if gate is not None and gate.diagnostics is not last.diagnostics:
        gate = None  # an earlier model's: its warnings are carried, the last context gates
    raise_warnings_gate(last, gate)  # or a warning of an earlier model, the quantization, the save
    return last


#: The notes of an earlier model carried beside its warnings: a block left unfused because
#: no fused kernel exists for it (DO543) is what the user would otherwise not see of it.
_CARRIED_NOTES = frozenset({"rotary-without-fused-kernel"})


def _carry(programs: list[tuple[str, ONNXProgram]], ctx: Any) -> None:
    """The earlier models' warnings and errors, and their notes of a multimodal family
    (DO541: a rewrite of transformers' vision code that fired) or of an unfused block
    (_CARRIED_NOTES), into ``ctx``, the run's one record: the reports and the command's
    summary are written from it."""
    for _, program in programs:
        ctx.findings.extend(
            f
            for f in program.diagnostics.findings
            if f.level >= Level.WARNING
            or "multimodal" in f.rule.tags
            or f.rule.name in _CARRIED_NOTES
        )


def _summarize(ctx: Any, written: list[str], failed: str | None, folder: SpeechFolder) -> None:
    missing = [name for name in folder.part_filenames if name not in written]
    ctx.record(
        "multimodal-folder-written",
        genai_type=folder.genai_type,
        written=", ".join(written) or "no model",
        missing=", ".join(missing) or "none",
        reason=f"the export of {failed} failed" if failed else "every model was exported",
    )
