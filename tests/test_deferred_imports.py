"""onnxscript's optimizer and rewriter, and ONNX's reference evaluator, loaded when first used
(deferred_imports.py): an export that does not optimize never loads them, every way a user
reaches them afterwards gets the real module, and nothing changes when onnxscript was
imported first. The checks on onnxscript run in fresh processes (this one imported it long
ago); the stand-in's own behaviour is checked here on a package made for the test."""

from __future__ import annotations

import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from dynamo_onnx.deferred_imports import DeferredModule, _stand_in, is_deferred
from fresh_process import last_json_line

#: An export that does not optimize, then every spelling of reaching the deferred parts.
_AFTER_AN_EXPORT = r"""
import importlib.util, json, sys
import torch
import dynamo_onnx
from dynamo_onnx.deferred_imports import is_deferred

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2

x = torch.randn(2, 3)
program = dynamo_onnx.export(Model(), (x,), optimize=False)
found = {"after_export": [is_deferred("onnxscript.optimizer"), is_deferred("onnxscript.rewriter"),
                          is_deferred("onnx.reference")],
         "folding_loaded": "onnxscript.optimizer._constant_folding" in sys.modules,
         "matcher_loaded": "onnxscript.rewriter._matcher" in sys.modules}
spec = importlib.util.find_spec("onnxscript.optimizer")  # read without loading it
found["spec"] = [spec.name, is_deferred("onnxscript.optimizer")]
import onnxscript
held = onnxscript.optimizer  # a reference taken while it is the stand-in
spelling = sys.argv[1]
if spelling == "from-import":
    from onnxscript.optimizer import optimize
    found["got"] = optimize.__module__
elif spelling == "submodule":
    import onnxscript.rewriter.ort_fusions as fusions
    found["got"] = fusions.__name__
elif spelling == "attribute":
    found["got"] = onnxscript.rewriter.pattern.RewriteRule.__name__
elif spelling == "dir":
    found["got"] = "optimize" in dir(onnxscript.optimizer)
elif spelling == "optimize":
    program.optimize()
    found["got"] = len(program.model.graph)
elif spelling == "reference-evaluator":
    import numpy as np
    from onnx.reference import ReferenceEvaluator
    (y,) = ReferenceEvaluator(program.model_proto).run(None, {"x": x.numpy()})
    found["got"] = bool(np.allclose(y, Model()(x).numpy()))
elif spelling == "onnxscript-eager":
    import numpy as np
    from onnxscript import opset18 as op
    found["got"] = op.Relu(np.array([-1.0, 2.0], dtype=np.float32)).value.tolist()
elif spelling == "torch.onnx":
    onnx_program = torch.onnx.export(Model(), (x,), dynamo=True, optimize=True)
    found["got"] = len(onnx_program.model.graph)
found["loaded"] = [not is_deferred("onnxscript.optimizer"),
                   type(sys.modules["onnxscript.optimizer"]).__name__,
                   onnxscript.optimizer is sys.modules["onnxscript.optimizer"]]
if not is_deferred("onnxscript.optimizer"):
    found["held_reads_the_same"] = held.optimize is onnxscript.optimizer.optimize
print(json.dumps(found))
"""


@pytest.mark.parametrize(
    ("spelling", "got"),
    [
        ("from-import", "onnxscript.optimizer"),
        ("submodule", "onnxscript.rewriter.ort_fusions"),
        ("attribute", None),
        ("dir", True),
        ("optimize", None),
        ("torch.onnx", None),
        ("reference-evaluator", True),
        ("onnxscript-eager", [0.0, 2.0]),
    ],
)
def test_an_export_loads_neither_and_each_spelling_gets_the_real_subpackage(spelling, got):
    result = last_json_line(_AFTER_AN_EXPORT, spelling)
    assert result["after_export"] == [True, True, True]
    assert not result["folding_loaded"] and not result["matcher_loaded"]
    assert result["spec"] == ["onnxscript.optimizer", True]
    if got is not None:
        assert result["got"] == got
    if spelling == "attribute":
        assert result["got"] == "RewriteRule"
    if spelling in ("attribute", "reference-evaluator", "onnxscript-eager"):
        return  # the optimizer was not read
    assert result["loaded"] == [True, "module", True]
    assert result["held_reads_the_same"] is True
    if spelling in ("optimize", "torch.onnx"):
        assert result["got"] >= 1


