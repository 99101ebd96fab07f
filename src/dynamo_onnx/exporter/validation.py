"""Checks of what ``export`` was given and of what the captured model returns.

Bad input should fail before any work, with the rule, the cause and the fix, instead of
deep inside torch.export. Each check records its finding in the export's context (so the
reports say it) and raises the matching :class:`OnnxExporterError` subclass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import onnx
import torch
from torch.export import graph_signature as gs
from torch.export import pytree

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import mark_recorded
from dynamo_onnx.exporter.errors import (
    CaptureError,
    InvalidExportOptionsError,
    OnnxExporterError,
    format_message,
)
from dynamo_onnx.rules import get_rule

__all__ = ["check_model", "check_arguments", "check_opset", "check_outputs", "fail"]

#: Leaf types torch.export takes as inputs (others must be registered pytree containers).
_LEAF_TYPES = (torch.Tensor, bool, int, float, complex, str, type(None), torch.dtype, torch.device)


def fail(
    ctx: DiagnosticContext,
    rule_name: str,
    error_type: type[OnnxExporterError] = InvalidExportOptionsError,
    location: Location | None = None,
    **fields: Any,
) -> NoReturn:
    """Record the rule's finding (at the export call unless given) and raise its error."""
    rule = get_rule(rule_name)
    ctx.record(rule, locations=[location or ctx.call_site], **fields)
    error = error_type(
        format_message(rule.id, rule.name, rule.format_message(**fields), rule.fix),
        rule_id=rule.id,
        diagnostics=ctx,
    )
    mark_recorded(error)
    raise error


def _describe(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({text})"


def check_model(ctx: DiagnosticContext, model: Any) -> None:
    if isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)):
        return
    if isinstance(model, type) or not callable(model):
        what = f"the class {model.__name__}" if isinstance(model, type) else _describe(model)
        fail(ctx, "invalid-model", what=what)


def check_arguments(
    ctx: DiagnosticContext, args: Any, kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` as a tuple (a lone tensor becomes one), ``kwargs`` as a dict, leaves checked."""
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple):
        fail(
            ctx,
            "invalid-arguments",
            problem=f"`args` must be a tuple of the model's positional inputs, got "
            f"{_describe(args)}; for one input write `(x,)`",
        )
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        fail(
            ctx,
            "invalid-arguments",
            problem=f"`kwargs` must be a dict of keyword inputs by name, got {_describe(kwargs)}",
        )
    leaves, _ = pytree.tree_flatten((args, dict(kwargs)))
    for leaf in leaves:
        if not isinstance(leaf, _LEAF_TYPES):
            fail(
                ctx,
                "invalid-arguments",
                problem=f"an input is {_describe(leaf)}, which torch.export cannot take "
                "(inputs are tensors, numbers, bools, strings, None, and lists, tuples, dicts "
                "or registered containers of them)",
            )
    return args, dict(kwargs)


def check_opset(ctx: DiagnosticContext, opset_version: Any) -> None:
    if opset_version is None:
        return
    highest = onnx.defs.onnx_opset_version()
    if isinstance(opset_version, bool) or not isinstance(opset_version, int) or not (
        7 <= opset_version <= highest
    ):
        fail(
            ctx,
            "invalid-option",
            option="opset_version",
            problem=f"is {opset_version!r}",
            allowed=f"it takes an int from 7 to {highest} (the newest this onnx knows), or "
            "None for the default, 18",
        )


def check_outputs(ctx: DiagnosticContext, ep: torch.export.ExportedProgram) -> None:
    """Every user output of the captured program is a tensor (or a symbolic integer)."""
    user = [s for s in ep.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    for index, spec in enumerate(user):
        if isinstance(spec.arg, gs.ConstantArgument):
            fail(
                ctx, "non-tensor-output", CaptureError, ctx.model_location,
                index=index, what=_describe(spec.arg.value),
            )
