"""``export_llm``'s checks of a streamed folder made on a layer copy: the folder check
(onnxruntime-genai generating a token, DO514) and the comparison with eager transformers,
when holding the whole folder's weights would cost more memory than the export did.

The copy (``integrations.transformers.layer_copy``) is the model's config with the first
layer of each kind, reading the checkpoint's tensors of those layers; it is exported here
as the model was (the same export, fusions and precision) into a temporary folder with its
runtime files. Its float32 ONNX model is compared with transformers' model of the copy
(DO534, or DO535 when they differ), then quantized as the model was and checked by the
runtime, whose failure is the folder's DO514. DO533 says the check ran on the copy.

Whether the copy is checked is decided before the model's save (:func:`copy_to_check`), and
its export and float32 save run in a thread while the model is saved (:class:`CopyChecks`):
the save mostly waits on the disk and on threads that release the GIL, the copy's export is
mostly Python, and two cores do both at once; the steps that hold memory follow the save.
What the checks find is recorded once the save ended, after its findings
(:func:`record_copy_checks`), so that the record is the one a run that checked after the
save would make.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import pathlib
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from dynamo_onnx.defaults import VERIFY_ATOL, VERIFY_RTOL
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.files import atomic_write_bytes
from dynamo_onnx.integrations import SavedModel, StreamedFolder, layer_copy_of, layer_copy_to_eager
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.direct_file import BUFFER_BYTES
from dynamo_onnx.io.runner import OrtRunner
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.llm_stream import peak_rss_bytes
from dynamo_onnx.passes.base import run_pipeline
from dynamo_onnx.passes.collector import collections_spaced
from dynamo_onnx.passes.verify import VerifyPass, VerifyRequest

if TYPE_CHECKING:
    from dynamo_onnx.diagnostics import Finding, Location
    from dynamo_onnx.integrations.transformers.layer_copy import LayerCopy
    from dynamo_onnx.program import ONNXProgram
    from dynamo_onnx.runtimes.onnxruntime.quantize import Quantization

__all__ = [
    "THREAD_NAME",
    "CopyCheck",
    "CopyChecked",
    "CopyChecks",
    "checks_a_copy",
    "copy_to_check",
    "peak_by_the_save",
    "process_state_kept",
    "record_copy_checks",
    "resident_bytes",
]

#: The name of the thread that checks the copy while the model is saved.
THREAD_NAME = "dynamo-onnx-layer-copy"


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux's ``/proc``; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def checks_a_copy(weights: int, copy_bytes: int, peak: int, resident: int | None) -> bool:
    """Whether the folder's checks run on its layer copy: when loading the folder's
    ``weights`` (the ``.data`` file's bytes) on top of what the process holds
    (``resident``; 0 when unknown) would go past the command's ``peak`` (the export's,
    the save included: :func:`peak_by_the_save`), and the copy holds less (``copy_bytes``:
    its float32 weights, the bound of what its checks hold: its ONNX model's file, which
    ONNX Runtime maps; the eager twin holds less, a 16-bit embedding and head kept 16-bit).
    The runtime holds at least the weights it loads, so a whole-folder check past that
    bound raises the command's peak by the model's size; an int4 folder smaller than its
    copy's float32 weights is checked whole."""
    return (resident or 0) + weights > peak and copy_bytes < weights


def peak_by_the_save(peak: int, resident: int | None, largest: int) -> int:
    """The command's peak once the model's save has run, bounded before it starts: the
    decision of :func:`checks_a_copy` is taken then, so that the copy's checks can run
    while the model is saved. The save holds, over what the process holds (``resident``),
    at most twice its ``largest`` tensor (the one written and the one made ahead:
    ``io/data_file.py``) and its write buffer; its peak is that or the ``peak`` so far."""
    return max(peak, (resident or 0) + 2 * largest + BUFFER_BYTES)


@dataclasses.dataclass(frozen=True)
class CopyCheck:
    """What the copy's checks need of the export that ran: how it exported (``export``:
    a folder to a program, as the model was), quantized and saved, and whether its sliding
    layers kept whole windows."""

    export: Callable[[SavedModel], ONNXProgram]
    quantization: Quantization
    whole_windows: bool
    model_filename: str
    #: where the copy's temporary folder goes (the folder written: on its disk)
    beside: pathlib.Path
    #: the model's location, the anchor of the copy's findings (the program's)
    model_location: Location | None = None


