"""Saves of an ONNX model: to a path, atomically (through ``dynamo_onnx.files``, so a failed
or interrupted save never leaves a half-written file and never destroys an earlier one), or
to a binary file object; and the ModelProto."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import onnx
import onnx_ir as ir

from dynamo_onnx.defaults import SAVE_TENSORS_AHEAD
from dynamo_onnx.fake import is_fake
from dynamo_onnx.files import staging
from dynamo_onnx.io import data_file, protowriter
from dynamo_onnx.io.direct_file import open_direct

__all__ = [
    "EXTERNAL_THRESHOLD",
    "TWO_GB",
    "external_nbytes",
    "initializers_layout",
    "is_file_object",
    "save",
    "to_proto",
    "unwritable",
    "weights_nbytes",
    "write",
]

#: Protobuf cannot hold more than this; larger models must use external data.
TWO_GB = 2**31
#: Tensors of more bytes than this go to the external data file (onnx_ir's default);
#: smaller ones stay inline in the model.
EXTERNAL_THRESHOLD = 256
#: Inline weights from this size up are written past the page cache (``direct_file``):
#: below it the cache is cheap, and a small model's file is likely read again at once.
DIRECT_BYTES = 64 * 2**20


def is_file_object(destination: object) -> bool:
    """Whether ``destination`` is a writable file object (``io.BytesIO``, an open file)
    rather than a path: ``torch.onnx`` accepts both."""
    return not isinstance(destination, (str, os.PathLike)) and callable(
        getattr(destination, "write", None)
    )


def external_nbytes(model: ir.Model) -> list[int]:
    """The size of each tensor a save with external data writes to the ``.data`` file."""
    sizes = (v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value)
    return [n for n in sizes if n > EXTERNAL_THRESHOLD]


def weights_nbytes(model: ir.Model) -> int:
    """Bytes of initializer data (fake or missing weights count as zero)."""
    total = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None:
            total += tensor.nbytes
    return total


@contextlib.contextmanager
def initializers_layout(
    model: ir.Model, *, include_initializers: bool, keep_initializers_as_inputs: bool
) -> Iterator[ir.Model]:
    """Temporarily lay the initializers out as the four ``save`` combinations ask."""
    graph = model.graph
    saved_inputs = list(graph.inputs)
    saved_initializers = dict(graph.initializers)
    try:
        if keep_initializers_as_inputs:
            present = {id(v) for v in graph.inputs}
            graph.inputs.extend(v for v in saved_initializers.values() if id(v) not in present)
        if not include_initializers:
            graph.initializers.clear()
        yield model
    finally:
        graph.inputs.clear()
        graph.inputs.extend(saved_inputs)
        graph.initializers.clear()
        for name, value in saved_initializers.items():
            graph.initializers[name] = value


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as an ``onnx.ModelProto`` (weights are copied into it)."""
    return ir.to_proto(model)


def save(
    model: ir.Model,
    destination: str | os.PathLike[str],
    *,
    include_initializers: bool = True,
    keep_initializers_as_inputs: bool = False,
    external_data: bool | None = None,
    progress: Progress | None = None,
) -> None:
    """Write the model to ``destination`` atomically (``dynamo_onnx.files``).

    With external data (asked for, or automatic above 2 GB of weights) the weights go to
    ``<destination>.data`` beside it, written and renamed the same way, before the model,
    one tensor at a time (``data_file``: a lazy tensor is evaluated in a thread while the
    one before it is written): ``progress`` is called before each is written with the
    tensors and bytes written so far, that one included, and in all.
    A model with no weights to write has no ``.data`` file. Raises ``OSError`` as the file
    system does; check :func:`unwritable` first for a clear cause.
    """
    destination = pathlib.Path(os.fspath(destination))
    if external_data is None:
        external_data = include_initializers and weights_nbytes(model) >= TWO_GB
    with (
        initializers_layout(
            model,
            include_initializers=include_initializers,
            keep_initializers_as_inputs=keep_initializers_as_inputs,
        ),
        staging(destination.parent, destination.name) as stage,
    ):
        staged = stage.path(destination.name)
        if external_data and model.graph.initializers:
            data_name = f"{destination.name}.data"
            values = data_file.external_values(model, EXTERNAL_THRESHOLD)
            if values is None:
                ir.save(
                    model,
                    staged,
                    external_data=data_name,
                    size_threshold_bytes=EXTERNAL_THRESHOLD,
                    callback=_callback(model, progress),
                )
            else:
                _save_with_data_file(model, staged, data_name, values, progress)
            data = stage.path(data_name)
            # Tensors under ir.save's threshold stay inline: no weights outside, no file.
            if data.exists() and data.stat().st_size:
                stage.commit(data_name)
            stage.commit(destination.name)
            return
        if all(protowriter.streamable(v) for v in model.graph.initializers.values()):
            direct = open_direct(staged) if weights_nbytes(model) >= DIRECT_BYTES else None
            with direct if direct is not None else open(staged, "wb") as file:
                protowriter.write_model(model, file)
        else:
            ir.save(model, staged)
        stage.commit(destination.name)


