"""The validate pass: the model, the arguments and the options, before anything runs.

Bad input should fail before any work, with the rule, the cause and the fix, instead of
deep inside torch.export. Each check fails through ``ctx.fail``, so the reports say it.
The pass also normalizes what the caller gave: ``args`` as a tuple, ``kwargs`` as a dict,
the dynamic-shape spec in torch.export's terms, and the registry to translate with. With a
model family's values among the inputs (a KV cache), its family takes them as flat tensors
(``CheckedRequest.family_inputs``) and reads their spec (``dynamo_onnx.integrations``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch.export import pytree

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import (
    CaptureError,
    InvalidExportOptionsError,
    InvalidOptionValueError,
    OnnxExporterError,
)
from dynamo_onnx.integrations import FamilyInputs, ModelFamily, family_of, input_family
from dynamo_onnx.io.inputs import call_arguments, spread
from dynamo_onnx.options import (
    ExportOptions,
    OptionProblem,
    default_opset,
    diagnostic_options_problem,
    export_options_problem,
    opset_problem,
    optimize_problem,
)
from dynamo_onnx.passes.base import CheckedRequest, ExportState, PassName
from dynamo_onnx.passes.model import describe_value, forward_signature, model_anchor
from dynamo_onnx.passes.validate import spec_forms, torch_onnx
from dynamo_onnx.passes.validate.exportable import with_module_arguments
from dynamo_onnx.registry import OnnxRegistry

__all__ = ["ValidatePass", "normalize_dynamic_shapes"]

#: Leaf types torch.export takes as inputs (others must be registered pytree containers).
_LEAF_TYPES = (torch.Tensor, bool, int, float, complex, str, type(None), torch.dtype, torch.device)

#: torch.onnx.export's own keywords: passed to dynamo_export they reach the model.
_EXPORT_KEYWORDS = frozenset(
    {
        "args",
        "kwargs",
        "opset_version",
        "export_params",
        "verbose",
        "input_names",
        "output_names",
        "dynamic_axes",
        "do_constant_folding",
        "dynamo",
        "f",
        "training",
        "operator_export_type",
        "keep_initializers_as_inputs",
        "custom_opsets",
        "export_modules_as_functions",
        "external_data",
        "report",
        "optimize",
        "verify",
        "dynamic_shapes",
        "artifacts_dir",
    }
)


class ValidatePass:
    """Check the request; return the state the capture needs."""

    name: ClassVar[str] = PassName.VALIDATE
    #: Anything unexpected here is an internal error (DO900); bad input fails on purpose.
    error_type: ClassVar[type[OnnxExporterError]] = OnnxExporterError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        # torch.onnx.ExportableModule: export(module) with the module's own arguments
        request = with_module_arguments(ctx, state.request)
        for problem in (
            diagnostic_options_problem(request.diagnostic_options),
            export_options_problem(request.export_options),
            opset_problem(request.opset_version),
            optimize_problem(request.torch_onnx.optimize if request.torch_onnx else True),
        ):
            _fail_option(ctx, problem)
        _check_model(ctx, request.model)
        # torch.onnx.export's export_modules_as_functions=True is module_functions=True
        module_functions = bool(request.module_functions) or bool(
            getattr(request.torch_onnx, "export_modules_as_functions", False)
        )
        if request.torch_onnx is not None:
            torch_onnx.report_arguments(ctx, request.torch_onnx, request.model, module_functions)
        torch_onnx.check_names(ctx, request.input_names, request.output_names)
        args, kwargs = _check_arguments(ctx, request.args, request.kwargs)
        registry = request.registry if request.registry is not None else OnnxRegistry()
        if request.custom_translation_table:
            registry = torch_onnx.register_translations(registry, request.custom_translation_table)
        checked = CheckedRequest(
            request.model,
            args,
            kwargs,
            opset=request.opset_version
            if request.opset_version is not None
            else default_opset(torch_onnx_call=request.torch_onnx is not None),
            input_names=_names(request.input_names),
            output_names=_names(request.output_names),
            registry=registry,
            module_functions=module_functions,
            custom_opsets=dict(request.custom_opsets or {}),
            verbose=bool(getattr(request.torch_onnx, "verbose", False)),
        )
        if request.dynamic_axes is not None and request.dynamic_shapes is not None:
            ctx.fail(
                "invalid-option",
                InvalidOptionValueError,
                option="dynamic_axes",
                problem="is given together with dynamic_shapes",
                allowed="give one of them: dynamic_shapes (preferred) or dynamic_axes",
            )
        if isinstance(request.model, torch.export.ExportedProgram):
            _report_spec_of_program(ctx, request)
            return state.replace(checked=checked)
        signature = forward_signature(request.model)
        bound = _check_inputs(ctx, signature, args, kwargs, request.torch_onnx is not None)
        spread_out = spread(signature, bound) if signature is not None else bound
        spec = _checked_spec(ctx, request, args, kwargs, signature, bound, spread_out)
        family_inputs = None
        family = (
            input_family(request.model, signature, spread_out.values())
            if signature is not None
            else None
        )
        if family is not None and signature is not None:
            flat_from = spread_out
            family_inputs = _family_inputs(ctx, family, signature, flat_from)
            if spec is not True and request.dynamic_axes is None:
                spec = family.flat_spec(
                    spec_forms.named(spec, signature, bound), flat_from, family_inputs
                )
            bound = family_inputs.flat(flat_from)
            if isinstance(spec, dict):
                bound, widened = family.widen_example(bound, family_inputs, spec)
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
            checked = dataclasses.replace(
                checked,
                family_inputs=family_inputs,
                input_names=checked.input_names or tuple(family_inputs.names.values()),
            )
        if request.dynamic_axes is not None:
            spec = torch_onnx.dynamic_axes_to_shapes(
                ctx,
                request.dynamic_axes,
                request.input_names,
                request.output_names,
                _axes_keys(bound, request.input_names, family_inputs),
            )
        options = request.export_options
        # Two spellings of one request: every dimension dynamic where the model allows it.
        everything = spec is True or (isinstance(options, ExportOptions) and options.dynamic_shapes)
        if everything:
            spec = {name: _auto_spec(value) for name, value in bound.items()}
        # one spelling per request (see _by_index), by name or by position
        if isinstance(spec, dict):
            spec = {name: _by_index(dims, bound.get(name)) for name, dims in spec.items()}
        elif isinstance(spec, (list, tuple)) and len(spec) == len(bound):
            spec = type(spec)(_by_index(d, v) for d, v in zip(spec, bound.values()))
        named_spec = spec
        spec = normalize_dynamic_shapes(spec)
        if isinstance(spec, dict) and bound and set(spec) <= set(bound):
            # torch.export wants every input named; one the caller left out is static
            # (a flag beside a spec for the token ids)
            spec = {name: spec.get(name) for name in bound}
        requested = _requested_dynamic(spec, bound)
        labels = _input_labels(bound, request.input_names)
        if family_inputs is not None and not request.input_names:
            labels = dict(family_inputs.names)
        if not everything:  # there, a size-1 dimension is one the model may keep static
            for (input_name, dim), size in requested.items():
                if size == 0:  # size 1: capture traces it at size 2 (DO129), or says DO105
                    ctx.record(
                        "dynamic-dim-example-too-small",
                        locations=[ctx.call_site],
                        input=labels.get(input_name, input_name),
                        dim=dim,
                        size=size,
                    )
        checked = dataclasses.replace(
            checked,
            bound=bound,
            model_location=model_anchor(request.model, ctx.library_prefixes, ctx.call_site),
            dynamic_shapes=spec,
            named_spec=named_spec,
            requested_dims=requested,
            declared_dims=frozenset() if everything else frozenset(requested),
            all_dims_dynamic=bool(everything),
            input_labels=labels,
        )
        return state.replace(checked=checked)


def _checked_spec(
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
                entry="dynamic_shapes",
                given=f"a {type(spec).__name__} that finds no tensor of the cache (it looks "
                "into registered pytree classes only)",
                expected="a dict by forward's parameter names, or a tuple by position",
                spec=f'dynamic_shapes={{"{name}": {family.spec_example(name)}, ...}}',
            )
    try:
        checked = spec_forms.spec_by_parameter(
            spec, signature, bound, spread_out, request.input_names
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
        _unknown_name(ctx, "dynamic_shapes", problem, "input of this call")
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


def _axes_keys(
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


def _report_spec_of_program(ctx: DiagnosticContext, request: Any) -> None:
    """``dynamic_shapes``/``dynamic_axes`` (or ``ExportOptions(dynamic_shapes=True)``)
    beside an ExportedProgram: its dims were fixed when it was captured, so the argument
    changes nothing. A warning where it asks for a dim the program has static (the ONNX
    model will not take other sizes there), else a note: never dropped in silence."""
    for argument in ("dynamic_shapes", "dynamic_axes"):
        value = getattr(request, argument)
        if value is None:
            continue
        static = _static_in_program(
            request.model, value, request.input_names, axes=argument == "dynamic_axes"
        )
        reason = (
            "the ExportedProgram's dims were fixed when torch.export.export captured it"
            + (f", and it has {', '.join(static)} static" if static else "")
            + "; to change them, pass dynamic_shapes to torch.export.export when capturing "
            "it, or pass the model itself to dynamo_onnx.export"
        )
        torch_onnx.ignored(ctx, argument, _short_repr(value), reason, warning=bool(static))
    options = request.export_options
    if isinstance(options, ExportOptions) and options.dynamic_shapes:
        # dynamo_export's spelling of "every dimension dynamic": a warning when the program
        # has no dynamic dimension at all (features a Linear fixes are static in any case)
        dims = _tensor_dims(request.model)
        static = all(isinstance(size, int) for size in dims)
        reason = (
            "the ExportedProgram's dims were fixed when torch.export.export captured it"
            + (", and it has every dimension static" if static else "")
            + "; to change them, pass dynamic_shapes to torch.export.export when capturing "
            "it, or pass the model itself to dynamo_onnx.dynamo_export"
        )
        torch_onnx.ignored(
            ctx, "ExportOptions.dynamic_shapes", "True", reason, warning=static and bool(dims)
        )


def _tensor_dims(program: Any) -> list[Any]:
    """The sizes of every dimension of ``program``'s top-level tensor inputs."""
    user_inputs = set(program.graph_signature.user_inputs)
    return [
        size
        for node in program.graph.nodes
        if node.op == "placeholder"
        and node.name in user_inputs
        and isinstance(val := node.meta.get("val"), torch.Tensor)
        for size in val.shape
    ]


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _asked_axes(dims: Any, axes: bool) -> list[int]:
    """The dims one entry asks to be dynamic: ``dynamic_axes``' axes (dict keys or a list),
    or a ``dynamic_shapes`` entry's non-static dims (dict or list by index)."""
    if isinstance(dims, Mapping):
        return [int(k) for k, v in dims.items() if isinstance(k, int) and v is not None]
    if isinstance(dims, (list, tuple)):
        if axes:
            return [int(a) for a in dims if isinstance(a, int)]
        return [i for i, d in enumerate(dims) if d is not None and not isinstance(d, int)]
    return []


