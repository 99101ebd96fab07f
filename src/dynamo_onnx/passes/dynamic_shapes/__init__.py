"""The dynamic-shapes pass: what the caller asked to be dynamic against what the captured
program has, and the names of the dynamic dimensions in the ONNX model.

A dimension asked dynamic that torch specialized is a warning (DO106) naming the input, the
dimension, the value and the guard's line. The dynamic ones get the caller's names (a
string or a ``Dim``'s name) in the ONNX model, else ``<input>_dim_<i>``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import ClassVar

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import CaptureError, OnnxExporterError
from dynamo_onnx.foreign_text import (
    Guard,
    ProgramCondition,
    ShapeLog,
    mentions,
    program_conditions,
    read_shape_log,
    symbol_mentions,
)
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.fx import range_bounds, static_size
from dynamo_onnx.passes.probe import agrees_outside

__all__ = ["DynamicShapesPass", "dimension_names"]


class DynamicShapesPass:
    """Specialization findings and dimension names."""

    name: ClassVar[str] = PassName.DYNAMIC_SHAPES
    error_type: ClassVar[type[OnnxExporterError]] = CaptureError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        program = state.exported_program
        assert program is not None
        log = read_shape_log(state.capture.shape_log)  # torch's words, read once
        _report_specializations(ctx, program, state, log)
        names = dimension_names(program, state.checked.shapes.names())
        _report_narrowing(ctx, program, state, names, log)
        _report_constant_guards(ctx, program, state, log)
        return state.replace(dim_names=names)


def _resolve(suffix: str) -> str | None:
    """torch logs paths cut from the left to a width (``ork/main/model.py``): find the
    loaded module whose file ends that way."""
    suffix = suffix.replace("/", os.sep)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.abspath(path).endswith(suffix):
            return os.path.abspath(path)
    return None


def _guard_line(ctx: DiagnosticContext, guard: Guard) -> Location | None:
    """The user's line behind a guard: the innermost user frame of the stack when it was
    added; torch's own frame otherwise names a file by its tail."""
    where = ctx.user_frame(guard.stack)
    if where is None and guard.frame is not None and (path := _resolve(guard.frame.path_tail)):
        where = Location(path, guard.frame.line, guard.frame.function)
        where = where if ctx.user_frame([where]) is not None else None
    return where


def _unknown_line(log: ShapeLog) -> str:
    """The ``source`` of a finding whose guard was not found: an unknown line, and, when
    torch logged a guard or a symbol in words this version cannot read, that message quoted
    (a reworded message must not silently make the finding vaguer)."""
    if not log.unparsed:
        return "an unknown line"
    return (
        f"an unknown line (dynamo-onnx could not read torch's message "
        f'"{log.unparsed[0].text[:300]}")'
    )


def _report_specializations(
    ctx: DiagnosticContext,
    program: torch.export.ExportedProgram,
    state: ExportState,
    log: ShapeLog,
) -> None:
    """Requested-dynamic dimensions the captured program has as constants.

    Decided from the program (a placeholder whose size is an int); torch's guard and the
    user's line behind it say why. A dimension the caller named or declared is a warning
    (DO106) each; in "every dimension dynamic" mode the dimensions the model keeps static
    (a Linear's features, a Conv's channels) are what that mode promises, so they are one
    note (DO128) that lists them.
    """
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    guards = [(g.expression, g.symbols, _guard_line(ctx, g)) for g in log.guards]
    kept: list[str] = []
    #: the model's lines that fix a kept dimension: the note is at the first, as it says
    fixed_at: list[Location] = []
    for (input_name, dim), example in state.checked.shapes.requested.items():
        node = placeholders.get(input_name)
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor) or dim >= val.dim():
            continue
        value = static_size(val.shape[dim])
        if value is None:
            continue
        declared = (input_name, dim) in state.checked.shapes.declared
        if declared and example in (0, 1):
            continue  # torch's 0/1 rule, not a line of the model: DO105 says it
        symbol = log.symbol_of(input_name, dim)
        culprit = next((g for g in reversed(guards) if symbol is not None and symbol in g[1]), None)
        guard, where = (culprit[0], culprit[2]) if culprit is not None else ("unknown", None)
        if not declared:
            because = f", because of `{guard}` at {ctx.display(where)}" if where else ""
            kept.append(f"`{state.checked.label(input_name)}` dimension {dim} = {value}{because}")
            fixed_at += [where] if where else []
            continue
        ctx.record(
            "dynamic-dim-specialized",
            locations=[where],
            input=state.checked.label(input_name),
            dim=dim,
            value=value,
            guard=guard,
            source=ctx.display(where) if where else _unknown_line(log),
        )
    if kept:
        ctx.record(
            "dynamic-dims-kept-static",
            locations=fixed_at[:1],
            count=len(kept),
            dims="; ".join(kept),
        )


