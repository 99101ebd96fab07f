"""How capture calls torch.export: a strategy is ``torch.export.export`` in strict or
non-strict mode, tried in the order of :data:`STRATEGIES`; a capture that defers size
guards to assertions in the graph says so in its label (:data:`DEFERRING`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["DEFERRING", "STRATEGIES", "TorchExportStrategy"]


@dataclasses.dataclass(frozen=True)
class TorchExportStrategy:
    """``torch.export.export`` in strict or non-strict mode."""

    strict: bool

    @property
    def label(self) -> str:
        return f"torch.export.export(strict={self.strict})"

    def capture(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        dynamic_shapes: Any,
        deferred: bool = False,
    ) -> torch.export.ExportedProgram:
        """``deferred``: a guard torch cannot turn into a range of a ``Dim`` becomes an
        assertion in the graph instead of failing the export (see ``CapturePass._attempts``)."""
        return torch.export.export(
            module,
            tuple(args),
            kwargs=dict(kwargs),
            dynamic_shapes=dynamic_shapes,
            strict=self.strict,
            prefer_deferred_runtime_asserts_over_guards=deferred,
        )


#: What a strategy's label says when it deferred size guards to assertions in the graph.
DEFERRING = " deferring size guards"

#: The strategies, in the order they are tried.
STRATEGIES: tuple[TorchExportStrategy, ...] = (
    TorchExportStrategy(strict=False),
    TorchExportStrategy(strict=True),
)
