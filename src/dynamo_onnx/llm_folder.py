"""``export_llm``: a Hugging Face folder on disk in, a folder onnxruntime-genai runs out.

The steps a user would otherwise write (load the model offline and build its example
inputs, which its family does; export, quantize, save with the runtime's configuration and
the tokenizer),
in one call that the ``export-llm`` command also makes. Each step is the public one
(``export``, ``ONNXProgram.quantize``, ``ONNXProgram.save``), so its findings are in the
program's diagnostics as usual; the load's findings (recorded before the export opens its
context) are carried into the same record (:func:`_load_findings_kept`). The folder
written is then checked with the runtime it is for: loaded, and one token generated
(:class:`FolderCheckPass`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from dynamo_onnx.defaults import (
    QUANTIZATION_ACCURACY_LEVEL,
    QUANTIZATION_BLOCK_SIZE,
    QUANTIZATION_SYMMETRIC,
)
from dynamo_onnx.diagnostics import Level
from dynamo_onnx.errors import (
    DynamoOnnxWarning,
    InvalidOptionValueError,
    OnnxExporterError,
    VerificationError,
    WarningsAsErrorsError,
)
from dynamo_onnx.exporter import export, raise_warnings_gate
from dynamo_onnx.files import atomic_write_bytes
from dynamo_onnx.integrations import (
    SavedModel,
    StreamedFolder,
    files_not_beside,
    is_speech_folder,
    is_vision_folder,
    load_folder,
    load_speech_folder,
    load_streamed_folder,
    load_vision_folder,
)
from dynamo_onnx.llm_copy import (
    CopyCheck,
    CopyChecked,
    CopyChecks,
    copy_to_check,
    process_state_kept,
    record_copy_checks,
)
from dynamo_onnx.llm_stream import give_weights, note_peak, report_streamed
from dynamo_onnx.llm_template import export_repeated
from dynamo_onnx.options import OPTIMIZE_RUNTIMES, DiagnosticOptions, optimize_problem
from dynamo_onnx.passes.base import PassName, run_pipeline
from dynamo_onnx.reports import ReportingContext
from dynamo_onnx.reports.terminal import issue_warnings
from dynamo_onnx.runtimes.onnxruntime.quantize import Quantization

if TYPE_CHECKING:
    from dynamo_onnx.diagnostics import DiagnosticContext, Location
    from dynamo_onnx.integrations import SpeechFolder, VisionFolder
    from dynamo_onnx.integrations.transformers.layer_copy import LayerCopy
    from dynamo_onnx.io.streamed_weights import WeightStream
    from dynamo_onnx.program import ONNXProgram

__all__ = ["MODEL_FILENAME", "FolderCheck", "FolderCheckPass", "export_llm"]

#: The model's file in the output folder (its weights in ``model.onnx.data``), the name
#: onnxruntime-genai's builder gives it too.
MODEL_FILENAME = "model.onnx"


@dataclasses.dataclass(frozen=True)
class FolderCheck:
    """A written folder to check with the runtime it is for: ``saved`` says which runtime,
    its file and how to ask it; ``not_written`` why the family wrote no file it needs."""

    folder: pathlib.Path
    saved: SavedModel
    not_written: dict[str, str]
    model_location: Location | None = None
    #: the runtime was asked already, about a layer copy of the folder exported the same
    #: way (:mod:`dynamo_onnx.llm_copy`, while the folder was saved), and answered
    #: ``problem`` (None: it generated), which is ``folder``'s
    asked: bool = False
    problem: str | None = None


class FolderCheckPass:
    """A folder the runtime runs, or a finding: the runtime's file not written is a
    warning (DO515) with the reason; the runtime not importable here a warning (DO516:
    the folder is written but nothing vouches for it); the runtime failing to generate a
    token from the folder an error (DO514) with its message, and its file removed so that
    the folder does not look like one it runs."""

    name: ClassVar[str] = PassName.VERIFICATION
    error_type: ClassVar[type[OnnxExporterError]] = VerificationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: FolderCheck) -> FolderCheck:
        saved, config = request.saved, request.folder / request.saved.runtime_file
        fields = {
            "path": os.fspath(request.folder),
            "runtime": saved.runtime,
            "config": saved.runtime_file,
            "model": os.fspath(request.folder / MODEL_FILENAME),
        }
        if not config.is_file():
            reason = request.not_written.get(saved.runtime_file) or (
                "the model's inputs and outputs are not those the runtime reads"
            )
            ctx.record(
                "runtime-folder-not-made",
                locations=[request.model_location],
                reason=reason.rstrip("."),
                **fields,
            )
            return request
        unavailable = saved.runtime_unavailable()
        if unavailable is not None:
            ctx.record(
                "runtime-folder-unchecked",
                locations=[request.model_location],
                reason=unavailable,
                **fields,
            )
            return request
        cause = request.problem if request.asked else saved.runtime_problem(request.folder)
        if cause is not None:
            config.unlink()
            ctx.fail(
                "runtime-folder-check-failed",
                VerificationError,
                request.model_location,
                cause=cause,
                **fields,
            )
        return request


def _export_folder(
    folder: SavedModel, streamed: bool, options: dict[str, Any]
) -> tuple[ONNXProgram, WarningsAsErrorsError | None, WeightStream | None]:
    """:func:`export` of the folder's model with its example inputs: the program, the
    gate error that ``warnings_as_errors`` raised (the folder is still made, then it is
    raised), and, for a ``streamed`` folder (meta weights), the stream of its checkpoint's
    tensors: such a program is optimized once its weights can be read."""
    optimize = options["optimize"]
    gate: WarningsAsErrorsError | None = None
    try:
        program = export(
            folder.model,
            (),
            kwargs=folder.inputs,
            **{**options, "optimize": False if streamed else optimize},
        )
    except WarningsAsErrorsError as error:
        gate, program = error, error.program  # type: ignore[assignment]
    stream = give_weights(program, folder) if streamed else None  # type: ignore[arg-type]
    if stream is not None and optimize:
        # optimized after export() returned: its warnings reach the terminal as export()'s do
        known = len(program.diagnostics.findings)
        program.optimize(optimize if isinstance(optimize, str) else None)
        warned = [f for f in program.diagnostics.findings[known:] if f.level == Level.WARNING]
        if warned:
            issue_warnings(warned, program.model_location, "program.diagnostics.findings")
    return program, gate, stream


def _export_model(
    folder: SavedModel, streamed: bool, options: dict[str, Any], whole_windows: bool
) -> tuple[ONNXProgram, WarningsAsErrorsError | None, WeightStream | None]:
    """:func:`_export_folder` of the folder's model; a streamed one through a template of a
    few layers repeated in the ONNX graph when it can be (:mod:`dynamo_onnx.llm_template`),
    its sliding layers keeping their whole cache when ``whole_windows`` says the folder's
    do."""
    if not streamed:
        return _export_folder(folder, streamed, options)
    return export_repeated(
        folder,  # type: ignore[arg-type]
        whole_windows,
        lambda exported: _export_folder(exported, True, options),
    )


def _unfused_sliding(program: ONNXProgram, folder: SavedModel) -> bool:
    """Whether the runtime's file is not written beside ``program``'s model because a
    sliding layer hands back its window (:meth:`SavedModel.with_whole_windows` fixes it)."""
    reasons = files_not_beside(program.model, program.reference, program.inputs, MODEL_FILENAME)
    return folder.runtime_file in reasons


def _carry_load(load: DiagnosticContext, program: ONNXProgram) -> None:
    """The findings the folder's load recorded in ``load`` (the context ``export_llm``
    opens before any export) into the program's diagnostics, the run's one record; its
    warnings issued as Python warnings, as ``export()``'s are."""
    program.diagnostics.carry(load)
    warned = [f for f in load.findings if f.level == Level.WARNING]
    if warned:
        issue_warnings(warned, program.model_location, "program.diagnostics.findings")