def _report_narrowing(
    ctx: DiagnosticContext,
    program: torch.export.ExportedProgram,
    state: ExportState,
    names: Mapping[str, str],
    log: ShapeLog,
) -> None:
    """A warning for each requested-dynamic dimension that torch.export kept dynamic over a
    narrower range than asked, or only as a multiple of a number."""
    if not state.checked.shapes.requested:
        return
    ranges = {str(symbol): vr for symbol, vr in program.range_constraints.items()}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    reported: set[str] = set()
    asked = state.capture.shapes  # the caller's request, or torch's refinement of it (DO125)
    for (input_name, dim), _ in state.checked.shapes.requested.items():
        node = placeholders.get(input_name)
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor) or dim >= val.dim():
            continue
        size = val.shape[dim]
        if static_size(size) is not None:
            continue  # specialized: DO106
        expression = str(size)
        # the range constraints' keys are symbols and, for a derived Dim, expressions
        # (``32*s52``): a size mentioning two of them is the caller's declared multiple
        symbols = [s for s in ranges if mentions(expression, s)]
        if len(symbols) != 1:
            continue
        symbol = symbols[0]
        if symbol in reported:
            continue  # one finding per dimension symbol (inputs sharing it say the same)
        reported.add(symbol)
        name = (
            names.get(expression, f"{input_name}_dim_{dim}")
            if expression.isidentifier()
            else f"{input_name}_dim_{dim}"
        )
        low, high = asked.asked_range(input_name, dim)
        got_low, got_high = range_bounds(ranges[symbol])
        parts = []
        if expression != symbol:  # e.g. 32*s12: only multiples are accepted
            head, star, tail = expression.partition("*")
            factor = head if star and tail == symbol and head.isdigit() else None
            valid = f"multiples of {factor}" if factor else f"sizes of the form {expression}"
            spec = (
                f'{factor} * torch.export.Dim("{name}")'
                if factor
                else f"the expression {expression}"
            )
        else:
            if _report_divisibility(ctx, log, state.checked.label(input_name), dim, symbol, name):
                continue
            narrower_low = got_low is not None and got_low > low
            narrower_high = got_high is not None and (high is None or got_high < high)
            if not (narrower_low or narrower_high):
                continue
            valid = (
                f"sizes {got_low} to {got_high}"
                if got_high is not None
                else f"sizes of {got_low} or more"
            )
            if narrower_low:
                parts.append(f"min={got_low}")
            if got_high is not None:
                parts.append(f"max={got_high}")
            spec = f'torch.export.Dim("{name}", {", ".join(parts)})'
        guard, where = _narrowing_guard(ctx, log, symbol)
        sizes_in_guard = [s for s in symbol_mentions(guard) if s.startswith("s")]
        if len(sizes_in_guard) > 1 and expression == symbol:
            # a relation between dims (the mask's length <= past + new tokens): the bound
            # follows from the others' ranges, not from a line that narrows this one
            continue
        if expression == symbol and agrees_outside(
            program,
            state.checked.model,
            (tuple(state.checked.args), dict(state.checked.kwargs)),
            symbol,
            _outside(low, high, got_low, got_high),
        ):
            # torch keeping a derived size off 0 and 1 (``x[:, :-1]``), or sizes eager
            # PyTorch rejects too (a Conv1d's kernel): the program holds outside the range
            continue
        _narrowed(
            ctx,
            state.checked.label(input_name),
            dim,
            valid,
            guard,
            where,
            f"declare it as {spec} to accept that, or rewrite the line",
            log,
        )


