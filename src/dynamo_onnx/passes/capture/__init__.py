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
the spec it captured with: the checked one or torch's refinement of it, torch's
symbolic-shape log) is its own ``CaptureRecord``; the checked request is left as it was.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import operator
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch
import torch.export.dynamic_shapes
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_summary
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.errors import CaptureError, OnnxExporterError
from dynamo_onnx.foreign_text import is_about_a_guard, program_conditions, read_capture_failure
from dynamo_onnx.integrations import capturing
from dynamo_onnx.passes.base import CaptureRecord, ExportState, PassName, ShapeLogRecord
from dynamo_onnx.passes.capture.called_spec import as_called
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
from dynamo_onnx.passes.capture.onnx_export_flag import onnx_export_flag
from dynamo_onnx.passes.fx import is_none_output, static_size
from dynamo_onnx.passes.logs import (
    dropped,
    filtered,
    partial_graphs_dropped,
    torch_deprecations_ignored,
)
from dynamo_onnx.passes.model import (
    as_module,
    describe_value,
    flat_forward,
    forward_signature,
    return_location,
)
from dynamo_onnx.passes.probe import agrees_outside

__all__ = ["STRATEGIES", "CapturePass", "TorchExportStrategy", "copy_program"]


@dataclasses.dataclass(frozen=True)
class TorchExportStrategy:
    """``torch.export.export`` in strict or non-strict mode."""

    strict: bool

    @property
    def label(self) -> str:
        return f"torch.export.export(strict={self.strict})"

    def capture(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        dynamic_shapes: Any,
        deferred: bool = False,
    ) -> torch.export.ExportedProgram:
        """``deferred``: a guard torch cannot turn into a range of a ``Dim`` becomes an
        assertion in the graph instead of failing the export (see ``_capture``'s retry)."""
        return torch.export.export(
            module,
            tuple(args),
            kwargs=dict(kwargs),
            dynamic_shapes=dynamic_shapes,
            strict=self.strict,
            prefer_deferred_runtime_asserts_over_guards=deferred,
        )


#: What a strategy's label says when it deferred size guards to assertions in the graph.
_DEFERRING = " deferring size guards"

#: The strategies, in the order they are tried.
STRATEGIES: tuple[TorchExportStrategy, ...] = (
    TorchExportStrategy(strict=False),
    TorchExportStrategy(strict=True),
)


class _ShapeLog(logging.Filter):
    """Where torch's symbolic shapes came from: each record of its symbolic-shape logger
    during capture, with the Python stack when it adds a guard (torch names its own frame
    for a guard; the stack still holds the user's line behind it).

    The findings are decided from the captured program; these records only say which
    line caused what the program shows. They must not depend on how the caller's process
    configured logging, so while capture runs the logger is made to produce them whatever
    ``logging.disable``, ``dictConfig(disable_existing_loggers=True)``, the logger's level
    or ``TORCH_LOGS`` say, and a filter on the logger (added, never replacing a handler)
    takes them. They stop here: torch's warnings during capture (the FX graph, 36 lines of
    it, for every data-dependent branch) say what a finding says at the user's line. With
    ``show`` (``verbose=True``, ``dynamo-onnx export --verbose``) a record the caller's
    configuration would have shown goes on to the caller's handlers. Everything is
    restored afterwards.
    """

    LOGGER = "torch.fx.experimental.symbolic_shapes"

    #: The errors a failed attempt logs anyway ("Error while creating guard" and its stack
    #: for a constraint violation; strict mode's summary of any failure): the finding
    #: reports it, once, at the user's line. Dropped by a filter while capture runs.
    QUIET = (
        "torch._guards",
        "torch.export._trace",
        "torch._subclasses.fake_tensor",
        "torch._export.non_strict_utils",  # "0/1 specialized": DO105 says it
        # "Using None as a dynamic shape dimension is deprecated": validation hands torch no
        # None (torch.onnx's idiom, which users write), a spec torch refined may still hold one
        "torch.export.dynamic_shapes",
    )

    def __init__(self, show: bool = False) -> None:
        super().__init__()
        self.records: list[ShapeLogRecord] = []
        self.show = show
        self._shown: Any = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        stack: tuple[Location, ...] = ()
        if is_about_a_guard(message):
            stack = tuple(
                Location(fs.filename, fs.lineno or 1, fs.name)
                for fs in reversed(traceback.extract_stack())
            )
        self.records.append(ShapeLogRecord(message, stack))
        return self.show and self._shown is not None and bool(self._shown(record.levelno))

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._producing(logging.getLogger(self.LOGGER)))
            stack.enter_context(dropped(*self.QUIET))
            if not self.show:
                stack.enter_context(partial_graphs_dropped())
            yield

    @contextlib.contextmanager
    def _producing(self, logger: logging.Logger) -> Iterator[None]:
        """The logger emits INFO records to this filter whatever the caller configured."""
        was_disabled = logger.disabled
        own = logger.__dict__.get("isEnabledFor")
        shown_by_caller = logger.isEnabledFor

        def shown(level: int) -> bool:  # what the caller's configuration lets through
            return not was_disabled and shown_by_caller(level)

        self._shown = shown
        logger.disabled = False
        logger.isEnabledFor = lambda level: level >= logging.INFO or shown(level)  # type: ignore[method-assign]
        try:
            with filtered(logger, self):
                yield
        finally:
            if own is None:
                del logger.isEnabledFor
            else:
                logger.isEnabledFor = own  # type: ignore[method-assign]
            logger.disabled = was_disabled
            self._shown = None


