"""What the verification pass is asked: its own module so that the pass and the divergence
search it calls both read it without importing each other."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch

from dynamo_onnx.defaults import VERIFY_ATOL, VERIFY_RTOL
from dynamo_onnx.io.runner import Runner
from dynamo_onnx.passes.verify.comparison import Comparison


@dataclasses.dataclass(frozen=True)
class VerifyRequest:
    """What to verify: the model, the program it came from, how to run it, on what inputs.

    ``run`` runs the ONNX model in ONNX Runtime (a session the session pass made); ``reference``
    computes the eager outputs (default: the exported program's module). The pass returns a
    copy with ``comparisons``; the request it was given is not changed.
    """

    model: ir.Model
    exported_program: torch.export.ExportedProgram | None
    run: Runner
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] | None = None
    reference: Callable[..., Any] | None = None
    atol: float = VERIFY_ATOL
    rtol: float = VERIFY_RTOL
    find_divergence: bool = False
    #: Also compare at a second size of every dynamic dimension.
    second_shape: bool = True
    comparisons: tuple[Comparison, ...] = ()
    #: The axis along which an output (by name) holds more than eager's, whose values are
    #: its last positions (``FamilyInputs.longer_output``: a whole cache against a window).
    longer_output: Callable[[str], int | None] | None = None
