"""A streamed folder's model with fewer layers: one of each kind, reading the same tensors.

The checks after ``export-llm``'s save (onnxruntime-genai loading the folder, the comparison
with eager transformers) hold the model's weights: the whole folder's, as large as the model.
For a checkpoint the export streamed, they run on this copy instead: the same config with
only the first layer of each kind (a Gemma 2 keeps a sliding and a full layer, a Llama one
layer), whose weights are the checkpoint's own tensors of those layers (read under the
copy's layer numbers), with the embedding, the final norm and the LM head. Exported the way
the model was, it has the model's graph per layer, its I/O names and its runtime config,
at the cost of a few layers whatever the model's depth.

A layer's kind is what tells one layer from another: its parameters' names and shapes,
its modules' classes, and the config's per-layer entries (``layer_types``, ``no_rope_layers``:
lists of one value per layer). The copy's config keeps those entries of the layers kept;
a config that says a layer's kind otherwise (``first_k_dense_replace``) is caught by
comparing the copy's layers with the layers they stand for, and then the copy is the
first layers up to the last kind's first one; when that differs too, there is no copy.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Hashable
from typing import Any

from dynamo_onnx.integrations.transformers.hf_folder import HFFolder, example_inputs
from dynamo_onnx.integrations.transformers.streamed import (
    StreamedFolder,
    build_on_meta,
    match_checkpoint,
    streamed_folder,
)
from dynamo_onnx.io.checkpoint import Checkpoint

__all__ = ["LayerCopy", "Layers", "eager_folder", "layer_copy", "layer_number", "layers_of"]


@dataclasses.dataclass(frozen=True)
class LayerCopy:
    """``folder``: the copy, a streamed folder to export as the model was; ``kept``: the
    model's layers it holds, in order (the copy's layer ``i`` is the model's ``kept[i]``);
    ``layers``: how many the model has."""

    folder: StreamedFolder
    kept: tuple[int, ...]
    layers: int

    @property
    def float32_bytes(self) -> int:
        """The copy's weights in float32 (a tied one once): its float32 ONNX model's, the
        most its checks hold (its eager twin keeps a 16-bit embedding and head 16-bit)."""
        return 4 * sum(p.numel() for p in self.folder.model.parameters())


def _layer_list(model: Any, count: int) -> tuple[str, Any] | None:
    """The module list of the decoder's layers (its path in the model and itself)."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count and name:
            if name.split(".")[-1] in {"layers", "h", "blocks", "layer"}:
                return name, module
    return None


def _per_layer_keys(config: Any, count: int) -> list[str]:
    """The config's entries with one value per layer (``layer_types``...)."""
    return [
        key
        for key, value in vars(config).items()
        if "layer" in key and isinstance(value, (list, tuple)) and len(value) == count
    ]


def _kind(layer: Any, config: Any, keys: list[str], index: int) -> Hashable:
    parameters = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in layer.named_parameters())
    modules = tuple((n, type(m).__name__) for n, m in layer.named_modules())
    entries = tuple((k, repr(getattr(config, k)[index])) for k in keys)
    return parameters, modules, entries


def _kinds(model: Any, count: int, keys: list[str]) -> list[Hashable] | None:
    """Each layer's kind, with the config's per-layer entries ``keys`` (the model's: a
    copy's index list, ``moe_layers``, may have as many entries as the copy has layers)."""
    found = _layer_list(model, count)
    if found is None:
        return None
    return [_kind(layer, model.config, keys, i) for i, layer in enumerate(found[1])]


def _copy_config(config: Any, kept: tuple[int, ...], keys: list[str]) -> Any:
    shrunk = copy.deepcopy(config)
    for key in keys:
        value = getattr(config, key)
        setattr(shrunk, key, type(value)(value[i] for i in kept))
    shrunk.num_hidden_layers = len(kept)
    return shrunk


def layer_number(path: str) -> re.Pattern[str]:
    """A tensor name's layer number (group 3) under the layer list at ``path``, matched by
    the list's last name wherever it starts (a checkpoint saved from the base model has no
    ``model.`` prefix)."""
    return re.compile(rf"(^|\.)({re.escape(path.split('.')[-1])})\.(\d+)\.")


def _renamed(checkpoint: Checkpoint, path: str, kept: tuple[int, ...]) -> Checkpoint:
    """The checkpoint's tensors of the kept layers under the copy's layer numbers, and its
    tensors of no layer as they are (a checkpoint saved from the base model has no
    ``model.`` prefix: the layer list's last name is matched wherever it starts)."""
    pattern = layer_number(path)
    number = {old: new for new, old in enumerate(kept)}
    tensors = {}
    for name in checkpoint:
        match = pattern.search(name)
        if match is None:
            tensors[name] = checkpoint.stored(name)
        elif int(match.group(3)) in number:
            start, end = match.span(3)
            tensors[name[:start] + str(number[int(match.group(3))]) + name[end:]] = (
                checkpoint.stored(name)
            )
    return Checkpoint(tensors)