def copy_program(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A program whose graph can be rewritten without touching ``ep`` (weights shared)."""
    gm = copy.deepcopy(ep.graph_module)
    _keep_names(gm, ep.graph_module)
    return torch.export.ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=copy.deepcopy(ep.graph_signature),
        state_dict=ep.state_dict,
        range_constraints=ep.range_constraints,
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=ep.verifiers,
    )


def _keep_names(copied: torch.fx.GraphModule, original: torch.fx.GraphModule) -> None:
    """Give the copy's nodes the original's names, in every graph of the module.

    Copying a graph renames a node named like a Python builtin (``input``, the parameter
    of every ``torch.nn`` module's ``forward``, becomes ``input_1``), while the copied
    signature keeps the original names: the program would no longer match its signature.
    torch.export names its nodes directly (``node.name = node.target = ...``) and so
    does this; the names were valid and unique in the original graph.
    """
    originals = dict(original.named_modules())
    for path, module in copied.named_modules():
        source = originals.get(path)
        if not isinstance(module, torch.fx.GraphModule) or not isinstance(
            source, torch.fx.GraphModule
        ):
            continue
        renamed = False
        for node, before in zip(module.graph.nodes, source.graph.nodes):
            if node.name != before.name:
                node.name = before.name
                renamed = True
            if node.op == "placeholder" and node.target != before.target:
                node.target = before.target
                renamed = True
        if renamed:
            module.recompile()


def _frames(exc: BaseException) -> tuple[tuple[Location, ...], tuple[Location, ...]]:
    """(the frames that may hold the user's line, the Python stack innermost first).

    torch.export (strict) reports the user's frames in the message, not the traceback: they
    are searched first for the user's line, but the stack shown is the traceback alone, so
    it is in the order it says and no frame appears twice.
    """
    stack = tuple(
        Location(fs.filename, fs.lineno or 1, fs.name)
        for fs in reversed(traceback.extract_tb(exc.__traceback__))
    )
    return tuple(parse_stack_trace(str(exc))) + stack, stack


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
        model = state.valid.model
        if isinstance(model, torch.export.ExportedProgram):
            given = "the given ExportedProgram"
            ctx.record("capture-strategy-succeeded", strategy=given, nodes=len(model.graph.nodes))
            program = copy_program(model)
            _lines_for_regions(program)
            _check_outputs(ctx, program, state.valid.model_location)
            return state.replace(
                capture=CaptureRecord(given, state.valid.shapes.spec),
                exported_program=program,
            )
        module = as_module(model)
        with capturing(ctx, module, state.valid.registry):
            if state.valid.family_inputs is not None:
                with flat_forward(module, state.valid.family_inputs):
                    return self._capture(ctx, module, state)
            widened = _widened_capture(ctx, self.strategies[0], module, state)
            if widened is not None:
                return widened
            captured = self._capture(ctx, module, state)
            return _unpinned_capture(ctx, self.strategies[0], module, captured)

    def _capture(
        self, ctx: DiagnosticContext, module: torch.nn.Module, state: ExportState
    ) -> ExportState:
        """Each strategy in turn; the first program wins, every failure is a finding."""
        _report_size_one(ctx, state)
        inputs = state.valid.capture_inputs()
        causes: list[str] = []
        failures: list[tuple[BaseException, Location | None]] = []
        for strategy, deferred in self._attempts(failures, state.valid.shapes.spec):
            label = strategy.label + (_DEFERRING if deferred else "")
            shape_log = _ShapeLog(show=state.valid.verbose)
            spec = state.valid.shapes.spec
            try:
                with shape_log.listening():
                    try:
                        program = strategy.capture(module, *inputs, spec, deferred=deferred)
                    except Exception as exc:  # noqa: BLE001 - retried once with torch's fixes
                        refined = _refined(exc, spec)
                        if refined is None:
                            raise
                        program = strategy.capture(module, *inputs, refined, deferred=deferred)
                        _report_refined(
                            ctx,
                            exc,
                            as_called(refined, state.valid.family_inputs),
                            shape_log.records,
                        )
                        spec = refined
            except Exception as exc:  # noqa: BLE001 - each failure is a finding
                frames, stack = _frames(exc)
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
                kept = _kept_dynamic(strategy, module, inputs, spec, program, state)
                if kept is not None:
                    # the first capture's records still say which line fixed each size
                    # that stays static (torch names a symbol by its source: the same
                    # symbol in both captures is the same dimension)
                    program, spec, records = kept[0], kept[1], records + kept[2]
                    label += _DEFERRING
            ctx.record(
                "capture-strategy-succeeded",
                strategy=label,
                nodes=len(program.graph.nodes),
            )
            _lines_for_regions(program)
            _check_outputs(ctx, program, state.valid.model_location)
            return state.replace(
                capture=CaptureRecord(label, spec, records),
                exported_program=program,
            )
        returned = return_location(state.valid.model) or state.valid.model_location
        _fail_with_cause(ctx, module, inputs, failures, returned)
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
        if self.strategies and any(_violates_constraints(exc, spec) for exc, _ in failures):
            yield self.strategies[0], True


def _fail_with_cause(
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
        frames, stack = _frames(eager)
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


def _size_one_dims(state: ExportState) -> list[tuple[str, int]]:
    """Dimensions the caller declared dynamic whose example has size 1."""
    return [
        key
        for key, size in state.valid.shapes.requested.items()
        if size == 1 and key in state.valid.shapes.declared
    ]


def _widened_capture(
    ctx: DiagnosticContext,
    strategy: TorchExportStrategy,
    module: torch.nn.Module,
    state: ExportState,
) -> ExportState | None:
    """Capture with every size-1 dimension the caller declared dynamic traced at size 2.

    torch.export makes a size-1 dimension static (its 0/1 rule), so the torch.onnx
    tutorial's ``torch.randn(1, 3, 32, 32)`` with ``dynamic_axes={"input": {0:
    "batch_size"}}`` would come out with a batch of 1. torch.onnx traces such dimensions
    "size-oblivious", through a private torch switch; here the example is repeated along
    them (``torch.cat([x, x], dim)``: the same values, so value-dependent code sees what
    it saw), which gives the same graph through public APIs. A model that does not trace
    at size 2, or fixes the dimension at 2 (the ONNX model would then refuse the example
    itself), is captured as given instead, and the dimension is a DO105 warning.
    """
    ones = _size_one_dims(state)
    if not ones:
        return None
    return _repeated_capture(ctx, strategy, module, state, ones, "", unpins=False)


def _repeated_capture(
    ctx: DiagnosticContext,
    strategy: TorchExportStrategy,
    module: torch.nn.Module,
    state: ExportState,
    dims: list[tuple[str, int]],
    reason: str,
    unpins: bool,
    deferred: bool = False,
) -> ExportState | None:
    """Capture with the example repeated along ``dims`` (twice its size), a DO129 note
    for each (``reason``: why, beyond a size of 1); None when the model does not trace so,
    or fixes one of them, or (``unpins``: the capture is made to free a computed size)
    still holds a computed size at 0 or 1. ``unpins`` also keeps the first capture's
    DO102, which the caller recorded; ``deferred``: size guards deferred, as the first
    capture had them."""
    signature = forward_signature(state.valid.model)
    if signature is None:
        return None
    bound = inspect.BoundArguments(signature, dict(state.valid.bound))  # type: ignore[arg-type]
    for name, dim in dims:
        value = bound.arguments[name]
        bound.arguments[name] = torch.cat([value, value], dim=dim)
    shape_log = _ShapeLog(show=state.valid.verbose)
    try:
        with shape_log.listening():
            program = strategy.capture(
                module, bound.args, bound.kwargs, state.valid.shapes.spec, deferred=deferred
            )
    except Exception:  # noqa: BLE001 - captured as given instead, with DO105
        return None
    if _specialized(program, dims) or (unpins and _sizes_pinned_at_zero_or_one(program, state)):
        return None  # fixed at 2, it would not even take the example: as given, DO105
    for name, dim in dims:
        ctx.record(
            "dynamic-dim-example-widened",
            locations=[ctx.call_site],
            input=state.valid.label(name),
            dim=dim,
            size=state.valid.shapes.requested.get((name, dim), 1),
            traced=2 * state.valid.shapes.requested.get((name, dim), 1),
            reason=reason,
        )
    if not unpins:
        ctx.record(
            "capture-strategy-succeeded", strategy=strategy.label, nodes=len(program.graph.nodes)
        )
        _check_outputs(ctx, program, state.valid.model_location)
    _lines_for_regions(program)
    label = strategy.label + (_DEFERRING if deferred else "")
    record = CaptureRecord(label, state.valid.shapes.spec, tuple(shape_log.records))
    return state.replace(capture=record, exported_program=program)


def _sizes_pinned_at_zero_or_one(
    program: torch.export.ExportedProgram, state: ExportState
) -> list[tuple[str, int]]:
    """The declared dimensions behind a size computed from them that the program holds
    at 0 or 1 (``x.view(-1, 2).view(1, -1)`` traced at 2: ``x.size()[0] // 2 == 1``):
    torch's 0/1 rule applied to the computed size, which the example made 1, fixes the
    program to it although the model computes it at every size."""
    dims: list[tuple[str, int]] = []
    found = [
        [(size.input, size.dim) for size in condition.sizes]
        for condition in program_conditions(program)
        if condition.fixes_a_computed_size and condition.value in ("0", "1")
    ]
    for keys in [*found, *_asserted_at_zero_or_one(program)]:
        if keys and all(key in state.valid.shapes.declared for key in keys):
            dims.extend(key for key in keys if key not in dims)
    return dims


def _asserted_at_zero_or_one(program: torch.export.ExportedProgram) -> list[list[tuple[str, int]]]:
    """The sizes behind each assertion in the graph (a capture deferring size guards) that
    a size computed from them is 0 or 1 (``_assert_scalar(floordiv(sym_size(x, 0), 2) ==
    1)``), as (input, dimension) lists."""
    found = []
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten._assert_scalar.default or not node.args:
            continue
        condition = node.args[0]
        if not isinstance(condition, torch.fx.Node) or condition.target is not operator.eq:
            continue
        computed, value = condition.args[0], condition.args[1]
        if value not in (0, 1) or not isinstance(computed, torch.fx.Node):
            continue
        if computed.target in (torch.ops.aten.sym_size.int, operator.mod):
            continue  # a bare size (a range) or a remainder (divisibility), not a size
        sizes = [
            (str(n.args[0]), int(n.args[1]))
            for n in _ancestors(computed)
            if n.target is torch.ops.aten.sym_size.int and isinstance(n.args[0], torch.fx.Node)
        ]
        found.append(sizes)
    return found


def _ancestors(node: torch.fx.Node) -> list[torch.fx.Node]:
    seen: dict[torch.fx.Node, None] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen[current] = None
        stack.extend(n for n in current.all_input_nodes if n.op == "call_function")
    return list(seen)


def _unpinned_capture(
    ctx: DiagnosticContext,
    strategy: TorchExportStrategy,
    module: torch.nn.Module,
    captured: ExportState,
) -> ExportState:
    """``captured``, or, when its program holds a size computed from declared dynamic
    dimensions at 0 or 1 (:func:`_sizes_pinned_at_zero_or_one`), the capture with the
    example repeated along them, where that size is no longer 0 or 1 (torch.onnx traces
    size-oblivious through a private switch for the same)."""
    program = captured.exported_program
    pinned = _sizes_pinned_at_zero_or_one(program, captured) if program is not None else []
    label = captured.capture.strategy if captured.capture is not None else ""
    deferred = label == strategy.label + _DEFERRING
    if not pinned or label not in (strategy.label, strategy.label + _DEFERRING):
        return captured  # (a strict capture: left as it is)
    reason = ", which made a size computed from it 1, and torch fixes a size of 1"
    widened = _repeated_capture(
        ctx, strategy, module, captured, pinned, reason, unpins=True, deferred=deferred
    )
    return widened if widened is not None else captured


#: How many times a dimension's example size the probe tries it at, beyond the example.
_PROBE_STEPS = (1, 2)


def _kept_dynamic(
    strategy: TorchExportStrategy,
    module: torch.nn.Module,
    inputs: tuple[tuple[Any, ...], Mapping[str, Any]],
    spec: Any,
    program: torch.export.ExportedProgram,
    state: ExportState,
) -> tuple[torch.export.ExportedProgram, Any, tuple[ShapeLogRecord, ...]] | None:
    """A capture that keeps dynamic the dimensions ``program`` fixed although they were
    asked dynamic, where the model works at other sizes; None to keep ``program``.

    torch.export fixes a ``Dim.AUTO`` dimension on any guard that compares it to a number,
    also one inside an operator's shape check that holds at every size
    (``torch.take_along_dim`` fixes all the sizes of both inputs). Deferring the guards, as
    torch.onnx captures, keeps such a size symbolic (its range collapsed to the example);
    the dimension then stays dynamic if the program runs and matches eager at other sizes.
    Dimensions where eager itself refuses another size (a Linear's features) are taken out
    of the spec and the capture is made once more, so the ONNX model keeps them fixed as
    the plain capture did. Only for a module with real weights (probing runs it).
    """
    fixed = _fixed_requested(program, state)
    if not fixed or spec is None:
        return None
    model_inputs = (tuple(state.valid.args), dict(state.valid.kwargs))
    for _ in range(2):
        shape_log = _ShapeLog(show=False)
        try:
            with shape_log.listening():
                deferred = strategy.capture(module, *inputs, spec, deferred=True)
        except Exception:  # noqa: BLE001 - the plain capture stands
            return None
        symbols = _symbols_of(deferred, fixed)
        working = {
            dim
            for dim, symbol in symbols.items()
            if agrees_outside(
                deferred,
                state.valid.model,
                model_inputs,
                symbol,
                [fixed[dim] + step for step in _PROBE_STEPS],
                must_run=True,
            )
        }
        if not working:
            return None
        if working == set(symbols):
            return deferred, spec, tuple(shape_log.records)
        spec = _without_dims(state.valid.shapes.by_name(spec), set(symbols) - working)
        if spec is None:
            return None
        fixed = {dim: fixed[dim] for dim in working}
    return None


def _fixed_requested(
    program: torch.export.ExportedProgram, state: ExportState
) -> dict[tuple[str, int], int]:
    """(input name, dimension) -> size, for each dimension asked dynamic that ``program``
    has as a constant (size-0/1 examples aside: torch's 0/1 rule, not the model's)."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    fixed: dict[tuple[str, int], int] = {}
    for (name, dim), example in state.valid.shapes.requested.items():
        node = placeholders.get(name)
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor) or dim >= val.dim() or example in (0, 1):
            continue
        size = static_size(val.shape[dim])
        if size is not None:
            fixed[(name, dim)] = size
    return fixed


def _symbols_of(
    program: torch.export.ExportedProgram, dims: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], str]:
    """The symbol of each of ``dims`` that ``program`` keeps as a plain symbolic size."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    symbols: dict[tuple[str, int], str] = {}
    for name, dim in dims:
        node = placeholders.get(name)
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor) or dim >= val.dim():
            continue
        size = val.shape[dim]
        if isinstance(size, torch.SymInt) and str(size).isidentifier():
            symbols[(name, dim)] = str(size)
    return symbols


def _without_dims(spec: Any, dims: set[tuple[str, int]]) -> dict[str, Any] | None:
    """``spec`` (by parameter name) with ``dims`` static; None if one is not a dimension
    of a top-level tensor's ``{dim: ...}`` entry (a nested input's spec is left alone)."""
    if not isinstance(spec, dict):
        return None
    spec = dict(spec)
    for name, dim in dims:
        entry = spec.get(name)
        if not isinstance(entry, dict) or dim not in entry:
            return None
        spec[name] = {d: v for d, v in entry.items() if d != dim} or None
    return spec


def _specialized(program: torch.export.ExportedProgram, dims: list[tuple[str, int]]) -> bool:
    """Whether the program has any of ``dims`` (input name, dimension) as a constant: the
    model fixed the size it was traced at (``if x.shape[0] == 2``, ``x.reshape(2, ...)``)."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for name, dim in dims:
        node = placeholders.get(name)
        val = node.meta.get("val") if node is not None else None
        if isinstance(val, torch.Tensor) and dim < val.dim() and static_size(val.shape[dim]):
            return True
    return False


