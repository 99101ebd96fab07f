"""The forms a dynamic-shape spec takes, read against the inputs it describes.

torch.export takes a spec by ``forward``'s parameter names (a dict) or by position (a
tuple), each entry shaped like its input: a tensor's is a dict of dims by index, a list of
one dim per dimension, or None; a container's is a container of the same shape. A
transformers cache has more forms than torch.export's, because users write it the ways
the tools they come from flatten it: one spec for all of its tensors, transformers'
``register_dynamic_cache_export_support()`` nesting (``[[k0..kL-1], [v0..vL-1]]``), the flat
list of onnx-diagnostic and of :func:`cache_dynamic_shapes` (``[k0, v0, k1, v1, ...]``).

Everything here is a pure function of the spec and the inputs: a spec that fits no form
raises :class:`SpecMismatch` (the validate pass turns it into a ``dynamic-spec-mismatch``
error before anything is captured), a key that names no input :class:`UnknownSpecName`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dynamo_onnx.io.caches import CACHE_PARAMETERS, cache_parts, is_cache

__all__ = [
    "SpecMismatch",
    "UnknownSpecName",
    "cache_specs",
    "check_spec",
    "did_you_mean",
    "named",
    "spec_by_parameter",
]

#: What the message suggests for a cache when the caller's spec holds nothing usable.
_CACHE_EXAMPLE = '{0: "batch_size", 2: "past_sequence_length"}'


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


class UnknownSpecName(ValueError):
    """A key of a name-keyed spec that is no input."""

    def __init__(self, name: str, valid: Sequence[str], hint: str = "") -> None:
        super().__init__(name)
        self.name, self.valid, self.hint = name, list(valid), hint


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """`` (did you mean `input`?)`` for the closest valid name, or ""."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


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
    return f"a dim ({_literal(spec)})"


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
    literal = _literal(spec)
    if spec is None or len(literal) > 60 or _is_dim(spec):
        return _noun(spec)
    if isinstance(spec, (list, tuple)) and "(" in _noun(spec):  # mixed entries: show them
        return f"a {type(spec).__name__} of {len(spec)} ({literal})"
    return f"{_noun(spec)} ({literal})"


def _first_tensor_spec(spec: Any, rank: int) -> Any:
    """The first entry within ``spec`` that is a tensor's spec (not None), to suggest."""
    if spec is not None and fits_tensor(spec, rank):
        return spec
    if isinstance(spec, (list, tuple)):
        for value in spec:
            found = _first_tensor_spec(value, rank)
            if found is not None:
                return found
    return None


def _layers(cache: Any) -> int:
    """The number of layers of a cache (of its self-attention for an encoder-decoder)."""
    inner = getattr(cache, "self_attention_cache", cache)
    return len(getattr(inner, "layers", ()))


def _encoder_decoder(cache: Any) -> bool:
    return hasattr(cache, "self_attention_cache") and hasattr(cache, "cross_attention_cache")


def _interleave(keys: Sequence[Any], values: Sequence[Any]) -> list[Any]:
    """``[k0..], [v0..]`` -> ``[k0, v0, k1, v1, ...]`` (the cache's tensor order)."""
    return [spec for pair in zip(keys, values) for spec in pair]


def _registration_form(entry: Any, ranks: Sequence[int]) -> list[Any] | None:
    """transformers' registration nesting, ``[[k0..kL-1], [v0..vL-1]]``, in tensor order."""
    layers = len(ranks) // 2
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
        return None
    keys, values = entry
    if not all(isinstance(side, (list, tuple)) and len(side) == layers for side in entry):
        return None
    flat = _interleave(keys, values)
    return flat if all(fits_tensor(s, r) for s, r in zip(flat, ranks)) else None


def _encoder_decoder_form(entry: Any, cache: Any) -> list[Any] | None:
    """``[self-attention's spec, cross-attention's spec]``, each in a cache's forms."""
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
        return None
    sides = (cache.self_attention_cache, cache.cross_attention_cache)
    try:
        mine, cross = (cache_specs(e, side) for e, side in zip(entry, sides))
    except SpecMismatch:
        return None
    merged: list[Any] = []
    for layer in range(_layers(cache)):
        merged += mine[2 * layer : 2 * layer + 2] + cross[2 * layer : 2 * layer + 2]
    return merged


