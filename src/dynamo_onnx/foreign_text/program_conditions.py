"""The conditions an ``ExportedProgram`` checks when called, as torch writes them in Python
(``math.trunc(L['x'].size()[0] / 2) == 4``), read, and evaluated at given sizes by walking
their syntax, never by ``eval``.

Recorded text: ``tests/foreign_text/torch-<version>/program_conditions.json``, tested by
``tests/foreign_text/test_program_conditions.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class SizeRef:
    """``L['x'].size()[0]`` in a condition: an input's dimension."""

    input: str
    dim: int
    written: str


class _NotArithmetic(Exception):
    """A condition that is not arithmetic on sizes: it is not evaluated."""


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: lambda a: -a,
    ast.UAdd: lambda a: +a,
    ast.Not: lambda a: not a,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "math.trunc": math.trunc,
    "math.floor": math.floor,
    "math.ceil": math.ceil,
    "int": int,
    "abs": abs,
    "min": min,
    "max": max,
}


def _size_ref(node: ast.expr, flat_names: Sequence[str]) -> tuple[str, int] | None:
    """(input, dim) for ``L['x'].size()[0]`` (or ``L['flat_args'][i].size()[0]``)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
        return None
    call = node.value
    if not (
        isinstance(call, ast.Call)
        and not call.args
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "size"
    ):
        return None
    owner = call.func.value
    if not isinstance(owner, ast.Subscript) or not isinstance(owner.slice, ast.Constant):
        return None
    if isinstance(owner.value, ast.Name) and owner.value.id == "L":
        name = owner.slice.value
    elif (
        isinstance(owner.value, ast.Subscript)
        and isinstance(owner.value.value, ast.Name)
        and owner.value.value.id == "L"
        and isinstance(owner.value.slice, ast.Constant)
        and owner.value.slice.value == "flat_args"
        and isinstance(owner.slice.value, int)
        and owner.slice.value < len(flat_names)
    ):
        name = flat_names[owner.slice.value]
    else:
        return None
    dim = node.slice.value
    return (name, dim) if isinstance(name, str) and isinstance(dim, int) else None


def _evaluate(node: ast.expr, sizes: Mapping[tuple[str, int], int], flat: Sequence[str]) -> Any:
    """The value of a condition's arithmetic with its sizes given: numbers, sizes, the
    operators and ``math.trunc``-like calls only (anything else: :class:`_NotArithmetic`)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return node.value
    if (ref := _size_ref(node, flat)) is not None:
        if ref not in sizes:
            raise _NotArithmetic(ref)
        return sizes[ref]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](
            _evaluate(node.left, sizes, flat), _evaluate(node.right, sizes, flat)
        )
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, sizes, flat))
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = _evaluate(node.left, sizes, flat)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, sizes, flat)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v, sizes, flat) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Call) and not node.keywords:
        function = _FUNCTIONS.get(ast.unparse(node.func))
        if function is not None:
            return function(*(_evaluate(a, sizes, flat) for a in node.args))
    raise _NotArithmetic(ast.unparse(node))


#: A condition equating a number computed from sizes to a constant
#: (``math.trunc(L['x'].size()[0] / 2) == 4``).
_CONSTANT_CONDITION = re.compile(r"^(?P<expr>.*\.size\(\)\[\d+\].*?) == (?P<value>-?\d+)$")
_BARE_SIZE = re.compile(r"^L\[[^\]]+\](\[[^\]]+\])*\.size\(\)\[\d+\]$")
_INPUT = re.compile(r"L\['(\w+)'\]")
_INPUT_SIZE = re.compile(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]")
#: Newer torch names inputs by their flat position (``L['flat_args'][0].size()[1]``).
_FLAT_ARG = re.compile(r"L\['flat_args'\]\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class ProgramCondition:
    """A condition the program's module checks when called, as torch writes it in Python
    (``math.trunc(L['x'].size()[0] / 2) == 4``), inputs by name."""

    code: str
    #: the sizes it reads, first first
    sizes: tuple[SizeRef, ...]
    #: for ``<expression of sizes> == <number>``: the expression and the number
    expression: str | None = None
    value: str | None = None
    tree: ast.Expression | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def fixes_a_computed_size(self) -> bool:
        """An expression of sizes, not a bare size nor a remainder, equated to a number: a
        size standing for a constant (``int(n / 2) == 4``)."""
        return (
            self.expression is not None
            and _BARE_SIZE.match(self.expression) is None
            and "%" not in self.expression
        )

    @property
    def truncates(self) -> bool:
        return any(word in self.code for word in ("trunc", "int(", "floor"))

    def written_with(self, label: Callable[[str], str]) -> str:
        """The condition with each input written as ``label`` names it (``x``)."""
        return _INPUT.sub(lambda m: label(m[1]), self.code)

    def holds_at(self, sizes: Mapping[tuple[str, int], int]) -> bool | None:
        """Whether the condition holds at these sizes (by (input, dim)); None when it is
        not arithmetic on sizes alone or reads a size not given."""
        if self.tree is None:
            return None
        try:
            return _evaluate(self.tree.body, sizes, ()) is True
        except (_NotArithmetic, ArithmeticError, TypeError, ValueError):
            return None


def read_program_conditions(
    codes: Iterable[str], user_inputs: Sequence[str]
) -> tuple[ProgramCondition, ...]:
    """Conditions as torch writes them (``ExportedProgram``'s guards code), inputs by name."""
    read = []
    for raw in codes:
        code = _FLAT_ARG.sub(
            lambda m: f"L['{user_inputs[int(m[1])]}']" if int(m[1]) < len(user_inputs) else m[0],
            str(raw),
        )
        try:
            tree: ast.Expression | None = ast.parse(code, mode="eval")
        except SyntaxError:
            tree = None
        constant = _CONSTANT_CONDITION.match(code)
        read.append(
            ProgramCondition(
                code=code,
                sizes=tuple(SizeRef(m[1], int(m[2]), m[0]) for m in _INPUT_SIZE.finditer(code)),
                expression=constant["expr"] if constant else None,
                value=constant["value"] if constant else None,
                tree=tree,
            )
        )
    return tuple(read)


def program_conditions(program: Any) -> tuple[ProgramCondition, ...]:
    """The conditions ``program`` (an ``ExportedProgram``) checks when called, read.

    torch keeps them as Python text in ``_guards_code`` (what ``program.module()`` checks);
    no public API gives them, so this is the one place that reads the attribute, and an
    empty tuple is the answer when a release drops it."""
    codes = getattr(program, "_guards_code", None) or ()
    return read_program_conditions(codes, tuple(program.graph_signature.user_inputs))
