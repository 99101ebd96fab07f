"""The recordings the readers' tests read (``torch-<version>/<reader>.json`` beside them) and
the recorder's models, whose marked lines are the lines torch names."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
#: The recordings these tests read: the torch the project supports.
FIXTURES = HERE / "torch-2.13"


def _recorder() -> Any:
    """record.py as a module: its models carry the markers of the lines torch names."""
    spec = importlib.util.spec_from_file_location("foreign_text_record", HERE / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _recorder()


def cases(reader: str) -> dict[str, Any]:
    """The recorded cases of one reader, by name."""
    return json.loads((FIXTURES / f"{reader}.json").read_text())["cases"]
