"""The report files of an export (``<artifacts_dir>/<subject>.sarif`` and ``.md``), written
with the project's one atomic writer (``dynamo_onnx.files``)."""

from __future__ import annotations

import os
import pathlib

from dynamo_onnx.files import atomic_write_text

__all__ = ["atomic_write_text", "report_paths"]


def report_paths(artifacts_dir: str | os.PathLike[str], subject: str) -> tuple[str, str]:
    """``<artifacts_dir>/<subject>.sarif`` and ``.md``."""
    base = pathlib.Path(artifacts_dir) / subject
    return f"{base}.sarif", f"{base}.md"