def _try(
    folder: StreamedFolder, kept: tuple[int, ...], kinds: list[Hashable], keys: list[str]
) -> Any | None:
    """The copy keeping ``kept`` when its layers are of the kinds of those they stand for."""
    model = build_on_meta(_copy_config(folder.model.config, kept, keys), folder.path)
    if _kinds(model, len(kept), keys) != [kinds[i] for i in kept]:
        return None
    return model


@dataclasses.dataclass(frozen=True)
class Layers:
    """What tells ``folder``'s model's layers apart: where their module list is (``path``),
    how many there are, the config's per-layer entries (``keys``) and each layer's kind."""

    folder: StreamedFolder
    path: str
    count: int
    keys: list[str]
    kinds: list[Hashable]

    def keeping(self, kept: tuple[int, ...]) -> StreamedFolder | None:
        """The copy of the model keeping the layers ``kept``, reading the checkpoint's
        tensors of those layers under the copy's numbers; None when its layers are not of
        the kinds of those they stand for, or its checkpoint is not its model's."""
        model = _try(self.folder, kept, self.kinds, self.keys)
        if model is None:
            return None
        checkpoint = _renamed(self.folder.checkpoint, self.path, kept)
        sources, report = match_checkpoint(model, checkpoint)
        if report.problem:
            return None
        return streamed_folder(self.folder.path, model, checkpoint, sources)


def layers_of(folder: StreamedFolder) -> Layers | None:
    """``folder``'s model's layers and their kinds; None when they cannot be found."""
    config = folder.model.config
    count = getattr(config, "num_hidden_layers", None)
    if not isinstance(count, int):
        return None
    keys = _per_layer_keys(config, count)
    kinds = _kinds(folder.model, count, keys)
    found = _layer_list(folder.model, count) if kinds is not None else None
    if kinds is None or found is None:
        return None
    return Layers(folder, found[0], count, keys, kinds)


def layer_copy(folder: StreamedFolder) -> LayerCopy | None:
    """The copy of ``folder``'s model with the first layer of each kind, reading the
    checkpoint's tensors of those layers; None when the model's layers cannot be found,
    when it has no fewer layers than the copy would, or when no copy of its config has
    layers of the same kinds (see the module's docstring)."""
    layers = layers_of(folder)
    if layers is None:
        return None
    kinds = layers.kinds
    first = sorted({kind: i for i, kind in reversed(list(enumerate(kinds)))}.values())
    candidates = [tuple(first), tuple(range(first[-1] + 1))]
    for kept in dict.fromkeys(candidates):
        if len(kept) >= layers.count:
            return None
        shrunk = layers.keeping(kept)
        if shrunk is not None:
            return LayerCopy(shrunk, kept, layers.count)
    return None


def eager_folder(copy_of: LayerCopy, whole_windows: bool) -> HFFolder:
    """The copy as transformers runs it: float32 parameters read from the checkpoint (a
    tied weight's names share one tensor; a 16-bit embedding and head kept 16-bit and
    widened where used, :mod:`.narrow_vocab`), buffers computed as it is built, example inputs with
    values (drawn from a generator seeded here, the caller's random state untouched), with
    whole windows when the copy was exported with them."""
    import torch

    from dynamo_onnx.integrations.transformers.narrow_vocab import NARROW_DTYPES, narrowed, widen

    shrunk = copy_of.folder
    model = build_on_meta(shrunk.model.config, shrunk.path)
    vocabulary = narrowed(model)  # embedding and head: kept 16-bit (narrow_vocab's docstring)
    read: dict[tuple[str, bool], Any] = {}
    state = {}
    for name in model.state_dict(keep_vars=True):
        source = shrunk.sources.get(name)
        if source is not None:
            narrow = name in vocabulary and shrunk.checkpoint.stored(source).dtype in NARROW_DTYPES
            if (source, narrow) not in read:
                read[source, narrow] = shrunk.checkpoint.read(
                    source, None if narrow else torch.float32
                )
            state[name] = read[source, narrow]
    model.load_state_dict(state, strict=False, assign=True)
    widen(model, vocabulary, state)
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ValueError("a parameter of the copy has no tensor in the checkpoint")
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        inputs = example_inputs(model, batch=1)  # a batch of one: GroupQueryAttention's
        # CPU kernel takes several new tokens after a past only then
    folder = HFFolder(shrunk.path, model, inputs, shrunk.files_to_copy)
    if whole_windows:
        folder = folder.with_whole_windows() or folder
    return folder