def cache_expected(cache: Any) -> str:
    """The forms a cache's spec takes, with this cache's numbers."""
    count, layers = len(cache_parts(cache)), _layers(cache)
    one = f"one spec for all of its tensors (a dict of dims such as {_CACHE_EXAMPLE})"
    flat = f"a flat list of {count} specs (layer 0's keys and values, then layer 1's...)"
    if _encoder_decoder(cache):
        return f"{one}, 2 specs (self-attention, cross-attention) in those forms, or {flat}"
    registration = (
        f"2 lists of {layers} specs (keys, then values: transformers' "
        "register_dynamic_cache_export_support nesting)"
    )
    return f"{one}, {registration}, or {flat}"


def cache_specs(entry: Any, cache: Any, parameter: str = "past_key_values") -> list[Any]:
    """The spec of every tensor of ``cache``, in :func:`cache_parts` order, from the entry
    the caller wrote for it in any of its forms; :class:`SpecMismatch` if it fits none."""
    ranks = [t.dim() for _, t in cache_parts(cache)]
    if all(fits_tensor(entry, r) for r in ranks):
        return [entry] * len(ranks)  # one spec for every tensor (None: all static)
    forms = (
        [_encoder_decoder_form(entry, cache)]
        if _encoder_decoder(cache)
        else [_registration_form(entry, ranks)]
    )
    if isinstance(entry, (list, tuple)) and len(entry) == len(ranks):
        if all(fits_tensor(s, r) for s, r in zip(entry, ranks)):
            forms.append(list(entry))  # flat, in tensor order
    for found in forms:
        if found is not None:
            return found
    example = _first_tensor_spec(entry, ranks[0] if ranks else 4)
    raise SpecMismatch(
        parameter,
        cache_expected(cache),
        describe(entry),
        f'dynamic_shapes={{"{parameter}": {_literal(example) if example else _CACHE_EXAMPLE}}}',
    )


def _literal(spec: Any) -> str:
    """A spec as Python source a user can paste (``Dim`` objects by their name)."""
    if isinstance(spec, Mapping):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(_literal(v) for v in spec)
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


