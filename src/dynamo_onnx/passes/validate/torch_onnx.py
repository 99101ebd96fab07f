"""torch.onnx.export's arguments, as the validate pass reads them.

Each argument either does here what torch.onnx documents (``input_names``, ``dynamic_axes``,
``custom_translation_table``, ...), has no effect and is a ``argument-ignored`` note (a
warning for ``dynamo=False``), or would change the model if ignored and is an
``argument-unsupported`` error. Nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Level
from dynamo_onnx.errors import InvalidExportOptionsError, InvalidOptionTypeError
from dynamo_onnx.io.onnx_file import is_file_object
from dynamo_onnx.registry import OnnxRegistry, target_name
from dynamo_onnx.specs import Spelling, spellings
from dynamo_onnx.specs.forms import did_you_mean
from dynamo_onnx.torch_onnx_names import OperatorExportTypes, TrainingMode

__all__ = [
    "IGNORED_WITHOUT_EFFECT",
    "TorchOnnxArguments",
    "dynamic_axes_to_shapes",
    "ignored",
    "register_translations",
    "report_arguments",
]


@dataclasses.dataclass(frozen=True)
class TorchOnnxArguments:
    """The arguments of ``torch.onnx.export`` that dynamo-onnx reads, as the caller gave them."""

    f: Any = None
    verbose: bool | None = None
    dynamo: bool = True
    profile: bool = False
    dump_exported_program: bool = False
    export_params: bool = True
    keep_initializers_as_inputs: bool = False
    training: Any = TrainingMode.EVAL
    operator_export_type: Any = OperatorExportTypes.ONNX
    do_constant_folding: bool = True
    optimize: bool | str = True
    autograd_inlining: bool = True
    export_modules_as_functions: Any = False
    #: The names of the arguments the caller wrote (a value equal to the default can be
    #: the caller's or the default: only the caller's is reported).
    passed: frozenset[str] = frozenset()


#: argument -> (its value with no effect here, why, what to use instead), for the note.
IGNORED_WITHOUT_EFFECT: dict[str, str] = {
    "profile": "the time of every pass is in the SARIF log's invocation and the markdown "
    "report's pass table",
    "dump_exported_program": "dynamo-onnx does not write the ExportedProgram; "
    "torch.export.save(program.exported_program, path) does",
    "autograd_inlining": "it applies to the TorchScript exporter only",
    "do_constant_folding": "constant folding is part of optimize=True; pass optimize=False "
    "to export without any optimization",
}


def ignored(
    ctx: DiagnosticContext, argument: str, value: str, reason: str, warning: bool = False
) -> None:
    """DO111 at the export call: the argument had no effect, and why."""
    ctx.record(
        "argument-ignored",
        level=Level.WARNING if warning else None,
        locations=[ctx.call_site],
        argument=argument,
        value=value,
        reason=reason,
    )


def report_arguments(
    ctx: DiagnosticContext, given: TorchOnnxArguments, model: Any, module_functions: bool
) -> None:
    """A note for every argument given a value that has no effect, an error for one that
    cannot be honored without changing the model."""
    if (
        given.f is not None
        and not isinstance(given.f, (str, os.PathLike))
        and not is_file_object(given.f)
    ):
        ctx.fail(
            "invalid-option",
            InvalidOptionTypeError,
            option="f",
            problem=f"is a {type(given.f).__name__}",
            allowed="it takes a file path such as model.onnx, a binary file object such as "
            "io.BytesIO(), or None (then save with program.save(path)); keyword inputs go "
            "in kwargs={...}",
        )
    if not given.dynamo:
        ignored(
            ctx,
            "dynamo",
            "False",
            "dynamo-onnx has no TorchScript exporter; the model was exported with "
            "torch.export, as dynamo=True does",
            warning=True,
        )
    defaults = TorchOnnxArguments()
    for name, reason in IGNORED_WITHOUT_EFFECT.items():
        value = getattr(given, name)
        if name == "do_constant_folding" and (value or not given.optimize):
            continue
        if value != getattr(defaults, name):
            ignored(
                ctx,
                name,
                repr(value),
                reason,
            )
    if given.optimize and module_functions and "optimize" in given.passed:
        ignored(
            ctx,
            "optimize",
            "True",
            "the optimizer inlines functions, which would undo the layer functions "
            "module_functions asks for; call program.optimize() to optimize and inline them",
        )
    grouping = given.export_modules_as_functions
    if not isinstance(grouping, bool):
        ignored(
            ctx,
            "export_modules_as_functions",
            repr(grouping),
            "grouping only some module types is not supported; every submodule call "
            "became a local function, as with True",
        )
    if given.f is None:
        for name in ("export_params", "keep_initializers_as_inputs"):
            value = getattr(given, name)
            if value != getattr(defaults, name):
                ignored(
                    ctx,
                    name,
                    repr(value),
                    f"it applies when f is given; save with program.save(path, "
                    f"{'include_initializers' if name == 'export_params' else name}="
                    f"{value!r})",
                )
    if given.operator_export_type != OperatorExportTypes.ONNX:
        ctx.fail(
            "argument-unsupported",
            InvalidExportOptionsError,
            argument="operator_export_type",
            value=str(given.operator_export_type),
            reason="dynamo-onnx exports standard ONNX operators only (OperatorExportTypes.ONNX); "
            "ATen fallback operators do not exist in this exporter",
        )
    wants_training = given.training == TrainingMode.TRAINING
    if wants_training and isinstance(model, torch.nn.Module) and not model.training:
        ctx.fail(
            "argument-unsupported",
            InvalidExportOptionsError,
            argument="training",
            value=str(given.training),
            reason="dynamo-onnx exports the model in the mode it is in, and it is in eval "
            "mode; call model.train() before exporting to export training behavior",
        )


def _names(value: Any, option: str, ctx: DiagnosticContext) -> list[str] | None:
    if value is None:
        return None
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(v, str) for v in value)
    ):
        ctx.fail(
            "invalid-option",
            InvalidOptionTypeError,
            option=option,
            problem=f"is {value!r}",
            allowed="it takes a list of strings, one per graph input or output in order",
        )
    return list(value)


def check_names(ctx: DiagnosticContext, input_names: Any, output_names: Any) -> None:
    """``input_names`` and ``output_names`` are lists of strings."""
    _names(input_names, "input_names", ctx)
    _names(output_names, "output_names", ctx)


def dynamic_axes_to_shapes(
    ctx: DiagnosticContext,
    dynamic_axes: Mapping[str, Any],
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    inputs: Mapping[str, Sequence[str]],
) -> dict[str, dict[int, str]]:
    """``dynamic_axes`` (by ONNX input name) as dynamic shapes by the export's inputs.

    ``inputs`` maps every name a key may give an input by (an ``input_names`` entry, a
    parameter, a cache tensor's ONNX name) to the export's inputs it stands for. Axes given
    as a list are named ``<input>_dim_<axis>``; keys that name outputs are left out (an
    output's dimensions follow from the inputs') with a note; a key that is neither is a
    ``dynamic-spec-unknown-name`` error, as torch.onnx fails on it.
    """
    if not isinstance(dynamic_axes, Mapping):
        ctx.fail(
            "invalid-option",
            InvalidOptionTypeError,
            option=Spelling.DYNAMIC_AXES,
            problem=f"is a {type(dynamic_axes).__name__}",
            allowed='it takes a dict like {"x": {0: "batch"}} or {"x": [0]}',
        )
    outputs = [str(n) for n in output_names or ()]
    spec, others = spellings.from_dynamic_axes(dynamic_axes, inputs)
    for key in others:
        if key not in outputs:
            _unknown_axes_key(ctx, str(key), input_names, list(inputs), outputs)
    output_keys = others
    if output_keys:
        ignored(
            ctx,
            Spelling.DYNAMIC_AXES,
            ", ".join(repr(o) for o in output_keys),
            "these keys are outputs; an output's dimensions follow from the inputs'",
        )
    return spec


def _unknown_axes_key(
    ctx: DiagnosticContext,
    key: str,
    input_names: Sequence[str] | None,
    accepted: Sequence[str],
    outputs: Sequence[str],
) -> None:
    """A ``dynamic_axes`` key that is no input or output name: an error naming the names
    it takes (the caller's ``input_names`` first), the closest one if any is close."""
    names = [str(n) for n in input_names or ()] or list(accepted)
    valid = names + [n for n in outputs if n not in names]
    hint = did_you_mean(key, valid + [n for n in accepted if n not in valid])
    if not hint and not outputs:
        hint = " (output_names is not given, so no key names an output)"
    shown = valid[:12] + (["..."] if len(valid) > 12 else [])
    ctx.fail(
        "dynamic-spec-unknown-name",
        InvalidExportOptionsError,
        option=Spelling.DYNAMIC_AXES,
        name=key,
        what="input or output name",
        suggestion=hint,
        valid=", ".join(n if n == "..." else f"`{n}`" for n in shown) or "none",
    )


def register_translations(registry: OnnxRegistry, table: Mapping[Any, Any]) -> OnnxRegistry:
    """A copy of ``registry`` with ``custom_translation_table``'s functions registered, as
    ``register_op`` would: ``{torch.ops.aten.add.Tensor: fn}`` or a list of functions."""
    registry = registry.copy()
    for target, functions in table.items():
        # An OpOverloadPacket (torch.ops.aten.add) stands for all of its overloads.
        packet = callable(getattr(target, "overloads", None))
        overloads = [getattr(target, o) for o in target.overloads()] if packet else [target]
        functions = functions if isinstance(functions, (list, tuple)) else [functions]
        for overload in overloads:
            namespace, _, rest = target_name(overload).partition("::")
            op_name, _, overload_name = rest.partition(".")
            for function in functions:
                registry.register_op(function, namespace, op_name, overload_name or None)
    return registry