def test_nothing_is_deferred_when_onnxscript_came_first():
    script = (
        "import json, sys, onnxscript, dynamo_onnx\n"
        "print(json.dumps([type(sys.modules[n]).__name__ for n in "
        "('onnxscript.optimizer', 'onnxscript.rewriter')]))\n"
    )
    assert last_json_line(script) == ["module", "module"]


def test_importing_a_deferred_part_first_imports_its_package_too():
    """``import onnxscript.optimizer`` before anything of onnxscript: the stand-in is in
    ``sys.modules``, and the package is imported and binds it."""
    script = (
        "import json, sys, dynamo_onnx\n"
        "import onnxscript.optimizer\n"
        "print(json.dumps([onnxscript.optimizer.optimize.__name__,\n"
        "                  type(sys.modules['onnxscript.optimizer']).__name__]))\n"
    )
    assert last_json_line(script) == ["optimize", "module"]


# -- the stand-in, on a package of the test's own ------------------------------------------


def _package(root: Path, name: str, heavy_source: str) -> None:
    """``name`` whose ``__init__`` imports its subpackage ``heavy`` as onnxscript's does."""
    (root / name / "heavy").mkdir(parents=True)
    (root / name / "__init__.py").write_text("from . import heavy\nLIGHT = 1\n")
    (root / name / "heavy" / "__init__.py").write_text(textwrap.dedent(heavy_source))


@pytest.fixture
def made_package(tmp_path, monkeypatch):
    """A package ``deferme_<n>`` under ``tmp_path``, with a stand-in for its ``heavy``;
    its modules are forgotten afterwards."""
    import importlib.util

    made: list[str] = []

    def make(heavy_source: str) -> tuple[str, DeferredModule]:
        name = f"deferme_{uuid.uuid4().hex}"
        _package(tmp_path, name, heavy_source)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        stand_in = _stand_in(f"{name}.heavy", importlib.util.find_spec(name))
        assert stand_in is not None
        sys.modules[stand_in.__name__] = stand_in
        made.append(name)
        return name, stand_in

    yield make
    for name in made:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def test_the_stand_in_loads_on_the_first_read_and_keeps_its_file_and_spec(made_package):
    name, stand_in = made_package("VALUE = 42\nfrom . import inner\n")
    (Path(stand_in.__file__).parent / "inner.py").write_text("X = 'inner'\n")
    package = __import__(name)
    assert package.heavy is stand_in and is_deferred(f"{name}.heavy")
    assert stand_in.__file__.endswith("heavy/__init__.py")  # read without loading it
    assert stand_in.__spec__.name == f"{name}.heavy" and is_deferred(f"{name}.heavy")
    assert stand_in.VALUE == 42  # the first read loads it
    real = sys.modules[f"{name}.heavy"]
    assert real is not stand_in and type(real).__name__ == "module"
    assert package.heavy is real and stand_in.inner is real.inner
    assert not is_deferred(f"{name}.heavy")


def test_a_subpackage_that_fails_to_import_raises_and_stays_deferred(made_package):
    name, stand_in = made_package("raise ImportError('the heavy part is broken')\n")
    package = __import__(name)
    for _ in range(2):  # the error each time, not a half-imported module
        with pytest.raises(ImportError, match="heavy part is broken"):
            stand_in.anything  # noqa: B018
        assert sys.modules[f"{name}.heavy"] is stand_in and package.heavy is stand_in


def test_two_threads_reading_a_stand_in_at_once_import_it_once(made_package, tmp_path):
    runs = tmp_path / "runs.txt"
    name, stand_in = made_package(
        f"import time\nwith open({str(runs)!r}, 'a') as f:\n    f.write('ran\\n')\n"
        "time.sleep(0.3)\nVALUE = 7\n"
    )
    __import__(name)
    values: list[int] = []
    threads = [threading.Thread(target=lambda: values.append(stand_in.VALUE)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert values == [7, 7]
    assert runs.read_text() == "ran\n"  # executed once
