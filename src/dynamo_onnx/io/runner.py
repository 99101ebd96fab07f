"""Running an ONNX Runtime session with torch tensors: what verification and
``ONNXProgram.__call__`` both need, and all verification needs (not the program)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from dynamo_onnx.io.inputs import complex_outputs, onnx_input_tensors
from dynamo_onnx.io.ort_values import from_ort_value, to_ort_value

__all__ = ["OrtRunner", "Runner"]


class Runner(Protocol):
    """Runs the ONNX model on the model's inputs (as ``forward`` takes them)."""

    def __call__(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]: ...


class OrtRunner:
    """An ONNX Runtime session fed the model's inputs: the tensors among them, in the
    exported program's order; complex outputs come back complex, as eager returns them."""

    def __init__(
        self,
        session: Any,
        exported_program: torch.export.ExportedProgram | None,
        adapt: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]] | None = None,
    ):
        self.session = session
        #: the caller's inputs -> the export's (caches as their tensors), if they differ
        self._adapt = adapt
        self._exported_program = exported_program
        self._names = [i.name for i in session.get_inputs()]
        #: Which outputs eager returns complex: read from the graph once.
        self._complex: Sequence[bool] = complex_outputs(exported_program)

    def __call__(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        if self._adapt is not None:
            args, kwargs = self._adapt(*args, **kwargs)
        inputs = onnx_input_tensors(self._exported_program, args, kwargs)
        feed = {
            name: to_ort_value(t if isinstance(t, torch.Tensor) else torch.tensor(t))
            for name, t in zip(self._names, inputs)
        }
        outputs = [from_ort_value(o) for o in self.session.run_with_ort_values(None, feed)]
        return [
            torch.view_as_complex(o.contiguous())
            if i < len(self._complex) and self._complex[i]
            else o
            for i, o in enumerate(outputs)
        ]
