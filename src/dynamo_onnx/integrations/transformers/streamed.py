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

The load is checked as the in-memory one is (``hf_folder.load``, ``checkpoint.py``), with
the key sets taken from the checkpoint's headers and the meta model's state_dict: the same
refusals (DO507, DO513) with the same messages, before anything is read or written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError, WeightsMismatchError
from dynamo_onnx.fake import is_fake
from dynamo_onnx.integrations.transformers.checkpoint import (
    KeyReport,
    architecture_problem,
    config_problem,
    key_report,
)
from dynamo_onnx.integrations.transformers.hf_folder import (
    GENERATION_CONFIG,
    NEW,
    HFFolder,
    example_inputs,
    files_to_copy,
    fill_ids_from_tokenizer,
)
from dynamo_onnx.integrations.transformers.loading import first_line, folder_problem, quiet_loading
from dynamo_onnx.integrations.transformers.rotary import long_frequencies_as_buffers
from dynamo_onnx.io.checkpoint import Checkpoint, open_checkpoint
from dynamo_onnx.io.fill import Scratch
from dynamo_onnx.io.streamed_weights import READ_REDIRECT, WeightStream

__all__ = [
    "StreamedFolder",
    "attach_weights",
    "build_on_meta",
    "load_streamed",
    "match_checkpoint",
    "parameters_on_meta",
    "renames_keys",
    "streamed_folder",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StreamedFolder(HFFolder):
    """A causal LM of ``path`` whose parameters are on the meta device, its example inputs
    (meta tensors too), the buffers computed when it was built, and its checkpoint: an
    :class:`HFFolder` in all else (the files to copy, the runtime that checks the folder)."""

    checkpoint: Checkpoint
    #: name -> the real tensor, for the buffers the model computes (not in the checkpoint)
    buffers: Mapping[str, Any]
    #: a model weight's name -> the checkpoint's name of its tensor (tied weights: one name)
    sources: Mapping[str, str]

    def prompt(self) -> list[int]:
        """The runtime check's prompt: :data:`~hf_folder.NEW` ids drawn as the example's
        are (the example is meta tensors here: shapes without values), seeded."""
        import torch

        seeded = torch.Generator().manual_seed(0)
        vocab = self.model.config.vocab_size
        return torch.randint(1, vocab, (NEW,), generator=seeded).tolist()


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered in the block goes to the meta device; buffers stay.

    Modules create their parameters with ``torch.empty`` (untouched memory: no resident
    pages) and move here at once; their initialization then runs on meta tensors, free.
    Buffers, such as the rotary inverse frequencies transformers computes in ``__init__``,
    are computed for real. ``nn.Module.register_parameter`` is put back after the block.
    """
    import torch

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


def _stored_name(model: Any, checkpoint: Checkpoint) -> Callable[[str], str]:
    """The checkpoint's name of a model weight: its own, or without the base model's prefix
    for a checkpoint saved from the base model (``LlamaModel``: ``layers.0...``), as
    transformers reads it (the LM head is then missing, which the checks say)."""
    prefix = (getattr(model, "base_model_prefix", "") or "") + "."
    if prefix == "." or any(name.startswith(prefix) for name in checkpoint):
        return lambda name: name
    return lambda name: name.removeprefix(prefix)


def _ignored(patterns: Iterable[str] | None) -> re.Pattern[str] | None:
    found = sorted(set(patterns or ()))
    return re.compile("|".join(f"({p})" for p in found)) if found else None


def match_checkpoint(model: Any, checkpoint: Checkpoint) -> tuple[dict[str, str], KeyReport]:
    """Each weight's checkpoint tensor (any name of a tied parameter reads the one stored),
    and the key report of the load transformers would make: the model's state_dict against
    the checkpoint's names and shapes (its headers), with the keys transformers itself
    ignores (``_keys_to_ignore_on_load_missing``/``_unexpected``, old rotary and position
    buffers) left out and the config's tied weights (``all_tied_weights_keys``) named."""
    state = model.state_dict(keep_vars=True)
    stored_name = _stored_name(model, checkpoint)
    groups: dict[int, list[str]] = {}
    for name, tensor in state.items():
        groups.setdefault(id(tensor), []).append(name)
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
    sources: dict[str, str] = {}
    missing: list[str] = []
    mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
    for group in groups.values():
        stored = [n for n in group if stored_name(n) in checkpoint]
        if not stored:
            missing.extend(group)
            continue
        source = stored_name(stored[0])
        held, shape = checkpoint.stored(source).shape, tuple(state[stored[0]].shape)
        if tuple(held) != shape:
            mismatched.append((stored[0], tuple(held), shape))
            continue
        for name in group:
            sources[name] = source
            if name not in stored:  # filled from the one stored: tied, not missing
                missing.append(name)
                tied.setdefault(name, stored[0])
    buffers = {name for name, _ in model.named_buffers()}
    unexpected_patterns = set(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    if any(b.endswith("rotary_emb.inv_freq") for b in buffers):
        unexpected_patterns.add(r"rotary_emb\.inv_freq")
    if any(b.endswith("position_ids") for b in buffers):
        unexpected_patterns.add(r"(^|\.)position_ids$")
    ignore_missing = _ignored(getattr(model, "_keys_to_ignore_on_load_missing", None))
    ignore_unexpected = _ignored(unexpected_patterns)
    used = set(sources.values()) | {stored_name(n) for n in state}
    # a buffer not in the state_dict (non-persistent) is unexpected too, as transformers
    # matches the checkpoint against the state_dict: only its patterns above are ignored
    unexpected = [
        name
        for name in checkpoint
        if name not in used and not (ignore_unexpected and ignore_unexpected.search(name))
    ]
    missing = [n for n in missing if not (ignore_missing and ignore_missing.search(n))]
    return sources, key_report(missing, unexpected, mismatched, tied)


def renames_keys(model: Any) -> bool:
    """Whether transformers converts the checkpoint's tensors of ``model``'s type when it
    loads them (a Mixtral saved with one tensor per expert, loaded as the experts' fused
    ``gate_up_proj``): names and shapes the headers give are then not the model's, and the
    streamed read does not make those conversions, so the folder is loaded in memory,
    where transformers converts and ``hf_folder.load`` checks what it loaded."""
    from transformers import conversion_mapping

    return bool(conversion_mapping.extract_weight_conversions_for_model(model))


def _build(folder: pathlib.Path) -> tuple[Any, str | None]:
    """The model of ``folder``'s config with meta parameters (None, and why, when it is
    refused: an encoder-decoder)."""
    import transformers

    with quiet_loading(transformers):
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        refused = config_problem(config)
        if refused is not None:
            return None, refused
        return build_on_meta(config, folder), None


def build_on_meta(config: Any, folder: pathlib.Path) -> Any:
    """The causal LM of ``config`` with meta parameters and real buffers, with the
    generation config saved in ``folder`` (what from_pretrained reads too: the checkpoint's
    search and end ids)."""
    import torch
    import transformers

    with quiet_loading(transformers):
        with parameters_on_meta():
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        if model.can_generate() and (folder / GENERATION_CONFIG).is_file():
            model.generation_config = transformers.GenerationConfig.from_pretrained(
                folder, local_files_only=True
            )
    return model


def load_streamed(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> StreamedFolder | None:
    """The causal LM saved in ``path`` with its parameters on the meta device (float32),
    built offline from its ``config.json``; None when its weights are not safetensors (the
    caller loads the model in memory then), or when their names are not the model's and
    transformers converts them (:func:`renames_keys`: then too). The load is checked as
    ``hf_folder.load`` checks it, from the checkpoint's headers: a folder that is no causal
    decoder fails with DO507 and the reason; weights that are not the model's (missing,
    unexpected, of another shape) with DO513, naming them. Nothing is read but the
    headers."""
    folder = pathlib.Path(path)
    problem = folder_problem(folder)
    checkpoint = open_checkpoint(folder) if problem is None else None
    if problem is None and checkpoint is None:
        return None
    model, mismatch, sources = None, None, {}
    if problem is None and checkpoint is not None:
        try:
            model, problem = _build(folder)
            if model is not None:
                sources, report = match_checkpoint(model, checkpoint)
                problem = architecture_problem(model, report)
                mismatch = report.problem and report.problem + report.tied_note
        except (OSError, ValueError, KeyError, ImportError, RuntimeError) as exc:
            problem = first_line(exc)
    if problem is not None or model is None or checkpoint is None:
        ctx.fail("hf-folder-unusable", InvalidOptionValueError, path=os.fspath(path), cause=problem)
    if mismatch is not None and renames_keys(model):
        return None  # transformers converts this checkpoint's names: loaded in memory
    if mismatch is not None:
        ctx.fail(
            "checkpoint-mismatch", WeightsMismatchError, path=os.fspath(path), tensors=mismatch
        )
    return streamed_folder(folder, model, checkpoint, sources)


def streamed_folder(
    folder: pathlib.Path, model: Any, checkpoint: Checkpoint, sources: Mapping[str, str]
) -> StreamedFolder:
    """``model`` (built by :func:`build_on_meta` from ``folder``'s config, checked against
    ``checkpoint``) as a folder to export: its buffers computed and kept, then moved to the
    meta device, with example inputs of meta tensors."""
    import torch

    model = model.eval()
    fill_ids_from_tokenizer(model, folder)
    long_frequencies_as_buffers(model)  # LongRoPE's, computed here like the other buffers
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    model.to("meta")
    with torch.device("meta"):
        inputs = example_inputs(model)
    return StreamedFolder(
        folder,
        model,
        inputs,
        files_to_copy(folder),
        checkpoint=checkpoint,
        buffers=buffers,
        sources=dict(sources),
    )


def attach_weights(model: ir.Model, folder: StreamedFolder, stream: WeightStream) -> list[str]:
    """Give each fake initializer of ``model`` (exported from ``folder.model``) its value:
    a lazy read of its checkpoint tensor, converted to the initializer's dtype, or the
    buffer computed when the model was built. Returns the fake initializers that have
    neither (none, for a model transformers builds from the folder's config)."""

    from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE, torch_tensor_to_ir

    torch_dtypes = {onnx: dtype for dtype, onnx in TORCH_TO_ONNX_DTYPE.items()}
    unknown = []
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if tensor is None or not is_fake(getattr(tensor, "raw", None)):
            continue
        source = folder.sources.get(name)
        if source is not None:
            read = functools.partial(_read, folder.checkpoint, source, torch_dtypes[tensor.dtype])
            stored = functools.partial(_read_stored, folder.checkpoint, source)
            value.const_value = stream.lazy(name, tensor.dtype, tensor.shape, read, stored)
        elif name in folder.buffers:
            value.const_value = torch_tensor_to_ir(folder.buffers[name], name)
        else:
            unknown.append(name)
    return unknown


def _read(checkpoint: Checkpoint, source: str, dtype: Any) -> np.ndarray:
    """``source`` read from ``checkpoint``, or the tensor a repeated layer reads in its
    place (:data:`~dynamo_onnx.io.streamed_weights.READ_REDIRECT`)."""
    redirect = READ_REDIRECT.get()
    if redirect is not None:
        checkpoint, source = redirect.source(checkpoint, source)
    return checkpoint.read(source, dtype).numpy()


def _read_stored(checkpoint: Checkpoint, source: str, scratch: Scratch) -> torch.Tensor:
    """``source`` as stored (its file's dtype), read into ``scratch``'s ``"read"`` slot;
    redirected as :func:`_read` is."""
    redirect = READ_REDIRECT.get()
    if redirect is not None:
        checkpoint, source = redirect.source(checkpoint, source)
    return checkpoint.read_into(source, scratch.take("read", checkpoint.stored(source).nbytes))
