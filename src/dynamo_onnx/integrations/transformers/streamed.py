"""A causal LM from a Hugging Face folder, built without its weights, and where each weight is.

``export-llm`` on a 1.3B checkpoint used to hold the model in float32, its ONNX copy and the
quantizer's: its peak memory grew with the model at 2-3 times its size. Here the model is
built with every parameter on torch's meta device (a shape and a dtype, no storage), so the
capture costs what a fake-mode export costs whatever the size; the checkpoint's tensors are
read one at a time later, when the ONNX weights are written (``io.streamed_weights``).

What the checkpoint does not hold is handled by name:

- buffers computed when the model is built (rotary inverse frequencies): the parameters
  alone go to the meta device as each module registers them, so the buffers are computed
  by transformers' own code, for real, and kept (they are small);
- tied weights (an LM head sharing the embedding's matrix): every name of one parameter
  reads the tensor stored under any of them;
- transformations the ONNX passes make later (packed q/k/v, transposed weights, rotary
  caches) are lazy tensors over these, so they need no name of their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError
from dynamo_onnx.fake import is_fake
from dynamo_onnx.integrations.transformers import hf_folder
from dynamo_onnx.io.checkpoint import Checkpoint, open_checkpoint
from dynamo_onnx.io.streamed_weights import WeightStream

__all__ = ["StreamedFolder", "attach_weights", "load_streamed", "parameters_on_meta"]


@dataclasses.dataclass(frozen=True)
class StreamedFolder:
    """A causal LM of ``path`` whose parameters are on the meta device, its example inputs
    (meta tensors too), the buffers computed when it was built, and its checkpoint."""

    path: pathlib.Path
    model: Any  # a transformers PreTrainedModel, in eval mode, on the meta device
    inputs: dict[str, Any]
    files_to_copy: tuple[pathlib.Path, ...]
    checkpoint: Checkpoint
    #: name -> the real tensor, for the buffers the model computes (not in the checkpoint)
    buffers: Mapping[str, Any]
    #: a model weight's name -> the checkpoint's name of its tensor (tied weights: one name)
    sources: Mapping[str, str]
    #: model weights that the checkpoint lacks, or holds with another shape
    missing: tuple[str, ...]
    #: checkpoint tensors that are no weight of the model
    unexpected: tuple[str, ...]


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered in the block goes to the meta device; buffers stay.

    Modules create their parameters with ``torch.empty`` (untouched memory: no resident
    pages) and move here at once; their initialization then runs on meta tensors, free.
    Buffers, such as the rotary inverse frequencies transformers computes in ``__init__``,
    are computed for real. ``nn.Module.register_parameter`` is put back after the block.
    """
    import torch  # noqa: PLC0415

    original = torch.nn.Module.register_parameter

    def register(module: Any, name: str, param: Any) -> None:
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


def _sources(model: Any, checkpoint: Checkpoint) -> tuple[dict[str, str], list[str]]:
    """Each weight's checkpoint tensor (any name of a tied parameter), and the weights
    the checkpoint lacks or holds with another shape."""
    names: dict[int, list[str]] = {}
    tensors: dict[int, Any] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
        tensors[id(param)] = param
    persistent = dict(model.state_dict(keep_vars=True))
    for name, buffer in model.named_buffers(remove_duplicate=False):
        if name in persistent:
            names.setdefault(id(buffer), []).append(name)
            tensors[id(buffer)] = buffer
    sources: dict[str, str] = {}
    missing: list[str] = []
    for key, group in names.items():
        shape = tuple(tensors[key].shape)
        stored = [n for n in group if n in checkpoint]
        if not stored:
            missing.extend(group)
            continue
        if checkpoint.stored(stored[0]).shape != shape:
            held = checkpoint.stored(stored[0]).shape
            missing.append(f"{stored[0]} (shape {list(held)}, the model's {list(shape)})")
            continue
        for name in group:
            sources[name] = stored[0]
    return sources, missing


def _unexpected(model: Any, checkpoint: Checkpoint, sources: Mapping[str, str]) -> list[str]:
    """Checkpoint tensors that are no weight of the model, less those transformers itself
    ignores when loading (``_keys_to_ignore_on_load_unexpected``)."""
    import re  # noqa: PLC0415

    used = set(sources.values()) | set(sources)
    ignored = [
        re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or []
    ]
    buffers = {name for name, _ in model.named_buffers()}
    return sorted(
        name
        for name in checkpoint
        if name not in used and name not in buffers and not any(p.search(name) for p in ignored)
    )


def load_streamed(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> StreamedFolder | None:
    """The causal LM saved in ``path`` with its parameters on the meta device (float32),
    built offline from its ``config.json``; None when its weights are not safetensors (the
    caller loads the model in memory then). A folder that is no causal LM fails with DO507
    and transformers' reason, as loading it would."""
    folder = pathlib.Path(path)
    problem = hf_folder._problem(folder)
    checkpoint = open_checkpoint(folder) if problem is None else None
    if problem is None and checkpoint is None:
        return None
    model = None
    if problem is None:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        try:
            with hf_folder._quiet_loading(transformers):
                config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
                with parameters_on_meta():
                    model = transformers.AutoModelForCausalLM.from_config(
                        config, dtype=torch.float32
                    )
        except (OSError, ValueError, KeyError, ImportError) as exc:
            problem = hf_folder._first_line(exc)
    if problem is not None or model is None or checkpoint is None:
        ctx.fail("hf-folder-unusable", InvalidOptionValueError, path=os.fspath(path), cause=problem)
    model = model.eval()
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    sources, missing = _sources(model, checkpoint)
    unexpected = _unexpected(model, checkpoint, sources)
    model.to("meta")
    with torch.device("meta"):
        inputs = hf_folder.example_inputs(model)
    files = tuple(folder / name for name in hf_folder.TOKENIZER_FILES if (folder / name).is_file())
    return StreamedFolder(
        folder,
        model,
        inputs,
        files,
        checkpoint,
        buffers,
        sources,
        tuple(missing),
        tuple(unexpected),
    )


def attach_weights(model: ir.Model, folder: StreamedFolder, stream: WeightStream) -> list[str]:
    """Give each fake initializer of ``model`` (exported from ``folder.model``) its value:
    a lazy read of its checkpoint tensor, converted to the initializer's dtype, or the
    buffer computed when the model was built. Returns the fake initializers that have
    neither (none, for a model transformers builds from the folder's config)."""

    from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE, torch_tensor_to_ir  # noqa: PLC0415

    torch_dtypes = {onnx: dtype for dtype, onnx in TORCH_TO_ONNX_DTYPE.items()}
    unknown = []
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if tensor is None or not is_fake(getattr(tensor, "raw", None)):
            continue
        source = folder.sources.get(name)
        if source is not None:
            read = functools.partial(_read, folder.checkpoint, source, torch_dtypes[tensor.dtype])
            value.const_value = stream.lazy(name, tensor.dtype, tensor.shape, read)
        elif name in folder.buffers:
            value.const_value = torch_tensor_to_ir(folder.buffers[name], name)
        else:
            unknown.append(name)
    return unknown


def _read(checkpoint: Checkpoint, source: str, dtype: Any) -> np.ndarray:
    return checkpoint.read(source, dtype).numpy()
