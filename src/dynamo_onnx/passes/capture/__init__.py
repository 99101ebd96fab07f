"""The capture pass: the model becomes a ``torch.export.ExportedProgram``.

Strategies are objects tried in order: ``torch.export.export`` non-strict (traces with real
Python, the most permissive), then strict (TorchDynamo). Each failure is a finding with its
root cause; only when all fail does capture fail, with the rule of the cause at the user's
line: tensors on several devices (DO138) and a model that fails in eager PyTorch too
(DO127) are decided from the model (``eager``), a data-dependent branch (DO104) from torch's
exception, the rest (DO126, DO309) from its text (``causes``); else DO100 listing every
cause. When a strategy refuses the dynamic shapes for a guard no ``Dim`` range expresses,
a last attempt defers such guards to assertions in the graph (``CapturePass._attempts``).
A program the caller passed in is copied, never rewritten. What capture did (the strategy,
the shape request it captured with: the checked one or torch's refinement of it, torch's
symbolic-shape log) is its own ``CaptureRecord``; the checked request is left as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import CaptureError, OnnxExporterError
from dynamo_onnx.foreign_text import read_capture_failure
from dynamo_onnx.integrations import capturing
from dynamo_onnx.passes.base import CaptureRecord, ExportState, PassName
from dynamo_onnx.passes.capture.called_spec import as_called
from dynamo_onnx.passes.capture.causes import capture_cause
from dynamo_onnx.passes.capture.failures import (
    exception_frames,
    fail_with_cause,
    report_refined,
    violates_constraints,
)
from dynamo_onnx.passes.capture.onnx_export_flag import onnx_export_flag
from dynamo_onnx.passes.capture.program_copy import check_outputs, copy_program, lines_for_regions
from dynamo_onnx.passes.capture.recapture import (
    kept_dynamic,
    report_size_one,
    unpinned_capture,
    widened_capture,
)
from dynamo_onnx.passes.capture.shape_log import ShapeLogListener
from dynamo_onnx.passes.capture.strategies import DEFERRING, STRATEGIES, TorchExportStrategy
from dynamo_onnx.passes.logs import torch_deprecations_ignored
from dynamo_onnx.passes.model import as_module, flat_forward, return_location

__all__ = ["STRATEGIES", "CapturePass", "TorchExportStrategy", "copy_program"]


class CapturePass:
    """The model -> an ExportedProgram, by the first strategy that succeeds."""

    name: ClassVar[str] = PassName.CAPTURE
    error_type: ClassVar[type[OnnxExporterError]] = CaptureError
    changes_input: ClassVar[bool] = False

    def __init__(self, strategies: tuple[TorchExportStrategy, ...] = STRATEGIES) -> None:
        self.strategies = strategies

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        # torch's deprecation warnings about its own tree specs are not the user's; the
        # model sees torch.onnx.is_in_onnx_export() True, as under torch.onnx.export
        with torch_deprecations_ignored(), onnx_export_flag():
            return self._run(ctx, state)

    def _run(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model = state.checked.model
        if isinstance(model, torch.export.ExportedProgram):
            given = "the given ExportedProgram"
            ctx.record("capture-strategy-succeeded", strategy=given, nodes=len(model.graph.nodes))
            program = copy_program(model)
            lines_for_regions(program)
            check_outputs(ctx, program, state.checked.model_location)
            return state.replace(
                capture=CaptureRecord(given, state.checked.shapes),
                exported_program=program,
            )
        module = as_module(model)
        with capturing(ctx, module, state.checked.registry):
            if state.checked.family_inputs is not None:
                with flat_forward(module, state.checked.family_inputs):
                    return self._capture(ctx, module, state)
            widened = widened_capture(ctx, self.strategies[0], module, state)
            if widened is not None:
                return widened
            captured = self._capture(ctx, module, state)
            return unpinned_capture(ctx, self.strategies[0], module, captured)

    def _capture(
        self, ctx: DiagnosticContext, module: torch.nn.Module, state: ExportState
    ) -> ExportState:
        """Each strategy in turn; the first program wins, every failure is a finding."""
        report_size_one(ctx, state)
        inputs = state.checked.capture_inputs()
        causes: list[str] = []
        failures: list[tuple[BaseException, Location | None]] = []
        for strategy, deferred in self._attempts(failures, state.checked.shapes.spec):
            label = strategy.label + (DEFERRING if deferred else "")
            shape_log = ShapeLogListener(show=state.checked.verbose)
            shapes = state.checked.shapes
            try:
                with shape_log.listening():
                    try:
                        program = strategy.capture(module, *inputs, shapes.spec, deferred=deferred)
                    except Exception as exc:  # retried once with torch's fixes
                        fixes = read_capture_failure(type(exc).__name__, str(exc)).suggested_fixes
                        refined = shapes.refined(fixes)
                        if refined is None:
                            raise
                        program = strategy.capture(module, *inputs, refined.spec, deferred=deferred)
                        report_refined(
                            ctx,
                            exc,
                            as_called(refined.spec, state.checked.family_inputs),
                            shape_log.records,
                        )
                        shapes = refined
            except Exception as exc:  # each failure is a finding
                frames, stack = exception_frames(exc)
                cause = capture_cause(exc)
                causes.append(f"{label}: {cause}")
                failures.append((exc, ctx.user_frame(frames)))
                ctx.record(
                    "capture-strategy-failed",
                    locations=[ctx.user_frame(frames)],
                    stack=stack,
                    properties={"exception": type(exc).__name__},
                    strategy=label,
                    cause=cause,
                )
                continue
            records = tuple(shape_log.records)
            if not deferred:
                kept = kept_dynamic(strategy, module, inputs, shapes, program, state)
                if kept is not None:
                    # the first capture's records still say which line fixed each size
                    # that stays static (torch names a symbol by its source: the same
                    # symbol in both captures is the same dimension)
                    program, shapes, records = kept[0], kept[1], records + kept[2]
                    label += DEFERRING
            ctx.record(
                "capture-strategy-succeeded",
                strategy=label,
                nodes=len(program.graph.nodes),
            )
            lines_for_regions(program)
            check_outputs(ctx, program, state.checked.model_location)
            return state.replace(
                capture=CaptureRecord(label, shapes, records),
                exported_program=program,
            )
        returned = return_location(state.checked.model) or state.checked.model_location
        fail_with_cause(ctx, module, inputs, failures, returned)
        ctx.fail(
            "capture-failed",
            CaptureError,
            failures[0][1] if failures else None,
            cause="no strategy could capture it:\n" + "\n".join(f"  - {c}" for c in causes),
        )

    def _attempts(
        self, failures: list[tuple[BaseException, Location | None]], spec: Any
    ) -> Iterator[tuple[TorchExportStrategy, bool]]:
        """(strategy, defer size guards): each strategy as it is, then, when one refused the
        dynamic shapes for a guard on a size that no ``Dim`` range expresses, the first
        deferring such guards to assertions in the graph, as torch.onnx captures.

        A ``Dim('seq', max=32)`` over ``mask[:n, :n]`` of a 32-row buffer fails on torch's
        guard ``seq != 32`` (is the slice the whole buffer?) with no suggested fix, though
        the model runs at 32. Deferring is the last resort, not the first: a guard torch
        only asserts is not a size torch could resolve, and the dynamic-shapes pass reads
        what the program holds; a strategy that captures without it is taken first. Lazy:
        ``failures`` is read after the strategies before ran.
        """
        for strategy in self.strategies:
            yield strategy, False
        if self.strategies and any(violates_constraints(exc, spec) for exc, _ in failures):
            yield self.strategies[0], True
