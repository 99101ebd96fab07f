"""torch's and ONNX Runtime's text, read once into typed records: the one module that parses
what other libraries say in words.

Some facts reach the exporter only as text: the guards torch's symbolic-shape log records
while capturing (with torch's own frame), the conditions an ``ExportedProgram`` checks when
called, why torch.export refused a model, why ONNX Runtime refused a model or an input, and
which ONNX node it names. Each is read here into a frozen record; the passes work on the
records, and no pass applies a regular expression to foreign text (tests/test_architecture.py
fails when a module under ``passes/`` imports ``re``).

The wordings are a contract with a library that does not know it has one. Each reader is fed
text recorded from the real torch and ONNX Runtime (``tests/fixtures/foreign_text/``, and its
``record.py`` re-records them for a new version), and a message that looks like one we read
but no longer parses is kept as :class:`Unparsed`, so a finding can say it could not read
torch's message and quote it instead of going quiet.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from dynamo_onnx.diagnostics import Location

__all__ = [
    "CaptureFailureText",
    "CreatedSymbol",
    "FailureKind",
    "GraphBreak",
    "Guard",
    "InputMismatch",
    "OrtError",
    "ProgramCondition",
    "Remainder",
    "ShapeLog",
    "SizeRef",
    "TorchFrame",
    "UnsupportedType",
    "Unparsed",
    "converter_message",
    "fx_node_target",
    "is_about_a_guard",
    "kernel_registered_in_python",
    "mentions",
    "program_conditions",
    "read_capture_failure",
    "read_ort_error",
    "read_program_conditions",
    "read_shape_log",
    "symbol_renamer",
    "rewrite_traceback_paths",
    "symbol_mentions",
    "symbols_in",
]


# -- symbols ----------------------------------------------------------------------------------

#: torch's size symbols: ``s77`` for an input's size, ``u0`` for a value known only at run time.
_SYMBOL = re.compile(r"\b[su]\d+\b")


def symbols_in(text: str) -> frozenset[str]:
    """The symbols (``s77``, ``u0``) in torch's text of an expression (``32*s77``)."""
    return frozenset(_SYMBOL.findall(text))


def mentions(text: str, name: str) -> bool:
    """Whether torch's expression ``text`` contains ``name`` (a symbol, or the text of a
    range constraint's key, ``32*s52``) as a whole, not inside a longer name."""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def symbol_mentions(text: str) -> tuple[str, ...]:
    """Every mention of a symbol in ``text``, in order, repeats included."""
    return tuple(_SYMBOL.findall(text))


def symbol_renamer(names: Mapping[str, str]) -> Callable[[str], str]:
    """A function of torch's expression of a size (``2*s77``) replacing each whole symbol in
    ``names`` with its name (``2*batch``); a symbol inside another (``s7`` in ``s77``) is
    left alone. (Made once, applied to every dimension of a model.)"""
    if not names:
        return lambda text: text
    pattern = re.compile(
        r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b"
    )
    return lambda text: pattern.sub(lambda m: names[m[1]], text)


# -- torch's symbolic-shape log -------------------------------------------------------------


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


@dataclasses.dataclass(frozen=True)
class Unparsed:
    """A message that looks like one we read (``kind``) but did not parse: a wording this
    module does not know. Kept, so a finding can quote it rather than go quiet."""

    kind: str
    text: str


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


# -- the conditions of an ExportedProgram -----------------------------------------------------


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


# -- torch.export's failures ------------------------------------------------------------------


class FailureKind(enum.Enum):
    """Why torch.export failed, as its message says."""

    DATA_DEPENDENT = "data-dependent"
    DATA_POINTER = "data-pointer"
    QUANTIZED = "quantized"


