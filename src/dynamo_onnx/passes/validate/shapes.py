"""The dynamic-shape spec checked against the inputs before anything is captured, and
the facts the request is built from: which argument asked (one only), the spec by
``forward``'s parameters, ``dynamic_axes``' keys, a model family's view of its values.

What does not fit fails here with its rule (``dynamic-spec-mismatch``,
``dynamic-spec-unknown-name``, ``invalid-option``); the normalization itself is
:meth:`dynamo_onnx.specs.ShapeRequest.build`'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidExportOptionsError, InvalidOptionValueError
from dynamo_onnx.integrations import FamilyInputs, ModelFamily, families, family_of, input_family
from dynamo_onnx.options import ExportOptions
from dynamo_onnx.passes.base import ExportRequest
from dynamo_onnx.specs import ShapeRequest, Spelling
from dynamo_onnx.specs import forms as spec_forms

__all__ = [
    "axes_keys",
    "check_one_spelling",
    "checked_spec",
    "every_dim_option",
    "family_view",
    "report_empty_examples",
    "spelling_of",
]


def check_one_spelling(ctx: DiagnosticContext, request: ExportRequest) -> None:
    """``dynamic_axes`` and ``dynamic_shapes`` are two spellings of one request: one only."""
    if request.dynamic_axes is not None and request.dynamic_shapes is not None:
        ctx.fail(
            "invalid-option",
            InvalidOptionValueError,
            option=Spelling.DYNAMIC_AXES,
            problem=f"is given together with {Spelling.DYNAMIC_SHAPES}",
            allowed="give one of them: dynamic_shapes (preferred) or dynamic_axes",
        )


def every_dim_option(request: ExportRequest) -> bool:
    """``ExportOptions(dynamic_shapes=True)``: dynamo_export's "every dimension dynamic"."""
    options = request.export_options
    return isinstance(options, ExportOptions) and bool(options.dynamic_shapes)


def spelling_of(request: ExportRequest) -> str | None:
    """The argument that asked for dynamic dimensions, as a message names it."""
    if request.dynamic_shapes is True:
        return Spelling.EVERY_DIM
    if every_dim_option(request):
        return Spelling.EXPORT_OPTIONS
    if request.dynamic_axes is not None:
        return Spelling.DYNAMIC_AXES
    return Spelling.DYNAMIC_SHAPES if request.dynamic_shapes is not None else None


def family_view(
    ctx: DiagnosticContext,
    request: ExportRequest,
    signature: inspect.Signature | None,
    bound: dict[str, Any],
    spread_out: dict[str, Any],
    spec: Any,
) -> tuple[FamilyInputs | None, dict[str, Any], Any]:
    """With a model family's values among the inputs (a KV cache): how its family takes
    them as flat tensors, the flat inputs, and the spec by them (the family's default dim
    names for a value the caller gave none; its sizes of 0 or 1 widened, DO129). Else the
    inputs and the spec as they are."""
    family = (
        input_family(request.model, signature, spread_out.values())
        if signature is not None
        else None
    )
    if family is None or signature is None:
        return None, bound, spec
    family_inputs = _family_inputs(ctx, family, signature, spread_out)
    if spec is not True and request.dynamic_axes is None:
        spec = family.flat_spec(spec_forms.named(spec, signature, bound), spread_out, family_inputs)
    flat = family_inputs.flat(spread_out)
    if isinstance(spec, dict):
        flat, widened = family.widen_example(flat, family_inputs, spec)
        for input_name, dim in widened:
            ctx.record(
                "dynamic-dim-example-widened",
                locations=[ctx.call_site],
                input=family_inputs.names[input_name],
                dim=dim,
                size=1,
                traced=2,
                reason="",
            )
    return family_inputs, flat, spec


def _family_inputs(
    ctx: DiagnosticContext,
    family: ModelFamily,
    signature: inspect.Signature,
    bound: dict[str, Any],
) -> FamilyInputs:
    """How the family's values among the inputs are taken as tensors; DO108 for one that
    cannot be (a cache that holds no tensors)."""
    try:
        return family.inputs(signature, bound)
    except ValueError as exc:
        ctx.fail("invalid-arguments", InvalidExportOptionsError, problem=str(exc))