def _static_in_program(program: Any, spec: Any, input_names: Any, axes: bool) -> list[str]:
    """```x` dim N`` for each dim ``spec`` asks to be dynamic that ``program`` has static,
    among its top-level tensor inputs (by name, ``input_names`` or position)."""
    user_inputs = list(program.graph_signature.user_inputs)
    values = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    if isinstance(spec, (list, tuple)):
        spec = dict(zip(user_inputs, spec))
    if not isinstance(spec, Mapping):
        return []
    names = [str(n) for n in input_names or ()]
    static: list[str] = []
    for key, dims in spec.items():
        name = user_inputs[names.index(key)] if key in names[: len(user_inputs)] else key
        val = values.get(name)
        if not isinstance(val, torch.Tensor):
            continue  # not a top-level tensor: nothing to compare here
        for axis in _asked_axes(dims, axes):
            if axis < val.dim() and isinstance(val.shape[axis], int):
                static.append(f"`{key}` dim {axis}")
    return static


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


def _names(names: Any) -> tuple[str, ...] | None:
    """``input_names``/``output_names`` (already checked to be strings) as a tuple."""
    return tuple(str(n) for n in names) if names else None


def _fail_option(ctx: DiagnosticContext, problem: OptionProblem | None) -> None:
    if problem is not None:
        ctx.fail("invalid-option", problem.error_type, **problem.fields)


