"""docs/ci.md's GitHub Actions workflow, run as written: each ``run:`` step of its YAML in a
shell, in a repository with ``models/build.py:make_model``, with ``dynamo-onnx`` on PATH."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import yaml

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "ci.md"

BUILD = textwrap.dedent(
    """
    import torch


    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.body(x))


    def make_model():
        torch.manual_seed(0)
        return Classifier().eval(), (torch.randn(2, 8),)
    """
)


def _steps() -> dict[str, str]:
    """The workflow's ``run:`` steps by name (docs/ci.md's only YAML block)."""
    (block,) = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    workflow = yaml.safe_load(block)
    (job,) = workflow["jobs"].values()
    return {step.get("name", step["run"]): step["run"] for step in job["steps"] if "run" in step}


def _run(command: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_STEP_SUMMARY": str(cwd / "summary.md"),
    }
    return subprocess.run(
        ["bash", "-e", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture()
def repository(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "build.py").write_text(BUILD)
    return tmp_path


def test_the_documented_workflow_runs_as_written(repository):
    steps = _steps()
    assert set(steps) >= {"Export", "Gate on new warnings", "Report"}
    assert shutil.which("bash")
    export = _run(steps["Export"], repository)
    assert export.returncode == 0, export.stderr
    assert {"model.onnx", "model.sarif", "model.md"} <= {p.name for p in repository.iterdir()}
    first = _run(steps["Gate on new warnings"], repository)  # no baseline yet
    assert first.returncode == 0 and "gate passed" in first.stdout, first.stdout + first.stderr
    (repository / "baseline").mkdir()
    shutil.copy(repository / "model.sarif", repository / "baseline" / "model.sarif")
    gated = _run(steps["Gate on new warnings"], repository)  # a pull request with main's log
    assert gated.returncode == 0 and "0 new result(s)" in gated.stdout, gated.stdout
    assert (repository / "gated.sarif").exists()
    assert _run(steps["Report"], repository).returncode == 0
    summary = (repository / "summary.md").read_text()
    assert "dynamo-onnx export of `Classifier`: succeeded" in summary


def test_a_factory_without_inputs_still_leaves_a_log_to_upload(repository):
    """The Export step fails (exit 2: usage), and the ``if: always()`` upload finds a SARIF
    log that says why, at the factory's line."""
    build = repository / "models" / "build.py"
    build.write_text(
        BUILD.replace(
            "return Classifier().eval(), (torch.randn(2, 8),)", "return Classifier().eval()"
        )
    )
    export = _run(_steps()["Export"], repository)
    assert export.returncode == 2
    assert "returned only a model" in export.stderr
    log = yaml.safe_load((repository / "model.sarif").read_text())  # JSON is YAML
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "DO109"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "models/build.py"
    assert location["region"]["startLine"] == BUILD.splitlines().index("def make_model():") + 1
    assert (repository / "model.md").read_text().startswith("# ❌")
