"""ExportOptions and ONNXRuntimeOptions, as in the PyTorch 2.1-2.5 API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dynamo_onnx.exporter.errors import InvalidOptionTypeError, option_error
from dynamo_onnx.diagnostics import DiagnosticOptions

if TYPE_CHECKING:
    import onnxruntime

    from dynamo_onnx.exporter.registry import OnnxRegistry

__all__ = ["ExportOptions", "ONNXRuntimeOptions"]


@dataclasses.dataclass
class ExportOptions:
    """Options to influence the TorchDynamo ONNX exporter.

    Attributes:
        dynamic_shapes: ``True`` makes every input dimension dynamic, ``False`` every one
            static, ``None`` lets the exporter choose.
        fake_context: the fake context the model was built in (see ``enable_fake_mode``).
        onnx_registry: the registry of ONNX functions; default: onnxscript's torch_lib.
        diagnostic_options: verbosity and warnings-as-errors of the reports.
    """

    dynamic_shapes: bool | None = None
    fake_context: Any = None
    onnx_registry: OnnxRegistry | None = None
    diagnostic_options: DiagnosticOptions = dataclasses.field(default_factory=DiagnosticOptions)

    def __post_init__(self) -> None:
        if self.dynamic_shapes not in (None, True, False):
            raise option_error(
                "ExportOptions.dynamic_shapes",
                f"is {self.dynamic_shapes!r}",
                "it takes True, False or None; pass torch.export dynamic shape specs to "
                "dynamo_onnx.export(..., dynamic_shapes=...) instead",
                InvalidOptionTypeError,
            )
        if self.diagnostic_options is None:
            self.diagnostic_options = DiagnosticOptions()
        if not isinstance(self.diagnostic_options, DiagnosticOptions):
            raise option_error(
                "ExportOptions.diagnostic_options",
                f"is a {type(self.diagnostic_options).__name__}",
                "it takes a dynamo_onnx.DiagnosticOptions",
                InvalidOptionTypeError,
            )


@dataclasses.dataclass
class ONNXRuntimeOptions:
    """Options to influence the execution of the ONNX model through ONNX Runtime.

    Attributes:
        session_options: ONNX Runtime session options.
        execution_providers: execution providers, by name or ``(name, options)``.
        execution_provider_options: one options dict per provider.
    """

    session_options: Sequence[onnxruntime.SessionOptions] | onnxruntime.SessionOptions | None = None
    execution_providers: Sequence[str | tuple[str, Mapping[Any, Any]]] | None = None
    execution_provider_options: Sequence[Mapping[Any, Any]] | None = None