@contextlib.contextmanager
def _load_findings_kept(load: DiagnosticContext) -> Iterator[None]:
    """When the block fails, the load's findings are in the error's diagnostics too."""
    try:
        yield
    except OnnxExporterError as error:
        if error.diagnostics is not None:
            error.diagnostics.carry(load)
        raise


def _copy_check(
    program: ONNXProgram,
    streamed: StreamedFolder | None,
    check: FolderCheck,
    quantization: Quantization,
    options: dict[str, Any],
    whole_windows: bool,
) -> tuple[LayerCopy, CopyCheck] | None:
    """The copy whose checks stand for the folder's, and how to make it, decided before the
    save (:func:`copy_to_check`); None when the whole folder is to be checked after the
    save: not streamed, no runtime file, or the folder is small enough."""
    if streamed is None or check.saved.runtime_file in check.not_written:
        return None
    copy_of = copy_to_check(program, streamed)
    if copy_of is None:
        return None
    quiet = {**options, "progress": None, "verbose": False}
    how = CopyCheck(
        lambda saved: _export_folder(saved, True, quiet)[0],
        quantization,
        whole_windows,
        MODEL_FILENAME,
        check.folder,
        program.model_location,
    )
    return copy_of, how


def _export_with_fallback(
    folder: SavedModel, streamed: bool, options: dict[str, Any]
) -> tuple[ONNXProgram, WarningsAsErrorsError | None, WeightStream | None, SavedModel, bool]:
    """The folder exported, and exported again as the plain fallback (every layer its whole
    cache, the window in the mask) when a sliding layer's cache cannot stay bounded: with no
    fusion asked, or when a sliding attention did not fuse. Returns the program, its gate,
    its weight stream, the folder exported and whether that is the fallback."""
    whole = folder.with_whole_windows()
    if whole is not None and options["optimize"] not in OPTIMIZE_RUNTIMES:
        # no fusion can make a sliding layer's cache whole: export the plain fallback
        folder = whole
    if whole is None or folder is whole:
        return (*_export_model(folder, streamed, options, folder is whole), folder, folder is whole)
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always", DynamoOnnxWarning)
        program, gate, stream = _export_model(folder, streamed, options, False)
    if _unfused_sliding(program, folder):
        # a sliding attention did not fuse (its DO503/DO511 says why, and the second
        # export says it again): the plain model, whose every layer keeps its whole
        # cache; the warnings of the model not kept are not the user's
        folder = whole
        issued = [w for w in issued if not issubclass(w.category, DynamoOnnxWarning)]
        program, gate, stream = _export_model(folder, streamed, options, True)
    for w in issued:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return program, gate, stream, folder, folder is whole


