"""A spec of the export's flat inputs written back the way the caller spells it: by
``forward``'s parameters, a family value's tensors as one entry of its parameter.

The export captures a model that takes a family value (a KV cache) through flat keyword
inputs (``cache_0_key``...), so a spec torch.export refined is keyed by those. Quoted to the
caller as it is (DO125's "the export used ..."), the same call would reject it: no parameter
is called ``cache_0_key`` (DO132).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynamo_onnx.integrations.base import FamilyInputs

__all__ = ["as_called"]


def _parameter(onnx_name: str, key: str, prefixes: Mapping[str, str]) -> str | None:
    """The parameter whose value holds the flat input ``key`` (``onnx_name``), or None for
    a parameter that is the input itself."""
    for parameter, prefix in prefixes.items():
        if onnx_name.startswith(prefix + "."):
            return parameter
    head, dot, _ = onnx_name.partition(".")
    return head if dot and head != key else None


def _one_or_each(entries: list[Any]) -> Any:
    """One spec for every tensor when they are all alike (the short form), else one per
    tensor in input order; both are forms a family value's entry takes."""
    if entries and all(repr(e) == repr(entries[0]) for e in entries):
        return entries[0]
    return entries


def as_called(spec: Any, inputs: FamilyInputs | None) -> Any:
    """``spec`` (by the export's flat inputs) by the caller's parameters; ``spec`` itself
    when the call has no family value or the spec is not a dict by input."""
    if inputs is None or not isinstance(spec, Mapping):
        return spec
    called: dict[str, Any] = {}
    grouped: dict[str, list[Any]] = {}
    for key, entry in spec.items():
        onnx_name = inputs.names.get(key)
        parameter = None if onnx_name is None else _parameter(onnx_name, key, inputs.prefixes)
        if parameter is None:
            called[key] = entry
        else:
            if parameter not in grouped:
                called[parameter] = None  # its place among the inputs
                grouped[parameter] = []
            grouped[parameter].append(entry)
    for parameter, entries in grouped.items():
        called[parameter] = _one_or_each(entries)
    return called
