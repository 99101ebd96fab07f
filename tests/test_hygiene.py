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


def private_imports(paths) -> list[str]:
    """``file:line imports torch._x`` for each import of a private torch module in ``paths``."""
    offenders = []
    for path in paths:
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
    return offenders


#: The line naming the torch loggers capture quiets: configured through ``logging`` (public),
#: never imported. (One name per line in the tuple, each a string and nothing else.)
LOGGER_NAMES = ("QUIET = (",)
_LOGGER_NAME_LINE = re.compile(r'"torch\.[\w.]+",(\s*#.*)?')
_PRIVATE_ATTRIBUTE = re.compile(r"\btorch\.(?:onnx\._internal|_[A-Za-z])")


def private_attributes(paths) -> list[str]:
    """``file:line: text`` for each line of ``paths`` that reaches a private torch name."""
    return [
        f"{path.name}:{i}: {line.strip()}"
        for path in paths
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if _PRIVATE_ATTRIBUTE.search(line)
        and not any(name in line for name in LOGGER_NAMES)
        and not _LOGGER_NAME_LINE.fullmatch(line.strip())
    ]


def test_src_never_imports_private_torch_modules():
    offenders = private_imports(_python_files())
    assert not offenders, offenders


def test_src_never_touches_torch_private_attributes():
    offenders = private_attributes(_python_files())
    assert not offenders, offenders


def test_the_private_checks_can_fail(tmp_path):
    """Both checks above, on a made-up module of src/ that breaks each rule once."""
    offender = tmp_path / "offender.py"
    offender.write_text(
        "import torch\n"
        "import torch.onnx._internal.exporter\n"
        "from torch._subclasses import FakeTensorMode\n"
        "QUIET = (\n"
        '    "torch._dynamo",\n'
        ")\n"
        "key = torch._C.DispatchKey\n"
    )
    assert private_imports([offender]) == [
        "offender.py:2 imports torch.onnx._internal.exporter",
        "offender.py:3 imports torch._subclasses",
    ]
    # the logger names (strings, not imports) are allowed; the attribute is not
    assert private_attributes([offender]) == [
        "offender.py:2: import torch.onnx._internal.exporter",
        "offender.py:3: from torch._subclasses import FakeTensorMode",
        "offender.py:7: key = torch._C.DispatchKey",
    ]