_KINDS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (
        FailureKind.DATA_DEPENDENT,
        re.compile(r"guard ?on ?data-?dependent|data-dependent", re.IGNORECASE),
    ),
    (FailureKind.DATA_POINTER, re.compile(r"data pointer|data_ptr", re.IGNORECASE)),
    (FailureKind.QUANTIZED, re.compile(r"quantized", re.IGNORECASE)),
)
#: Errors eager PyTorch raises on inputs that do not fit.
_INPUTS_DO_NOT_FIT = re.compile(
    r"shapes cannot be multiplied|same reduction dim|must match the size of tensor|"
    r"expected input\[|to have \d+ channels|Given groups=|size mismatch|"
    r"Dimension out of range|out of bounds for dimension|is invalid for input of size|"
    r"expected scalar type|must have the same dtype|Expected \d+D|index out of range",
    re.IGNORECASE,
)
_DATA_DEPENDENT_EXPRESSION = re.compile(r"data-dependent expression (?P<expr>.+?) \(unhinted")
#: TorchDynamo's graph break: the headline after this marker, then indented fields
#: (``Explanation:``, ``Hint:``...) until its debug context or the user's frames.
_GRAPH_BREAK_MARKER = "Got graph break/error:"
_GRAPH_BREAK_END = re.compile(
    r"^\s*(Developer debug context:|For more details about this graph break|from user code:|"
    r"Set TORCHDYNAMO_VERBOSE)"
)
#: An object's repr with its address (``<bound method ... at 0x7f...>``): differs per run.
_ADDRESSED_REPR = re.compile(r"\s*Found in <.*\bat 0x[0-9a-f]+>+\.?")
#: A type torch.export found in the outputs with no pytree registration: non-strict names
#: the class (``<class 'pkg.Pair'>``), strict mode its name (``UserDefinedObjectVariable(Pair)``).
_UNREGISTERED_OUTPUT = re.compile(
    r"Found <class '(?P<qualified>[\w.<>]+)'> in output, which is not a known type|"
    r"Encountered unrecognized type UserDefinedObjectVariable\((?P<name>\w+)\) at output"
)


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """What TorchDynamo said after "Got graph break/error:": the headline (``Encountered
    aliasing during higher order op tracing``), its explanation and its hints, in order."""

    headline: str
    explanation: str = ""
    hints: tuple[str, ...] = ()
    #: the other fields (``Higher Order Operator: torch.cond``), as written
    details: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = [self.headline + (f" ({'; '.join(self.details)})" if self.details else "")]
        if self.explanation:
            parts.append(self.explanation)
        parts.extend(f"Hint: {hint}" for hint in self.hints)
        return ". ".join(p.rstrip(".") for p in parts) + "."


def _read_graph_break(text: str) -> GraphBreak | Unparsed | None:
    if _GRAPH_BREAK_MARKER not in text:
        return None
    lines: list[str] = []
    for line in text.split(_GRAPH_BREAK_MARKER, 1)[1].splitlines():
        if _GRAPH_BREAK_END.match(line):
            break
        if line.strip():
            lines.append(line)
    if not lines:
        return Unparsed("graph break", text)
    headline, explanation, hints, details = lines[0].strip(), "", [], []
    for line in lines[1:]:
        field, _, value = line.strip().partition(": ")
        if field == "Explanation":
            explanation = _ADDRESSED_REPR.sub("", value).strip()
        elif field == "Hint":
            hints.append(value.strip())
        elif value:
            details.append(f"{field}: {value.strip()}")
        else:
            explanation = f"{explanation} {line.strip()}".strip()
    return GraphBreak(headline, explanation, tuple(hints), tuple(details))


@dataclasses.dataclass(frozen=True)
class CaptureFailureText:
    """torch.export's (or eager PyTorch's) exception, read."""

    exception_type: str
    text: str
    #: the first cause recognized, in the order data-dependent, data pointer, quantized
    kind: FailureKind | None
    #: an eager error on inputs that do not fit the model (shapes, channels, dtypes)
    inputs_do_not_fit: bool
    #: "Constraints violated": the spec refused for a guard on a size
    constraints_violated: bool
    #: the lines under "Constraints violated", without their "- "
    violations: tuple[str, ...]
    #: the lines under "Suggested fixes:" (``n = Dim('n', min=5)``)
    suggested_fixes: tuple[str, ...]
    #: the condition of "Could not guard on data-dependent expression Eq(u0, 1)"
    data_dependent_expression: str | None
    #: TorchDynamo's cause after "Got graph break/error:" (the first line of the message
    #: says only that there was one); Unparsed when it is there in words not read here
    graph_break: GraphBreak | Unparsed | None = None
    #: the name of an output's type no pytree registration covers (``pkg.Pair`` when torch
    #: names its module, ``Pair`` in strict mode)
    unregistered_output: str | None = None

    @property
    def root_cause(self) -> str:
        """The sentence to report: the first line, and what follows "Got graph
        break/error:" (read, or quoted when it did not parse), or the "- " lines of the
        list the first line announces (a spec's conflicts, the constraints violated)."""
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        if isinstance(self.graph_break, GraphBreak):
            return f"{first} {self.graph_break}"
        if isinstance(self.graph_break, Unparsed):
            rest = self.text.split(_GRAPH_BREAK_MARKER, 1)[1]
            return f"{first} {' '.join(rest.split())}"
        if self.violations and (first.endswith(":") or self.constraints_violated):
            return f"{first} {' '.join(f'- {v}' for v in self.violations)}"  # what it announced
        return first