def _outside(low: int, high: int | None, got_low: int | None, got_high: int | None) -> list[int]:
    """The sizes asked for but outside the narrowed range that the probe tries: each end
    of the gap below it, and the two sizes above it (where asked)."""
    sizes: list[int] = []
    if got_low is not None and got_low > low:
        sizes += sorted({low, got_low - 1})
    if got_high is not None:
        sizes += [s for s in (got_high + 1, got_high + 2) if high is None or s <= high]
    return sizes


def _narrowed(
    ctx: DiagnosticContext,
    input_name: str,
    dim: int,
    valid: str,
    guard: str,
    where: Location | None,
    remedy: str,
    log: ShapeLog,
) -> None:
    ctx.record(
        "dynamic-dim-narrowed",
        locations=[where],
        input=input_name,
        dim=dim,
        valid=valid,
        guard=guard,
        source=ctx.display(where) if where else _unknown_line(log),
        remedy=remedy,
    )


def _report_divisibility(
    ctx: DiagnosticContext,
    log: ShapeLog,
    input_name: str,
    dim: int,
    symbol: str,
    name: str,
) -> bool:
    """DO124 for a guard on the remainder of ``symbol`` (``h % 32 == 0``, or ``!= 0``):
    torch.export keeps the range but the graph holds only for (non-)multiples. True if found."""
    for guard in log.guards:
        remainder = guard.remainder
        if remainder is None or remainder.symbol != symbol:
            continue
        where = ctx.user_frame(guard.stack)
        factor = remainder.factor
        if remainder.equal:
            spec = f'{factor} * torch.export.Dim("{name}_div_{factor}")'
            _narrowed(
                ctx,
                input_name,
                dim,
                f"multiples of {factor}",
                guard.expression,
                where,
                f"declare it as {spec} to accept that, or rewrite the line",
                log,
            )
        else:
            _narrowed(
                ctx,
                input_name,
                dim,
                f"sizes that are not multiples of {factor}",
                guard.expression,
                where,
                "no Dim spec expresses that: rewrite the line with torch.cond, "
                "which exports both branches",
                log,
            )
        return True
    return False


def _report_constant_guards(
    ctx: DiagnosticContext,
    program: torch.export.ExportedProgram,
    state: ExportState,
    log: ShapeLog,
) -> None:
    """DO124 for each condition the program holds under that no range expresses: a number
    computed from a dynamic size and used as a constant (``x[: int(n / 2)]`` slices 4 rows
    at every size when the example had 8 or 9).

    Decided from the exported program's own conditions, those its module checks when called
    (``int(n / 2) == 4`` there; ranges and equal sizes are in its range constraints and
    shared symbols, divisibility has its own finding); the line is the guard's in torch's
    log, matched by its constant.
    """
    if not state.checked.shapes.requested:
        return
    multiples = _declared_multiples(program)
    for condition in program_conditions(program):
        if not condition.fixes_a_computed_size or condition.value is None:
            continue
        if _holds_at_other_sizes(condition, state.checked.shapes.requested, multiples):
            continue  # a check on the sizes (reshape's), not a size standing for a constant
        written = condition.written_with(state.checked.label)
        first = condition.sizes[0] if condition.sizes else None
        input_name, dim = (first.input, first.dim) if first else ("?", 0)
        guard, where = _constant_guard_line(ctx, log, condition.value)
        remedy = (
            "no Dim spec expresses that: compute the number with integer arithmetic on the "
            "size (`n // 2`, not `int(n / 2)`), which the model keeps symbolic"
            if condition.truncates
            else "no Dim spec expresses that: compute the number from the size with "
            "operations torch.export keeps symbolic, or branch with torch.cond"
        )
        _narrowed(
            ctx,
            state.checked.label(input_name),
            dim,
            f"sizes where `{written}` (the ONNX model uses {condition.value} at every size)",
            guard or written,
            where,
            remedy,
            log,
        )


