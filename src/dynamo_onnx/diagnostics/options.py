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
        # Imported here: the diagnostics package does not depend on the exporter otherwise.
        from dynamo_onnx.exporter.errors import (
            InvalidOptionTypeError,
            InvalidOptionValueError,
            option_error,
        )

        if isinstance(self.verbosity_level, bool) or self.verbosity_level not in _VALID_LEVELS:
            raise option_error(
                "DiagnosticOptions.verbosity_level",
                f"is {self.verbosity_level!r}",
                "it takes logging.DEBUG, INFO, WARNING or ERROR "
                f"({', '.join(map(str, _VALID_LEVELS))})",
                InvalidOptionValueError,
            )
        if not isinstance(self.warnings_as_errors, bool):
            raise option_error(
                "DiagnosticOptions.warnings_as_errors",
                f"is a {type(self.warnings_as_errors).__name__}",
                "it takes True or False",
                InvalidOptionTypeError,
            )
