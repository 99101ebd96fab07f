"""A streamed folder's model as a template of a few layers, whose layers the ONNX graph repeats.

torch.export's capture of a decoder costs time in proportion to its layers, and every layer
of a kind is traced from the same code. ``export-llm`` therefore exports a template: the
model's config with layer 0 and the first two layers of each kind after it
(``onnx_tools.layer_repeat.plan_template``), reading the checkpoint's tensors of those
layers (a copy made as :mod:`.layer_copy` makes one), through the whole pipeline; its layers
are then repeated in the ONNX graph to make the model's (``repeat_layers``).

A repeated layer's weights are the template layer's lazy tensors (whatever the passes made
of them: packed q/k/v, a transpose, a quantization after), evaluated with their checkpoint
reads redirected to that layer's tensors (:class:`LayerRead`, set in
``io.streamed_weights.READ_REDIRECT`` inside the evaluation, so a writer thread sees it too);
the weight stream records that layer's weight names (its non-finite values name that layer's
weight, DO401). A constant the optimizer folded from a layer's small weights (Gemma's
``1 + weight`` norms, GPT-OSS's sinks) is such a lazy tensor too
(``onnx_tools.lazy_folding.FoldedTensor``): its computation re-applied to the repeated
layer's own tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from dynamo_onnx.integrations.transformers import layer_names
from dynamo_onnx.integrations.transformers.layer_copy import layer_number, layers_of
from dynamo_onnx.integrations.transformers.loading import first_line
from dynamo_onnx.integrations.transformers.streamed import StreamedFolder
from dynamo_onnx.io.checkpoint import Checkpoint
from dynamo_onnx.io.fill import Fillable, Scratch, copy_array
from dynamo_onnx.io.streamed_weights import READ_REDIRECT

if TYPE_CHECKING:
    from dynamo_onnx.onnx_tools.layer_repeat import LayerPlan

__all__ = ["LayerRead", "LayerTemplate", "RedirectedTensor", "layer_template"]


@dataclasses.dataclass(frozen=True)
class LayerRead:
    """The reads of template layer ``j`` (the model's layer ``kept[j]``) made for the
    model's layer ``i``: its checkpoint names and weight names with ``i`` for ``kept[j]``
    (checkpoint names) or ``j`` (the template's weight names)."""

    checkpoint: Checkpoint
    pattern: re.Pattern[str]
    template_layer: int
    kept_layer: int
    layer: int

    def weight(self, name: str) -> str:
        return _with_layer(self.pattern, name, self.template_layer, self.layer)

    def source(self, checkpoint: Any, name: str) -> tuple[Any, str]:
        # the template's checkpoint keeps the model's tensors under its own numbers: the
        # stored tensor knows its name in the model's checkpoint
        stored = checkpoint.stored(name).name
        return self.checkpoint, _with_layer(self.pattern, stored, self.kept_layer, self.layer)


def _with_layer(pattern: re.Pattern[str], name: str, old: int, new: int) -> str:
    match = pattern.search(name)
    if match is None or int(match.group(3)) != old:
        return name
    start, end = match.span(3)
    return name[:start] + str(new) + name[end:]


@dataclasses.dataclass(frozen=True)
class LayerTemplate:
    """``folder``: the template, a streamed folder to export as the model would be;
    ``model``: the model's folder; ``kept``: the model's layers the template holds (its layer
    ``j`` is the model's ``kept[j]``); ``sources[i]``: the template layer the model's layer
    ``i`` repeats."""

    folder: StreamedFolder
    model: StreamedFolder
    kept: tuple[int, ...]
    sources: tuple[int, ...]
    path: str

    @property
    def layers(self) -> int:
        return len(self.sources)

    def model_weight(self, name: str) -> str:
        """The model's name of the template's weight ``name`` (its layer ``j`` is the
        model's ``kept[j]``)."""
        match = layer_number(self.path).search(name)
        if match is None:
            return name
        j = int(match.group(3))
        return _with_layer(layer_number(self.path), name, j, self.kept[j])

    def layer_weights(self, names: Iterable[str]) -> list[str]:
        """The weights among ``names`` that belong to a layer of the template."""
        pattern = layer_number(self.path)
        return [n for n in names if pattern.search(n) is not None]

    def plan(self) -> LayerPlan:
        """The plan ``repeat_layers`` follows, with transformers' layer names."""
        from dynamo_onnx.onnx_tools import layer_repeat

        return layer_repeat.LayerPlan(
            kept=self.kept,
            sources=self.sources,
            layer_of=layer_names.layer_of,
            renamed=layer_names.renamed,
            retarget=self.retarget,
        )

    def retarget(self, tensor: ir.TensorProtocol, j: int, i: int) -> ir.TensorProtocol:
        """Template layer ``j``'s initializer ``tensor`` as the model's layer ``i``'s: a lazy
        tensor evaluating ``tensor`` with its reads redirected to layer ``i``'s tensors.
        A layer's initializer that is not such a lazy tensor (a value computed at export
        from the template's tensors) is that layer's alone: repeating it would give layer
        ``i`` the template's values, so the repetition is refused."""
        from dynamo_onnx.onnx_tools.layer_repeat import LayerRepeatRefused

        lazy = isinstance(tensor, ir.LazyTensor) and not tensor.cache
        if i == self.kept[j] and (j == i or not lazy):
            return tensor  # the template's own layer, under its own numbers
        if not lazy:
            raise LayerRepeatRefused(
                f"the template's layer {self.kept[j]} has an initializer "
                f"`{tensor.name}` whose value was computed at export, not read from the "
                f"checkpoint: layer {i}'s cannot be made from it"
            )
        read = LayerRead(self.model.checkpoint, layer_number(self.path), j, self.kept[j], i)
        return RedirectedTensor(tensor, read)  # type: ignore[arg-type]


class RedirectedTensor(ir.LazyTensor):
    """A template layer's lazy ``tensor`` evaluated for another layer: with ``read`` in
    ``READ_REDIRECT`` while it evaluates (or fills a save's buffer: ``io.fill``)."""

    def __init__(self, tensor: ir.LazyTensor, read: LayerRead) -> None:
        thunk = tensor.raw

        def evaluate() -> ir.TensorProtocol:
            with self._redirected():
                return thunk()  # type: ignore[no-any-return]

        name = read.weight(tensor.name) if tensor.name else None
        super().__init__(evaluate, dtype=tensor.dtype, shape=tensor.shape, name=name)
        self._tensor = tensor
        self._read = read

    @contextlib.contextmanager
    def _redirected(self) -> Iterator[None]:
        token = READ_REDIRECT.set(self._read)
        try:
            yield
        finally:
            READ_REDIRECT.reset(token)

    def fill(self, out: torch.Tensor, scratch: Scratch) -> None:
        with self._redirected():
            if isinstance(self._tensor, Fillable):
                self._tensor.fill(out, scratch)
            else:
                copy_array(out, self._tensor.numpy())


def layer_template(folder: StreamedFolder) -> LayerTemplate | str:
    """The template of ``folder``'s model, or why there is none (the model is then
    exported whole): its layers cannot be found, the template would hold as many layers as
    the model, or the template's config does not give its layers the kinds of those they
    stand for."""
    from dynamo_onnx.onnx_tools.layer_repeat import plan_template

    layers = layers_of(folder)
    if layers is None:
        return "the model's layers are not a module list the config counts"
    planned = plan_template(layers.kinds)
    if planned is None:
        return f"a template would hold all {layers.count} layers"
    kept, sources = planned
    try:
        shrunk = layers.keeping(kept)
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
        # transformers refused the shrunk config: the model itself was built
        return f"transformers cannot build a config of layers {kept}: {first_line(exc)}"
    if shrunk is None:
        indices = ", ".join(map(str, kept))
        return f"a config of layers {indices} does not give them the kinds they have in the model"
    return LayerTemplate(shrunk, folder, kept, sources, layers.path)
