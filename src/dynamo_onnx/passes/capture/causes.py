"""The capture failures users meet most, each reported with its own rule, at the user's
line, with a fix that works.

Drawn from torch.export's exportdb and the torch.onnx issue tracker: a branch on a tensor's
value; a tensor's memory handed to code torch cannot trace ("Cannot access data pointer of
Tensor": a custom C++/CUDA kernel, ctypes, ``data_ptr()``); example inputs the model itself
rejects (decided by running the model, ``eager``; the text below only when it cannot run);
and quantized tensors, which ONNX has no type for. (``.numpy()`` and ``.tolist()`` in
``forward`` are traced by torch 2.13 and need no rule.) Anything else stays the general DO100
with every strategy's root cause.

A data-dependent branch is decided from torch's exception itself
(``GuardOnDataDependentSymNode`` carries the sympy condition it could not decide) and told in
words: the user's expression, read from their line, and torch's condition written as Python
(``u0 == 1``). Only strict mode's failure ("Data-dependent branching") is known by its text;
the texts are read by ``dynamo_onnx.foreign_text`` (:func:`read_capture_failure`), whose
tests feed it messages recorded from torch; here each kind read maps to its rule.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import traceback
from typing import Any

import sympy
import torch
from torch.export import pytree
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.diagnostics.context import RECORDED_ATTR
from dynamo_onnx.foreign_text import CaptureFailureText, FailureKind, read_capture_failure

__all__ = [
    "EAGER_FAILURE",
    "KNOWN_CAUSES",
    "DataDependence",
    "KnownCause",
    "LibraryBranch",
    "LibraryCheck",
    "LIBRARY_CHECKS",
    "capture_cause",
    "library_branch",
    "quantized_modules",
    "unregistered_output",
    "data_dependence",
    "known_cause",
    "readable_condition",
    "source_expression",
]


@dataclasses.dataclass(frozen=True)
class KnownCause:
    """A capture failure recognized by what its exception says, and its rule."""

    rule: str
    #: the kind torch's message says (None: eager PyTorch's error on inputs that do not fit)
    kind: FailureKind | None
    #: extra message fields for rules shared with other passes
    fields: tuple[tuple[str, str], ...] = ()


#: Errors eager PyTorch raises on inputs that do not fit; read only when the model cannot
#: be run to see (weights on the meta device).
EAGER_FAILURE = KnownCause("example-inputs-do-not-fit", None)

KNOWN_CAUSES: tuple[KnownCause, ...] = (
    KnownCause("data-dependent-control-flow", FailureKind.DATA_DEPENDENT),
    KnownCause("untraceable-kernel", FailureKind.DATA_POINTER),
    KnownCause(
        "dtype-not-in-onnx",
        FailureKind.QUANTIZED,
        (("what", "model's tensor"), ("dtype", "quantized")),
    ),
)


def capture_cause(exc: BaseException) -> str:
    """``Type: cause`` of the root of a failed capture, whole: TorchDynamo's message says on
    its first line only that there was a graph break, and the cause, torch's explanation
    and its hints follow ("Got graph break/error: ..."); they are kept (read by
    ``foreign_text``), the debug context and torch's own frames are not."""
    root = exc
    while root.__cause__ is not None and not getattr(root, RECORDED_ATTR, False):
        root = root.__cause__
    cause = read_capture_failure(type(root).__name__, str(root)).root_cause
    return f"{type(root).__name__}: {cause}" if cause else type(root).__name__


def known_cause(failure: CaptureFailureText) -> KnownCause | None:
    """The known cause of a capture failure, from what its exception says, if any."""
    return next((c for c in KNOWN_CAUSES if c.kind is not None and c.kind is failure.kind), None)


@dataclasses.dataclass(frozen=True)
class DataDependence:
    """What a data-dependent failure needed: a branch (a condition) or a number (a size, an
    index), and torch's expression for it as Python, if torch gave one."""

    branch: bool
    condition: str | None


def data_dependence(exc: BaseException) -> DataDependence | None:
    """From torch's exception: a guard on a value known only at run time, if that was it."""
    if not isinstance(exc, GuardOnDataDependentSymNode):
        return None
    cond: Any = getattr(exc, "cond", None)
    if not isinstance(cond, sympy.Basic):
        return DataDependence(branch=True, condition=None)
    # A condition (u0 == 1) is a branch; a bare expression (u0) is a number torch needed
    # (a sympy Symbol is a Boolean too: the test is on relations and logic, not on type).
    logic = (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction)
    return DataDependence(
        branch=isinstance(cond, logic) or cond in (sympy.true, sympy.false),
        condition=readable_condition(cond),
    )


_RELATIONS = {
    sympy.Eq: "==",
    sympy.Ne: "!=",
    sympy.StrictLessThan: "<",
    sympy.LessThan: "<=",
    sympy.StrictGreaterThan: ">",
    sympy.GreaterThan: ">=",
}


