"""Same model, same bytes; a 10,000-node model's SARIF stays within GitHub's limits."""

from __future__ import annotations

import gzip
import json
import logging

import pytest
import torch

import dynamo_onnx
from conftest import SmallCNN
from sarif_tools import multitool_errors

transformers = pytest.importorskip("transformers")


def _cnn():
    return SmallCNN().eval(), (torch.rand(2, 3, 16, 16),)


def _gpt2():
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    return transformers.GPT2Model(config).eval(), (torch.randint(0, 100, (2, 7)),)


def _without_invocation_times(log):
    for run in log["runs"]:
        for invocation in run["invocations"]:
            invocation.pop("startTimeUtc")
            invocation.pop("endTimeUtc")
            for p in invocation.get("properties", {}).get("passes", []):
                p.pop("durationSeconds")
    return log


@pytest.mark.parametrize("build", [_cnn, _gpt2], ids=["cnn", "gpt2"])
def test_two_exports_give_identical_onnx_bytes_and_sarif(build, tmp_path):
    logs = []
    for i in range(2):
        torch.manual_seed(0)
        model, args = build()
        program = dynamo_onnx.export(model, args)
        program.save(tmp_path / f"m{i}.onnx")
        program.save_diagnostics(tmp_path / f"m{i}.sarif")
        logs.append(json.loads((tmp_path / f"m{i}.sarif").read_text()))
    assert (tmp_path / "m0.onnx").read_bytes() == (tmp_path / "m1.onnx").read_bytes()
    assert logs[0] != logs[1]  # the times differ...
    assert _without_invocation_times(logs[0]) == _without_invocation_times(logs[1])  # only they


class Chain(torch.nn.Module):
    """10,000 ONNX nodes: 5,000 x (sin, mul)."""

    def forward(self, x):
        for _ in range(5000):
            x = torch.sin(x) * 1.0001
        return x


def test_ten_thousand_nodes_at_debug_stay_within_github_limits(tmp_path):
    options = dynamo_onnx.DiagnosticOptions(verbosity_level=logging.DEBUG)
    program = dynamo_onnx.export(Chain(), (torch.randn(4),), diagnostic_options=options)
    assert len(program.model.graph) >= 10_000  # and the constant 1.0001
    x = torch.randn(4)
    torch.testing.assert_close(program(x)[0], Chain()(x))
    path = tmp_path / "chain.sarif"
    program.save_diagnostics(path)
    raw = path.read_bytes()
    run = json.loads(raw)["runs"][0]
    assert len(run["results"]) <= 25_000
    assert len(gzip.compress(raw)) <= 10 * 2**20
    dispatched = [r for r in run["results"] if r["ruleId"] == "DO304"]
    summaries = [r for r in dispatched if r["properties"].get("summary")]
    (summary,) = summaries  # nothing dropped silently: the rest is counted in one result
    assert summary["properties"]["total"] == 10_000
    assert summary["properties"]["omitted"] == 10_000 - summary["properties"]["cap"]
    assert len(dispatched) == summary["properties"]["cap"] + 1
    assert "9500 more DO304 node-dispatched findings (of 10000)" in summary["message"]["text"]
    assert run["properties"]["recordedFindings"] >= 10_000
    assert multitool_errors(path, tmp_path) == []
    markdown = tmp_path / "chain.md"
    program.diagnostics.save_markdown(markdown)
    assert "9500 more" in markdown.read_text()