def check_spec(spec: Any, value: Any, parameter: str) -> None:
    """:class:`SpecMismatch` unless ``spec`` has the shape of ``value`` as torch.export
    takes it (a cache in any of its forms). Leaves other than tensors (numbers, registered
    classes) are torch.export's to judge."""
    if spec is None:
        return
    if is_cache(value):
        cache_specs(spec, value, parameter)
    elif isinstance(value, torch.Tensor):
        if not fits_tensor(spec, value.dim()):
            kept = spec.items() if isinstance(spec, Mapping) else ()
            valid = {k: v for k, v in kept if isinstance(k, int) and 0 <= k < value.dim()}
            example = valid or {0: "batch"}
            raise SpecMismatch(
                parameter,
                f"None, a dict of dims by index (0 to {value.dim() - 1}), or a list of "
                f"{value.dim()} dims, for a tensor of shape {tuple(value.shape)}",
                describe(spec),
                f'dynamic_shapes={{"{parameter}": {_literal(example)}}}',
            )
    elif isinstance(value, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
            raise SpecMismatch(
                parameter,
                f"None, or a list or tuple of {len(value)} specs, one per element of the "
                f"{type(value).__name__}",
                describe(spec),
                f'dynamic_shapes={{"{parameter}": {_literal([None] * len(value))}}}'
                " with each None replaced by its element's spec",
            )
        for index, (s, v) in enumerate(zip(spec, value)):
            check_spec(s, v, f"{parameter}[{index}]")
    elif isinstance(value, Mapping):
        if not isinstance(spec, Mapping) or set(spec) - set(value):
            keys = ", ".join(repr(k) for k in value)
            raise SpecMismatch(
                parameter,
                f"None, or a dict with some of the keys {keys}",
                describe(spec),
                f'dynamic_shapes={{"{parameter}": {{{keys.split(", ")[0]}: ...}}}}',
            )
        for key, s in spec.items():
            check_spec(s, value[key], f"{parameter}[{key!r}]")


def _aliases(given: Mapping[str, Any]) -> dict[str, str]:
    """The other name of the cache parameter (``past_key_values`` for ``cache``, transformers
    5.24's new name, and back): a spec written for either version reads the same."""
    found = [n for n in CACHE_PARAMETERS if n in given and is_cache(given[n])]
    return {other: found[0] for other in CACHE_PARAMETERS if found and other not in given}


def spec_by_parameter(
    spec: Any,
    signature: inspect.Signature | None,
    bound: Mapping[str, Any],
    spread_out: Mapping[str, Any],
    input_names: Sequence[str] | None = None,
) -> Any:
    """The caller's spec checked against the inputs; a name-keyed one returned by the names
    of ``spread_out`` (``**kwargs`` entries by their own names), the cache parameter's old
    or new name taken for the other. A tuple by position stays a tuple (torch.export's form),
    each entry checked against its input.

    ``bound`` is ``forward``'s parameters bound to the inputs (torch.export zips a tuple
    with them); ``spread_out`` the same with a ``**kwargs`` parameter's entries spread.
    """
    if spec is None or spec is True or signature is None:
        return spec
    if isinstance(spec, Mapping):
        if spec and all(isinstance(k, int) for k in spec):
            raise SpecMismatch(
                "dynamic_shapes",
                "a dict by forward's parameter names, or a tuple with one spec per input",
                "a dict of dims",
                f'dynamic_shapes={{"{next(iter(bound), "x")}": {_literal(spec)}}}',
            )
        aliases = _aliases(spread_out)
        valid = list(spread_out)
        named: dict[str, Any] = {}
        for key, entry in spec.items():
            name = aliases.get(key, key)
            if _var_keyword(signature, name) and isinstance(entry, Mapping):
                for inner, value in entry.items():  # {"kwargs": {...}}: torch.export's form
                    if inner not in spread_out:
                        raise UnknownSpecName(str(inner), valid, did_you_mean(str(inner), valid))
                    check_spec(value, spread_out[inner], inner)
                    named[inner] = value
                continue
            if name not in spread_out:
                if key in signature.parameters and entry is None:
                    continue  # a parameter given no input: nothing to make dynamic
                hint = did_you_mean(str(key), valid + list(aliases))
                if not hint and input_names and key in input_names:
                    hint = (
                        f" (`{key}` is in input_names, which names the ONNX inputs; "
                        "dynamic_shapes takes forward's parameter names)"
                    )
                elif not hint and key in signature.parameters:
                    hint = " (a parameter of forward, but given no input in this call)"
                raise UnknownSpecName(str(key), valid, hint)
            check_spec(entry, spread_out[name], name)
            named[name] = entry
        return named
    if isinstance(spec, (list, tuple)):
        names = list(bound)
        if len(spec) > len(names):
            raise SpecMismatch(
                "dynamic_shapes",
                f"one spec per input in forward's order, {len(names)} at most ({', '.join(names)})",
                describe(spec),
                "dynamic_shapes={"
                + ", ".join(f'"{n}": ...' for n in names if _holds_tensor(bound[n]))
                + "}",
            )
        for name, entry in zip(names, spec):
            check_spec(entry, bound[name], name)
        return spec
    raise SpecMismatch(
        "dynamic_shapes",
        "a dict by forward's parameter names, a tuple with one spec per input, or None",
        describe(spec),
        f'dynamic_shapes={{"{next(iter(bound), "x")}": {{0: "batch"}}}}',
    )


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor) or is_cache(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    return False


def named(spec: Any, signature: inspect.Signature, bound: Mapping[str, Any]) -> Any:
    """A spec by position (torch.export zips a tuple with the bound parameters) as a dict
    by parameter name, a ``**kwargs`` parameter's entries by their own names; a name-keyed
    spec as it is."""
    if not isinstance(spec, (list, tuple)):
        return spec
    out: dict[str, Any] = {}
    for (name, _), entry in zip(bound.items(), spec):
        if _var_keyword(signature, name) and isinstance(entry, Mapping):
            out.update(entry)
        else:
            out[name] = entry
    return out


def _var_keyword(signature: inspect.Signature, name: str) -> bool:
    parameter = signature.parameters.get(name)
    return parameter is not None and parameter.kind is parameter.VAR_KEYWORD
