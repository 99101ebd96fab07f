"""The forms a dynamic-shape spec takes, read against the inputs it describes.

torch.export takes a spec by ``forward``'s parameter names (a dict) or by position (a
tuple), each entry shaped like its input: a tensor's is a dict of dims by index, a list of
one dim per dimension, or None; a container's is a container of the same shape. A model
family's value (a KV cache) takes the forms its family reads
(:meth:`~dynamo_onnx.integrations.base.ModelFamily.value_specs`).

Everything here is a pure function of the spec, the inputs and the installed model
families (given by the caller: this package sits below ``integrations/``, whose families
raise :class:`SpecMismatch` too): a spec that fits no form raises :class:`SpecMismatch` (the
validate pass turns it into a ``dynamic-spec-mismatch`` error before anything is
captured), a key that names no input :class:`UnknownSpecName`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from dynamo_onnx.specs.messages import SpecMismatch, describe, fits_tensor, literal

if TYPE_CHECKING:
    from dynamo_onnx.integrations.base import ModelFamily

__all__ = [
    "SpecMismatch",
    "UnknownSpecName",
    "check_spec",
    "did_you_mean",
    "family_of",
    "named",
    "spec_by_parameter",
]


class UnknownSpecName(ValueError):
    """A key of a name-keyed spec that is no input."""

    def __init__(self, name: str, valid: Sequence[str], hint: str = "") -> None:
        super().__init__(name)
        self.name, self.valid, self.hint = name, list(valid), hint


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """`` (did you mean `input`?)`` for the closest valid name, or ""."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def family_of(value: Any, families: Sequence[ModelFamily]) -> ModelFamily | None:
    """The family among ``families`` that recognizes ``value``, or None."""
    return next((f for f in families if f.recognizes(value)), None)


def check_spec(spec: Any, value: Any, parameter: str, families: Sequence[ModelFamily] = ()) -> None:
    """:class:`SpecMismatch` unless ``spec`` has the shape of ``value`` as torch.export
    takes it (a model family's value in any of its family's forms). Leaves other than
    tensors (numbers, registered classes) are torch.export's to judge."""
    if spec is None:
        return
    family = family_of(value, families)
    if family is not None:
        family.value_specs(spec, value, parameter)
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
                f'dynamic_shapes={{"{parameter}": {literal(example)}}}',
            )
    elif isinstance(value, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
            raise SpecMismatch(
                parameter,
                f"None, or a list or tuple of {len(value)} specs, one per element of the "
                f"{type(value).__name__}",
                describe(spec),
                f'dynamic_shapes={{"{parameter}": {literal([None] * len(value))}}}'
                " with each None replaced by its element's spec",
            )
        for index, (s, v) in enumerate(zip(spec, value)):
            check_spec(s, v, f"{parameter}[{index}]", families)
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
            check_spec(s, value[key], f"{parameter}[{key!r}]", families)


def _aliases(given: Mapping[str, Any], families: Sequence[ModelFamily]) -> dict[str, str]:
    """Other names of a family value's parameter (one renamed between library versions):
    a spec written for either version reads the same."""
    return {k: v for family in families for k, v in family.parameter_aliases(given).items()}


def spec_by_parameter(
    spec: Any,
    signature: inspect.Signature | None,
    bound: Mapping[str, Any],
    spread_out: Mapping[str, Any],
    input_names: Sequence[str] | None = None,
    families: Sequence[ModelFamily] = (),
) -> Any:
    """The caller's spec checked against the inputs; a name-keyed one returned by the names
    of ``spread_out`` (``**kwargs`` entries by their own names), a model family's renamed
    parameter taken by its old or new name. A tuple by position stays a tuple
    (torch.export's form), each entry checked against its input.

    ``bound`` is ``forward``'s parameters bound to the inputs (torch.export zips a tuple
    with them); ``spread_out`` the same with a ``**kwargs`` parameter's entries spread;
    ``families`` the installed model families, which read their values' entries.
    """
    if spec is None or spec is True or signature is None:
        return spec
    if isinstance(spec, Mapping):
        if spec and all(isinstance(k, int) for k in spec):
            raise SpecMismatch(
                "dynamic_shapes",
                "a dict by forward's parameter names, or a tuple with one spec per input",
                "a dict of dims",
                f'dynamic_shapes={{"{next(iter(bound), "x")}": {literal(spec)}}}',
            )
        aliases = _aliases(spread_out, families)
        valid = list(spread_out)
        named: dict[str, Any] = {}
        for key, entry in spec.items():
            name = aliases.get(key, key)
            if _var_keyword(signature, name) and isinstance(entry, Mapping):
                for inner, value in entry.items():  # {"kwargs": {...}}: torch.export's form
                    if inner not in spread_out:
                        raise UnknownSpecName(str(inner), valid, did_you_mean(str(inner), valid))
                    check_spec(value, spread_out[inner], inner, families)
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
            check_spec(entry, spread_out[name], name, families)
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
                + ", ".join(f'"{n}": ...' for n in names if _holds_tensor(bound[n], families))
                + "}",
            )
        for name, entry in zip(names, spec):
            check_spec(entry, bound[name], name, families)
        return spec
    raise SpecMismatch(
        "dynamic_shapes",
        "a dict by forward's parameter names, a tuple with one spec per input, or None",
        describe(spec),
        f'dynamic_shapes={{"{next(iter(bound), "x")}": {{0: "batch"}}}}',
    )


def _holds_tensor(value: Any, families: Sequence[ModelFamily]) -> bool:
    if isinstance(value, torch.Tensor) or family_of(value, families) is not None:
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v, families) for v in value)
    if isinstance(value, Mapping):
        return any(_holds_tensor(v, families) for v in value.values())
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
