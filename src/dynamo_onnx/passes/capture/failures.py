"""A capture that failed, as a finding: the rule of its cause at the user's line (DO138,
DO141, DO127, DO139, DO104, DO142 and the causes known by their text), and DO125 when torch's
suggested fixes made it work."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_frames as context_exception_frames
from dynamo_onnx.diagnostics.context import exception_summary
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.errors import CaptureError
from dynamo_onnx.foreign_text import read_capture_failure
from dynamo_onnx.passes.base import ShapeLogRecord
from dynamo_onnx.passes.capture.causes import (
    EAGER_FAILURE,
    capture_cause,
    data_dependence,
    known_cause,
    library_branch,
    quantized_modules,
    source_expression,
    unregistered_output,
)
from dynamo_onnx.passes.capture.eager import eager_run, runs_eagerly, tensor_devices

__all__ = ["exception_frames", "fail_with_cause", "report_refined", "violates_constraints"]


def exception_frames(exc: BaseException) -> tuple[tuple[Location, ...], tuple[Location, ...]]:
    """(the frames that may hold the user's line, the Python stack innermost first).

    torch.export (strict) reports the user's frames in the message, not the traceback: they
    are searched first for the user's line, but the stack shown is the traceback alone, so
    it is in the order it says and no frame appears twice.
    """
    stack = context_exception_frames(exc)
    return tuple(parse_stack_trace(str(exc))) + stack, stack


def fail_with_cause(
    ctx: DiagnosticContext,
    module: torch.nn.Module,
    inputs: tuple[tuple[Any, ...], Mapping[str, Any]],
    failures: list[tuple[BaseException, Location | None]],
    returned: Location | None = None,
) -> None:
    """Fail with the rule of the cause of a failed capture, when it is known.

    In order: tensors on several devices (every operator refuses them, eager too),
    torch.ao quantized modules (DO141: export the float model and quantize the ONNX one), a
    model that fails in eager PyTorch (the inputs or the model are wrong, not the export),
    a library module's own branch on a value that an argument avoids (DO139, before DO104:
    rewriting torch's code with torch.cond is no advice), a guard on a tensor's value
    (torch's exception says which), an output class with no pytree registration (DO142),
    then the causes known by their text. Returns when none applies (DO100).
    """
    first = failures[0][1] if failures else None
    summary = capture_cause(failures[0][0]) if failures else ""
    devices = tensor_devices(module, *inputs)
    if devices is not None:
        weights, given = devices
        ctx.fail(
            "devices-differ",
            CaptureError,
            first,
            weights=_devices(weights),
            inputs=_devices(given),
            source=ctx.display(first),
            cause=summary,
        )
    quantized = quantized_modules(module)
    if quantized:
        ctx.fail(
            "quantized-module",
            CaptureError,
            first,
            modules=", ".join(f"`{path}`: {kind}" for path, kind in quantized[:3])
            + (f" and {len(quantized) - 3} more" if len(quantized) > 3 else ""),
            cause=summary,
        )
    run = eager_run(module, *inputs)
    eager = run.error
    if eager is not None:
        frames, stack = exception_frames(eager)
        where = ctx.user_frame(frames) or first
        ctx.fail(
            "example-inputs-do-not-fit",
            CaptureError,
            where,
            stack=stack,
            properties={"exception": type(eager).__name__},
            source=ctx.display(where),
            cause=exception_summary(eager),
        )
    for exc, where in failures:
        branch = library_branch(exc)
        if branch is not None:
            dependence = data_dependence(exc)
            condition = dependence.condition if dependence else None
            ctx.fail(
                "library-branch-on-value",
                CaptureError,
                where,
                properties={"exception": type(exc).__name__},
                source=ctx.display(where),
                check=branch.check.function,
                library=branch.check.library,
                detail=f"`{branch.line}`"
                + (f", which torch traced as `{condition}`" if condition else ""),
                remedy=branch.remedy,
            )
    for exc, where in failures:
        dependence = data_dependence(exc)
        if dependence is not None:
            _fail_data_dependent(ctx, exc, where, dependence.branch, dependence.condition)
    eager_ran = runs_eagerly(module)
    for exc, where in failures:
        failure = read_capture_failure(type(exc).__name__, str(exc))
        if failure.unregistered_output is not None:
            _fail_unregistered(ctx, failure.unregistered_output, run.output, returned)
        recognized = known_cause(failure)
        if recognized is None and not eager_ran and failure.inputs_do_not_fit:
            recognized = EAGER_FAILURE
        if recognized is None:
            continue
        if recognized.rule == "data-dependent-control-flow":
            _fail_data_dependent(ctx, exc, where, True, None)
        ctx.fail(
            recognized.rule,
            CaptureError,
            where,
            source=ctx.display(where),
            cause=capture_cause(exc),
            **dict(recognized.fields),
        )


def _fail_unregistered(
    ctx: DiagnosticContext, type_name: str, output: Any, returned: Location | None
) -> None:
    """DO142: the registration that lets torch.export flatten the output's class."""
    found = unregistered_output(output, type_name)
    name = type(found).__name__ if found is not None else type_name.rpartition(".")[2]
    if found is None or dataclasses.is_dataclass(found):
        registration = f"call `torch.export.register_dataclass({name})`"
    else:
        registration = f"register `{name}` with `torch.utils._pytree.register_pytree_node`"
    ctx.fail(
        "output-type-not-registered",
        CaptureError,
        returned,
        type=name,
        registration=registration,
    )


def _devices(types: list[str]) -> str:
    """``the meta device``, ``the cpu and cuda devices``."""
    if not types:
        return "no device"
    return f"the {' and '.join(types)} device{'s' if len(types) > 1 else ''}"


def _fail_data_dependent(
    ctx: DiagnosticContext,
    exc: BaseException,
    where: Location | None,
    branch: bool,
    condition: str | None,
) -> None:
    """DO104 in words: the user's expression and torch's condition as Python; torch's own
    message is in the finding's properties."""
    expression = source_expression(where)
    parts = [f"`{expression}`" if expression else ""]
    if condition:
        parts.append(f"which torch traced as `{condition}`" if expression else f"`{condition}`")
    ctx.fail(
        "data-dependent-control-flow",
        CaptureError,
        where,
        properties={"exception": type(exc).__name__, "torch_message": capture_cause(exc)},
        what="branch" if branch else "size or index",
        source=ctx.display(where),
        detail=", ".join(p for p in parts if p) or "a value torch could not name",
    )


def violates_constraints(exc: BaseException, spec: Any) -> bool:
    """Whether torch.export refused ``spec`` for a guard on a size ("Constraints
    violated"), the failure ``CapturePass._attempts`` retries deferring such guards."""
    return (
        spec is not None and read_capture_failure(type(exc).__name__, str(exc)).constraints_violated
    )


def report_refined(
    ctx: DiagnosticContext,
    exc: BaseException,
    refined: Any,
    records: list[ShapeLogRecord],
) -> None:
    """DO125 at the user's line behind the guard that did not fit (or torch's message).

    Every violation torch listed is named: the one its fix is for may not be the first
    (``seq != 32``, deferred by the retry, comes before ``seq <= 32``)."""
    frames, _ = exception_frames(exc)
    where = ctx.user_frame(frames)
    for record in reversed(records):
        if where is None and record.stack:
            where = ctx.user_frame(record.stack)
    failure = read_capture_failure(type(exc).__name__, str(exc))
    violations = failure.violations
    ctx.record(
        "dynamic-shapes-refined",
        locations=[where],
        stack=frames,
        violation="; ".join(violations) if violations else capture_cause(exc),
        fixes="; ".join(failure.suggested_fixes),
        spec=repr(refined),
        source=ctx.display(where) if where else "an unknown line",
    )
