"""Helpers to check SARIF logs: the OASIS schema and the Microsoft SARIF multitool."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MULTITOOL = ROOT / ".sarif-tools/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"
GITHUB_CONFIG = ROOT.parent / "shared" / "sarif" / "github.config.xml"


def multitool_errors(log_path: pathlib.Path, tmp_path: pathlib.Path) -> list[str]:
    """Run `validate --rule-kind Sarif;Ghas` with GitHub's policy; return its error results.

    The multitool exits 0 even when it finds errors, so its output file is read. Under CI
    (CI=true) the tool must be present: .ci/run installs it.
    """
    tool = pathlib.Path(os.environ.get("SARIF_MULTITOOL", MULTITOOL))
    if not tool.exists() or not GITHUB_CONFIG.exists():
        if os.environ.get("CI"):
            pytest.fail(
                f"the SARIF multitool or its GitHub policy is missing: {tool}, {GITHUB_CONFIG}"
            )
        pytest.skip(
            "SARIF multitool not installed (npm install --prefix .sarif-tools @microsoft/sarif-multitool)"
        )
    out = tmp_path / f"{log_path.stem}.validation.sarif"
    subprocess.run(
        [
            str(tool),
            "validate",
            str(log_path),
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
        timeout=120,
    )
    assert out.exists(), "the multitool wrote no output file"
    results = json.loads(out.read_text())["runs"][0].get("results", [])
    return [
        f"{r['ruleId']}: {r['message'].get('text') or r['message'].get('arguments')}"
        for r in results
        if r.get("level") == "error"
    ]
