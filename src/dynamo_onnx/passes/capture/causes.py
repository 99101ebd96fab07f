"""The capture failures users meet most, each recognized by its error text and reported
with its own rule, at the user's line, with a fix that works.

Drawn from torch.export's exportdb and the torch.onnx issue tracker: a branch on a tensor's
value; a tensor's memory handed to code torch cannot trace ("Cannot access data pointer of
Tensor": a custom C++/CUDA kernel, ctypes, ``data_ptr()``); example inputs the model itself
rejects (a shape or dtype mismatch that eager PyTorch raises too: the most common cause of a
"failed export"); and quantized tensors, which ONNX has no type for. (``.numpy()`` and
``.tolist()`` in ``forward`` are traced by torch 2.13 and need no rule.) Anything else stays
the general DO100 with every strategy's root cause.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["KNOWN_CAUSES", "KnownCause", "known_cause"]


@dataclasses.dataclass(frozen=True)
class KnownCause:
    """A capture failure recognized by its exception text."""

    rule: str
    pattern: re.Pattern[str]
    #: extra message fields for rules shared with other passes
    fields: tuple[tuple[str, str], ...] = ()


KNOWN_CAUSES: tuple[KnownCause, ...] = (
    KnownCause(
        "data-dependent-control-flow",
        re.compile(r"guard ?on ?data-?dependent|data-dependent", re.IGNORECASE),
    ),
    KnownCause(
        "untraceable-kernel",
        re.compile(r"data pointer|data_ptr", re.IGNORECASE),
    ),
    KnownCause(
        "example-inputs-do-not-fit",
        re.compile(
            r"shapes cannot be multiplied|same reduction dim|must match the size of tensor|"
            r"expected input\[|to have \d+ channels|Given groups=|size mismatch|"
            r"Dimension out of range|out of bounds for dimension|is invalid for input of size|"
            r"expected scalar type|must have the same dtype|Expected \d+D|index out of range",
            re.IGNORECASE,
        ),
    ),
    KnownCause(
        "dtype-not-in-onnx",
        re.compile(r"quantized", re.IGNORECASE),
        (("what", "model's tensor"), ("dtype", "quantized")),
    ),
)


def known_cause(exception_type: str, text: str) -> KnownCause | None:
    """The known cause of a capture failure with this exception type and message, if any."""
    subject = f"{exception_type} {text}"
    return next((c for c in KNOWN_CAUSES if c.pattern.search(subject)), None)