def copy_to_check(program: ONNXProgram, folder: StreamedFolder) -> LayerCopy | None:
    """The layer copy whose checks stand for the folder's, decided before the model's save
    (``program.model``'s weights, not yet written, as the ``.data`` file will hold them:
    :func:`checks_a_copy`); None when the whole folder is to be checked after the save: it
    is small enough, or the model has no copy."""
    copy_of = layer_copy_of(folder)
    if copy_of is None:
        return None
    sizes = onnx_file.external_nbytes(program.model)
    resident = resident_bytes()
    peak = peak_by_the_save(peak_rss_bytes(), resident, max(sizes, default=0))
    return copy_of if checks_a_copy(sum(sizes), copy_of.float32_bytes, peak, resident) else None


@dataclasses.dataclass(frozen=True)
class CopyChecked:
    """What the copy's checks found, kept until the model's save ended (they ran beside
    it), then recorded in the program's diagnostics in the order they were made
    (:func:`record_copy_checks`)."""

    copy_of: LayerCopy
    #: the copy's folder as exported (its runtime, its prompt)
    saved: SavedModel
    precision: str
    #: the command's peak memory once the copy was exported and saved (DO533's)
    peak: int
    #: DO534 or the DO535s, as recorded
    findings: tuple[Finding, ...]
    #: the runtime asked about the copy's folder (it is installed): its problem, None when
    #: it generated
    asked: bool
    problem: str | None


class _Stopped(Exception):
    """The copy's export was stopped between two steps: the save failed or was
    interrupted."""


@dataclasses.dataclass(frozen=True)
class _Made:
    """The copy exported and saved in float32 in its folder, with the peak then."""

    saved: SavedModel
    shrunk: ONNXProgram
    model_path: pathlib.Path
    peak: int


class CopyChecks:
    """The copy's checks, their light steps in a thread of their own started before the
    model's save so that the two run at the same time: the copy's export (its capture and
    optimization on meta weights: Python, on the other core) and its save (the save mostly
    waits on the disk and on threads that release the GIL). The steps that hold memory (the
    eager model of the copy and its session for the comparison, its quantization, genai's
    load of its folder) run in the caller's thread once the model's save ended
    (:meth:`outcome`), so that they add nothing to the save's peak. :meth:`abandon` when
    the save failed: the thread stops at its next step. The thread records into no context
    the caller uses and prints nothing; the copy's folder is removed once both ended."""

    def __init__(self, copy_of: LayerCopy, folder: StreamedFolder, how: CopyCheck) -> None:
        self._copy_of, self._folder, self._how = copy_of, folder, how
        # beside the folder, on its disk: a temporary directory may be memory (tmpfs)
        self._out = pathlib.Path(tempfile.mkdtemp(prefix=".layer_copy_", dir=how.beside))
        self._stop = threading.Event()
        self._made: _Made | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._made = _export_copy(self._copy_of, self._how, self._out, self._stop)
        except _Stopped:
            pass
        except BaseException as error:  # raised in the caller's thread by outcome()
            self._error = error

    def outcome(self) -> CopyChecked | None:
        """Once the model's save ended: the copy's checks finished here and what they
        found (None when the copy did not export: the whole folder is then checked), or
        the error they raised."""
        self._thread.join()
        try:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._made is None:
                return None
            return _check_made(self._made, self._copy_of, self._folder, self._how, self._out)
        finally:
            self._made = None
            shutil.rmtree(self._out, ignore_errors=True)

    def abandon(self) -> None:
        """Stop the copy's export at its next step, wait for it to end and remove its
        folder; what it made or raised is dropped: the save's failure is the one."""
        self._stop.set()
        self._thread.join()
        self._made = None
        shutil.rmtree(self._out, ignore_errors=True)


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Python's warnings filters and collector thresholds, process-wide, as they were
    before the block: each pipeline sets and puts back its own (``passes.logs``,
    ``passes.collector``), which two threads interleave; every state set inside the block
    ignores warnings, so that neither thread shows the other's (the copy's export warned as
    the model's did), and the block's end puts back the caller's."""
    with warnings.catch_warnings(), collections_spaced():
        warnings.simplefilter("ignore")
        yield


def _export_copy(
    copy_of: LayerCopy, how: CopyCheck, out: pathlib.Path, stop: threading.Event
) -> _Made | None:
    """``copy_of`` exported as ``how`` says and saved in float32 in ``out``; None when the
    copy does not export (the model exported: the copy's failure is not the user's)."""
    saved = (copy_of.folder.with_whole_windows() if how.whole_windows else None) or copy_of.folder
    model_path = out / how.model_filename
    try:
        with warnings.catch_warnings():  # the model's export said them already
            warnings.simplefilter("ignore")
            shrunk = how.export(saved)
        _stop_if(stop)
        shrunk.save(model_path, external_data=True)
    except OnnxExporterError:
        return None
    return _Made(saved, shrunk, model_path, peak_rss_bytes())


