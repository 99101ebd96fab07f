"""Project rules that a test can enforce: no private torch imports in src/."""

from __future__ import annotations

import ast
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "dynamo_onnx"


def _python_files():
    files = sorted(SRC.rglob("*.py"))
    assert files
    return files


def test_src_never_imports_private_torch_modules():
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] == "torch" and any(p.startswith("_") for p in parts[1:]):
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert not offenders, offenders


#: The line naming the torch loggers capture quiets: configured through ``logging`` (public),
#: never imported. (One name per line in the tuple, each a string and nothing else.)
LOGGER_NAMES = ("QUIET = (",)
_LOGGER_NAME_LINE = re.compile(r'"torch\.[\w.]+",(\s*#.*)?')


def test_src_never_touches_torch_private_attributes():
    pattern = re.compile(r"\btorch\.(?:onnx\._internal|_[A-Za-z])")
    offenders = [
        f"{path.name}:{i}: {line.strip()}"
        for path in _python_files()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
        and not any(name in line for name in LOGGER_NAMES)
        and not _LOGGER_NAME_LINE.fullmatch(line.strip())
    ]
    assert not offenders, offenders


def test_the_private_check_can_fail(tmp_path):
    sample = "import torch.onnx._internal.exporter\nx = torch._C.DispatchKey\n"
    assert re.search(r"\btorch\.(?:onnx\._internal|_[A-Za-z])", sample)
