"""DiagnosticOptions: what the renderings show, and whether warnings fail the export."""

from __future__ import annotations

import dataclasses
import logging

__all__ = ["DiagnosticOptions"]

_VALID_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)


@dataclasses.dataclass
class DiagnosticOptions:
    """Options for the diagnostic context, as in ``torch.onnx.DiagnosticOptions``.

    Attributes:
        verbosity_level: a :mod:`logging` level. It filters what the SARIF log and the
            markdown report show, never what is recorded: WARNING shows errors and warnings,
            INFO adds notes and the table of passes, DEBUG adds per-node dispatch detail.
        warnings_as_errors: render every warning as an error, and make the export raise
            after both reports are written.
    """

    verbosity_level: int = logging.INFO
    warnings_as_errors: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.verbosity_level, bool) or self.verbosity_level not in _VALID_LEVELS:
            raise ValueError(
                f"DiagnosticOptions.verbosity_level must be one of logging.DEBUG, INFO, "
                f"WARNING or ERROR ({', '.join(map(str, _VALID_LEVELS))}), "
                f"got {self.verbosity_level!r}"
            )
        if not isinstance(self.warnings_as_errors, bool):
            raise TypeError(
                "DiagnosticOptions.warnings_as_errors must be a bool, "
                f"got {type(self.warnings_as_errors).__name__}"
            )