def _report_size_one(ctx: DiagnosticContext, state: ExportState) -> None:
    """DO105 for each declared dimension whose example of size 1 torch will make static."""
    for name, dim in _size_one_dims(state):
        ctx.record(
            "dynamic-dim-example-too-small",
            locations=[ctx.call_site],
            input=state.valid.label(name),
            dim=dim,
            size=1,
        )


def _refined(exc: BaseException, spec: Any) -> Any:
    """``spec`` with torch.export's suggested fixes applied, or None when there are none."""
    fixes = read_capture_failure(type(exc).__name__, str(exc)).suggested_fixes
    if spec is None or not fixes:
        return None
    refine = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes
    try:
        refined = refine("Suggested fixes:\n" + "\n".join(f"  {f}" for f in fixes), spec)
    except Exception:  # noqa: BLE001 - fixes torch cannot apply: the failure stands
        return None
    return refined if refined != spec else None


def _violates_constraints(exc: BaseException, spec: Any) -> bool:
    """Whether torch.export refused ``spec`` for a guard on a size ("Constraints
    violated"), the failure ``CapturePass._attempts`` retries deferring such guards."""
    return (
        spec is not None and read_capture_failure(type(exc).__name__, str(exc)).constraints_violated
    )


def _report_refined(
    ctx: DiagnosticContext,
    exc: BaseException,
    refined: Any,
    records: list[ShapeLogRecord],
) -> None:
    """DO125 at the user's line behind the guard that did not fit (or torch's message).

    Every violation torch listed is named: the one its fix is for may not be the first
    (``seq != 32``, deferred by the retry, comes before ``seq <= 32``)."""
    frames, _ = _frames(exc)
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