def report_empty_examples(
    ctx: DiagnosticContext, shapes: ShapeRequest, labels: Mapping[str, str]
) -> None:
    """DO105 for each dimension declared dynamic whose example has size 0 (size 1: capture
    traces it at size 2, DO129, or says DO105). Not for "every dimension dynamic", where a
    small dimension is one the model may keep static."""
    if shapes.everything:
        return
    for (input_name, dim), size in shapes.requested.items():
        if size == 0:
            ctx.record(
                "dynamic-dim-example-too-small",
                locations=[shapes.location],
                input=labels.get(input_name, input_name),
                dim=dim,
                size=size,
            )


def checked_spec(
    ctx: DiagnosticContext,
    request: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    signature: inspect.Signature | None,
    bound: Mapping[str, Any],
    spread_out: Mapping[str, Any],
) -> Any:
    """``dynamic_shapes`` checked against the inputs before anything is captured: an entry
    that fits no form of its input is a ``dynamic-spec-mismatch`` error, a key that names
    no input a ``dynamic-spec-unknown-name`` error (torch.export would fail later, and
    the failure would read as the model's)."""
    spec = request.dynamic_shapes
    structured = {
        name: family
        for name, value in spread_out.items()
        if (family := family_of(value)) is not None
    }
    if isinstance(spec, (torch.export.ShapesCollection, torch.export.AdditionalInputs)):
        # resolved by parameter as torch.export resolves it, so that every spelling asks
        # the same dims (DO129's repeated example is new tensors a collection misses)
        try:  # a family value's tensors are found only where it is a registered pytree
            spec = spec.dynamic_shapes(request.model, args, kwargs)
        except ValueError:
            if not structured:
                return spec  # torch.export says which tensor it misses
            name, family = next(iter(structured.items()))
            ctx.fail(
                "dynamic-spec-mismatch",
                InvalidExportOptionsError,
                entry=Spelling.DYNAMIC_SHAPES,
                given=f"a {type(spec).__name__} that finds no tensor of the cache (it looks "
                "into registered pytree classes only)",
                expected="a dict by forward's parameter names, or a tuple by position",
                spec=f'dynamic_shapes={{"{name}": {family.spec_example(name)}, ...}}',
            )
    try:
        checked = spec_forms.spec_by_parameter(
            spec, signature, bound, spread_out, request.input_names, families()
        )
    except spec_forms.SpecMismatch as problem:
        ctx.fail(
            "dynamic-spec-mismatch",
            InvalidExportOptionsError,
            properties={"parameter": problem.parameter},
            entry=problem.entry,
            given=problem.given,
            expected=problem.expected,
            spec=problem.spec,
        )
    except spec_forms.UnknownSpecName as problem:
        _unknown_name(ctx, Spelling.DYNAMIC_SHAPES, problem, "input of this call")
    if isinstance(spec, Mapping) and isinstance(checked, dict) and not structured:
        # torch.export wants the given inputs' names only: an entry of None for a
        # parameter given no input says nothing (a family value's spec is read by its
        # family)
        return {k: v for k, v in spec.items() if k in bound or v is not None}
    return checked if isinstance(spec, Mapping) else spec


def _unknown_name(
    ctx: DiagnosticContext, option: str, problem: spec_forms.UnknownSpecName, what: str
) -> None:
    shown = problem.valid[:12] + (["..."] if len(problem.valid) > 12 else [])
    ctx.fail(
        "dynamic-spec-unknown-name",
        InvalidExportOptionsError,
        option=option,
        name=problem.name,
        what=what,
        suggestion=problem.hint,
        valid=", ".join(f"`{n}`" if n != "..." else n for n in shown) or "none",
    )


def axes_keys(
    bound: Mapping[str, Any], input_names: Any, family_inputs: FamilyInputs | None
) -> dict[str, list[str]]:
    """Every name ``dynamic_axes`` may key an input by -> the export's inputs it stands
    for: an ``input_names`` entry (by position), a parameter given an input, the ONNX name
    of a family value's tensor, a family value's parameter (all its tensors)."""
    keys: dict[str, list[str]] = {}
    flat = list(bound)
    if family_inputs is not None:
        for key, onnx_name in family_inputs.names.items():
            keys.setdefault(onnx_name, [key])
            prefix = onnx_name.split(".", 1)[0]
            if "." in onnx_name:
                for parameter, value_prefix in family_inputs.prefixes.items():
                    if value_prefix == prefix:
                        keys.setdefault(parameter, []).append(key)
    else:
        keys.update({name: [name] for name in flat})
    for position, name in enumerate(input_names or ()):
        if position < len(flat):
            keys[str(name)] = [flat[position]]
    return keys
