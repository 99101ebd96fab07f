"""ONNX Runtime's (and the ONNX checker's) errors, read: the node a run failed in, the nodes
a load names, the reason without its C++ source, an unsupported type, an input refused.

Recorded text: ``tests/foreign_text/torch-<version>/ort_errors.json``, tested by
``tests/foreign_text/test_ort_errors.py``.
"""

from __future__ import annotations

import dataclasses
import re

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