def readable_condition(expr: Any) -> str:
    """A sympy condition of torch's symbolic shapes as Python (``Eq(u0, 1)`` -> ``u0 == 1``,
    ``And(u0 >= 0, u1 < 3)`` -> ``u0 >= 0 and u1 < 3``)."""
    for kind, operator in _RELATIONS.items():
        if isinstance(expr, kind):
            return f"{readable_condition(expr.lhs)} {operator} {readable_condition(expr.rhs)}"
    if isinstance(expr, (sympy.And, sympy.Or)):
        joint = " and " if isinstance(expr, sympy.And) else " or "
        return joint.join(f"({readable_condition(a)})" for a in expr.args)
    if isinstance(expr, sympy.Not):
        return f"not ({readable_condition(expr.args[0])})"
    return str(expr)


def source_expression(location: Location | None) -> str | None:
    """The expression the user's line computes: the condition of an ``if``/``while``, the
    tested expression of an ``assert``, what a ``for`` iterates over, the value of a
    ``return`` or an assignment, else the whole line. None when the line cannot be read."""
    if location is None:
        return None
    line = linecache.getline(location.path, location.line).strip()
    if not line:
        return None
    after = line[4:5]
    elif_ = line.startswith("elif") and not (after.isalnum() or after == "_")
    header = "if" + line[4:] if elif_ else line
    for candidate in (header, header + "\n    pass"):  # a statement, or a block's header
        try:
            statement = ast.parse(candidate).body[0]
        except (SyntaxError, IndexError):
            continue
        if isinstance(statement, (ast.If, ast.While, ast.Assert)):
            return ast.unparse(statement.test)
        if isinstance(statement, ast.For):
            return ast.unparse(statement.iter)
        value = getattr(statement, "value", None)
        if isinstance(value, ast.expr):
            return ast.unparse(value)
        break
    return line


# -- a library's own branch on a value ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LibraryCheck:
    """A function of a library that branches on a tensor's value unless an argument of its
    caller says the answer: where it is, and what to tell the user."""

    #: the end of its file's path, with ``/`` (``torch/nn/modules/transformer.py``)
    path_tail: str
    function: str
    library: str
    #: the remedy, with ``{argument}`` (the variable its caller assigns, an argument of the
    #: module's ``forward``) and ``{mask}`` (the first argument passed to it)
    remedy: str


#: The library checks known to stop torch.export, verified with torch 2.13
#: (``nn.MultiheadAttention``'s fast path is not taken while exporting: not listed).
LIBRARY_CHECKS: tuple[LibraryCheck, ...] = (
    LibraryCheck(
        "torch/nn/modules/transformer.py",
        "_detect_is_causal_mask",
        "torch.nn's Transformer modules",
        "pass `{argument}=True` with the causal `{mask}` (`{argument}=False` for another "
        "mask) so the module uses the mask as given and compares nothing",
    ),
)


@dataclasses.dataclass(frozen=True)
class LibraryBranch:
    """A failed capture that stopped inside a :class:`LibraryCheck`: the check, the line of
    it that branched, and its caller's argument and mask."""

    check: LibraryCheck
    line: str
    argument: str
    mask: str

    @property
    def remedy(self) -> str:
        return self.check.remedy.format(argument=self.argument, mask=self.mask)


def library_branch(exc: BaseException) -> LibraryBranch | None:
    """The library check a failed capture stopped in, from its traceback's frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    for index, frame in enumerate(frames):
        path = frame.filename.replace("\\", "/")
        for check in LIBRARY_CHECKS:
            if not (path.endswith("/" + check.path_tail) and frame.name == check.function):
                continue
            caller = frames[index - 1].line if index else None
            argument, mask = _assigned_call(caller or "")
            return LibraryBranch(check, (frame.line or "").strip(), argument, mask)
    return None


def _assigned_call(line: str) -> tuple[str, str]:
    """(the name assigned, the first argument) of ``x = f(a, ...)``; ``is_causal`` and
    ``mask`` when the line is not of that form."""
    try:
        statement = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return "is_causal", "mask"
    target = getattr(statement, "targets", [None])[0]
    value = getattr(statement, "value", None)
    argument = target.id if isinstance(target, ast.Name) else "is_causal"
    mask = ast.unparse(value.args[0]) if isinstance(value, ast.Call) and value.args else "mask"
    return argument, mask


# -- quantized modules, outputs torch cannot flatten -----------------------------------------

#: Where torch.ao's quantized modules live (their classes' modules start so).
_QUANTIZED_MODULES = ("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized")


def quantized_modules(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(path, class name) of each torch.ao quantized module in ``module``."""
    found: list[tuple[str, str]] = []
    for path, child in module.named_modules():
        kind = type(child)
        inside = any(path.startswith(f"{outer}.") for outer, _ in found)
        if kind.__module__.startswith(_QUANTIZED_MODULES) and not inside:
            package = kind.__module__.split(".modules", 1)[0]  # the public name
            found.append((path or "the model", f"{package}.{kind.__name__}"))
    return found


def unregistered_output(output: Any, type_name: str) -> Any:
    """The object among ``output``'s pytree leaves whose class torch named ``type_name``
    (``pkg.Pair`` or ``Pair``), or None."""
    short = type_name.rpartition(".")[2]
    leaves = pytree.tree_leaves(output)
    return next((leaf for leaf in leaves if type(leaf).__name__ == short), None)