def _save(
    program: ONNXProgram, stream: WeightStream | None, folder: SavedModel, out: pathlib.Path
) -> None:
    """The model saved in ``out`` with its weights (DO532 for streamed ones) and the files
    its folder copies (the tokenizer's)."""
    program.save(out / MODEL_FILENAME, external_data=True)
    if stream is not None:
        report_streamed(program, stream, out / f"{MODEL_FILENAME}.data")
    for source in folder.files_to_copy:
        atomic_write_bytes(out / source.name, source.read_bytes())


def _saved_and_checked(
    program: ONNXProgram,
    stream: WeightStream | None,
    streamed: StreamedFolder | None,
    check: FolderCheck,
    quantization: Quantization,
    options: dict[str, Any],
    whole_windows: bool,
) -> None:
    """The folder saved, then checked by its runtime. When a layer copy is checked instead
    of the whole folder, its checks run while the model is saved (:class:`CopyChecks`) and
    are recorded after the save's findings; a failure of the save (or Ctrl-C) stops them
    and is raised once they ended, their folder removed; theirs is raised after the save."""
    copy = _copy_check(program, streamed, check, quantization, options, whole_windows)
    if copy is None:
        _save(program, stream, check.saved, check.folder)
        _check_folder(program, check, None)
        return
    copy_of, how = copy
    assert streamed is not None  # a copy is of a streamed folder
    with process_state_kept():  # two threads set and put back warnings filters
        checks = CopyChecks(copy_of, streamed, how)
        try:
            _save(program, stream, check.saved, check.folder)
            checked = checks.outcome()
        except BaseException:
            checks.abandon()
            raise
    _check_folder(program, check, checked)


