"""Helpers to check SARIF logs with the tools people read them with.

Everything they need is in the repository or installed by ``make``: the Microsoft SARIF
multitool, ``sarif-junit`` and ``@security-alert/sarif-to-markdown`` from npm (``make
sarif-tools``, into ``.sarif-tools/``), ``sarif-tools`` and ``sarif-pydantic`` from PyPI (the
``test`` extra), and GitHub's multitool policy (``tests/sarif-consumers/github.config.xml``).

A missing tool skips its check, except under ``make test`` (it sets ``SARIF_TOOLS_REQUIRED=1``
after installing them all), where it fails: no check is silently skipped there.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "sarif-consumers"
GITHUB_CONFIG = HARNESS / "github.config.xml"
NODE_MODULES = ROOT / ".sarif-tools" / "node_modules"
MULTITOOL = NODE_MODULES / "@microsoft/sarif-multitool-linux/Sarif.Multitool"
SARIF_JUNIT = NODE_MODULES / "sarif-junit/bin/sarif-junit.js"
SARIF_TO_MARKDOWN = NODE_MODULES / "@security-alert/sarif-to-markdown"


def require(what: str, present: bool) -> None:
    """Skip (or, under ``make test``, fail) when a tool the check needs is missing."""
    if present:
        return
    message = f"{what} is not installed: `make sarif-tools` and the test extra install it"
    if os.environ.get("SARIF_TOOLS_REQUIRED"):
        pytest.fail(message)
    pytest.skip(message)


def multitool_errors(
    log_path: pathlib.Path | Sequence[pathlib.Path], tmp_path: pathlib.Path
) -> list[str]:
    """Run `validate --rule-kind Sarif;Ghas` with GitHub's policy on one log or several (one
    run of the tool: it starts in ~0.8 s); return its error results, each with its file.

    The multitool exits 0 even when it finds errors, so its output file is read."""
    tool = pathlib.Path(os.environ.get("SARIF_MULTITOOL", MULTITOOL))
    require(f"the SARIF multitool ({tool})", tool.exists())
    paths = [log_path] if isinstance(log_path, pathlib.Path) else list(log_path)
    out = tmp_path / f"{paths[0].stem}.validation.sarif"
    subprocess.run(
        [
            str(tool),
            "validate",
            *map(str, paths),
            "--rule-kind",
            "Sarif;Ghas",
            "-c",
            str(GITHUB_CONFIG),
            "-o",
            str(out),
            "--log",
            "ForceOverwrite",
        ],
        check=False,
        capture_output=True,
        timeout=180,
        env={**os.environ, "DOTNET_SYSTEM_GLOBALIZATION_INVARIANT": "1"},
    )
    assert out.exists(), "the multitool wrote no output file"
    results = json.loads(out.read_text())["runs"][0].get("results", [])
    return [
        f"{_validated_file(r)}{r['ruleId']}: "
        f"{r['message'].get('text') or r['message'].get('arguments')}"
        for r in results
        if r.get("level") == "error"
    ]


def _validated_file(result: dict[str, Any]) -> str:
    """The log a multitool result is about, as ``name: ``."""
    for location in result.get("locations", []):
        uri = location.get("physicalLocation", {}).get("artifactLocation", {}).get("uri")
        if uri:
            return f"{pathlib.PurePosixPath(uri).name}: "
    return ""


# -- the other consumers -----------------------------------------------------------------

#: sarif-tools commands that write a file, and those that print.
_SARIF_TOOLS_WRITING = ("html", "csv", "codeclimate", "emacs", "word", "copy")
_SARIF_TOOLS_PRINTING = ("summary", "info")
_SUFFIX = {"codeclimate": ".json", "emacs": ".txt", "word": ".docx", "copy": ".sarif"}


def require_consumers() -> None:
    """Every consumer of :func:`consumer_problems` is installed (else skip or fail)."""
    require("sarif-tools (PyPI)", importlib.util.find_spec("sarif") is not None)
    require("sarif-pydantic (PyPI)", importlib.util.find_spec("sarif_pydantic") is not None)
    require(f"sarif-junit (npm, {SARIF_JUNIT})", SARIF_JUNIT.exists())
    require(
        f"@security-alert/sarif-to-markdown (npm, {SARIF_TO_MARKDOWN})", SARIF_TO_MARKDOWN.exists()
    )


def _results(log: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(result, its rule) for every result of every run."""
    pairs = []
    for run in log["runs"]:
        rules = run["tool"]["driver"].get("rules") or []
        for result in run.get("results") or []:
            index = result.get("ruleIndex")
            rule = rules[index] if isinstance(index, int) and index < len(rules) else {}
            pairs.append((result, rule))
    return pairs


def _problem(name: str, code: int, output: str) -> str | None:
    """A crash (traceback, node stack) or a non-zero exit of a consumer, or None."""
    if "Traceback (most recent call last)" in output or "    at " in output:
        return f"{name} crashed: {output.strip().splitlines()[-1][:300]}"
    if code != 0:
        return f"{name} exited {code}: {output.strip()[-300:]}"
    return None