#: ``progress(tensors written, tensors, bytes written, bytes)``.
Progress = Callable[[int, int, int, int], None]


def _save_with_data_file(
    model: ir.Model,
    staged: pathlib.Path,
    data_name: str,
    values: list[ir.Value],
    progress: Progress | None,
) -> None:
    """``ir.save(model, staged, external_data=data_name)``'s two files, the data file
    written by ``data_file`` (weights made ahead in threads, written past the page cache):
    ``values`` are the initializers it writes, which then refer to it as onnx_ir's own save
    makes them."""
    tensors = [v.const_value for v in values]
    assert all(t is not None for t in tensors)
    total_bytes = sum(t.nbytes for t in tensors)  # type: ignore[union-attr]
    written = [0]

    def before(index: int, tensor: ir.TensorProtocol) -> None:
        written[0] += tensor.nbytes
        if progress is not None:
            progress(index + 1, len(tensors), written[0], total_bytes)

    data_file.write_data_file(
        tensors,  # type: ignore[arg-type]
        staged.parent / data_name,
        direct=total_bytes >= DIRECT_BYTES,
        before=before,
        ahead=SAVE_TENSORS_AHEAD,
    )
    location, base_dir = os.path.normpath(data_name), os.path.normpath(staged.parent)
    offset = 0
    try:
        for value, tensor in zip(values, tensors, strict=True):
            assert tensor is not None
            value.const_value = ir.ExternalTensor(
                location,
                offset,
                tensor.nbytes,
                tensor.dtype,
                shape=tensor.shape,  # type: ignore[arg-type]
                name=tensor.name,  # type: ignore[arg-type]
                base_dir=base_dir,
            )
            offset += tensor.nbytes
        ir.save(model, staged)
    finally:
        for value, tensor in zip(values, tensors, strict=True):
            value.const_value = tensor


def _callback(model: ir.Model, progress: Progress | None) -> Callable[..., None] | None:
    """onnx_ir's per-tensor callback as ``progress`` calls, the last one at the end."""
    if progress is None:
        return None
    total_bytes = sum(external_nbytes(model))
    written = {"tensors": 0, "bytes": 0}

    def callback(tensor: ir.TensorProtocol, info: Any) -> None:
        written["tensors"] += 1
        written["bytes"] += tensor.nbytes
        progress(written["tensors"], info.total, written["bytes"], total_bytes)

    return callback


def write(
    model: ir.Model,
    file: protowriter.Writable,
    *,
    include_initializers: bool = True,
    keep_initializers_as_inputs: bool = False,
) -> None:
    """Write the model, weights inline, to a binary file object (``io.BytesIO``, an open
    file) as ``torch.onnx`` does; the caller has checked that the weights fit (< 2 GB)."""
    with initializers_layout(
        model,
        include_initializers=include_initializers,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
    ):
        if all(protowriter.streamable(v) for v in model.graph.initializers.values()):
            protowriter.write_model(model, file)
        else:
            file.write(ir.to_proto(model).SerializeToString())


def unwritable(destination: str | os.PathLike[str]) -> str | None:
    """Why ``destination`` cannot be written, before anything is written; None if it can."""
    destination = pathlib.Path(os.fspath(destination))
    directory = destination.parent
    if destination.is_dir():
        return "it is a directory; give a file path such as model.onnx"
    if not directory.is_dir():
        return f"its directory {directory} does not exist"
    if not os.access(directory, os.W_OK):
        return f"its directory {directory} is not writable"
    return None


def fake_weight_names(model: ir.Model) -> list[str]:
    """Names of the initializers that are fake (meta tensors, no data)."""
    return [
        name
        for name, value in model.graph.initializers.items()
        if is_fake(getattr(value.const_value, "raw", None))
    ]
