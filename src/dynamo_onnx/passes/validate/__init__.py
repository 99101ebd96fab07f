"""The validate pass: the model, the arguments and the options, before anything runs.

Bad input should fail before any work, with the rule, the cause and the fix, instead of
deep inside torch.export. Each check fails through ``ctx.fail``, so the reports say it.
The pass also normalizes what the caller gave: ``args`` as a tuple, ``kwargs`` as a dict,
the dynamic-shape spec in torch.export's terms, and the registry to translate with. With a
model family's values among the inputs (a KV cache), its family takes them as flat tensors
(``CheckedRequest.family_inputs``) and reads their spec (``dynamo_onnx.integrations``).

This module holds the pass and the checks of the options and the model; each other check
has its module: ``arguments.py`` (the example inputs and their binding to ``forward``,
with ``right_call.py`` for the call the user meant), ``shapes.py`` (the dynamic-shape
spec against the inputs), ``given_program.py`` (a spec beside an ExportedProgram),
``torch_onnx.py`` (torch.onnx.export's arguments), ``exportable.py``
(``torch.onnx.ExportableModule``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import CaptureError, InvalidExportOptionsError, OnnxExporterError
from dynamo_onnx.io.inputs import spread
from dynamo_onnx.options import (
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
from dynamo_onnx.passes.validate.arguments import check_arguments, check_inputs, input_labels
from dynamo_onnx.passes.validate.exportable import with_module_arguments
from dynamo_onnx.passes.validate.given_program import report_spec_of_program
from dynamo_onnx.passes.validate.shapes import (
    axes_keys,
    check_one_spelling,
    checked_spec,
    family_view,
    report_empty_examples,
    spelling_of,
)
from dynamo_onnx.registry import OnnxRegistry
from dynamo_onnx.specs import ShapeRequest

__all__ = ["ValidatePass"]


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
        args, kwargs = check_arguments(ctx, request.args, request.kwargs)
        checked = _checked_request(request, args, kwargs, module_functions)
        check_one_spelling(ctx, request)
        if isinstance(request.model, torch.export.ExportedProgram):
            report_spec_of_program(ctx, request)
            return state.replace(checked=checked)
        signature = forward_signature(request.model)
        bound = check_inputs(ctx, signature, args, kwargs, request.torch_onnx is not None)
        spread_out = spread(signature, bound) if signature is not None else bound
        spec = checked_spec(ctx, request, args, kwargs, signature, bound, spread_out)
        family_inputs, bound, spec = family_view(ctx, request, signature, bound, spread_out, spec)
        if request.dynamic_axes is not None:
            keys = axes_keys(bound, request.input_names, family_inputs)
            spec = torch_onnx.dynamic_axes_to_shapes(
                ctx, request.dynamic_axes, request.input_names, request.output_names, keys
            )
        shapes = ShapeRequest.build(
            spec,
            bound,
            spelling=spelling_of(request),
            location=ctx.call_site,
        )
        labels = input_labels(bound, request.input_names, family_inputs)
        report_empty_examples(ctx, shapes, labels)
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