def _run(name: str, command: list[str], out: pathlib.Path, **env: str) -> str | None:
    """Run a consumer; a crash (traceback, node stack) or a non-zero exit is a problem."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False, cwd=out,
        env={**os.environ, **env},
    )  # fmt: skip
    return _problem(name, done.returncode, done.stdout + done.stderr)


#: sarif-tools' own entry point (``python -m sarif``: ``sys.exit(main.main())``) run once per
#: command line, all in one process: importing sarif-tools (matplotlib, python-docx) takes
#: most of a command's time. Each command's output (stdout and stderr) and exit code are
#: kept apart; an exception is printed as the interpreter would print it.
_SARIF_TOOLS_DRIVER = """
import contextlib, io, json, sys, traceback
from sarif.cmdline import main as sarif_main
done = []
for argv in json.loads(sys.argv[1]):
    output = io.StringIO()
    sys.argv = ["sarif", *argv]
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            code = sarif_main.main()
        except SystemExit as exit_:
            code = exit_.code
        except Exception:
            traceback.print_exc()
            code = 1
    if not isinstance(code, int):
        code = 0 if code is None else 1
    done.append([code, output.getvalue()])
print(json.dumps(done))
"""


def _run_sarif_tools(commands: list[list[str]], out: pathlib.Path) -> list[str | None]:
    """Run each sarif-tools command line (``sarif CMD ARGS``) in one process; the problem of
    each (see :func:`_problem`), in order."""
    done = subprocess.run(
        [sys.executable, "-c", _SARIF_TOOLS_DRIVER, json.dumps(commands)],
        capture_output=True, text=True, timeout=300, check=False, cwd=out,
    )  # fmt: skip
    if done.returncode != 0:
        return [_problem("sarif-tools", done.returncode or 1, done.stdout + done.stderr)] * len(
            commands
        )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return [
        _problem(f"sarif {argv[0]}", code, output)
        for argv, (code, output) in zip(commands, results, strict=True)
    ]


def consumer_problems(log_path: pathlib.Path, out: pathlib.Path) -> list[str]:
    """Feed one log to each consumer; return what went wrong (a crash, a rejected log, a
    lost result). An empty list: every consumer read the log and kept every result."""
    require_consumers()
    out.mkdir(parents=True, exist_ok=True)
    log = json.loads(log_path.read_text(encoding="utf-8"))
    pairs = _results(log)
    count = len(pairs)
    stem = log_path.stem
    problems: list[str] = []

    def check(condition: bool, text: str) -> None:
        if not condition:
            problems.append(text)

    # Microsoft's sarif-tools, every command that reads one log.
    written = {
        command: out / f"{stem}.{command}{_SUFFIX.get(command, '.' + command)}"
        for command in _SARIF_TOOLS_WRITING
    }
    lines = [[command, str(log_path)] for command in _SARIF_TOOLS_PRINTING]
    lines += [[command, str(log_path), "-o", str(target)] for command, target in written.items()]
    for argv, problem in zip(lines, _run_sarif_tools(lines, out), strict=True):
        problems += [problem] if problem else []
        target = written.get(argv[0])
        if target is not None:
            check(problem is not None or target.exists(), f"sarif {argv[0]} wrote no {target.name}")
    if written["csv"].exists():
        with open(written["csv"], encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        check(len(rows) == count, f"sarif csv: {len(rows)} rows for {count} results")
    if written["codeclimate"].exists():
        issues = json.loads(written["codeclimate"].read_text(encoding="utf-8"))
        check(len(issues) == count, f"sarif codeclimate: {len(issues)} issues for {count} results")

    # sarif-junit: one test case per result, a failure per error or warning.
    junit = out / f"{stem}.junit.xml"
    problem = _run(
        "sarif-junit",
        ["node", str(SARIF_JUNIT), "-i", str(log_path), "-o", str(junit), "--test-suite", stem],
        out,
    )
    problems += [problem] if problem else []
    if junit.exists():
        root = ElementTree.parse(junit).getroot()
        cases, failures = root.findall(".//testcase"), root.findall(".//testcase/failure")
        failing = sum(1 for r, _ in pairs if r.get("level", "warning") in ("error", "warning"))
        check(len(cases) == count, f"sarif-junit: {len(cases)} test cases for {count} results")
        check(len(failures) == failing, f"sarif-junit: {len(failures)} failures for {failing}")
    else:
        check(problem is not None, f"sarif-junit wrote no {junit.name}")

    # @security-alert/sarif-to-markdown: every rule with results is listed; errors fail.
    markdown = out / f"{stem}.consumer.md"
    done = subprocess.run(
        ["node", str(HARNESS / "sarif2md.js"), str(log_path), str(markdown)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )  # fmt: skip
    if done.returncode != 0 or not markdown.exists():
        problems.append(f"sarif-to-markdown failed: {(done.stdout + done.stderr)[-300:]}")
    else:
        body = markdown.read_text(encoding="utf-8")
        missing = sorted({r["ruleId"] for r, _ in pairs if f"**[{r['ruleId']}]**" not in body})
        check(not missing, f"sarif-to-markdown: rules missing from its results: {missing}")
        verdicts = json.loads(done.stdout.strip().splitlines()[-1])
        has_error = any(r.get("level") == "error" for r, _ in pairs)
        fails = any(v["shouldFail"] for v in verdicts)
        check(
            fails == has_error, f"sarif-to-markdown: shouldFail={fails}, error results={has_error}"
        )

    # sarif-pydantic: the log parses, laxly and strictly, and keeps its results.
    from pydantic import ValidationError
    from sarif_pydantic import Sarif

    text = log_path.read_text(encoding="utf-8")
    for strict in (False, True):
        try:
            parsed = Sarif.model_validate_json(text, strict=strict)
        except ValidationError as error:
            problems.append(f"sarif-pydantic (strict={strict}) rejects the log: {error}"[:600])
        else:
            kept = sum(len(run.results or []) for run in parsed.runs)
            check(kept == count, f"sarif-pydantic (strict={strict}): {kept} of {count} results")
    return problems
