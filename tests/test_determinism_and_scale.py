"""Same model, same bytes; a model of more nodes than a rule keeps, and tens of thousands of
findings, stay within GitHub's limits with every omission counted."""

from __future__ import annotations

import collections
import gzip
import json
import logging

import pytest
import torch

import dynamo_onnx
from conftest import SmallCNN, line_of
from dynamo_onnx.diagnostics import Location
from dynamo_onnx.reports import ReportingContext, sarif
from dynamo_onnx.rules import catalog, get_rule
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
    """1,500 ONNX nodes: 750 x (sin, mul), three times the notes a rule keeps."""

    def forward(self, x):
        for _ in range(750):
            x = torch.sin(x) * 1.0001
        return x


def test_a_model_of_more_nodes_than_a_rule_keeps_has_them_counted_in_one_result(tmp_path):
    """The export's own notes past the cap: the first 500 DO304 results, then one that counts
    the rest and says where the first left out is; nothing dropped silently."""
    options = dynamo_onnx.DiagnosticOptions(verbosity_level=logging.DEBUG)
    program = dynamo_onnx.export(Chain(), (torch.randn(4),), diagnostic_options=options)
    assert len(program.model.graph) >= 1_500
    x = torch.randn(4)
    torch.testing.assert_close(program(x)[0], Chain()(x))
    path = tmp_path / "chain.sarif"
    program.save_diagnostics(path)
    run = json.loads(path.read_bytes())["runs"][0]
    dispatched = [r for r in run["results"] if r["ruleId"] == "DO304"]
    (summary,) = [r for r in dispatched if r["properties"].get("summary")]
    assert summary["properties"]["total"] == 1_500
    assert summary["properties"]["cap"] == sarif.NOTE_CAP
    assert summary["properties"]["omitted"] == 1_500 - sarif.NOTE_CAP
    assert len(dispatched) == sarif.NOTE_CAP + 1
    assert "1000 more DO304 node-dispatched findings (of 1500)" in summary["message"]["text"]
    assert summary["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith(
        "test_determinism_and_scale.py"
    )
    assert run["properties"]["recordedFindings"] >= 1_500
    markdown = tmp_path / "chain.md"
    program.diagnostics.save_markdown(markdown)
    assert "1000 more" in markdown.read_text()


def _line_here() -> Location:
    return Location(__file__, line_of(_line_here, "return Location"), "_line_here")


def test_tens_of_thousands_of_findings_of_many_rules_stay_within_github_limits(tmp_path):
    """GitHub code scanning takes 25,000 results per run and 10 MB gzipped. Per-rule caps
    alone would pass it (six warning rules of 4,300 each, under their cap of 5,000): the
    largest rules keep fewer, a rule with few findings keeps them all, notes keep their cap,
    and every omission is counted."""
    ctx = ReportingContext(dynamo_onnx.DiagnosticOptions(verbosity_level=logging.DEBUG))
    rules = [r for r in catalog() if r.level == "warning" and not r.deprecated][:7]
    counts = {rule.id: 4_300 for rule in rules[:6]} | {rules[6].id: 40}
    notes = get_rule("DO304")
    counts[notes.id] = 2_000
    where = _line_here()
    for rule in [*rules, notes]:
        fields = {name: f"{name}-value" for name in rule.fields}
        for _ in range(counts[rule.id]):
            ctx.record(rule, locations=[where], **fields)
    ctx.finish()
    path = tmp_path / "many.sarif"
    ctx.save_sarif(path)
    raw = path.read_bytes()
    run = json.loads(raw)["runs"][0]
    assert len(run["results"]) <= sarif.RESULTS_LIMIT
    assert len(gzip.compress(raw)) <= 10 * 2**20
    by_rule = collections.Counter(r["ruleId"] for r in run["results"])
    summaries = {
        r["ruleId"]: r["properties"] for r in run["results"] if "summary" in r.get("properties", {})
    }
    assert by_rule[rules[6].id] == 40 and rules[6].id not in summaries  # all kept
    assert by_rule[notes.id] == sarif.NOTE_CAP + 1  # notes keep their cap
    for rule in rules[:6]:  # lowered below PROBLEM_CAP, the rest counted
        kept = by_rule[rule.id] - 1
        assert kept < sarif.PROBLEM_CAP
        assert summaries[rule.id]["omitted"] == 4_300 - kept == 4_300 - summaries[rule.id]["cap"]
    assert len(run["results"]) > sarif.RESULTS_LIMIT - 10  # lowered no more than it must
    assert sum(p.get("omitted", 0) for p in summaries.values()) + len(run["results"]) - len(
        summaries
    ) == sum(counts.values())
    assert multitool_errors(path, tmp_path) == []