def _declared_multiples(program: torch.export.ExportedProgram) -> dict[tuple[str, int], int]:
    """(input, dimension) -> k for each dimension the caller declared a multiple of k
    (``k * torch.export.Dim(...)``: its size in the program is ``k*s12``)."""
    found: dict[tuple[str, int], int] = {}
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if not isinstance(val, torch.Tensor):
            continue
        for dim, size in enumerate(val.shape):
            head, star, tail = str(size).partition("*")
            if star and head.isdigit() and tail.isidentifier():
                found[(node.name, dim)] = int(head)
    return found


def _holds_at_other_sizes(
    condition: ProgramCondition,
    example: Mapping[tuple[str, int], int],
    multiples: Mapping[tuple[str, int], int],
) -> bool:
    """Whether the condition still holds with every dynamic size doubled and with every one
    two steps larger (a step is 1, or k for a size declared a multiple of k: the sizes the
    caller accepts): ``(n * m) // trunc(n * m / 2) == 2`` (``x.reshape(int(n * m / 2),
    2)``) does, the model computes the size at run time; ``trunc(n / 2) == 4`` does not,
    the model slices 4 rows at every size. False when the condition cannot be evaluated."""
    keys = [(size.input, size.dim) for size in condition.sizes]
    if not all(key in example for key in keys):
        return False  # a size of a dimension that is not dynamic: not ours to vary
    doubled = {key: 2 * example[key] for key in keys}
    stepped = {key: example[key] + 2 * multiples.get(key, 1) for key in keys}
    for sizes in (doubled, stepped):
        if condition.holds_at(sizes) is not True:
            return False  # not plain arithmetic, or it fails: the finding stands
    return True


def _constant_guard_line(
    ctx: DiagnosticContext, log: ShapeLog, value: str
) -> tuple[str | None, Location | None]:
    """The logged guard (``Eq(TruncToInt(IntTrueDiv(s77, 2)), 4)``) setting an expression
    of sizes to ``value``, and the user's line behind it."""
    for guard in log.guards:
        if guard.fixed_value == value:
            return guard.expression, ctx.user_frame(guard.stack)
    return None, None


def _aliases(log: ShapeLog, symbol: str) -> set[str]:
    """``symbol`` and every symbol a guard made equal to it (``Eq(s53, s70)``: the mask's
    length is the ids' length), whose guards then constrain it too."""
    same = [guard.same for guard in log.guards if guard.same is not None]
    found = {symbol}
    grew = True
    while grew:
        grew = False
        for a, b in same:
            if (a in found) != (b in found):
                found |= {a, b}
                grew = True
    return found


def _narrowing_guard(
    ctx: DiagnosticContext, log: ShapeLog, symbol: str
) -> tuple[str, Location | None]:
    """The last guard on ``symbol`` (or a symbol made equal to it) that is not an equality,
    and the user's line behind it."""
    names = _aliases(log, symbol)
    found: tuple[str, Location | None] = ("unknown", None)
    for guard in log.guards:
        if guard.symbols & names and not guard.is_equality:
            found = (guard.expression, ctx.user_frame(guard.stack))
    return found


def dimension_names(
    program: torch.export.ExportedProgram, given: Mapping[tuple[str, int], str]
) -> dict[str, str]:
    """torch's symbols (``s17``) -> names for the ONNX dims: the caller's (``given``, by
    input and dimension: :meth:`ShapeRequest.names`), else ``<input>_dim_<i>``."""
    user_inputs = {
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT and hasattr(s.arg, "name")
    }
    mapping: dict[str, str] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for index, dim in enumerate(val.shape):
            symbol = str(dim)
            if isinstance(dim, int) or not symbol.isidentifier() or symbol in mapping:
                continue
            mapping[symbol] = given.get((node.name, index), f"{node.name}_dim_{index}")
    return mapping