def read_capture_failure(exception_type: str, text: str) -> CaptureFailureText:
    """The facts torch's words give about a failed capture (type name and ``str(exc)``)."""
    subject = f"{exception_type} {text}"
    kind = next((k for k, pattern in _KINDS if pattern.search(subject)), None)
    fixes: tuple[str, ...] = ()
    if "Suggested fixes:" in text:
        lines = text.split("Suggested fixes:", 1)[1].splitlines()
        fixes = tuple(line.strip() for line in lines if line.startswith("  ") and "=" in line)
    expression = _DATA_DEPENDENT_EXPRESSION.search(text)
    unregistered = _UNREGISTERED_OUTPUT.search(text)
    return CaptureFailureText(
        exception_type=exception_type,
        text=text,
        kind=kind,
        inputs_do_not_fit=_INPUTS_DO_NOT_FIT.search(subject) is not None,
        constraints_violated="Constraints violated" in text,
        violations=tuple(
            line.strip().lstrip("- ") for line in text.splitlines() if line.strip().startswith("- ")
        ),
        suggested_fixes=fixes,
        data_dependent_expression=expression["expr"] if expression else None,
        graph_break=_read_graph_break(text),
        unregistered_output=(unregistered["qualified"] or unregistered["name"])
        if unregistered
        else None,
    )


# -- ONNX Runtime and the ONNX checker ----------------------------------------------------------

#: How the checker ("node name: add_n0", "in 'add_n0 : value'") and ONNX Runtime loading a
#: model ("in node (add_n0)", "node with name 'add_n0'") name a node.
_NODE = re.compile(
    r"node name: ([\w./-]+)|node \(([\w./-]+)\)|node with name '([\w./-]+)'|"
    r"in '([\w./-]+) : ",
    re.IGNORECASE,
)
#: The node ONNX Runtime was running when it failed ("... running Reshape node. Name:'x'").
_RUNNING_NODE = re.compile(r"Name:'([^']*)'")
#: The checker's "op_type:X ... unsupported type tensor(T)" and ONNX Runtime's "Type
#: 'tensor(T)' of input parameter (v) of operator (X)".
_UNSUPPORTED_TYPE = re.compile(
    r"op_type:(?P<op>\w+).*unsupported type:? tensor\((?P<type>\w+)\)|"
    r"Type 'tensor\((?P<type2>\w+)\)' of (?:input|output) parameter \([^)]*\) of operator "
    r"\((?P<op2>\w+)\)"
)
_INVALID_DIMENSIONS = re.compile(
    r"Got invalid dimensions for input: (?P<input>\S+) for the following indices\s+"
    r"index: (?P<dim>\d+) Got: (?P<got>\d+) Expected: (?P<expected>\d+)"
)
_INPUT_TYPE = re.compile(
    r"Unexpected input data type\. Actual: \((?P<got>[^)]+\)?)\) , expected: "
    r"\((?P<expected>[^)]+\)?)\)"
)
_DIMENSION_OF_INPUT = re.compile(
    r"Dimension of input (?P<dim>\d+) must be (?P<expected>\d+) instead of (?P<got>\d+)"
)
_SOURCE_FILE = re.compile(r"^\s*\S+\.(?:h|cc|cpp):\d+\s+")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")


@dataclasses.dataclass(frozen=True)
class UnsupportedType:
    """An operator given a tensor type it does not take (``Relu`` on ``bool``)."""

    op_type: str
    type_name: str