def _check_folder(program: ONNXProgram, check: FolderCheck, checked: CopyChecked | None) -> None:
    """The folder written, checked by its runtime (whole, or by what its layer copy's
    checks found: ``checked``, recorded first); the command's peak noted after it; the
    check's warnings (DO515, DO516, DO535) issued to the caller as export()'s are."""
    known = len(program.diagnostics.findings)
    if checked is not None:
        data = check.folder / f"{MODEL_FILENAME}.data"
        record_copy_checks(program, checked, check.saved.runtime, data.stat().st_size)
        check = dataclasses.replace(
            check, saved=checked.saved, asked=checked.asked, problem=checked.problem
        )
    run_pipeline(program.diagnostics, [FolderCheckPass()], check)
    note_peak(program)
    warned = [f for f in program.diagnostics.findings[known:] if f.level == Level.WARNING]
    if warned:
        issue_warnings(warned, program.model_location, "program.diagnostics.findings")


def _multimodal_folder(
    ctx: DiagnosticContext, hf_dir: str | os.PathLike[str]
) -> SpeechFolder | VisionFolder | None:
    """A checkpoint onnxruntime-genai runs as several models (Whisper: encoder and decoder;
    Qwen2.5-VL: vision, embedding, decoder), loaded; None for a causal LM's folder."""
    if is_speech_folder(hf_dir):
        return load_speech_folder(ctx, hf_dir)
    if is_vision_folder(hf_dir):
        return load_vision_folder(ctx, hf_dir)
    return None


def export_llm(
    hf_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    precision: str = "fp32",
    optimize: bool | str = "onnxruntime",
    block_size: int = QUANTIZATION_BLOCK_SIZE,
    symmetric: bool = QUANTIZATION_SYMMETRIC,
    accuracy_level: int = QUANTIZATION_ACCURACY_LEVEL,
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

    A Whisper checkpoint becomes onnxruntime-genai's ``whisper`` folder instead (encoder,
    decoder, ``audio_processor_config.json``: :mod:`dynamo_onnx.multimodal_folder`); the program
    returned is then the decoder's, its diagnostics the whole run's. A Qwen2.5-VL
    checkpoint becomes onnxruntime-genai's ``qwen2_5_vl`` folder (vision encoder, embedding
    step, text decoder, the image processing: the same module), its
    program the decoder's too.

    Raises:
        InvalidOptionValueError: ``hf_dir`` is no causal decoder transformers loads
            offline (DO507), or a quantization setting is unknown (DO109).
        WeightsMismatchError: the checkpoint's tensors are not those of the model its
            config describes (DO513): nothing is written.
        VerificationError: onnxruntime-genai could not generate from the folder (DO514);
            the ONNX model is kept. A streamed checkpoint whose weights would take more
            memory than the export is checked on a layer copy exported the same way, also
            compared with eager transformers (DO533, DO534: :mod:`dynamo_onnx.llm_copy`).
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
    multimodal = _multimodal_folder(ctx, hf_dir)
    if multimodal is not None:  # several models (multimodal_folder.py)
        from dynamo_onnx.multimodal_folder import export_multimodal

        with _load_findings_kept(ctx):
            last = export_multimodal(
                multimodal,
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
        _carry_load(ctx, last)
        return last
    # a safetensors checkpoint is read a tensor at a time as the weights are written
    # (llm_stream), checked as the in-memory load is (DO507, DO513); other folders are
    # loaded in memory
    streamed = load_streamed_folder(ctx, hf_dir)
    folder = streamed if streamed is not None else load_folder(ctx, hf_dir)
    options = {
        "optimize": optimize,
        "progress": progress,
        "diagnostic_options": diagnostic_options,
        "source_root": source_root,
        "verbose": verbose,
    }
    with _load_findings_kept(ctx):  # the load's findings in a failure's record too
        program, gate, stream, folder, whole_windows = _export_with_fallback(
            folder, streamed is not None, options
        )
        _carry_load(ctx, program)
        program.quantize(
            precision, block_size=block_size, symmetric=symmetric, accuracy_level=accuracy_level
        )
        out = pathlib.Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        not_written = files_not_beside(
            program.model, program.reference, program.inputs, MODEL_FILENAME
        )
        check = FolderCheck(out, folder, not_written, program.model_location)
        _saved_and_checked(program, stream, streamed, check, quantization, options, whole_windows)
        raise_warnings_gate(program, gate)  # or a warning of the quantization or the save
        return program
