"""``export_llm``'s weights streamed from the checkpoint: the steps between the export of a
model built without weights and the save that reads them.

The export captures the model with meta parameters (``integrations.transformers.streamed``);
:func:`give_weights` then makes each ONNX weight a lazy read of its checkpoint tensor, so
that the optimizer, the fusions (packing q/k/v) and the quantizer compose lazy tensors and
the save evaluates them one at a time. :func:`report_streamed` records what the values
said (non-finite weights, DO401) and what the save cost (DO532), from the save itself.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import TYPE_CHECKING

from dynamo_onnx.errors import WeightsMismatchError
from dynamo_onnx.integrations import StreamedFolder, attach_folder_weights
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.streamed_weights import WeightStream

if TYPE_CHECKING:
    from dynamo_onnx.program import ONNXProgram

__all__ = ["MEASUREMENT", "give_weights", "note_peak", "peak_rss_bytes", "report_streamed"]

#: The key of the streamed save's figures in ``ctx.measurements`` (the SARIF invocation's
#: properties): tensors and bytes written, checkpoint tensors read, peak memory.
MEASUREMENT = "weights"
#: Names listed in a finding's message; the rest are counted.
_LISTED = 5


def _names(names: tuple[str, ...] | list[str]) -> str:
    names = sorted(names)
    shown = ", ".join(f"`{n}`" for n in names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (Linux counts KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def give_weights(program: ONNXProgram, folder: StreamedFolder) -> WeightStream:
    """The program's fake weights as lazy reads of the checkpoint. The checkpoint was
    checked against the model when it was loaded (DO513); an initializer with neither a
    checkpoint tensor nor a computed buffer is that same mismatch, found here."""
    stream = WeightStream()
    unknown = attach_folder_weights(program.model, folder, stream)
    if unknown:
        ctx = program._context()
        ctx.fail(
            "checkpoint-mismatch",
            WeightsMismatchError,
            program.model_location,
            path=os.fspath(folder.path),
            tensors=f"{len(unknown)} tensor(s) the model needs are not in it ({_names(unknown)})",
        )
    return stream


def report_streamed(
    program: ONNXProgram, stream: WeightStream, data_path: os.PathLike[str] | str
) -> None:
    """After the save: DO401 for each weight read with NaN or inf, and DO532 with the
    tensors and bytes written and the peak memory."""
    ctx = program._context()
    for name, (bad, total) in sorted(stream.non_finite.items()):
        ctx.record(
            "non-finite-weights",
            locations=[program.model_location],
            name=name,
            count=bad,
            total=total,
        )
    written = os.path.getsize(data_path) if os.path.exists(data_path) else 0
    tensors = len(onnx_file.external_nbytes(program.model))
    peak = peak_rss_bytes()
    ctx.measurements[MEASUREMENT] = {
        "tensors": tensors,
        "bytesWritten": written,
        "checkpointTensorsRead": len(stream.read),
        "peakRssBytes": peak,
    }
    ctx.record(
        "weights-streamed",
        locations=[program.model_location],
        tensors=tensors,
        written=f"{written / 1e9:.2f}",
        path=os.fspath(data_path),
        read=len(stream.read),
        peak=f"{peak / 1e9:.2f}",
    )


def note_peak(program: ONNXProgram) -> None:
    """The streamed figures' peak memory made the whole command's so far, once the checks
    after the save ran (the runtime loading the folder or its layer copy): the summary line
    and the SARIF invocation give that one; DO532 keeps the save's."""
    figures = program._context().measurements.get(MEASUREMENT)
    if figures is not None:
        figures["peakRssBytes"] = peak_rss_bytes()
