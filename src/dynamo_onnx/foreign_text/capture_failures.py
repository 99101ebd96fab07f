"""torch.export's (and eager PyTorch's) exceptions, read: the kind of failure, the spec
torch refused and its suggested fix, TorchDynamo's graph break after "Got graph
break/error:", the output type no pytree registration covers.

Recorded text: ``tests/foreign_text/torch-<version>/capture_errors.json``, tested by
``tests/foreign_text/test_capture_failures.py``.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from dynamo_onnx.foreign_text.unparsed import Unparsed


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
