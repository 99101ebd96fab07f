"""The dynamo-onnx command, run as a subprocess: every exit code, reports, gate, progress."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap

import pytest

from dynamo_onnx.diagnostics import DiagnosticContext
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
        raise RuntimeError("the factory itself fails")


    def sequential():
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
        with torch.no_grad():
            model[0].weight[0, 0] = float("nan")
        return model, (torch.randn(2, 4),)
    """
)


@pytest.fixture()
def workdir(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    return tmp_path


def run(workdir, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_exit_0_exports_and_writes_every_file(workdir):
    proc = run(
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
    assert "models.py:broken raised RuntimeError: the factory itself fails" in proc.stderr
    assert 'models.py", line' in proc.stderr and "in broken" in proc.stderr  # the user's frame
    assert "cli.py" not in proc.stderr  # never ours
    assert "Traceback" not in proc.stderr


#: docs/ci.md's exit-code table, end to end: arguments -> exit code, what stderr says, the
#: files written and the files not written. No row prints a Python traceback.
EXIT_TABLE = [
    (["export", "models.py:build", "-o", "m.onnx", "--sarif", "m.sarif"], 0, "", ["m.onnx", "m.sarif"], []),
    (["export", "models.py:mysterious", "--sarif", "x.sarif", "--report", "x.md"], 1, "[DO301 unsupported-operator]", ["x.sarif", "x.md"], ["model.onnx"]),
    (["export", "models.py:build", "-o", "/nonexistent/d/x.onnx", "--sarif", "s.sarif"], 1, "[DO406 save-failed]", ["s.sarif"], []),
    (["export", "models.py:build", "--sarif", "/nonexistent/d/x.sarif", "--report", "r.md"], 1, "could not write SARIF", ["model.onnx", "r.md"], []),
    (["export", "models.py:build", "--opset", "99", "--sarif", "o.sarif"], 2, "[DO109 invalid-option] `opset_version` is 99", ["o.sarif"], ["model.onnx"]),
    (["export", "models.py:bare", "--input", "wrongname=2x3:int64"], 2, "[DO103 inputs-do-not-match-forward]", [], ["model.onnx"]),
    (["export", "models.py:broken", "--sarif", "b.sarif"], 2, "models.py:broken raised RuntimeError", ["b.sarif"], ["model.onnx"]),
    (["export", "models.py:bare", "--sarif", "i.sarif", "--report", "i.md"], 2, "give example inputs", ["i.sarif", "i.md"], ["model.onnx"]),
    (["export", "models.py:nothing"], 2, "has no attribute 'nothing'", [], ["model.onnx"]),
    (["export", "missing.py:build"], 2, "no such file", [], []),
    (["export", "models.py:bare", "--input", "x=3y4"], 2, "dimensions must be integers", [], []),
    (["export", "models.py:bare", "--input", "x=3x4:floaty"], 2, "unknown dtype", [], []),
    (["export", "models.py:build", "--verbosity", "loud"], 2, "invalid choice", [], []),
    (["export", "models.py:nan_net", "--warnings-as-errors", "-o", "n.onnx", "--report", "n.md"], 3, "[DO401 non-finite-weights]", ["n.onnx", "n.md"], []),
    (["rules", "DO999"], 2, "no rule 'DO999'", [], []),
    (["gate", "missing.sarif"], 2, "cannot read the SARIF log", [], []),
    (["report", "missing.sarif"], 2, "cannot read the SARIF log", [], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "stderr", "written", "absent"),
    EXIT_TABLE,
    ids=[f"{row[1]}-{'-'.join(a.split(':')[-1] for a in row[0][:2])}" for row in EXIT_TABLE],
)
def test_exit_code_table(workdir, args, code, stderr, written, absent):
    proc = run(workdir, *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert stderr in proc.stderr
    assert "Traceback" not in proc.stderr
    assert all((workdir / name).exists() for name in written), sorted(os.listdir(workdir))
    assert not any((workdir / name).exists() for name in absent)


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
    assert "could not write SARIF /nonexistent/dir/x.sarif" in proc.stderr
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
        assert f"cannot read the SARIF log bad.sarif: {message}" in proc.stderr


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