@dataclasses.dataclass(frozen=True)
class InputMismatch:
    """An input ONNX Runtime refused at run time: its name (when ONNX Runtime gives it), the
    dimension (None for a type), what the model expects and what it got."""

    input: str | None
    dim: int | None
    expected: str
    got: str


@dataclasses.dataclass(frozen=True)
class OrtError:
    """ONNX Runtime's (or the ONNX checker's) error, read."""

    text: str
    #: the node a run failed in (``Name:'reshape_n1'``)
    failed_node: str | None
    #: the nodes a load or check failure names, in order
    nodes: tuple[str, ...]
    #: the reason in its own words, without its source file and C++ signature
    reason: str
    unsupported_type: UnsupportedType | None
    input_mismatch: InputMismatch | None


def _reason(text: str) -> str:
    """The sentence after "... was false." when there is one, else the first line."""
    body = text.split("Status Message:", 1)[-1]
    if " was false. " in body:
        body = body.split(" was false. ", 1)[1]
    body = _SOURCE_FILE.sub("", body)
    first = body.strip().splitlines()[0] if body.strip() else text
    first = _ORT_PREFIX.sub("", first)
    return first.split(" shape=")[0].rstrip(". ")


def _input_mismatch(text: str) -> InputMismatch | None:
    if found := _INVALID_DIMENSIONS.search(text):
        return InputMismatch(found["input"], int(found["dim"]), found["expected"], found["got"])
    if found := _INPUT_TYPE.search(text):
        return InputMismatch(None, None, found["expected"], found["got"])
    if found := _DIMENSION_OF_INPUT.search(text):
        return InputMismatch(None, int(found["dim"]), found["expected"], found["got"])
    return None


def read_ort_error(text: str) -> OrtError:
    """ONNX Runtime's error text (or the ONNX checker's), read."""
    unsupported = _UNSUPPORTED_TYPE.search(text)
    running = _RUNNING_NODE.search(text)
    return OrtError(
        text=text,
        failed_node=running[1] if running else None,
        nodes=tuple(next(filter(None, groups)) for groups in _NODE.findall(text)),
        reason=_reason(text),
        unsupported_type=UnsupportedType(
            unsupported.group("op") or unsupported.group("op2"),
            unsupported.group("type") or unsupported.group("type2"),
        )
        if unsupported
        else None,
        input_mismatch=_input_mismatch(text),
    )


# -- smaller texts ------------------------------------------------------------------------------

_CONVERTER_NUMBER = re.compile(r"\$(\d+)")


def converter_message(text: str) -> str:
    """ONNX's version converter's message as a sentence: its C++ formats numbers with a
    stray ``$`` ("No Adapter From Version $13 for Gemm")."""
    return _CONVERTER_NUMBER.sub(r"\1", text)


_PYTHON_KERNEL = re.compile(r"registered at .+\.py:\d+")


def kernel_registered_in_python(description: str) -> bool:
    """Whether the dispatcher's description of a kernel (``repr`` of
    ``torch.library.get_kernel``) says it was registered from a Python file."""
    return _PYTHON_KERNEL.search(description) is not None


_FX_TARGET = re.compile(r"target=(?:torch\.ops\.)?([^\]]+)\]")


def fx_node_target(description: str) -> str | None:
    """The operator of an FX node as torch prints the node (``... target=torch.ops.aten.relu.default]``)."""
    found = _FX_TARGET.search(description)
    return found[1] if found else None


#: A frame's file in a Python traceback text: `  File "/path/x.py", line 12, in forward`.
_TRACEBACK_FILE = re.compile(r'^(\s*File ")([^"]+)(", line \d+)', re.MULTILINE)


def rewrite_traceback_paths(trace: str, rewrite: Callable[[str], str | None]) -> str:
    """``trace`` (a Python traceback's text, as torch keeps it in ``node.meta``) with each
    frame's path replaced by ``rewrite(path)``, or kept when that is None."""

    def replaced(match: re.Match[str]) -> str:
        new = rewrite(match[2])
        return match[0] if new is None else f"{match[1]}{new}{match[3]}"

    return _TRACEBACK_FILE.sub(replaced, trace)
