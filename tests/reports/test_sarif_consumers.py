"""SARIF that every consumer reads right, from wherever the export runs: a subdirectory of a
git repository, outside the source root, standard input, ``python -c``, a notebook cell.

Each export runs in a fresh Python process, as a user runs a script; the logs are checked
for their locations, then fed to the real consumers (tests/sarif_tools.py: sarif-tools,
sarif-junit, sarif-to-markdown, sarif-pydantic and the multitool with GitHub's rules), all
installed by ``make``."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap

import pytest
from markdown_it import MarkdownIt

from sarif_tools import consumer_problems, multitool_errors

MODELS = textwrap.dedent(
    """
    import torch

    class Clean(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    class Unsupported(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x)  # marker: unsupported

    class Branches(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # marker: branch
                return x + 1
            return x - 1

    class Small(torch.nn.Module):
        def forward(self, x):
            return x * 2
    """
)

EXPORT = textwrap.dedent(
    """
    import logging, sys
    import torch, dynamo_onnx
    from models import {model}
    options = dynamo_onnx.DiagnosticOptions(warnings_as_errors={strict})
    try:
        dynamo_onnx.export({model}(), (torch.randn({shape}),), report=True, artifacts_dir="{out}",
                           diagnostic_options=options, dynamic_shapes={dynamic}{extra})
    except dynamo_onnx.OnnxExporterError as error:
        print(str(error).splitlines()[0])
    """
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> pathlib.Path:
    """A git work tree with the models in ``scripts/``, where the exports run."""
    top = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    (top / "scripts").mkdir()
    (top / "scripts" / "models.py").write_text(MODELS)
    return top


def _python(args: list[str], cwd: pathlib.Path, stdin: str | None = None) -> str:
    # the script's directory first, then the caller's path (the source tree under test)
    path = os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True, env=env,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _script(model: str, out: str, strict: bool = False, inline: bool = False) -> str:
    """The export script; ``inline``: the models are defined in it (it has no file)."""
    dynamic = '{"x": {0: "batch"}}' if model == "Small" else "None"
    shape = "1, 3" if model == "Small" else "2, 3"
    script = EXPORT.format(
        model=model, out=out, strict=strict, dynamic=dynamic, shape=shape, extra=""
    )
    if inline:
        script = MODELS + script.replace(f"from models import {model}\n", "")
    return script


@pytest.fixture(scope="module")
def logs(repo, tmp_path_factory) -> dict[str, pathlib.Path]:
    """The SARIF log of each kind of export, run as a user runs it. The four exports of a
    script file and a notebook cell's (``cell``: code compiled from a temporary file outside
    the repository, where IPython keeps a cell) run in one fresh process, one after the
    other (a process per export would only add its start-up, ~3 s of CPU each); standard
    input and ``python -c`` each need their own."""
    scripts = repo / "scripts"
    made = {}
    script = []
    for name, model, strict in (
        ("clean", "Clean", False),
        ("failure", "Unsupported", False),
        ("strict", "Small", True),
        ("branch", "Branches", False),
    ):
        script.append(_script(model, f"out_{name}", strict))
        made[name] = scripts / f"out_{name}" / f"{model}.sarif"
    cell = tmp_path_factory.mktemp("kernel") / "ipykernel_4242" / "3791239.py"
    cell.parent.mkdir()
    cell.write_text(_script("Unsupported", "out_cell", inline=True))
    script.append(
        textwrap.dedent(
            f"""
            source = open({str(cell)!r}).read()
            exec(compile(source, {str(cell)!r}, "exec"), {{"__name__": "__main__"}})
            """
        )
    )
    made["cell"] = scripts / "out_cell" / "Unsupported.sarif"
    (scripts / "export_all.py").write_text("".join(script))
    _python(["export_all.py"], scripts)
    _python(["-"], scripts, stdin=_script("Unsupported", "out_stdin", inline=True))
    made["stdin"] = scripts / "out_stdin" / "Unsupported.sarif"
    _python(["-c", _script("Clean", "out_c", inline=True)], scripts)
    made["command"] = scripts / "out_c" / "Clean.sarif"
    return made


def _results(path: pathlib.Path) -> tuple[dict, list[dict]]:
    log = json.loads(path.read_text())
    run = log["runs"][0]
    return run, run["results"]


def _artifact(result: dict) -> dict:
    return result["locations"][0]["physicalLocation"]["artifactLocation"]


def test_a_run_from_a_subdirectory_has_repository_relative_uris(logs, tmp_path):
    run, results = _results(logs["failure"])
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"].endswith("/repo0/")
    (unsupported,) = [r for r in results if r["ruleId"] == "DO301"]
    location = unsupported["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "scripts/models.py", "uriBaseId": "SRCROOT"}
    line = next(i for i, t in enumerate(MODELS.splitlines(), 1) if "marker: unsupported" in t)
    assert location["region"]["startLine"] == line
    names = ("clean", "failure", "strict", "branch")
    for name in names:
        _, results = _results(logs[name])
        for result in results:
            assert _artifact(result)["uri"].startswith("scripts/"), result
    assert multitool_errors([logs[name] for name in names], tmp_path) == []


@pytest.mark.parametrize("name", ["stdin", "command"])
def test_code_without_a_file_has_a_location_with_its_text_in_the_log(logs, name, tmp_path):
    run, results = _results(logs[name])
    assert results
    for result in results:
        artifact = _artifact(result)
        assert not artifact["uri"].startswith(("/", "file:"))
        assert artifact["uriBaseId"] == "SRCROOT"
        embedded = run["artifacts"][artifact["index"]]
        assert embedded["contents"]["text"]
    if name == "command":  # python -c: the command itself is the text
        (artifact,) = run["artifacts"]
        assert "dynamo_onnx.export(Clean()" in artifact["contents"]["text"]
        assert artifact["location"]["uri"] == "string"
    assert multitool_errors(logs[name], tmp_path) == []


def test_code_outside_the_source_root_is_never_an_absolute_result_uri(logs, tmp_path):
    """A notebook cell: code compiled from a temporary file outside the repository."""
    log = logs["cell"]
    run, results = _results(log)
    (unsupported,) = [r for r in results if r["ruleId"] == "DO301"]
    artifact = _artifact(unsupported)
    assert artifact["uri"] == "ipykernel_4242/3791239.py"
    assert "bessel_j0" in run["artifacts"][artifact["index"]]["contents"]["text"]
    for result in results:
        assert not _artifact(result)["uri"].startswith(("/", "file:"))
    assert multitool_errors(log, tmp_path) == []


def test_the_fix_of_a_failure_is_in_both_reports(logs):
    run, results = _results(logs["branch"])
    (result,) = [r for r in results if r["ruleId"] == "DO104"]
    assert result["message"]["markdown"].endswith(
        "**Fix:** Express the branch with torch.cond (it exports to an ONNX If) or torch.where, "
        "or make it depend on shapes instead of tensor values; keep a size or index taken from "
        "a tensor a tensor (index_select, gather), or bound it with torch._check."
    )
    assert "`" not in result["message"]["text"]
    report = logs["branch"].with_suffix(".md").read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(report)
    # The error quote: its Fix is a paragraph of its own, not part of the quoted text above it.
    depth, quoted = 0, []
    for i, token in enumerate(tokens):
        depth += {"blockquote_open": 1, "blockquote_close": -1}.get(token.type, 0)
        if depth and token.type == "inline":
            quoted.append((tokens[i - 1].type, token.content))
    fixes = [(kind, text) for kind, text in quoted if text.startswith("**Fix:**")]
    assert fixes == [("paragraph_open", fixes[0][1])], quoted
    assert fixes[0][1].endswith("or bound it with torch._check.")
    assert not any("Fix:" in text for _, text in quoted if not text.startswith("**Fix:**"))
    # Every **Fix** of the report is whole sentences.
    bold_fixes = [
        t.content for t in tokens if t.type == "inline" and t.content.startswith("**Fix:**")
    ]
    assert bold_fixes
    for text in bold_fixes:
        sentence = text.removeprefix("**Fix:**").split(" ([rule")[0].strip()
        assert sentence[0].isupper() and sentence.endswith((".", ")")), sentence


def test_reports_get_the_permissions_of_any_file_the_user_creates(logs):
    mask = os.umask(0)
    os.umask(mask)
    for path in (logs["clean"], logs["clean"].with_suffix(".md")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("name", ["clean", "failure", "strict", "stdin"])
def test_every_consumer_reads_the_logs(logs, name, tmp_path):
    """The real consumers on a clean export, a failure, warnings-as-errors and standard input:
    none crashes, rejects the log or loses a result."""
    assert consumer_problems(logs[name], tmp_path / "out") == []
    assert multitool_errors(logs[name], tmp_path) == []
