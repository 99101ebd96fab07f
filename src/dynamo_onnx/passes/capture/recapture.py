"""Capture again, with probes, where the first capture fixed a size the caller asked
dynamic: the example widened along its size-1 dimensions (DO129), a size computed from
declared dimensions unpinned from 0 or 1, and dimensions torch fixed on a guard that holds
at every size kept dynamic by deferring the guards (checked by running the program at other
sizes). The request itself is reshaped by its own methods
(:class:`~dynamo_onnx.specs.ShapeRequest`); this module decides when to capture again."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Mapping
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.foreign_text import program_conditions
from dynamo_onnx.passes.base import CaptureRecord, ExportState, ShapeLogRecord
from dynamo_onnx.passes.capture.program_copy import check_outputs, lines_for_regions
from dynamo_onnx.passes.capture.shape_log import ShapeLogListener
from dynamo_onnx.passes.capture.strategies import DEFERRING, TorchExportStrategy
from dynamo_onnx.passes.fx import static_size
from dynamo_onnx.passes.model import forward_signature
from dynamo_onnx.passes.probe import agrees_outside
from dynamo_onnx.specs import ShapeRequest

__all__ = ["kept_dynamic", "report_size_one", "unpinned_capture", "widened_capture"]


def widened_capture(
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
    ones = state.checked.shapes.size_one()
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
    signature = forward_signature(state.checked.model)
    if signature is None:
        return None
    shapes = state.checked.shapes
    widened = shapes.widen(state.checked.bound, dims)
    bound = inspect.BoundArguments(signature, widened)  # type: ignore[arg-type]
    shape_log = ShapeLogListener(show=state.checked.verbose)
    try:
        with shape_log.listening():
            program = strategy.capture(
                module, bound.args, bound.kwargs, shapes.spec, deferred=deferred
            )
    except Exception:  # captured as given instead, with DO105
        return None
    if _specialized(program, dims) or (unpins and _sizes_pinned_at_zero_or_one(program, state)):
        return None  # fixed at 2, it would not even take the example: as given, DO105
    for name, dim in dims:
        ctx.record(
            "dynamic-dim-example-widened",
            locations=[shapes.location],
            input=state.checked.label(name),
            dim=dim,
            size=shapes.example(name, dim),
            traced=2 * shapes.example(name, dim),
            reason=reason,
        )
    if not unpins:
        ctx.record(
            "capture-strategy-succeeded", strategy=strategy.label, nodes=len(program.graph.nodes)
        )
        check_outputs(ctx, program, state.checked.model_location)
    lines_for_regions(program)
    label = strategy.label + (DEFERRING if deferred else "")
    record = CaptureRecord(label, shapes, tuple(shape_log.records))
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
        if keys and all(key in state.checked.shapes.declared for key in keys):
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


def unpinned_capture(
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
    deferred = label == strategy.label + DEFERRING
    if not pinned or label not in (strategy.label, strategy.label + DEFERRING):
        return captured  # (a strict capture: left as it is)
    reason = ", which made a size computed from it 1, and torch fixes a size of 1"
    widened = _repeated_capture(
        ctx, strategy, module, captured, pinned, reason, unpins=True, deferred=deferred
    )
    return widened if widened is not None else captured


#: How many times a dimension's example size the probe tries it at, beyond the example.
_PROBE_STEPS = (1, 2)


def kept_dynamic(
    strategy: TorchExportStrategy,
    module: torch.nn.Module,
    inputs: tuple[tuple[Any, ...], Mapping[str, Any]],
    shapes: ShapeRequest,
    program: torch.export.ExportedProgram,
    state: ExportState,
) -> tuple[torch.export.ExportedProgram, ShapeRequest, tuple[ShapeLogRecord, ...]] | None:
    """A capture that keeps dynamic the dimensions ``program`` fixed although they were
    asked dynamic, where the model works at other sizes; None to keep ``program``.

    torch.export fixes a ``Dim.AUTO`` dimension on any guard that compares it to a number,
    also one inside an operator's shape check that holds at every size
    (``torch.take_along_dim`` fixes all the sizes of both inputs). Deferring the guards, as
    torch.onnx captures, keeps such a size symbolic (its range collapsed to the example);
    the dimension then stays dynamic if the program runs and matches eager at other sizes.
    Dimensions where eager itself refuses another size (a Linear's features) are taken out
    of the request (:meth:`ShapeRequest.without`) and the capture is made once more, so
    the ONNX model keeps them fixed as the plain capture did. Only for a module with real
    weights (probing runs it). ``shapes``: the request captured with (torch's refinement
    of the checked one, if any).
    """
    fixed = _fixed_requested(program, shapes)
    if not fixed or shapes.spec is None:
        return None
    model_inputs = (tuple(state.checked.args), dict(state.checked.kwargs))
    for _ in range(2):
        shape_log = ShapeLogListener(show=False)
        try:
            with shape_log.listening():
                deferred = strategy.capture(module, *inputs, shapes.spec, deferred=True)
        except Exception:  # the plain capture stands
            return None
        symbols = _symbols_of(deferred, fixed)
        working = {
            dim
            for dim, symbol in symbols.items()
            if agrees_outside(
                deferred,
                state.checked.model,
                model_inputs,
                symbol,
                [fixed[dim] + step for step in _PROBE_STEPS],
                must_run=True,
            )
        }
        if not working:
            return None
        if working == set(symbols):
            return deferred, shapes, tuple(shape_log.records)
        narrower = shapes.without(set(symbols) - working)
        if narrower is None:
            return None
        shapes = narrower
        fixed = {dim: fixed[dim] for dim in working}
    return None


def _fixed_requested(
    program: torch.export.ExportedProgram, shapes: ShapeRequest
) -> dict[tuple[str, int], int]:
    """(input name, dimension) -> size, for each dimension asked dynamic that ``program``
    has as a constant (size-0/1 examples aside: torch's 0/1 rule, not the model's)."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    fixed: dict[tuple[str, int], int] = {}
    for (name, dim), example in shapes.requested.items():
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


def report_size_one(ctx: DiagnosticContext, state: ExportState) -> None:
    """DO105 for each declared dimension whose example of size 1 torch will make static."""
    for name, dim in state.checked.shapes.size_one():
        ctx.record(
            "dynamic-dim-example-too-small",
            locations=[state.checked.shapes.location],
            input=state.checked.label(name),
            dim=dim,
            size=1,
        )
