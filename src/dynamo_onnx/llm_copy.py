"""``export_llm``'s checks of a streamed folder made on a layer copy: the folder check
(onnxruntime-genai generating a token, DO514) and the comparison with eager transformers,
when holding the whole folder's weights would cost more memory than the export did.

The copy (``integrations.transformers.layer_copy``) is the model's config with the first
layer of each kind, reading the checkpoint's tensors of those layers; it is exported here
as the model was (the same export, fusions and precision) into a temporary folder with its
runtime files. Its float32 ONNX model is compared with transformers' model of the copy
(DO534, or DO535 when they differ), then quantized as the model was and checked by the
runtime, whose failure is the folder's DO514. DO533 says the check ran on the copy.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import pathlib
import tempfile
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynamo_onnx.defaults import VERIFY_ATOL, VERIFY_RTOL
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.files import atomic_write_bytes
from dynamo_onnx.integrations import SavedModel, StreamedFolder, layer_copy_of, layer_copy_to_eager
from dynamo_onnx.io.runner import OrtRunner
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.llm_stream import peak_rss_bytes
from dynamo_onnx.passes.base import run_pipeline
from dynamo_onnx.passes.verify import VerifyPass, VerifyRequest

if TYPE_CHECKING:
    from dynamo_onnx.integrations.transformers.layer_copy import LayerCopy
    from dynamo_onnx.program import ONNXProgram
    from dynamo_onnx.runtimes.onnxruntime.quantize import Quantization

__all__ = ["CopyCheck", "checks_a_copy", "resident_bytes", "run_on_copy"]


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
    ``weights`` (the ``.data`` file's bytes) on top of what the process holds now
    (``resident``; 0 when unknown) would go past the export's ``peak`` so far, and the copy
    holds less (``copy_bytes``: its float32 weights, the bound of what its checks hold: its
    ONNX model's file, which ONNX Runtime maps; the eager twin holds less, a 16-bit
    embedding and head kept 16-bit).
    The runtime holds at least the weights it loads, so a whole-folder check past that
    bound raises the command's peak by the model's size; an int4 folder smaller than its
    copy's float32 weights is checked whole."""
    return (resident or 0) + weights > peak and copy_bytes < weights


@dataclasses.dataclass(frozen=True)
class CopyCheck:
    """What the copy's checks need of the export that ran: how it exported (``export``:
    a folder to a program, as the model was), quantized and saved, and whether its sliding
    layers kept whole windows."""

    export: Callable[[SavedModel], ONNXProgram]
    quantization: Quantization
    whole_windows: bool
    model_filename: str
    #: the bytes of the model's ``.data`` file, as the note says them
    weights: int
    #: where the copy's temporary folder goes (the folder written: on its disk)
    beside: pathlib.Path


def run_on_copy(
    program: ONNXProgram,
    folder: StreamedFolder,
    how: CopyCheck,
    check_folder: Callable[[pathlib.Path, SavedModel], None],
) -> bool:
    """When :func:`checks_a_copy` says so, export ``folder``'s layer copy as ``how`` says,
    compare it with eager (DO534/DO535) and run ``check_folder(copy's folder, copy)``, the
    runtime's check, with DO533 recorded first in ``program``'s diagnostics. False, with
    nothing recorded, when the whole folder is to be checked: it is small enough, the model
    has no copy, or the copy does not export."""
    copy_of = layer_copy_of(folder)
    if copy_of is None or not checks_a_copy(
        how.weights, copy_of.float32_bytes, peak_rss_bytes(), resident_bytes()
    ):
        return False
    saved = (copy_of.folder.with_whole_windows() if how.whole_windows else None) or copy_of.folder
    quantization = how.quantization
    # beside the folder, on its disk: a temporary directory may be memory (tmpfs)
    with tempfile.TemporaryDirectory(prefix=".layer_copy_", dir=how.beside) as tmp:
        out = pathlib.Path(tmp)
        model_path = out / how.model_filename
        try:
            with warnings.catch_warnings():  # the model's export said them already
                warnings.simplefilter("ignore")
                shrunk = how.export(saved)
            shrunk.save(model_path, external_data=True)
        except OnnxExporterError:  # the model exported: the copy's failure is not the user's
            return False
        program._context().record(
            "runtime-check-on-layer-copy",
            locations=[program.model_location],
            runtime=folder.runtime,
            kept=len(copy_of.kept),
            layers=copy_of.layers,
            indices=_indices(copy_of),
            precision=quantization.precision,
            weights=f"{how.weights / 1e9:.2f}",
            peak=f"{peak_rss_bytes() / 1e9:.2f}",
        )
        _compare_with_eager(program, shrunk, copy_of, model_path, how.whole_windows)
        if quantization.precision != "fp32":
            shrunk.quantize(
                quantization.precision,
                block_size=quantization.block_size,
                symmetric=quantization.symmetric,
                accuracy_level=quantization.accuracy_level,
            )
            shrunk.save(model_path, external_data=True)
        for source in folder.files_to_copy:
            atomic_write_bytes(out / source.name, source.read_bytes())
        check_folder(out, saved)
    return True


def _indices(copy_of: LayerCopy) -> str:
    return ", ".join(str(i) for i in copy_of.kept)


def _compare_with_eager(
    program: ONNXProgram,
    shrunk: ONNXProgram,
    copy_of: LayerCopy,
    model_path: pathlib.Path,
    whole_windows: bool,
) -> None:
    """transformers' copy against ONNX Runtime on the copy's saved float32 model: the eager
    outputs first, the model then released, so that one of the two is held at a time; the
    session without prepacking (its packed copies of the weights were its peak)."""
    eager = layer_copy_to_eager(copy_of, whole_windows)
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
    ctx = program._context()
    fields = {"kept": len(copy_of.kept), "indices": _indices(copy_of), "layers": copy_of.layers}
    tolerances = {"atol": VERIFY_ATOL, "rtol": VERIFY_RTOL}
    bad = [c for c in comparisons if not c.ok]
    for c in bad:
        ctx.record(
            "eager-mismatch-on-layer-copy",
            locations=[program.model_location],
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
            locations=[program.model_location],
            count=len(comparisons),
            max_abs=max((c.max_abs for c in comparisons), default=0.0),
            **fields,
            **tolerances,
        )


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