#: The higher-order operators torch.export records a ``with`` block as (``torch.autocast``,
#: ``torch.no_grad``/``set_grad_enabled``): their names start so. (``torch.cond`` and the
#: loops are not regions: translation places them by their operands, ``control_flow_source``.)
_REGION_PREFIX = "wrap_with_"


def _lines_for_regions(program: torch.export.ExportedProgram) -> None:
    """Give each call of a region's subgraph (``torch.autocast``'s, ``torch.no_grad``'s) the
    user's line of the first operator inside it, where torch gives it none.

    torch.export records a ``with torch.autocast(...)`` block as one call of a
    higher-order operator on a subgraph; the operators inside carry the user's line, the
    call does not. Decomposition inlines the subgraph by tracing it again, and the nodes
    it makes take the line of the call they came from: without this, every one of them
    (and a finding about it, DO409) would be "at an unknown line". All of a region's
    operators then point at its first line: nearer than none, and the region's own.
    """
    for graph_module in program.graph_module.modules():
        if not isinstance(graph_module, torch.fx.GraphModule):
            continue
        for node in graph_module.graph.nodes:
            if node.op != "call_function" or node.meta.get("stack_trace"):
                continue
            if not getattr(node.target, "__name__", "").startswith(_REGION_PREFIX):
                continue
            for arg in node.args:
                if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                    continue
                body = getattr(graph_module, str(arg.target), None)
                if isinstance(body, torch.fx.GraphModule):
                    inner = _first_line(body)
                    if inner is not None:
                        node.meta["stack_trace"] = inner
                        break


def _first_line(graph_module: torch.fx.GraphModule) -> str | None:
    """The stack trace of the first node of ``graph_module`` (or of a subgraph of it) that
    has one."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                trace = node.meta.get("stack_trace")
                if trace:
                    return str(trace)
    return None


def _check_outputs(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, model_location: Location | None
) -> None:
    """Every user output of the captured program is a tensor (or a symbolic integer); a
    ``None`` is dropped from the ONNX outputs by translation (DO311), as torch.onnx does."""
    user = [s for s in ep.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    for index, spec in enumerate(user):
        if isinstance(spec.arg, gs.ConstantArgument) and not is_none_output(spec):
            ctx.fail(
                "non-tensor-output",
                CaptureError,
                model_location,
                index=index,
                what=describe_value(spec.arg.value),
            )
