"""The dynamo-onnx command: every exit code, reports, gate, progress.

Most tests call the command in this process (tests/cli_runner.py scopes what a fresh process
would: directory, environment, sys.path, the user's modules, output); those that need a real
process run ``python -m dynamo_onnx.cli``: the entry point with nothing on standard error at
the file-descriptor level, a terminal, a full device or closed pipe on standard output, and
which modules a fresh process loads."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pty
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cli_runner import run_cli
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.reports.sarif import to_sarif
from sarif_tools import multitool_errors

MODELS = textwrap.dedent(
    """
    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)


    class NanNet(Net):
        def __init__(self):
            super().__init__()
            with torch.no_grad():
                self.fc.weight[0, 0] = float("nan")


    @torch.library.custom_op("dxcli::mystery", mutates_args=())
    def mystery(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy().copy())  # outside torch: no trace reaches in


    @mystery.register_fake
    def _(x):
        return torch.empty_like(x)


    class Mysterious(torch.nn.Module):
        def forward(self, x):
            return mystery(x) + 1


    def build():
        return Net(), (torch.randn(3, 4),)


    def bare():
        return Net()


    def inputs():
        return (torch.randn(5, 4),)


    def nan_net():
        return NanNet(), (torch.randn(3, 4),)


    def mysterious():
        return Mysterious(), (torch.randn(3, 4),)


    def broken():
        raise RuntimeError("the factory itself fails")  # marker: raises


    def _load_weights():
        raise FileNotFoundError("weights.bin")  # marker: deep raise


    def loads_missing_weights():
        model = Net()
        _load_weights()
        return model, (torch.randn(3, 4),)


    class Slow(torch.nn.Module):  # signals that capture started, then waits for Ctrl-C

        def forward(self, x):
            if torch.compiler.is_exporting():
                import pathlib
                import time

                pathlib.Path("capturing").touch()
                time.sleep(60)
            return x + 1


    def slow():
        return Slow(), (torch.randn(3, 4),)


    def sequential():
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
        with torch.no_grad():
            model[0].weight[0, 0] = float("nan")
        return model, (torch.randn(2, 4),)


    class ThreeWarnings(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.drop = torch.nn.Dropout(0.5)
            with torch.no_grad():
                self.fc.weight[0, 0] = float("nan")

        def forward(self, x):
            x.add_(1)  # marker: mutates
            return self.drop(self.fc(x))  # marker: dropout


    def three_warnings():
        return ThreeWarnings(), (torch.randn(3, 4),)


    class Fixed(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 3:  # marker: fixes the batch
                return x * 2
            return x


    def fixed():
        return Fixed(), (torch.randn(3, 4),)
    """
)

#: A registry for models.py's dxcli::mystery, in the three forms --registry takes.
OPS = textwrap.dedent(
    """
    import onnxscript
    import torch
    from onnxscript import opset18 as op

    import dynamo_onnx
    import models  # defines dxcli::mystery


    @onnxscript.script()
    def mystery_onnx(x):
        return op.Identity(x)


    def registry():
        made = dynamo_onnx.OnnxRegistry()
        made.register_op(mystery_onnx, "dxcli", "mystery")
        return made


    REGISTRY = registry()
    TABLE = {torch.ops.dxcli.mystery.default: mystery_onnx}
    """
)


def line_in_models(marker: str) -> int:
    return next(i for i, text in enumerate(MODELS.splitlines(), 1) if f"marker: {marker}" in text)


@pytest.fixture()
def workdir(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "ops.py").write_text(OPS)
    return tmp_path


def test_a_factory_failing_inside_dynamo_onnx_shows_only_the_users_frames(workdir):
    """The user's factory calls into dynamo_onnx, which raises: DO140 names the factory's
    line, and the traceback printed keeps the user's frames only, none of the package (of
    any of its modules, not only the command's own)."""
    (workdir / "options_factory.py").write_text(
        "from dynamo_onnx.rules import catalog\n"
        "\n"
        "\n"
        "def build():\n"
        "    return catalog().get('no-such-rule')  # marker: raises in dynamo_onnx\n"
    )
    proc = run(workdir, "export", "options_factory.py:build")
    assert proc.returncode == 2
    assert "[DO140 user-code-raised]" in proc.stderr
    assert "raised KeyError" in proc.stderr
    assert "options_factory.py:5" in proc.stderr and "in build" in proc.stderr
    assert "dynamo_onnx/" not in proc.stderr


_GENERATED_CODE_FACTORIES = """\
import dataclasses

import torch

import dynamo_onnx


@dataclasses.dataclass(frozen=True)
class Settings:
    size: int = 2


def with_options():
    return dynamo_onnx.ExportOptions(dynamic_shapes="yes")  # marker: options


def frozen():
    settings = Settings()
    settings.size = 3  # marker: frozen
    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)


def model():
    return torch.nn.Linear(2, 2)
"""


@pytest.mark.parametrize(
    ("args", "marker", "name", "cause"),
    [
        (["generated.py:with_options"], "options", "with_options", "InvalidOptionTypeError"),
        (["generated.py:frozen"], "frozen", "frozen", "FrozenInstanceError"),
        (["generated.py:model", "--inputs", "generated.py:with_options"], "options", "with_options", "InvalidOptionTypeError"),
    ],
)  # fmt: skip
def test_a_raise_inside_generated_code_is_located_at_the_users_line(
    workdir, args, marker, name, cause
):
    """A dataclass's generated ``__init__`` (dynamo_onnx's ExportOptions checking its
    values) or ``__setattr__`` (a frozen dataclass of the user's) has no file of its own
    (``<string>``): DO140 points at the user's line that called it, in the message and the
    SARIF log, and the traceback shown holds no such frame."""
    (workdir / "generated.py").write_text(_GENERATED_CODE_FACTORIES)
    line = next(
        number
        for number, text in enumerate(_GENERATED_CODE_FACTORIES.splitlines(), 1)
        if f"marker: {marker}" in text
    )
    proc = run(workdir, "export", *args, "--sarif", "g.sarif")
    assert proc.returncode == 2
    assert f"raised {cause}" in proc.stderr
    assert f"at generated.py:{line}." in proc.stderr
    assert f"in {name}" in proc.stderr
    assert "<string>" not in proc.stderr and "dynamo_onnx/" not in proc.stderr
    (result,) = json.loads((workdir / "g.sarif").read_text())["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("generated.py")
    assert location["region"]["startLine"] == line


def run(workdir, *args, env=None):
    """The command in this process (tests/cli_runner.py)."""
    return run_cli(workdir, *args, env=env)


def run_process(workdir, *args, env=None):
    """The command as users start it: ``python -m dynamo_onnx.cli`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_exit_0_exports_and_writes_every_file(workdir):
    proc = run_process(
        workdir,
        "export",
        "models.py:build",
        "-o",
        "net.onnx",
        "--sarif",
        "net.sarif",
        "--report",
        "net.md",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("exported Net in ")
    assert (
        "0 error(s), 0 warning(s); wrote model net.onnx, SARIF net.sarif, report net.md"
        in proc.stdout
    )
    assert proc.stderr.strip() == "", "no progress and no noise when output is not a terminal"
    import onnxruntime as ort

    session = ort.InferenceSession(str(workdir / "net.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == [3, 4]
    assert (workdir / "net.md").read_text().startswith("# ✅")


def test_inputs_function_and_input_specs(workdir):
    proc = run(
        workdir, "export", "models:bare", "--inputs", "models:inputs", "-o", "a.onnx", "--quiet"
    )
    assert proc.returncode == 0, proc.stderr
    proc = run(
        workdir, "export", "models.py:bare", "--input", "x=7x4:float32", "-o", "b.onnx", "--dynamic"
    )
    assert proc.returncode == 0, proc.stderr
    import onnx

    dims = onnx.load(str(workdir / "b.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_value == 4


def test_exit_1_when_the_export_fails(workdir):
    proc = run(workdir, "export", "models.py:mysterious", "--sarif", "m.sarif", "--report", "m.md")
    assert proc.returncode == 1
    assert "export of Mysterious failed: 1 error(s)" in proc.stdout
    assert (  # the failure on stderr, with its rule and the user's line
        "[DO301 unsupported-operator]" in proc.stderr
        and "dxcli::mystery at models.py:" in proc.stderr
    )
    assert not (workdir / "model.onnx").exists()
    log = json.loads((workdir / "m.sarif").read_text())
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    proc = run(workdir, "export", "models.py:broken")
    assert proc.returncode == 2  # the user's factory failed: a usage error, not an export one
    assert "`models.py:broken` raised RuntimeError: the factory itself fails" in proc.stderr
    assert 'models.py", line' in proc.stderr and "in broken" in proc.stderr  # the user's frame
    assert "dynamo_onnx/" not in proc.stderr  # never ours (the command's own frames)
    assert "Traceback" not in proc.stderr


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of docs/ci.md's exit-code table: the command, its environment and where its
    standard output goes (``full``: /dev/full; ``closed``: a pipe nobody reads, as
    ``| head`` leaves it), the exit code, what stderr says, the files written and not."""

    args: list[str]
    code: int
    stderr: str
    written: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    stdout: str = "pipe"


#: docs/ci.md's exit-code table, end to end. No row prints a Python traceback.
EXIT_TABLE = [
    Row(["export", "models.py:build", "-o", "m.onnx", "--sarif", "m.sarif"], 0, "", ("m.onnx", "m.sarif")),
    Row(["export", "models.py:mysterious", "--sarif", "x.sarif", "--report", "x.md"], 1, "[DO301 unsupported-operator]", ("x.sarif", "x.md"), ("model.onnx",)),
    Row(["export", "models.py:build", "-o", "/nonexistent/d/x.onnx", "--sarif", "s.sarif"], 1, "[DO406 save-failed]", ("s.sarif",)),
    Row(["export", "models.py:build", "--sarif", "/nonexistent/d/x.sarif", "--report", "r.md"], 1, "[DO902 output-not-written] Cannot write the SARIF log to /nonexistent/d/x.sarif", ("model.onnx", "r.md")),
    Row(["export", "models.py:build", "--opset", "99", "--sarif", "o.sarif"], 2, "[DO109 invalid-option] `opset_version` is 99", ("o.sarif",), ("model.onnx",)),
    Row(["export", "models.py:bare", "--input", "wrongname=2x3:int64"], 2, "[DO103 inputs-do-not-match-forward]", (), ("model.onnx",)),
    Row(["export", "models.py:bare", "--input", "tensor_x=-1x8", "--sarif", "n.sarif"], 2, "[DO109 invalid-option] `tensor_x=-1x8` has a negative size -1", ("n.sarif",), ("model.onnx",)),
    Row(["export", "models.py:bare", "--input", "x=99999999x99999999x99999999"], 2, "[DO109 invalid-option] `x=99999999x99999999x99999999` cannot be made", (), ("model.onnx",)),
    Row(["export", "models.py:broken", "--sarif", "b.sarif"], 2, "[DO140 user-code-raised] `models.py:broken` raised RuntimeError", ("b.sarif",), ("model.onnx",)),
    Row(["export", "models.py:bare", "--sarif", "i.sarif", "--report", "i.md"], 2, "give example inputs", ("i.sarif", "i.md"), ("model.onnx",)),
    Row(["export", "models.py:nothing"], 2, "has no attribute 'nothing'", (), ("model.onnx",)),
    Row(["export", "missing.py:build"], 2, "no such file", ()),
    Row(["export", "models.py:bare", "--input", "x=3y4"], 2, "dimensions that are not integers", ()),
    Row(["export", "models.py:bare", "--input", "x=3x4:floaty"], 2, "unknown dtype", ()),
    Row(["export", "models.py:build", "--dynamic-dim", "x=batch"], 2, "`x=batch` is not of the form INPUT:DIM=NAME", (), ("model.onnx",)),
    Row(["export", "models.py:build", "--dynamic", "--dynamic-dim", "x:0=batch"], 2, "`--dynamic` and --dynamic-dim are both given", (), ("model.onnx",)),
    Row(["export", "models.py:build", "--registry", "models.py:Net"], 2, "`models.py:Net` is a Net; --registry takes", (), ("model.onnx",)),
    Row(["export", "models.py:build", "--registry", "models.py:broken"], 2, "`models.py:broken` raised RuntimeError", (), ("model.onnx",)),
    Row(["export", "models.py:build", "--registry", "models.py:inputs"], 2, "`models.py:inputs` is a tuple", (), ("model.onnx",)),
    Row(["export", "models.py:build", "--verbosity", "loud"], 2, "invalid choice", ()),
    Row(["export", "models.py:nan_net", "--warnings-as-errors", "-o", "n.onnx", "--report", "n.md"], 3, "[DO401 non-finite-weights]", ("n.onnx", "n.md")),
    Row(["gate", "warn.sarif"], 0, ""),
    Row(["gate", "warn.sarif", "--fail-on", "warning", "--output", "g.sarif"], 1, "", ("g.sarif",)),
    Row(["gate", "warn.sarif", "--output", "/nonexistent/d/g.sarif"], 2, "[DO902 output-not-written] Cannot write the gated SARIF log to /nonexistent/d/g.sarif: No such file or directory"),
    Row(["gate", "warn.sarif", "--fail-on", "warning", "--output", "/nonexistent/d/g.sarif"], 1, "[DO902 output-not-written]"),
    Row(["gate", "warn.sarif"], 2, "Cannot write the job summary (GITHUB_STEP_SUMMARY) to /nonexistent/s.md", env={"GITHUB_STEP_SUMMARY": "/nonexistent/s.md"}),
    Row(["gate", "warn.sarif", "--output", "/nonexistent/d/g.sarif"], 2, "job summary (GITHUB_STEP_SUMMARY) to /nonexistent/s.md", env={"GITHUB_STEP_SUMMARY": "/nonexistent/s.md"}),
    Row(["gate", "missing.sarif"], 2, "[DO903 unreadable-sarif-log] Cannot read the SARIF log missing.sarif"),
    Row(["report", "missing.sarif"], 2, "[DO903 unreadable-sarif-log] Cannot read the SARIF log"),
    Row(["gate", "toolless.sarif"], 2, "[DO903 unreadable-sarif-log] Cannot read the SARIF log toolless.sarif: not a SARIF 2.1.0 log"),
    Row(["report", "toolless.sarif"], 2, "'tool' is a required property"),
    Row(["report", "warn.sarif", "-o", "w.md"], 0, "", ("w.md",)),
    Row(["report", "warn.sarif", "-o", "/nonexistent/x.md"], 1, "[DO902 output-not-written] Cannot write the markdown report to /nonexistent/x.md"),
    Row(["report", "warn.sarif"], 1, "Cannot write the output to standard output: No space left on device", stdout="full"),
    Row(["rules", "DO999"], 2, "[DO109 invalid-option] `DO999` is not a rule id or name"),
    Row(["rules"], 1, "[DO902 output-not-written] Cannot write the output to standard output", stdout="full"),
    Row(["rules", "DO301"], 1, "[DO902 output-not-written]", stdout="full"),
    Row(["rules"], 0, "", stdout="closed"),
    Row(["rules", "DO301"], 0, "", stdout="closed"),
    Row(["gate", "warn.sarif", "--fail-on", "warning"], 1, "", stdout="closed"),
    Row(["--version"], 1, "[DO902", stdout="full"),
]  # fmt: skip


def _row_id(row: Row) -> str:
    words = "-".join(a.split(":")[-1].split("/")[-1] for a in row.args[:2])
    extra = "-env" if row.env else "" if row.stdout == "pipe" else f"-{row.stdout}"
    return f"{row.code}-{words}{extra}"


def run_with_stdout(workdir, row: Row):
    """Run the row's command with its standard output where the row says."""
    argv = [sys.executable, "-m", "dynamo_onnx.cli", *row.args]
    env = {**os.environ, **(row.env or {})}
    if row.stdout == "pipe":
        return run(workdir, *row.args, env=row.env)
    if row.stdout == "full":
        with open("/dev/full", "w") as full:
            return subprocess.run(
                argv, cwd=workdir, stdout=full, stderr=subprocess.PIPE, text=True, env=env,
                timeout=300,
            )  # fmt: skip
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, as `| head -0`
    try:
        return subprocess.run(
            argv, cwd=workdir, stdout=write_end, stderr=subprocess.PIPE, text=True, env=env,
            timeout=300,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize("row", EXIT_TABLE, ids=[_row_id(row) for row in EXIT_TABLE])
def test_exit_code_table(workdir, row):
    _write_warning_log(workdir / "warn.sarif")
    (workdir / "toolless.sarif").write_text('{"runs": [{"results": []}]}')  # no tool, no version
    proc = run_with_stdout(workdir, row)
    assert proc.returncode == row.code, (proc.stdout or "") + proc.stderr
    assert row.stderr in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert all((workdir / name).exists() for name in row.written), sorted(os.listdir(workdir))
    assert not any((workdir / name).exists() for name in row.absent)
    if not row.stderr and row.code in (0, 1):
        assert proc.stderr.strip() == ""


def _write_warning_log(path):
    """A SARIF log with one warning at models.py's factory line."""
    ctx = DiagnosticContext(subject="M")
    ctx.record(
        "non-finite-weights",
        locations=[Location(str(path.parent / "models.py"), 3, "build")],
        name="fc.weight",
        count=1,
        total=8,
    )
    path.write_text(json.dumps(to_sarif(ctx)))


def test_exit_3_when_warnings_are_errors_and_the_model_is_still_written(workdir):
    proc = run(
        workdir,
        "export",
        "models.py:nan_net",
        "--warnings-as-errors",
        "-o",
        "nan.onnx",
        "--sarif",
        "nan.sarif",
        "--report",
        "nan.md",
    )
    assert proc.returncode == 3
    assert "but warnings are errors: 1 error(s)" in proc.stdout
    assert "[DO401 non-finite-weights]" in proc.stderr
    assert "`fc.weight`" in proc.stderr  # the whole failure, not its first line
    assert (workdir / "nan.onnx").exists()
    # the reports say what failed, as the API's do, though the model was saved after
    report = (workdir / "nan.md").read_text().splitlines()
    assert report[0].startswith("# ❌") and report[2].startswith("> **[DO401 non-finite-weights]")
    (run_log,) = json.loads((workdir / "nan.sarif").read_text())["runs"]
    (invocation,) = run_log["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "DO401" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    proc = run(workdir, "export", "models.py:nan_net", "-o", "nan.onnx")
    assert proc.returncode == 0 and "0 error(s), 1 warning(s)" in proc.stdout


def test_a_bad_option_value_is_a_usage_error_with_the_reports_written(workdir):
    proc = run(workdir, "export", "models.py:build", "--opset", "99", "--sarif", "o.sarif")
    assert proc.returncode == 2
    assert "[DO109 invalid-option] `opset_version` is 99" in proc.stderr
    assert "Traceback" not in proc.stderr
    log = json.loads((workdir / "o.sarif").read_text())
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["DO109"]
    proc = run(workdir, "export", "models.py:bare", "--input", "wrongname=2x3:int64")
    assert proc.returncode == 2 and "[DO103 inputs-do-not-match-forward]" in proc.stderr


def test_a_model_that_cannot_be_saved_still_gets_both_reports(workdir):
    proc = run(
        workdir, "export", "models.py:build", "-o", "/nonexistent/dir/x.onnx",
        "--sarif", "s.sarif", "--report", "r.md",
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "[DO406 save-failed]" in proc.stderr and "does not exist" in proc.stderr
    log = json.loads((workdir / "s.sarif").read_text())
    assert "DO406" in [r["ruleId"] for r in log["runs"][0]["results"]]
    assert "DO406" in (workdir / "r.md").read_text()


def test_a_report_that_cannot_be_written_does_not_stop_the_others(workdir):
    proc = run(
        workdir, "export", "models.py:build", "--sarif", "/nonexistent/dir/x.sarif",
        "--report", "r.md",
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        "[DO902 output-not-written] Cannot write the SARIF log to /nonexistent/dir/x.sarif"
        in proc.stderr
    )
    assert "but not every report was written" in proc.stdout
    assert (workdir / "model.onnx").exists() and (workdir / "r.md").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "the file is empty"), ("{}", "not a SARIF log"), ("{", "not JSON")],
)
def test_report_and_gate_explain_a_file_that_is_not_a_sarif_log(workdir, content, message):
    (workdir / "bad.sarif").write_text(content)
    for command in ("report", "gate"):
        proc = run(workdir, command, "bad.sarif")
        assert proc.returncode == 2
        assert f"[DO903 unreadable-sarif-log] Cannot read the SARIF log bad.sarif: {message}" in (
            proc.stderr
        )


def test_findings_on_a_library_model_point_at_the_factory_not_the_launcher(workdir):
    """nn.Sequential has no line of the user's: every result is at the factory's line."""
    proc = run(workdir, "export", "models.py:sequential", "--sarif", "seq.sarif")
    assert proc.returncode == 0, proc.stderr
    factory_line = MODELS.splitlines().index("def sequential():") + 1
    log = json.loads((workdir / "seq.sarif").read_text())
    places = {
        (
            loc["physicalLocation"]["artifactLocation"]["uri"],
            loc["physicalLocation"]["region"]["startLine"],
        )
        for result in log["runs"][0]["results"]
        for loc in result.get("locations", [])
    }
    assert places == {("models.py", factory_line)}
    assert "DO401" in [r["ruleId"] for r in log["runs"][0]["results"]]


def test_rules_takes_an_id_in_any_case(workdir):
    proc = run(workdir, "rules", "do301")
    assert proc.returncode == 0 and proc.stdout.startswith("DO301 unsupported-operator")


def test_help_documents_the_exit_codes(workdir):
    for args in (["--help"], ["export", "--help"], ["gate", "--help"]):
        proc = run(workdir, *args)
        assert proc.returncode == 0
        assert "3  exported, but failed under --warnings-as-errors" in proc.stdout


def test_rules_prints_one_rules_help(workdir):
    proc = run(workdir, "rules", "unsupported-operator")
    assert proc.returncode == 0
    assert proc.stdout.startswith("DO301 unsupported-operator (error, pass translation)")
    assert "registry.register_op(my_op" in proc.stdout
    listing = run(workdir, "rules").stdout.splitlines()
    assert any(line.startswith("DO401  non-finite-weights") for line in listing)


def _export_nan_log(workdir, name):
    proc = run(
        workdir, "export", "models.py:nan_net", "-o", f"{name}.onnx", "--sarif", f"{name}.sarif"
    )
    assert proc.returncode == 0, proc.stderr
    return workdir / f"{name}.sarif"


def test_gate_fails_on_a_new_warning_and_passes_with_a_baseline_after_lines_move(
    workdir, tmp_path_factory
):
    base = _export_nan_log(workdir, "base")
    proc = run(workdir, "gate", str(base), "--fail-on", "warning")
    assert proc.returncode == 1
    assert "gate failed: 1 result(s) at or above warning" in proc.stdout
    assert "DO401 non-finite-weights models.py:" in proc.stdout
    assert run(workdir, "gate", str(base)).returncode == 0, "a warning is not an error"

    # The model's lines move: the same warning is not new.
    (workdir / "models.py").write_text("# moved\n\n\n" + MODELS)
    head = _export_nan_log(workdir, "head")
    summary = workdir / "summary.md"
    proc = run(
        workdir,
        "gate",
        str(head),
        "--baseline",
        str(base),
        "--fail-on",
        "warning",
        "--output",
        "gated.sarif",
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert proc.returncode == 0, proc.stdout
    assert "gate passed: 0 new result(s)" in proc.stdout
    gated = json.loads((workdir / "gated.sarif").read_text())
    assert {r["baselineState"] for r in gated["runs"][0]["results"]} == {"unchanged"}
    assert multitool_errors(workdir / "gated.sarif", tmp_path_factory.mktemp("v")) == []
    assert "### ✅ dynamo-onnx gate passed" in summary.read_text()

    # A baseline without the warning: it is new, and the summary lists it.
    clean = run(workdir, "export", "models.py:build", "--sarif", "clean.sarif")
    assert clean.returncode == 0
    proc = run(
        workdir,
        "gate",
        str(head),
        "--baseline",
        "clean.sarif",
        "--fail-on",
        "warning",
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert proc.returncode == 1
    assert "1 new result(s)" in proc.stdout
    assert "| warning | DO401 `non-finite-weights` | `models.py:" in summary.read_text()


def test_progress_on_a_terminal(workdir):
    master, slave = pty.openpty()
    proc = subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", "export", "models.py:build", "-o", "t.onnx"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        timeout=300,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data.decode())
    os.close(master)
    progress = "".join(chunks)
    assert proc.returncode == 0
    for name in ("validate", "capture", "decomposition", "translation", "finalize", "weight-check"):
        assert f"{name}: done in " in progress
    assert "nodes" in progress  # the translation counter
    quiet = run(workdir, "export", "models.py:build", "-o", "t.onnx", "--quiet")
    assert quiet.stderr.strip() == ""


HEAVY = ("torch", "onnx", "onnx_ir", "onnxscript", "onnxruntime", "numpy")


@pytest.mark.parametrize(
    "args",
    [["gate", "{log}"], ["report", "{log}"], ["rules"], ["rules", "DO301"]],
    ids=["gate", "report", "rules", "rules-DO301"],
)
def test_commands_that_read_a_log_load_neither_torch_nor_onnx(workdir, args):
    """gate, report and rules read JSON and the rule catalog: a fresh process running one
    of them has none of torch, onnx, onnxscript, onnxruntime (or numpy) in sys.modules."""
    log = workdir / "clean.sarif"
    log.write_text(json.dumps(to_sarif(DiagnosticContext(subject="M"))))
    argv = [a.format(log=log) for a in args]
    script = (
        "import contextlib, io, json, sys\n"
        "from dynamo_onnx.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=workdir, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    code, loaded = json.loads(proc.stdout.splitlines()[-1])
    assert (code, loaded) == (0, [])


def test_the_package_loads_torch_only_when_an_exporting_name_is_used():
    script = (
        "import sys, dynamo_onnx, dynamo_onnx.diagnostics, dynamo_onnx.reports\n"
        "before = 'torch' in sys.modules\n"
        "options = dynamo_onnx.ExportOptions(); dynamo_onnx.DiagnosticOptions()\n"
        "light = 'torch' in sys.modules\n"
        "import dynamo_onnx.exporter\n"  # the module first: the name stays the function
        "print(before, light, callable(dynamo_onnx.export), type(dynamo_onnx.export).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["False", "False", "True", "function"], proc.stderr


def test_an_export_without_reports_loads_no_renderer():
    """sarif-om, jsonschema and jinja2 (0.06-0.2 s to import) load when a report is asked for."""
    script = (
        "import sys, torch, dynamo_onnx\n"
        "program = dynamo_onnx.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),))\n"
        "renderers = ('sarif_om', 'jsonschema', 'jinja2')\n"
        "print([m for m in renderers if m in sys.modules])\n"
        "program.diagnostics.to_markdown()\n"
        "print([m for m in renderers if m in sys.modules])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.splitlines() == ["[]", "['sarif_om', 'jsonschema', 'jinja2']"], proc.stderr


def _results(path):
    return [
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"], r["level"])
        for r in json.loads(path.read_text())["runs"][0]["results"]
        if r.get("locations")
    ]


def test_a_successful_export_lists_its_warnings(workdir):
    proc = run(workdir, "export", "models.py:three_warnings", "-o", "t.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 3 warning(s)" in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    expected = {
        "DO120 input-mutated": f"models.py:{line_in_models('mutates')}",
        "DO122 training-mode": f"models.py:{line_in_models('dropout')}",
        "DO401 non-finite-weights": "models.py:",
    }
    for rule, where in expected.items():
        (line,) = [x for x in lines if f"warning {rule} " in x]
        assert f"{rule} {where}" in line, line
    assert "Weight `fc.weight` has 1 non-finite value(s)" in proc.stderr
    clean = run(workdir, "export", "models.py:build", "-o", "c.onnx")
    assert clean.stderr == "", "a clean export prints nothing on stderr"


def test_warnings_as_errors_names_every_rule_and_its_fix(workdir):
    proc = run(
        workdir, "export", "models.py:three_warnings", "--warnings-as-errors", "-o", "t.onnx"
    )
    assert proc.returncode == 3
    headline = proc.stderr.splitlines()[0]
    for tag in ("[DO120 input-mutated]", "[DO122 training-mode]", "[DO401 non-finite-weights]"):
        assert tag in headline
    for rule_id in ("DO120", "DO122", "DO401"):
        assert f"Fix ({rule_id}): " in proc.stderr
    assert "Call model.eval() before exporting" in proc.stderr


@pytest.mark.parametrize("spelling", [["x:0=batch"], ["x:0"]])
def test_dynamic_dim_names_one_dimension_and_warns_where_the_model_fixes_it(workdir, spelling):
    args = [a for s in spelling for a in ("--dynamic-dim", s)]
    proc = run(workdir, "export", "models.py:fixed", *args, "--sarif", "f.sarif", "-o", "f.onnx")
    assert proc.returncode == 0, proc.stderr
    line = line_in_models("fixes the batch")
    assert ("DO106", line, "warning") in _results(workdir / "f.sarif")
    assert f"warning DO106 dynamic-dim-specialized models.py:{line}" in proc.stderr
    # a dimension the model leaves free is dynamic in the ONNX model, under its name
    proc = run(workdir, "export", "models.py:build", "--dynamic-dim", "x:0=batch", "-o", "b.onnx")
    assert proc.returncode == 0, proc.stderr
    import onnx
    import onnxruntime as ort

    dims = onnx.load(str(workdir / "b.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert (dims[0].dim_param, dims[1].dim_value) == ("batch", 4)
    session = ort.InferenceSession(str(workdir / "b.onnx"), providers=["CPUExecutionProvider"])
    for batch in (2, 9):
        (out,) = session.run(None, {"x": np.ones((batch, 4), np.float32)})
        assert out.shape == (batch, 2)


def test_dynamic_notes_the_kept_dimensions_at_the_models_line(workdir):
    proc = run(
        workdir, "export", "models.py:fixed", "--dynamic", "--sarif", "d.sarif", "-o", "d.onnx"
    )
    assert proc.returncode == 0, proc.stderr
    line = line_in_models("fixes the batch")
    (note,) = [r for r in _results(workdir / "d.sarif") if r[0] == "DO128"]
    # an informational result: SARIF gives it level "none" (kind "informational")
    assert note == ("DO128", line, "none")
    log = json.loads((workdir / "d.sarif").read_text())
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DO128"]
    assert f"at models.py:{line}" in result["message"]["text"]  # the message and the location agree


@pytest.mark.parametrize("spec", ["ops.py:REGISTRY", "ops.py:registry", "ops:TABLE"])
def test_registry_follows_do301s_fix_from_the_command_line(workdir, spec):
    failed = run(workdir, "export", "models.py:mysterious", "-o", "m.onnx")
    assert failed.returncode == 1 and "[DO301 unsupported-operator]" in failed.stderr
    proc = run(workdir, "export", "models.py:mysterious", "--registry", spec, "-o", "m.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout
    import onnxruntime as ort

    session = ort.InferenceSession(str(workdir / "m.onnx"), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(out, x + 1)


def test_rules_are_listed_in_id_order_and_version_names_the_tools(workdir):
    listing = run(workdir, "rules").stdout.splitlines()
    ids = [line.split()[0] for line in listing]
    assert ids == sorted(ids, key=lambda i: int(i[2:])) and len(ids) > 50
    proc = run(workdir, "--version")
    assert proc.returncode == 0
    from dynamo_onnx.versions import package_version, tool_versions

    assert proc.stdout.startswith(f"dynamo-onnx {package_version()} (")
    for name in ("torch", "onnx", "onnxscript", "onnxruntime"):
        assert f"{name} {tool_versions()[name]}" in proc.stdout


def test_verbose_into_a_file_has_no_terminal_control_characters(workdir):
    proc = run(workdir, "export", "models.py:build", "-o", "v.onnx", "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert "capture: done in " in proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr


def test_the_command_ends_its_process_without_walking_every_object_again(monkeypatch, capsys):
    """The installed ``dynamo-onnx`` (and ``python -m dynamo_onnx.cli``) is console_main:
    main's exit code, and the collector frozen first (the interpreter's final collections
    over torch's objects cost ~1 s a command). main() in a caller's process freezes
    nothing."""
    from importlib.metadata import entry_points

    from dynamo_onnx import cli

    (script,) = entry_points(group="console_scripts", name="dynamo-onnx")
    assert script.value == "dynamo_onnx.cli:console_main"
    before = gc.get_freeze_count()
    assert cli.main(["--version"]) == 0
    assert gc.get_freeze_count() == before
    frozen = []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["dynamo-onnx", "rules", "--no-such-option"])
    with pytest.raises(SystemExit) as exited:
        cli.console_main()
    assert exited.value.code == 2 and not frozen  # argparse's own exit: the process ends too
    monkeypatch.setattr(sys, "argv", ["dynamo-onnx", "--version"])
    with pytest.raises(SystemExit) as exited:
        cli.console_main()
    assert exited.value.code == 0 and frozen == [True]
    assert capsys.readouterr().out.startswith("dynamo-onnx ")


@pytest.mark.parametrize(
    ("args", "what", "marker", "cause"),
    [
        (["models.py:broken"], "models.py:broken", "raises", "RuntimeError: the factory itself fails"),
        (["models.py:loads_missing_weights"], "models.py:loads_missing_weights", "deep raise", "FileNotFoundError: weights.bin"),
        (["models.py:bare", "--inputs", "models.py:broken"], "models.py:broken", "raises", "RuntimeError"),
        (["models.py:build", "--registry", "models.py:broken"], "models.py:broken", "raises", "RuntimeError"),
    ],
)  # fmt: skip
def test_a_raising_factory_is_located_at_its_raise(workdir, args, what, marker, cause):
    """The factory's own error, at the line that raised (not the factory's def, not
    DO109's 'use one of the allowed values'), on stderr and in the SARIF log."""
    proc = run(workdir, "export", *args, "--sarif", "f.sarif")
    assert proc.returncode == 2
    line = line_in_models(marker)
    assert f"[DO140 user-code-raised] `{what}` raised {cause}" in proc.stderr
    assert f"at models.py:{line}." in proc.stderr
    assert "Fix: Fix the line shown" in proc.stderr
    assert "DO109" not in proc.stderr and "Traceback" not in proc.stderr
    (result,) = json.loads((workdir / "f.sarif").read_text())["runs"][0]["results"]
    assert result["ruleId"] == "DO140"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("models.py")
    assert location["region"]["startLine"] == line


def test_ctrl_c_ends_with_130_and_the_reports(workdir):
    """SIGINT during capture: exit 130, one line on stderr, the reports with DO143 and
    what was found so far, no model and no half-written file."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "dynamo_onnx.cli", "export", "models.py:slow"]
        + ["--sarif", "s.sarif", "--report", "s.md"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (workdir / "capturing").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines() == [
        "dynamo-onnx export: interrupted during capture; wrote SARIF s.sarif, report s.md"
    ]
    log = json.loads((workdir / "s.sarif").read_text())
    run_ = log["runs"][0]
    assert run_["invocations"][0]["executionSuccessful"] is False
    rules = [r["ruleId"] for r in run_["results"]]
    assert rules[-1] == "DO143" and "DO100" not in rules and "DO101" not in rules
    assert "interrupted during capture" in run_["results"][-1]["message"]["text"]
    assert "DO143" in (workdir / "s.md").read_text()
    assert sorted(os.listdir(workdir)) == [
        "capturing", "models.py", "ops.py", "s.md", "s.sarif"
    ]  # fmt: skip