def _check_model(ctx: DiagnosticContext, model: Any) -> None:
    if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        ctx.fail("torchscript-model", CaptureError, what=f"a {type(model).__name__}")
    if isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)):
        return
    if isinstance(model, type) or not callable(model):
        what = f"the class {model.__name__}" if isinstance(model, type) else describe_value(model)
        ctx.fail("invalid-model", InvalidExportOptionsError, what=what)


def _check_arguments(
    ctx: DiagnosticContext, args: Any, kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` as a tuple (a lone tensor becomes one), ``kwargs`` as a dict, leaves checked."""
    args, kwargs = call_arguments(args, kwargs)
    if not isinstance(args, tuple):
        ctx.fail(
            "invalid-arguments",
            InvalidExportOptionsError,
            problem=f"`args` must be a tuple of the model's positional inputs, got "
            f"{describe_value(args)}; for one input write `(x,)`",
        )
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        ctx.fail(
            "invalid-arguments",
            InvalidExportOptionsError,
            problem=f"`kwargs` must be a dict of keyword inputs by name, got {describe_value(kwargs)}",
        )
    leaves, _ = pytree.tree_flatten((args, dict(kwargs)))
    for leaf in leaves:
        if not isinstance(leaf, _LEAF_TYPES) and family_of(leaf) is None:
            ctx.fail(
                "invalid-arguments",
                InvalidExportOptionsError,
                problem=f"an input is {describe_value(leaf)}, which torch.export cannot take "
                "(inputs are tensors, numbers, bools, strings, None, and lists, tuples, dicts "
                "or registered containers of them)",
            )
    return args, dict(kwargs)


def _placeholder(value: Any) -> str:
    return f"<{type(value).__name__}>"


def _right_call(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    unexpected: list[str],
    via_export: bool,
) -> str:
    """The call the user most likely meant, written out from ``forward``'s parameters: each
    input given where it fits (``<Tensor>``), each missing required one by its name, inputs
    that fit no parameter left out; in the form of the function that was called."""
    given = kwargs.get("args")
    if not args and "args" in unexpected and given is not None:
        args = given if isinstance(given, tuple) else (given,)
    rest = list(args)
    kept = {k: v for k, v in kwargs.items() if k not in unexpected}
    positional: list[str] = []
    keywords: list[tuple[str, str]] = []
    in_order = True  # False once a defaulted parameter is skipped: the rest go by name
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            positional += [_placeholder(a) for a in rest]
            rest = []
        elif param.kind is param.VAR_KEYWORD:
            keywords += [(k, _placeholder(v)) for k, v in kept.items()]
            kept = {}
        elif param.kind is not param.KEYWORD_ONLY and rest:
            positional.append(_placeholder(rest.pop(0)))
        elif param.name in kept:
            text = _placeholder(kept.pop(param.name))
            if in_order and param.kind is not param.KEYWORD_ONLY:
                positional.append(text)
            else:
                keywords.append((param.name, text))
        elif param.default is param.empty:
            if in_order and param.kind is not param.KEYWORD_ONLY:
                positional.append(param.name)
            else:
                keywords.append((param.name, param.name))
        else:
            in_order = False
    options = [f"{k}={kwargs[k]!r}" for k in ("opset_version",) if k in kwargs]
    inputs = ", ".join(positional)
    export_call = f"dynamo_onnx.export(model, ({inputs}{',' if len(positional) == 1 else ''})"
    if keywords:
        export_call += ", kwargs={" + ", ".join(f'"{k}": {v}' for k, v in keywords) + "}"
    export_call += "".join(f", {o}" for o in options) + ")"
    if via_export:
        return export_call
    call = "dynamo_onnx.dynamo_export(" + ", ".join(
        ["model", *positional, *(f"{k}={v}" for k, v in keywords)]
    )
    call += ")"
    return f"{call}, or {export_call}" if options else call


def _check_inputs(
    ctx: DiagnosticContext,
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    via_export: bool,
) -> dict[str, Any]:
    """``forward``'s parameters bound to the inputs (bound once, here, for every pass);
    fails early, with the names, when the inputs do not fit its signature."""
    if signature is None:  # builtins without a signature: let torch.export judge
        return {}
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        reason = str(exc)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    unexpected = [] if accepts_any else [k for k in kwargs if k not in signature.parameters]
    if unexpected:
        problem = f"the keyword argument(s) {', '.join(unexpected)}"
        export_words = [k for k in unexpected if k in _EXPORT_KEYWORDS]
        if export_words:
            problem += (
                f" ({', '.join(export_words)} are torch.onnx.export options, which "
                "dynamo_export passes to the model)"
            )
    else:
        problem = f"these inputs ({reason})"
    ctx.fail(
        "inputs-do-not-match-forward",
        InvalidExportOptionsError,
        properties={"unexpected": unexpected},
        signature=str(signature),
        problem=problem,
        call=_right_call(signature, args, kwargs, unexpected, via_export),
    )


def _input_labels(bound: Mapping[str, Any], input_names: Any) -> dict[str, str]:
    """``forward`` parameter -> the caller's name for it in ``input_names`` (which name the
    ONNX inputs: the tensors among the inputs, in order), for the top-level tensor inputs."""
    if not input_names:
        return {}
    labels: dict[str, str] = {}
    position = 0
    for name, value in bound.items():
        leaves, _ = pytree.tree_flatten(value)
        if isinstance(value, torch.Tensor) and position < len(input_names):
            labels[name] = str(input_names[position])
        position += sum(isinstance(leaf, torch.Tensor) for leaf in leaves)
    return labels


def _auto_spec(value: Any) -> Any:
    """``dynamic_shapes=True`` for one input: every dimension of every tensor dynamic.

    ``Dim.AUTO`` lets torch.export keep a dimension static where the model requires it (the
    8 input features of a Linear(8, ...)) instead of failing; the seed's "most compatible"
    meaning.
    """
    if isinstance(value, torch.Tensor):
        return {dim: torch.export.Dim.AUTO for dim in range(value.dim())} or None
    if isinstance(value, (list, tuple)):
        return type(value)(_auto_spec(v) for v in value)
    if isinstance(value, dict):
        return {k: _auto_spec(v) for k, v in value.items()}
    return None


def _by_index(dims: Any, value: Any) -> Any:
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


def normalize_dynamic_shapes(spec: Any) -> Any:
    """torch.export's specs, plus names as strings: ``{0: "batch"}`` -> ``{0: Dim.AUTO}``.

    A named string is dynamic where the model allows it: a dimension the model specializes
    becomes a ``dynamic-dim-specialized`` warning instead of a failed capture (``Dim``
    objects keep torch's strict meaning). The names are applied to the ONNX dims after.
    """
    if isinstance(spec, str):
        return torch.export.Dim.AUTO
    if isinstance(spec, dict):
        return {k: normalize_dynamic_shapes(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(normalize_dynamic_shapes(v) for v in spec)
    return spec


def _requested_dynamic(spec: Any, bound: Mapping[str, Any]) -> dict[tuple[str, int], int]:
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
