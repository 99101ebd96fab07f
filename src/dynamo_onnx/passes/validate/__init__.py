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
from dynamo_onnx.integrations import FamilyInputs, ModelFamily, families, family_of, input_family
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
from dynamo_onnx.passes.base import CheckedRequest, ExportRequest, ExportState, PassName
from dynamo_onnx.passes.model import describe_value, forward_signature, model_anchor
from dynamo_onnx.passes.validate import torch_onnx
from dynamo_onnx.passes.validate.exportable import with_module_arguments
from dynamo_onnx.registry import OnnxRegistry
from dynamo_onnx.specs import ShapeRequest, Spelling
from dynamo_onnx.specs import forms as spec_forms

__all__ = ["ValidatePass"]

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
        _check_options(ctx, request)
        _check_model(ctx, request.model)
        module_functions = _module_functions(request)
        if request.torch_onnx is not None:
            torch_onnx.report_arguments(ctx, request.torch_onnx, request.model, module_functions)
        torch_onnx.check_names(ctx, request.input_names, request.output_names)
        args, kwargs = _check_arguments(ctx, request.args, request.kwargs)
        checked = _checked_request(request, args, kwargs, module_functions)
        _check_one_spelling(ctx, request)
        if isinstance(request.model, torch.export.ExportedProgram):
            _report_spec_of_program(ctx, request)
            return state.replace(checked=checked)
        signature = forward_signature(request.model)
        bound = _check_inputs(ctx, signature, args, kwargs, request.torch_onnx is not None)
        spread_out = spread(signature, bound) if signature is not None else bound
        spec = _checked_spec(ctx, request, args, kwargs, signature, bound, spread_out)
        family_inputs, bound, spec = _family_view(ctx, request, signature, bound, spread_out, spec)
        if request.dynamic_axes is not None:
            keys = _axes_keys(bound, request.input_names, family_inputs)
            spec = torch_onnx.dynamic_axes_to_shapes(
                ctx, request.dynamic_axes, request.input_names, request.output_names, keys
            )
        shapes = ShapeRequest.build(
            spec,
            bound,
            spelling=_spelling(request),
            location=ctx.call_site,
        )
        labels = _input_labels(bound, request.input_names, family_inputs)
        _report_empty_examples(ctx, shapes, labels)
        return state.replace(
            checked=dataclasses.replace(
                checked,
                bound=bound,
                input_names=checked.input_names
                or (tuple(family_inputs.names.values()) if family_inputs is not None else None),
                model_location=model_anchor(request.model, ctx.library_prefixes, ctx.call_site),
                shapes=shapes,
                input_labels=labels,
                family_inputs=family_inputs,
            )
        )


def _module_functions(request: ExportRequest) -> bool:
    """torch.onnx.export's ``export_modules_as_functions=True`` is ``module_functions=True``."""
    return bool(request.module_functions) or bool(
        getattr(request.torch_onnx, "export_modules_as_functions", False)
    )


def _checked_request(
    request: ExportRequest, args: tuple[Any, ...], kwargs: dict[str, Any], module_functions: bool
) -> CheckedRequest:
    """What every request has, the model's inputs aside: the opset with its entry point's
    default, the names as tuples, the registry, the options merged."""
    return CheckedRequest(
        request.model,
        args,
        kwargs,
        opset=request.opset_version
        if request.opset_version is not None
        else default_opset(torch_onnx_call=request.torch_onnx is not None),
        input_names=_names(request.input_names),
        output_names=_names(request.output_names),
        registry=_registry(request),
        module_functions=module_functions,
        custom_opsets=dict(request.custom_opsets or {}),
        verbose=bool(getattr(request.torch_onnx, "verbose", False)),
    )


def _check_options(ctx: DiagnosticContext, request: ExportRequest) -> None:
    """Every option checked where options are (``options.py``), before anything runs."""
    for problem in (
        diagnostic_options_problem(request.diagnostic_options),
        export_options_problem(request.export_options),
        opset_problem(request.opset_version),
        optimize_problem(request.torch_onnx.optimize if request.torch_onnx else True),
    ):
        _fail_option(ctx, problem)


def _registry(request: ExportRequest) -> OnnxRegistry:
    """The caller's registry (or a new one), with ``custom_translation_table``'s functions."""
    registry = request.registry if request.registry is not None else OnnxRegistry()
    if request.custom_translation_table:
        registry = torch_onnx.register_translations(registry, request.custom_translation_table)
    return registry


def _check_one_spelling(ctx: DiagnosticContext, request: ExportRequest) -> None:
    """``dynamic_axes`` and ``dynamic_shapes`` are two spellings of one request: one only."""
    if request.dynamic_axes is not None and request.dynamic_shapes is not None:
        ctx.fail(
            "invalid-option",
            InvalidOptionValueError,
            option="dynamic_axes",
            problem="is given together with dynamic_shapes",
            allowed="give one of them: dynamic_shapes (preferred) or dynamic_axes",
        )


def _every_dim_option(request: ExportRequest) -> bool:
    """``ExportOptions(dynamic_shapes=True)``: dynamo_export's "every dimension dynamic"."""
    options = request.export_options
    return isinstance(options, ExportOptions) and bool(options.dynamic_shapes)


def _spelling(request: ExportRequest) -> str | None:
    """The argument that asked for dynamic dimensions, as a message names it."""
    if request.dynamic_shapes is True:
        return Spelling.EVERY_DIM
    if _every_dim_option(request):
        return Spelling.EXPORT_OPTIONS
    if request.dynamic_axes is not None:
        return Spelling.DYNAMIC_AXES
    return Spelling.DYNAMIC_SHAPES if request.dynamic_shapes is not None else None


def _family_view(
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


def _report_empty_examples(
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
        if not structured:
            return spec  # torch.export resolves it (and checks AdditionalInputs' inputs)
        try:  # a family value's tensors are found only where it is a registered pytree
            spec = spec.dynamic_shapes(request.model, args, kwargs)
        except ValueError:
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
    for argument in (Spelling.DYNAMIC_SHAPES, Spelling.DYNAMIC_AXES):
        value = getattr(request, argument)
        if value is None:
            continue
        static = _static_in_program(
            request.model, value, request.input_names, axes=argument == Spelling.DYNAMIC_AXES
        )
        reason = (
            "the ExportedProgram's dims were fixed when torch.export.export captured it"
            + (f", and it has {', '.join(static)} static" if static else "")
            + "; to change them, pass dynamic_shapes to torch.export.export when capturing "
            "it, or pass the model itself to dynamo_onnx.export"
        )
        torch_onnx.ignored(ctx, argument, _short_repr(value), reason, warning=bool(static))
    if _every_dim_option(request):
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
            ctx, Spelling.EXPORT_OPTIONS, "True", reason, warning=static and bool(dims)
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


def _input_labels(
    bound: Mapping[str, Any], input_names: Any, family_inputs: FamilyInputs | None
) -> dict[str, str]:
    """``forward`` parameter -> the caller's name for it in ``input_names`` (which name the
    ONNX inputs: the tensors among the inputs, in order), for the top-level tensor inputs;
    without ``input_names``, a family's flat inputs by their ONNX names."""
    if not input_names:
        return dict(family_inputs.names) if family_inputs is not None else {}
    labels: dict[str, str] = {}
    position = 0
    for name, value in bound.items():
        leaves, _ = pytree.tree_flatten(value)
        if isinstance(value, torch.Tensor) and position < len(input_names):
            labels[name] = str(input_names[position])
        position += sum(isinstance(leaf, torch.Tensor) for leaf in leaves)
    return labels
