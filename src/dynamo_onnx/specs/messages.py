"""A dynamic-shape spec as messages describe it: the error of an entry that fits none of
its input's forms, whether an entry is one tensor's spec, and an entry as words or as
Python source a user can paste.

Shared by the generic forms of a spec (``specs/forms.py``) and the model families, whose
values take forms of their own (``integrations/``): it sits below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["SpecMismatch", "describe", "first_tensor_spec", "fits_tensor", "literal"]


class SpecMismatch(ValueError):
    """A spec entry that fits none of the forms its input takes."""

    def __init__(self, parameter: str, expected: str, given: str, spec: str) -> None:
        super().__init__(f"{parameter}: {given}, expected {expected}")
        self.parameter, self.expected, self.given, self.spec = parameter, expected, given, spec

    @property
    def entry(self) -> str:
        """Where the entry is, as the caller would index it: ``dynamic_shapes["cache"]``."""
        if self.parameter == "dynamic_shapes":
            return "dynamic_shapes"
        head, bracket, rest = self.parameter.partition("[")
        return f'dynamic_shapes["{head}"]' + (bracket + rest if bracket else "")


def _is_dim(value: Any) -> bool:
    """One dimension's entry: None, an int, a name, a ``Dim`` or a ``Dim`` hint; anything
    that is not a container (torch.export judges the rest)."""
    return not isinstance(value, (Mapping, list, tuple, torch.Tensor))


def fits_tensor(spec: Any, rank: int) -> bool:
    """Whether ``spec`` is a tensor's spec: None, a dict of dims by index below ``rank``,
    or a list/tuple of ``rank`` dims."""
    if spec is None:
        return True
    if isinstance(spec, Mapping):
        return all(
            isinstance(k, int) and not isinstance(k, bool) and 0 <= k < rank and _is_dim(v)
            for k, v in spec.items()
        )
    if isinstance(spec, (list, tuple)):
        return len(spec) == rank and all(_is_dim(v) for v in spec)
    return False


def _noun(spec: Any) -> str:
    """What one entry is, with its article: ``a dict of dims``, ``a list of 4 dicts of dims``."""
    if spec is None:
        return "None"
    if isinstance(spec, Mapping):
        if all(isinstance(k, int) for k in spec):
            return "a dict of dims"
        return "a dict with the keys " + ", ".join(repr(k) for k in spec)
    if isinstance(spec, (list, tuple)):
        kind = type(spec).__name__
        if not spec:
            return f"an empty {kind}"
        if all(_is_dim(v) for v in spec):
            return f"a {kind} of {len(spec)} dim{'s' if len(spec) > 1 else ''}"
        nouns = [_noun(v) for v in spec]
        if len(set(nouns)) == 1:
            noun = nouns[0].removeprefix("an ").removeprefix("a ") if len(spec) == 1 else None
            return f"a {kind} of {len(spec)} {noun or _plural(nouns[0])}"
        shown = ", ".join(nouns[:4]) + (", ..." if len(nouns) > 4 else "")
        return f"a {kind} of {len(spec)} ({shown})"
    if isinstance(spec, torch.Tensor):
        return "a tensor"
    return f"a dim ({literal(spec)})"


def _plural(noun: str) -> str:
    if noun == "None":
        return "Nones"
    if noun.startswith("a dim ("):
        return "dims"
    first, _, rest = noun.removeprefix("an ").removeprefix("a ").partition(" ")
    return f"{first}s {rest}".rstrip()


def describe(spec: Any) -> str:
    """The structure of a spec entry, for a message: ``a list of 2 lists of 4 dicts of dims``,
    with the entry itself when it is short."""
    text = literal(spec)
    if spec is None or len(text) > 60 or _is_dim(spec):
        return _noun(spec)
    if isinstance(spec, (list, tuple)) and "(" in _noun(spec):  # mixed entries: show them
        return f"a {type(spec).__name__} of {len(spec)} ({text})"
    return f"{_noun(spec)} ({text})"


def first_tensor_spec(spec: Any, rank: int) -> Any:
    """The first entry within ``spec`` that is a tensor's spec (not None), to suggest."""
    if spec is not None and fits_tensor(spec, rank):
        return spec
    if isinstance(spec, (list, tuple)):
        for value in spec:
            found = first_tensor_spec(value, rank)
            if found is not None:
                return found
    return None


def literal(spec: Any) -> str:
    """A spec as Python source a user can paste (``Dim`` objects by their name)."""
    if isinstance(spec, Mapping):
        return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(literal(v) for v in spec)
        return (
            f"[{inner}]" if isinstance(spec, list) else f"({inner}{',' if len(spec) == 1 else ''})"
        )
    if isinstance(spec, str):
        return f'"{spec}"'
    if spec is None or isinstance(spec, int):
        return repr(spec)
    hint = getattr(getattr(spec, "type", None), "name", None)
    if isinstance(hint, str):  # Dim.AUTO, Dim.DYNAMIC, Dim.STATIC
        return f"Dim.{hint}"
    name = getattr(spec, "__name__", None)
    return f'Dim("{name}")' if isinstance(name, str) else str(spec)