def _check_made(
    made: _Made, copy_of: LayerCopy, folder: StreamedFolder, how: CopyCheck, out: pathlib.Path
) -> CopyChecked:
    """The copy compared with eager (DO534/DO535), quantized as the model was, and the
    runtime asked about its folder."""
    shrunk, quantization = made.shrunk, how.quantization
    findings = _compare_with_eager(shrunk, copy_of, made.model_path, how)
    if quantization.precision != "fp32":
        shrunk.quantize(
            quantization.precision,
            block_size=quantization.block_size,
            symmetric=quantization.symmetric,
            accuracy_level=quantization.accuracy_level,
        )
        shrunk.save(made.model_path, external_data=True)
    for source in folder.files_to_copy:
        atomic_write_bytes(out / source.name, source.read_bytes())
    asked = made.saved.runtime_unavailable() is None
    problem = made.saved.runtime_problem(out) if asked else None
    return CopyChecked(
        copy_of, made.saved, quantization.precision, made.peak, findings, asked, problem
    )


def _stop_if(stop: threading.Event) -> None:
    if stop.is_set():
        raise _Stopped


def record_copy_checks(
    program: ONNXProgram, checked: CopyChecked, runtime: str, weights: int
) -> None:
    """DO533 (the check ran on the copy: ``weights``, the folder's ``.data`` bytes), then
    the copy's comparison with eager, in ``program``'s diagnostics after the save's
    findings, as if the checks had run after it."""
    ctx = program._context()
    copy_of = checked.copy_of
    ctx.record(
        "runtime-check-on-layer-copy",
        locations=[program.model_location],
        runtime=runtime,
        kept=len(copy_of.kept),
        layers=copy_of.layers,
        indices=_indices(copy_of),
        precision=checked.precision,
        weights=f"{weights / 1e9:.2f}",
        peak=f"{checked.peak / 1e9:.2f}",
    )
    ctx.findings.extend(checked.findings)


def _indices(copy_of: LayerCopy) -> str:
    return ", ".join(str(i) for i in copy_of.kept)


def _compare_with_eager(
    shrunk: ONNXProgram, copy_of: LayerCopy, model_path: pathlib.Path, how: CopyCheck
) -> tuple[Finding, ...]:
    """transformers' copy against ONNX Runtime on the copy's saved float32 model: the eager
    outputs first, the model then released, so that one of the two is held at a time; the
    session without prepacking (its packed copies of the weights were its peak). Returns
    DO534, or a DO535 for each output that differs, anchored at the model's location, for
    the program's record."""
    eager = layer_copy_to_eager(copy_of, how.whole_windows)
    kwargs = eager.inputs
    expected = _eager_outputs(eager.model, kwargs)
    reference = _Recorded(expected)
    del eager
    gc.collect()
    # unpacked: the session holds the pages of the weights a run reads, not packed copies
    session = inference_session(os.fspath(model_path), prepacking=False)
    runner = OrtRunner(session, shrunk.exported_program, shrunk.inputs)
    request = VerifyRequest(
        shrunk.model,
        None,
        runner,
        (),
        kwargs,
        reference,
        second_shape=False,
        longer_output=shrunk.inputs.longer_output if shrunk.inputs is not None else None,
    )
    # recorded in the copy's own diagnostics: the figures are the model's as this note
    comparisons = run_pipeline(shrunk.diagnostics, [VerifyPass()], request).comparisons
    del runner, session
    ctx = DiagnosticContext()  # recorded beside the model's save: carried after it
    location = how.model_location
    fields = {"kept": len(copy_of.kept), "indices": _indices(copy_of), "layers": copy_of.layers}
    tolerances = {"atol": VERIFY_ATOL, "rtol": VERIFY_RTOL}
    bad = [c for c in comparisons if not c.ok]
    for c in bad:
        ctx.record(
            "eager-mismatch-on-layer-copy",
            locations=[location],
            name=c.name,
            max_abs=c.max_abs,
            max_rel=c.max_rel,
            detail=c.detail,
            **fields,
            **tolerances,
        )
    if not bad:
        ctx.record(
            "eager-match-on-layer-copy",
            locations=[location],
            count=len(comparisons),
            max_abs=max((c.max_abs for c in comparisons), default=0.0),
            **fields,
            **tolerances,
        )
    return tuple(ctx.findings)


class _Recorded:
    """The eager outputs computed before the session was made, as VerifyPass's reference."""

    def __init__(self, outputs: Any) -> None:
        self._outputs = outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._outputs


def _eager_outputs(model: Any, kwargs: dict[str, Any]) -> Any:
    import torch

    from dynamo_onnx.integrations import copy_family_values

    with torch.no_grad():
        return model(**copy_family_values(dict(kwargs)))
