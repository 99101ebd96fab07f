"""What an export produced, as typed data for the reports: the model, its inputs and outputs,
and the operators it used. Filled in by the passes, rendered by ``reports``."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ExportSummary", "ModelSummary", "OperatorUse", "ValueSummary"]


@dataclasses.dataclass(frozen=True)
class ValueSummary:
    """One graph input or output: its name, element type and shape (``[batch, 8]``)."""

    name: str
    dtype: str
    shape: str


@dataclasses.dataclass(frozen=True)
class ModelSummary:
    """The size of the exported ONNX model."""

    nodes: int
    initializers: int
    weights_bytes: int
    functions: int
    opsets: dict[str, int]


@dataclasses.dataclass(frozen=True)
class OperatorUse:
    """One PyTorch operator of the graph: how often, and which ONNX function took it
    (``None`` when none could)."""

    op: str
    count: int
    function: str | None


@dataclasses.dataclass
class ExportSummary:
    """Everything the reports show besides the findings."""

    model: ModelSummary | None = None
    inputs: list[ValueSummary] = dataclasses.field(default_factory=list)
    outputs: list[ValueSummary] = dataclasses.field(default_factory=list)
    operators: list[OperatorUse] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (the SARIF run's properties), leaving out what is not known."""
        data: dict[str, Any] = {}
        if self.model is not None:
            data["model"] = dataclasses.asdict(self.model)
        for key in ("inputs", "outputs", "operators"):
            items = getattr(self, key)
            if items:
                data[key] = [dataclasses.asdict(item) for item in items]
        return data
