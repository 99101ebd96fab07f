"""torch's symbolic-shape log (``create_symbol ...``, ``eval ... [guard added]``), read into
the symbols made for the inputs' dimensions and the guards added while capturing.

Recorded text: ``tests/foreign_text/torch-<version>/shape_log.json``, tested by
``tests/foreign_text/test_shape_log.py``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Protocol

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.foreign_text.symbols import symbols_in
from dynamo_onnx.foreign_text.unparsed import Unparsed


class LogRecord(Protocol):
    """A record of torch's symbolic-shape log as capture keeps it: the message and the
    Python stack when it was logged (innermost first)."""

    @property
    def message(self) -> str: ...

    @property
    def stack(self) -> tuple[Location, ...]: ...


@dataclasses.dataclass(frozen=True)
class TorchFrame:
    """The frame torch names for a guard: its file cut from the left to a width
    (``ork/main/model.py``), the line and the function."""

    path_tail: str
    line: int
    function: str


@dataclasses.dataclass(frozen=True)
class CreatedSymbol:
    """``create_symbol s77 = 8 for L['x'].size()[0] [2, int_oo]``: the symbol torch made for
    an input's dimension, the example's size and the range (``high`` None: unbounded)."""

    symbol: str
    input: str
    dim: int
    example: int
    low: int | None
    high: int | None


@dataclasses.dataclass(frozen=True)
class Remainder:
    """A guard on a remainder, ``Eq(Mod(s77, 32), 0)`` (``equal``) or ``Ne(...)``."""

    symbol: str
    factor: int
    equal: bool


@dataclasses.dataclass(frozen=True)
class Guard:
    """``eval s77 > 4 [guard added] (model.py:12 in forward)``: a condition torch added to the
    program while capturing, with the Python stack at that time (the user's line is in it)."""

    expression: str
    symbols: frozenset[str]
    frame: TorchFrame | None
    stack: tuple[Location, ...] = ()
    #: ``Eq(Mod(s77, 32), 0)``: only (non-)multiples of 32
    remainder: Remainder | None = None
    #: ``Eq(s77, s17)``: two symbols made one
    same: tuple[str, str] | None = None
    #: ``Eq(TruncToInt(IntTrueDiv(s77, 2)), 4)``: the value an expression of sizes is fixed to
    #: (not a symbol's own value, nor a remainder's)
    fixed_value: str | None = None

    @property
    def is_equality(self) -> bool:
        return self.expression.startswith("Eq(")


_CREATE = re.compile(
    r"^create_symbol (?P<symbol>\w+) = (?P<example>-?\d+) for L\['(?P<input>\w+)'\]"
    r"\.size\(\)\[(?P<dim>\d+)\](?: \[(?P<low>-?\w+), (?P<high>-?\w+)\])?"
)
_GUARD = re.compile(
    r"^eval (?:\(forcing_spec\) )?(?P<expr>.+?) \[guard added\](?:.*?\((?P<frame>[^()]*?)\))?"
)
_FRAME = re.compile(r"^(?P<path>\S+?):(?P<line>\d+) in (?P<function>\w+)$")
_REMAINDER = re.compile(r"^(Eq|Ne)\(Mod\((\w+), (\d+)\), 0\)$")
_SAME = re.compile(r"^Eq\(([su]\d+), ([su]\d+)\)$")
_FIXED = re.compile(r"^Eq\((?!\w+, )(.+), (-?\d+)\)$")
#: Messages about guards that are not a guard of the program: one torch suppressed (it
#: holds for no program), a runtime assert (in the graph), and the DEBUG records a caller's
#: logging may let through (a condition torch already knew).
_NOT_GUARDS = ("eval [guard suppressed]", "runtime_assert", "[statically known]", "[trivial]")


def is_about_a_guard(message: str) -> bool:
    """Whether a message of torch's symbolic-shape log is about a guard added to the program
    (``eval ... [guard added]``, or a rewording of it): capture keeps the Python stack of
    those, where the user's line is."""
    return (message.startswith("eval") or "guard added" in message.lower()) and not any(
        marker in message for marker in _NOT_GUARDS
    )


def _bound(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _read_guard(message: str, stack: tuple[Location, ...]) -> Guard | Unparsed:
    found = _GUARD.match(message)
    if found is None:
        return Unparsed("guard", message)
    expression = found["expr"]
    frame = _FRAME.match(found["frame"] or "")
    remainder = _REMAINDER.match(expression)
    same = _SAME.match(expression)
    fixed = _FIXED.match(expression)
    return Guard(
        expression=expression,
        symbols=symbols_in(expression),
        frame=TorchFrame(frame["path"], int(frame["line"]), frame["function"]) if frame else None,
        stack=stack,
        remainder=Remainder(remainder[2], int(remainder[3]), remainder[1] == "Eq")
        if remainder
        else None,
        same=(same[1], same[2]) if same else None,
        fixed_value=fixed[2] if fixed and not expression.startswith("Eq(Mod(") else None,
    )


@dataclasses.dataclass(frozen=True)
class ShapeLog:
    """torch's symbolic-shape log of one capture, read: the symbols it made for the inputs'
    dimensions, the guards it added (in order), and the messages of those kinds that did
    not parse."""

    symbols: tuple[CreatedSymbol, ...] = ()
    guards: tuple[Guard, ...] = ()
    unparsed: tuple[Unparsed, ...] = ()

    def symbol_of(self, input_name: str, dim: int) -> str | None:
        """The symbol torch made for ``input_name``'s dimension ``dim``, if it logged one."""
        return next((s.symbol for s in self.symbols if (s.input, s.dim) == (input_name, dim)), None)

    def dims_of(self, guard: Guard) -> tuple[tuple[str, int], ...]:
        """The inputs' dimensions (input, dim) whose symbols ``guard`` reads, in the order
        torch made them."""
        return tuple((s.input, s.dim) for s in self.symbols if s.symbol in guard.symbols)


def read_shape_log(records: Iterable[LogRecord]) -> ShapeLog:
    """The records of torch's symbolic-shape log (``torch.fx.experimental.symbolic_shapes``),
    read: ``create_symbol ...`` and ``eval ... [guard added]`` (a guard torch logs as
    suppressed holds for no program and is skipped); other messages (``create_env``,
    ``set_replacement``...) say nothing read here. A message of either kind in other words
    is kept as :class:`Unparsed`."""
    symbols: list[CreatedSymbol] = []
    guards: list[Guard] = []
    unparsed: list[Unparsed] = []
    for record in records:
        message = record.message
        if message.startswith("create_symbol") and "duck sized" not in message:
            created = _CREATE.match(message)
            if created is None:
                unparsed.append(Unparsed("symbol", message))
                continue
            symbols.append(
                CreatedSymbol(
                    symbol=created["symbol"],
                    input=created["input"],
                    dim=int(created["dim"]),
                    example=int(created["example"]),
                    low=_bound(created["low"]),
                    high=_bound(created["high"]),
                )
            )
        elif is_about_a_guard(message):
            read = _read_guard(message, record.stack)
            if isinstance(read, Guard):
                guards.append(read)
            else:
                unparsed.append(read)
    return ShapeLog(tuple(symbols), tuple(guards), tuple(unparsed))
