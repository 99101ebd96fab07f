"""The dynamic-shape request of one export, as one frozen value with the operations the
passes apply to it.

The validate pass reads the caller's spelling (``dynamic_shapes`` with ``Dim``,
``Dim.AUTO``, strings or None; ``dynamic_shapes=True``; ``ExportOptions(dynamic_shapes=True)``;
torch.onnx's ``dynamic_axes``; a model family's forms through the plug-in) into one
:class:`ShapeRequest` with :meth:`ShapeRequest.build`. Capture and the dynamic-shapes pass
then ask it, and derive new requests from it, instead of reshaping the spec themselves:
the example widened along its size-1 dimensions (:meth:`~ShapeRequest.widen`), a dimension
dropped (:meth:`~ShapeRequest.without`), torch's suggested fixes applied
(:meth:`~ShapeRequest.refined`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.export.dynamic_shapes

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.specs import spellings

__all__ = ["ShapeRequest", "Spelling"]


class Spelling:
    """Which argument asked for the dynamic dimensions, as a message names it."""

    DYNAMIC_SHAPES = "dynamic_shapes"
    EVERY_DIM = "dynamic_shapes=True"
    EXPORT_OPTIONS = "ExportOptions.dynamic_shapes"
    DYNAMIC_AXES = "dynamic_axes"
    #: the spellings of "every dimension dynamic"
    EVERYTHING = frozenset({EVERY_DIM, EXPORT_OPTIONS})


@dataclasses.dataclass(frozen=True)
class ShapeRequest:
    """What the caller asked to be dynamic, in one normal form.

    Attributes:
        spec: torch.export's spec (strings turned into ``Dim.AUTO``; "every dimension
            dynamic" expanded, whichever spelling asked; every input named when the spec
            is by name). What capture hands ``torch.export.export``.
        named: the same spec with the caller's dimension names (from ``dynamic_shapes`` or
            ``dynamic_axes``), for the names of the ONNX dims.
        requested: (input name, dimension) -> example size, for every dimension asked to
            be dynamic.
        declared: the requested dimensions the caller named or declared one by one (not
            those of "every dimension dynamic", which the model may keep static).
        spelling: the argument that asked (a :class:`Spelling`), None when nothing did;
            "every dimension dynamic" is one of its spellings (:attr:`everything`).
        location: the line of the caller's export call, where the request was written:
            the findings about the request (an example too small to stay dynamic, one
            widened) point there.
        inputs: the export's inputs by name, in order (a spec by position zips with them).
    """

    spec: Any = None
    named: Any = None
    requested: Mapping[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    declared: frozenset[tuple[str, int]] = frozenset()
    spelling: str | None = None
    location: Location | None = None
    inputs: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        spec: Any,
        bound: Mapping[str, Any],
        *,
        spelling: str | None = None,
        location: Location | None = None,
    ) -> ShapeRequest:
        """The one normalization: ``spec`` (already checked against the inputs, by
        parameter name or by position, a family value's entries by its flat inputs) for
        the inputs ``bound``; ``spec is True`` or a ``spelling`` of
        :attr:`Spelling.EVERYTHING` ask every dimension.

        Every spelling of one request gives the same value: a tensor's list of dims and
        its dict by index, a dict with static dims and one without, a string and
        ``Dim.AUTO`` (``named`` keeps the string for the ONNX dim's name).
        """
        if spec is True and spelling not in Spelling.EVERYTHING:
            spelling = Spelling.EVERY_DIM
        everything = spelling in Spelling.EVERYTHING
        if everything:
            spec = {name: spellings.every_dim(value) for name, value in bound.items()}
        if isinstance(spec, dict):
            spec = {name: spellings.by_index(dims, bound.get(name)) for name, dims in spec.items()}
        elif isinstance(spec, (list, tuple)) and len(spec) == len(bound):
            spec = type(spec)(spellings.by_index(d, v) for d, v in zip(spec, bound.values()))
        named = spec
        spec = spellings.normalize(spec)
        if isinstance(spec, dict) and bound and set(spec) <= set(bound):
            # torch.export wants every input named; one the caller left out is static
            # (a flag beside a spec for the token ids)
            spec = {name: spec.get(name) for name in bound}
        requested = spellings.requested_dims(spec, bound)
        return cls(
            spec=spec,
            named=named,
            requested=requested,
            declared=frozenset() if everything else frozenset(requested),
            spelling=spelling,
            location=location,
            inputs=tuple(bound),
        )

    # -- questions ------------------------------------------------------------------------

    @property
    def everything(self) -> bool:
        """Every dimension asked dynamic (``dynamic_shapes=True`` or
        ``ExportOptions(dynamic_shapes=True)``): the model may keep some static."""
        return self.spelling in Spelling.EVERYTHING

    def by_name(self, spec: Any) -> Any:
        """``spec`` (this request's, its named form, or one torch refined) given as a tuple
        (one entry per input, in order) as a dict by input name; a dict or None as it is."""
        if isinstance(spec, (list, tuple)):
            return dict(zip(self.inputs, spec))
        return spec

    def asked_range(self, input_name: str, dim: int) -> tuple[int, int | None]:
        """The range asked for a dimension: its ``Dim``'s min and max, else [2, inf)
        (torch.export never makes sizes 0 and 1 dynamic); ``max`` None when unbounded."""
        spec = self.by_name(self.spec)
        dims = spec.get(input_name) if isinstance(spec, dict) else None
        asked = dims.get(dim) if isinstance(dims, dict) else None
        if asked is None and isinstance(dims, (list, tuple)) and dim < len(dims):
            asked = dims[dim]
        low = getattr(asked, "min", None)
        high = getattr(asked, "max", None)
        finite = isinstance(high, int) and high < 2**62
        return max(int(low) if isinstance(low, int) else 2, 2), (int(high) if finite else None)

    def names(self) -> dict[tuple[str, int], str]:
        """(input name, dimension) -> the name the caller gave it (a string or a ``Dim``'s
        name), for the names of the ONNX dims: top-level tensors, and those a parameter
        holds in a list or tuple (``*caches``), which torch.export names ``caches_0``..."""
        return spellings.given_names(self.by_name(self.named))

    def example(self, input_name: str, dim: int) -> int:
        """The example's size of a requested dimension (1 for one not requested)."""
        return self.requested.get((input_name, dim), 1)

    def size_one(self) -> list[tuple[str, int]]:
        """The dimensions the caller declared dynamic whose example has size 1, which
        torch.export would make static (its 0/1 rule)."""
        return [key for key, size in self.requested.items() if size == 1 and key in self.declared]

    # -- operations -----------------------------------------------------------------------

    def widen(self, bound: Mapping[str, Any], dims: Iterable[tuple[str, int]]) -> dict[str, Any]:
        """The example inputs ``bound`` repeated along ``dims`` (twice their size): the
        same values, so value-dependent code sees what it saw, at a size torch.export
        keeps symbolic."""
        widened = dict(bound)
        for name, dim in dims:
            value = widened[name]
            widened[name] = torch.cat([value, value], dim=dim)
        return widened

    def without(self, dims: Iterable[tuple[str, int]]) -> ShapeRequest | None:
        """This request with ``dims`` static (by name); None when one is not a dimension of
        a top-level tensor's ``{dim: ...}`` entry (a nested input's spec is left alone)."""
        spec = self.by_name(self.spec)
        if not isinstance(spec, dict):
            return None
        spec = dict(spec)
        dropped = set(dims)
        for name, dim in dropped:
            entry = spec.get(name)
            if not isinstance(entry, dict) or dim not in entry:
                return None
            spec[name] = {d: v for d, v in entry.items() if d != dim} or None
        return dataclasses.replace(
            self,
            spec=spec,
            requested={k: v for k, v in self.requested.items() if k not in dropped},
            declared=self.declared - dropped,
        )

    def refined(self, fixes: Sequence[str]) -> ShapeRequest | None:
        """This request with torch.export's suggested fixes applied to its spec (``seq =
        Dim("seq", max=32)``, read from torch's exception); None when there are none or
        torch cannot apply them, or they change nothing."""
        if self.spec is None or not fixes:
            return None
        refine = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes
        try:
            spec = refine("Suggested fixes:\n" + "\n".join(f"  {f}" for f in fixes), self.spec)
        except Exception:  # fixes torch cannot apply: the failure stands
            return None
        return dataclasses.replace(self, spec=spec) if spec != self.spec else None
