"""Every file the project writes: one atomic writer with the user's permissions, and an ONNX
file that is the same bytes whichever checkout it was exported from."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import runpy
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator

import onnx
import pytest
import torch

from dynamo_onnx import files

REPO = pathlib.Path(__file__).resolve().parent.parent


def _mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The process's umask set to ``mask`` for the block, as a user's shell sets it, and put
    back after it (pytest's thread is the one creating files meanwhile)."""
    saved = os.umask(mask)
    try:
        yield
    finally:
        os.umask(saved)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_file_written_gets_the_umask_s_permissions(tmp_path, umask, monkeypatch):
    import torch

    import dynamo_onnx
    from dynamo_onnx.diagnostics import DiagnosticContext
    from dynamo_onnx.passes.save import SavePass, SaveRequest

    monkeypatch.chdir(tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU()).eval()
    with _umask(umask):
        program = dynamo_onnx.export(
            model,
            (torch.randn(2, 64),),
            "model.onnx",
            report=True,
            artifacts_dir=tmp_path / "reports",
        )
        program.save_diagnostics("again.sarif")
        program.diagnostics.save_markdown("again.md")
        # what a causal LM's save writes beside the model
        os.makedirs("llm")
        beside = {"genai_config.json": "{}"}
        request = SaveRequest(
            program.model, str(tmp_path / "llm" / "model.onnx"), external_data=True, beside=beside
        )
        SavePass()(DiagnosticContext(), request)
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    names = [p.relative_to(tmp_path).as_posix() for p in written]
    assert names == [
        "again.md",
        "again.sarif",
        "llm/genai_config.json",
        "llm/model.onnx",
        "llm/model.onnx.data",
        "model.onnx",
        "model.onnx.data",
        "reports/Sequential.md",
        "reports/Sequential.sarif",
    ]
    assert {p.name: oct(_mode(p)) for p in written} == {
        p.name: oct(0o666 & ~umask) for p in written
    }
    # nothing staged is left behind
    assert not [p for p in tmp_path.rglob(".*")]


def test_the_atomic_writer_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "report.md"
    files.atomic_write_text(target, "old\n")

    class Unencodable(str):
        def encode(self, *args, **kwargs):
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        files.atomic_write_text(target, Unencodable("new"))
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
    with pytest.raises(FileNotFoundError):
        files.atomic_write_bytes(tmp_path / "missing" / "x.bin", b"x")


MODEL_SCRIPT = """
import torch
import dynamo_onnx


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.fc(x)
        return y.view(-1) * 2  # DO201 note: a view, at this line


program = dynamo_onnx.export(
    Scale().eval(), (torch.randn(3, 8),), "model.onnx", dynamic_shapes={"x": {0: "batch"}},
    report=True, artifacts_dir="reports",
)
"""


def _checkout(root: pathlib.Path) -> pathlib.Path:
    (root / "models").mkdir(parents=True)
    (root / "models" / "scale.py").write_text(MODEL_SCRIPT)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _results(sarif: pathlib.Path) -> list:
    log = json.loads(sarif.read_text())
    return log["runs"][0]["results"]


def test_the_same_model_from_two_checkouts_is_the_same_file(tmp_path, monkeypatch):
    """Run from each checkout's root, one after the other in one process (as a notebook
    that changes directory does): nothing of the first checkout stays in the second's files."""
    first = _checkout(tmp_path / "alice" / "project")
    second = _checkout(tmp_path / "ci" / "build" / "checkout")
    for root in (first, second):
        monkeypatch.chdir(root)
        runpy.run_path("models/scale.py")
    a, b = (root / "model.onnx" for root in (first, second))
    assert a.read_bytes() == b.read_bytes()
    model = onnx.load(str(a))
    traces = [
        p.value
        for node in model.graph.node
        for p in node.metadata_props
        if p.key == "pkg.dynamo_onnx.stack_trace"
    ]
    assert traces and all('File "models/scale.py", line ' in t for t in traces)
    assert str(tmp_path) not in a.read_bytes().decode("latin-1")
    results = [_results(root / "reports" / "Scale.sarif") for root in (first, second)]
    assert results[0] == results[1]
    assert any(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "models/scale.py"
        for r in results[0]
    )


@pytest.mark.parametrize(
    "save",
    [
        lambda program, path: program.save_diagnostics(path),
        lambda program, path: program.diagnostics.save_sarif(path),
        lambda program, path: program.diagnostics.save_markdown(path),
    ],
    ids=["save_diagnostics", "save_sarif", "save_markdown"],
)
@pytest.mark.parametrize("where", ["missing-directory", "a-directory"])
def test_a_report_that_cannot_be_written_is_do414_naming_the_callers_path(tmp_path, save, where):
    import torch

    import dynamo_onnx

    program = dynamo_onnx.export(torch.nn.Linear(4, 2).eval(), (torch.randn(3, 4),))
    path = tmp_path / "nodir" / "x.report" if where == "missing-directory" else tmp_path
    with pytest.raises(dynamo_onnx.OnnxExporterError) as caught:
        save(program, path)
    error = caught.value
    assert isinstance(error, OSError)  # `except OSError` around a save keeps working
    assert error.rule_id == "DO414"
    text = str(error)
    assert text.startswith("[DO414 report-not-written] Cannot write the ")
    assert f"to {path}: " in text and "Fix: Choose a path" in text
    assert ".x.report." not in text  # never the temporary file beside it
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no directory made


def _mlp_checkout(root: pathlib.Path) -> pathlib.Path:
    """A checkout of the project: its source and the seed MLP example, under git."""
    shutil.copytree(REPO / "src" / "dynamo_onnx", root / "src" / "dynamo_onnx")
    (root / "examples").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "mlp.py", root / "examples" / "mlp.py")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _export_mlp(checkout: pathlib.Path, library_path: list[pathlib.Path]) -> bytes:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*library_path, checkout / "src"]))}
    subprocess.run(
        [sys.executable, "examples/mlp.py"],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return (checkout / "mlp.onnx").read_bytes()


def test_the_mlp_from_two_checkouts_and_two_environments_is_the_same_file(tmp_path):
    """One checkout uses the shared environment (outside it); the other imports torch from
    an environment inside the checkout (torch hard-linked there: real files, another path,
    no copy of its gigabyte). Library frames are written relative to their installed
    package (torch/nn/modules/linear.py), the user's relative to the checkout."""
    first = _mlp_checkout(tmp_path / "alice" / "project")
    second = _mlp_checkout(tmp_path / "ci" / "build" / "checkout")
    inside = second / ".venv" / "site-packages"
    inside.mkdir(parents=True)
    torch_dir = pathlib.Path(torch.__file__).parent
    subprocess.run(["cp", "-al", str(torch_dir), str(inside / "torch")], check=True)
    a = _export_mlp(first, [])
    b = _export_mlp(second, [inside])
    model = onnx.load_from_string(b)
    traces = [
        p.value
        for node in model.graph.node
        for p in node.metadata_props
        if p.key == "pkg.dynamo_onnx.stack_trace"
    ]
    assert traces and all('File "examples/mlp.py", line ' in t for t in traces)
    assert any('File "torch/nn/modules/linear.py", line ' in t for t in traces)
    text = b.decode("latin-1")
    assert str(tmp_path) not in text and "site-packages" not in text and ".venv" not in text
    assert str(torch_dir) not in a.decode("latin-1")
    assert a == b
