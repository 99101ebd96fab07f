"""The spellings of one dynamic-shape request, read into torch.export's one form.

Users ask for the same dynamic dimension in several ways: ``{0: "batch"}``,
``["batch", None]``, ``{0: "batch", 1: None}``, ``{0: Dim.AUTO}``, ``dynamic_shapes=True``,
``ExportOptions(dynamic_shapes=True)``, torch.onnx's ``dynamic_axes``. Each function here
turns one spelling into the dict by dimension index that torch.export reads, so the passes
after validation see one request whichever the caller wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = [
    "by_index",
    "every_dim",
    "from_dynamic_axes",
    "given_names",
    "normalize",
    "requested_dims",
]


def every_dim(value: Any) -> Any:
    """``dynamic_shapes=True`` for one input: every dimension of every tensor dynamic.

    ``Dim.AUTO`` lets torch.export keep a dimension static where the model requires it (the
    8 input features of a Linear(8, ...)) instead of failing; the seed's "most compatible"
    meaning.
    """
    if isinstance(value, torch.Tensor):
        return {dim: torch.export.Dim.AUTO for dim in range(value.dim())} or None
    if isinstance(value, (list, tuple)):
        return type(value)(every_dim(v) for v in value)
    if isinstance(value, dict):
        return {k: every_dim(v) for k, v in value.items()}
    return None


def by_index(dims: Any, value: Any) -> Any:
    """A tensor's spec written as a list of its dimensions (``["batch", None, "past", None]``)
    or as a dict with static ones (``{0: "batch", 1: None}``) as the dict torch.export reads
    the same way (``{0: "batch", 2: "past"}``): the passes after validation see one request
    whichever the caller wrote, and torch.export is never handed a None dimension (it logs
    a deprecation for each, torch.onnx's own idiom); any other spec as it is."""
    if not isinstance(value, torch.Tensor):
        return dims
    if isinstance(dims, dict):
        items = list(dims.items())
    elif isinstance(dims, (list, tuple)) and len(dims) == value.dim():
        items = list(enumerate(dims))
    else:
        return dims
    if any(isinstance(d, (list, tuple, dict)) for _, d in items):
        return dims
    return {index: dim for index, dim in items if dim is not None} or None


def normalize(spec: Any) -> Any:
    """torch.export's specs, plus names as strings: ``{0: "batch"}`` -> ``{0: Dim.AUTO}``.

    A named string is dynamic where the model allows it: a dimension the model specializes
    becomes a ``dynamic-dim-specialized`` warning instead of a failed capture (``Dim``
    objects keep torch's strict meaning). The names are applied to the ONNX dims after.
    """
    if isinstance(spec, str):
        return torch.export.Dim.AUTO
    if isinstance(spec, dict):
        return {k: normalize(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(normalize(v) for v in spec)
    return spec


def requested_dims(spec: Any, bound: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """(input name, dimension) -> example size, for every dimension the spec makes dynamic."""
    if spec is None or not bound:
        return {}
    if isinstance(spec, (list, tuple)):
        spec = dict(zip(bound, spec))
    requested: dict[tuple[str, int], int] = {}
    if not isinstance(spec, dict):
        return requested
    for name, dims in spec.items():
        value = bound.get(name)
        if not isinstance(value, torch.Tensor):
            continue
        items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
        for index, dim in items:
            if dim is not None and dim is not torch.export.Dim.STATIC and int(index) < value.dim():
                requested[(name, int(index))] = int(value.shape[int(index)])
    return requested


def from_dynamic_axes(
    dynamic_axes: Mapping[str, Any], inputs: Mapping[str, list[str]]
) -> tuple[dict[str, dict[int, str]], list[str]]:
    """torch.onnx's ``dynamic_axes`` (by ONNX input name) as dynamic shapes by the export's
    inputs, and the keys that are no input (outputs, or names the caller mistyped: the
    validate pass tells them apart).

    ``inputs`` maps every name a key may give an input by (an ``input_names`` entry, a
    parameter, a family value's tensor's ONNX name) to the export's inputs it stands for.
    Axes given as a list are named ``<input>_dim_<axis>``.
    """
    spec: dict[str, dict[int, str]] = {}
    others: list[str] = []
    for key, axes in dynamic_axes.items():
        if key not in inputs:
            others.append(key)
            continue
        if isinstance(axes, Mapping):
            named = {int(axis): str(name) for axis, name in axes.items()}
        else:
            named = {int(axis): f"{key}_dim_{int(axis)}" for axis in axes}
        for target in inputs[key]:
            spec[target] = named
    return spec, others


def given_names(spec: Any) -> dict[tuple[str, int], str]:
    """(input name, dimension) -> the name the caller gave it (``spec`` by parameter name,
    as written: strings and ``Dim`` objects), for tensor inputs: top-level ones, and those a
    parameter holds in a list or tuple (``*caches``, ``caches: list``), which torch.export
    names ``caches_0``, ``caches_1``..."""
    names: dict[tuple[str, int], str] = {}
    if isinstance(spec, dict):
        for input_name, dims in spec.items():
            _collect_names(names, str(input_name), dims)
    return names


def _collect_names(names: dict[tuple[str, int], str], input_name: str, dims: Any) -> None:
    if isinstance(dims, dict):
        items: Any = dims.items()
    elif isinstance(dims, (list, tuple)):
        if any(isinstance(d, (dict, list, tuple)) for d in dims):  # one spec per tensor held
            for position, inner in enumerate(dims):
                _collect_names(names, f"{input_name}_{position}", inner)
            return
        items = enumerate(dims)
    else:
        return  # None, or a Dim hint for a whole non-tensor input (``y: Dim.STATIC``)
    for index, dim in items:
        name = dim if isinstance(dim, str) else getattr(dim, "__name__", None)
        if isinstance(name, str) and name.isidentifier():
            names[(input_name, int(index))] = name
