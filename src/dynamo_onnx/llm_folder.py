"""``export_llm``: a Hugging Face folder on disk in, a folder onnxruntime-genai runs out.

The steps a user would otherwise write (load the model offline and build its example
inputs, which its family does; export, quantize, save with the runtime's configuration and
the tokenizer),
in one call that the ``export-llm`` command also makes. Each step is the public one
(``export``, ``ONNXProgram.quantize``, ``ONNXProgram.save``), so its findings are in the
program's diagnostics as usual.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynamo_onnx.errors import InvalidOptionValueError, WarningsAsErrorsError
from dynamo_onnx.exporter import export, warnings_gate
from dynamo_onnx.files import atomic_write_bytes
from dynamo_onnx.integrations import load_folder, load_streamed_folder
from dynamo_onnx.llm_stream import check_checkpoint, give_weights, report_streamed
from dynamo_onnx.options import DiagnosticOptions, optimize_problem
from dynamo_onnx.reports import ReportingContext
from dynamo_onnx.runtimes.onnxruntime.quantize import Quantization

if TYPE_CHECKING:
    from dynamo_onnx.program import ONNXProgram

__all__ = ["MODEL_FILENAME", "export_llm"]

#: The model's file in the output folder (its weights in ``model.onnx.data``), the name
#: onnxruntime-genai's builder gives it too.
MODEL_FILENAME = "model.onnx"


def export_llm(
    hf_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    precision: str = "fp32",
    optimize: bool | str = "onnxruntime",
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int = 4,
    progress: Callable[[Any], None] | None = None,
    diagnostic_options: DiagnosticOptions | None = None,
    source_root: str | os.PathLike[str] | None = None,
    verbose: bool | None = None,
) -> ONNXProgram:
    """Export the causal LM saved in ``hf_dir`` with its KV cache to ``output_dir``.

    The folder then holds ``model.onnx`` with its weights in ``model.onnx.data``,
    the runtime's configuration and the tokenizer's files found in ``hf_dir``: onnxruntime-genai
    runs it as it is (``og.Model(output_dir)``). ``precision`` "int4" or "int8" quantizes
    the MatMul weights (:meth:`ONNXProgram.quantize`, with ``block_size``, ``symmetric``,
    ``accuracy_level``); ``optimize`` is :func:`export`'s, "onnxruntime" by default: the
    folder is for ONNX Runtime, so its attention, norms and rotary embeddings are fused
    (True keeps the plain model, with onnxscript's optimizer only). Nothing is downloaded:
    ``hf_dir`` is a folder ``save_pretrained`` wrote. ``diagnostic_options``,
    ``source_root`` and ``verbose`` are :func:`export`'s: the program's diagnostics (and the
    error's, when it fails) hold every finding of the load, export, quantization and save.

    Raises:
        InvalidOptionValueError: ``hf_dir`` is no causal LM transformers loads offline
            (DO507), or a quantization setting is unknown (DO109).
        WarningsAsErrorsError: ``warnings_as_errors`` is on and a step warned; the folder
            is written all the same (``error.program`` is the program), as a CI job that
            gates on warnings still wants to look at what was made.
        OnnxExporterError: the export, quantization or save failed (the rule says which).
    """
    ctx = ReportingContext(diagnostic_options, source_root=source_root, subject=os.fspath(hf_dir))
    quantization = Quantization(precision, block_size, symmetric, accuracy_level)
    unusable = optimize_problem(optimize)
    problem = quantization.problem() or (
        (unusable.option, unusable.problem, unusable.allowed) if unusable else None
    )
    if problem is not None:  # before the minutes of loading and exporting
        option, what, allowed = problem
        ctx.fail(
            "invalid-option", InvalidOptionValueError, option=option, problem=what, allowed=allowed
        )
    # a safetensors checkpoint is read a tensor at a time as the weights are written
    # (llm_stream); other folders are loaded in memory
    streamed = load_streamed_folder(ctx, hf_dir)
    if streamed is not None:
        check_checkpoint(ctx, streamed)
    folder = streamed if streamed is not None else load_folder(ctx, hf_dir)
    gate: WarningsAsErrorsError | None = None
    try:
        program = export(
            folder.model,
            (),
            kwargs=folder.inputs,
            optimize=optimize if streamed is None else False,
            progress=progress,
            diagnostic_options=diagnostic_options,
            source_root=source_root,
            verbose=verbose,
        )
    except WarningsAsErrorsError as error:  # the folder is still made, then this is raised
        gate, program = error, error.program  # type: ignore[assignment]
    stream = give_weights(program, streamed) if streamed is not None else None
    if stream is not None and optimize:  # optimized once the weights can be read
        program.optimize(optimize if isinstance(optimize, str) else None)
    program.quantize(
        precision, block_size=block_size, symmetric=symmetric, accuracy_level=accuracy_level
    )
    out = pathlib.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    program.save(out / MODEL_FILENAME, external_data=True)
    if stream is not None:
        report_streamed(program, stream, out / f"{MODEL_FILENAME}.data")
    for source in folder.files_to_copy:
        atomic_write_bytes(out / source.name, source.read_bytes())
    if gate is None:  # a warning of the quantization or the save
        gate = warnings_gate(program.diagnostics)
        if gate is not None:
            program.diagnostics.finish(gate)
    if gate is not None:
        gate.program = program
        raise gate
    return program
