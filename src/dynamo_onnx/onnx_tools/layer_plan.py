"""Which layers a template keeps and which template layer each model layer repeats
(:mod:`.layer_repeat`), and the names that say a value's layer."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Sequence

import onnx_ir as ir

__all__ = ["KEPT_PER_KIND", "LayerPlan", "LayerRepeatRefused", "plan_template"]

#: The template layers kept of each kind after the first layer: two, so that one is preceded
#: by a layer of its kind's computation (not the first, whose graph differs in a fused model)
#: and the two can be compared.
KEPT_PER_KIND = 2


class LayerRepeatRefused(Exception):
    """The template's layers cannot be repeated into the model: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def plan_template(kinds: Sequence[Hashable]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(kept, sources)``: ``kept`` the model's layers the template holds, in order (layer
    0, and for each kind its first two layers after layer 0, one when it has only one);
    ``sources[i]`` the template layer (an index into ``kept``) the model's layer ``i``
    repeats: 0 for layer 0, else the last kept layer of its kind, which a template layer
    precedes (the first layer's graph differs from the others'). None when the template
    would hold as many layers as the model."""
    seen: dict[Hashable, list[int]] = collections.defaultdict(list)
    for index, kind in enumerate(kinds):
        if index > 0 and len(seen[kind]) < KEPT_PER_KIND:
            seen[kind].append(index)
    kept = tuple(sorted({0, *(i for layers in seen.values() for i in layers)}))
    if not kinds or len(kept) >= len(kinds):
        return None
    position = {layer: j for j, layer in enumerate(kept)}
    sources = tuple(0 if i == 0 else position[seen[kind][-1]] for i, kind in enumerate(kinds))
    return kept, sources


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """How to make the model from its template: which template layer each model layer
    repeats, and how layer names read and are rewritten.

    ``layer_of`` gives the layer index in an initializer's, graph input's or graph
    output's name (the template's numbering for the template's names), None for a name of
    no layer; ``renamed`` that name with its index replaced; ``retarget`` the tensor of the
    model's layer ``i`` for the tensor of template layer ``j``'s initializer (a lazy one
    that reads the checkpoint, or the full export's in a test), or of a constant folded
    from its weights (a ``lazy_folding.FoldedTensor``)."""

    kept: tuple[int, ...]
    sources: tuple[int, ...]
    layer_of: Callable[[str], int | None]
    renamed: Callable[[str, int], str]
    retarget: Callable[[ir.TensorProtocol, int, int], ir.TensorProtocol]
