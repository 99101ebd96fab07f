"""A fixed sample of ``make compat`` (benchmarks/compat.py): generated models exported by
dynamo-onnx and by torch.onnx with the same call, both run in ONNX Runtime at two sizes of the
dynamic dimensions and compared with eager. No case may fail with dynamo-onnx where torch.onnx
matches eager, and a failed export must name a line of the case's file.

The sample is the first 17 cases of seed 0 (one model of each family, which take every call
form: ``test_the_sample_covers_every_family_and_call_form``), the cases make compat found and
that were fixed since (regressions), and the cases that fail today, each an
xfail(strict=True) with the issue it belongs to. torch.onnx runs on a case only when
dynamo-onnx does not match eager (``--reference on-failure``): a case of ours that matches is
no bug whatever torch.onnx does, and torch.onnx's export is six times ours (17 s of the
sample's 20).
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import torch
from torch.export import Dim

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import compat
import compat_models

SEED = 0
#: Cases dynamo-onnx gets wrong today, found by ``make compat``: index -> the reason and the
#: issue it belongs to. They are in the sample so that the fix flips them.
KNOWN: dict[int, str] = {}
#: Cases make compat found and that were fixed since: they stay in the sample as regressions.
FIXED: dict[int, str] = {
    1857: (
        "adaptive_avg_pool2d of a dynamic size (a strided conv's output) was DO303 "
        "'needs static spatial sizes': the averaging matrix is now made in the graph"
    ),
    481: (
        "issue 33: dynamo_export with ExportOptions(dynamic_shapes=True) on "
        "torch.take_along_dim: torch.export's trace of the operator fixed every size; now "
        "captured again with the guards deferred and kept dynamic where the model runs"
    ),
    62: (
        "issue 33: a buffer sliced by a dynamic size (mask[:n, :n]) gave torch.export's "
        "suggested fix seq <= 32, then a second guard seq != 32 with no fix: DO100"
    ),
    98: "issue 33 (None outputs): `return y, None` was DO110 where torch.onnx drops the None",
}
#: The generator deals the families in turn and the call forms in turn
#: (compat_models.generate): its first cases, one per family, take every call form too.
FIRST = len(compat_models.FAMILIES)
SAMPLE = [*range(FIRST), *FIXED, *KNOWN]


@pytest.fixture(scope="module")
def rows() -> dict[int, dict]:
    # in this process (jobs=0): a worker's start-up was half of the sample's time
    rows = compat.run(SEED, SAMPLE, jobs=0, timeout=120, reference="on-failure")
    return {row["index"]: row for row in rows}


def _param(index: int) -> object:
    if index in KNOWN:
        return pytest.param(index, marks=pytest.mark.xfail(strict=True, reason=KNOWN[index]))
    return index


@pytest.mark.parametrize("index", [_param(i) for i in SAMPLE])
def test_no_failure_of_ours_where_torch_onnx_matches_eager(rows, index):
    row = rows[index]
    assert row["verdict"] != "invalid", row.get("detail")
    ours = row["dynamo_onnx"]
    assert row["bug"] is None, (
        f"case {index} ({row['family']}: {row['title']}; {row['form']}): {row['bug']}\n"
        f"dynamo-onnx: {ours['status']} {ours['rule']} {ours['detail']}\n"
        f"torch.onnx: {row['torch_onnx']['status']} {row['torch_onnx']['detail']}\n"
        f"{row['source']}"
    )


def test_the_sample_covers_every_family_and_call_form():
    cases = [compat_models.generate(SEED, i) for i in range(FIRST)]
    assert {c.family for c in cases} == set(compat_models.FAMILIES)
    assert {c.form for c in cases} == set(compat_models.CALL_FORMS)
    # a second size is tried for the dynamic call forms
    assert any(len(c.sizes()) == 2 for c in cases if c.form.startswith("dynamic_shapes"))


def test_cases_are_the_same_for_the_same_seed_and_differ_between_seeds():
    assert compat_models.generate(3, 17) == compat_models.generate(3, 17)
    assert compat_models.generate(3, 17).source != compat_models.generate(4, 17).source


@pytest.mark.parametrize(
    ("ours", "theirs", "verdict", "bug"),
    [
        (compat.Outcome("match"), compat.Outcome("match"), "agree", None),
        (compat.Outcome("mismatch", size=1), compat.Outcome("match"), "ours-only", "mismatch"),
        (compat.Outcome("run-failed"), compat.Outcome("match"), "ours-only", "run-failed"),
        (compat.Outcome("match"), compat.Outcome("export-failed"), "torch-only", None),
        # --reference on-failure: torch.onnx is not run when ours matches
        (compat.Outcome("match"), compat.Outcome("not-run"), "ours-match", None),
        (
            compat.Outcome("export-failed", "DO301", line=12),
            compat.Outcome("export-failed"),
            "both-fail",
            None,
        ),
        # failing with no line of the user's code is a bug even when torch.onnx fails too
        (
            compat.Outcome("export-failed", "DO900"),
            compat.Outcome("export-failed"),
            "both-fail",
            "DO900 (a generic rule) names no line",
        ),
    ],
)
def test_verdicts(ours, theirs, verdict, bug):
    got, reason = compat.verdict_of(ours, theirs)
    assert got == verdict
    if bug is None:
        assert reason is None
    else:
        assert reason is not None and bug in reason


def test_the_report_has_the_figures_and_the_disagreements(rows):
    summary = compat.summarize(list(rows.values()))
    assert summary["cases"] == len(SAMPLE)
    assert sum(summary["verdicts"].values()) == len(SAMPLE)
    report = {
        "date": "today",
        "machine": "test",
        "seconds": 1.0,
        "versions": {"torch": "x"},
        "config": {"seed": SEED},
        "summary": summary,
        "cases": list(rows.values()),
    }
    text = compat.markdown(report)
    assert f"| agree | {summary['verdicts']['agree']} |" in text
    assert f"| **ours-only failures** | **{summary['verdicts']['ours-only']}** |" in text
    for form in compat_models.CALL_FORMS:
        assert f"| {form} |" in text


@pytest.mark.parametrize("ours", ["match", "mismatch", "export-failed"])
def test_on_failure_torch_onnx_runs_only_where_ours_does_not_match(ours, monkeypatch, tmp_path):
    """What the quick reference skips: torch.onnx where dynamo-onnx matches eager, nothing
    else (the exporters are stood in for: the order and the verdicts are the point)."""
    ran = []

    def exporter(name, *args):
        ran.append(name)
        return compat.Outcome("match" if name == "torch_onnx" else ours, line=3)

    monkeypatch.setattr(compat, "_run_exporter", exporter)
    row = compat.check_case(SEED, 0, 60, str(tmp_path), reference="on-failure")
    if ours == "match":
        assert ran == ["dynamo_onnx"] and row["verdict"] == "ours-match" and not row["bug"]
        assert row["torch_onnx"]["status"] == "not-run"
    else:
        assert ran == ["dynamo_onnx", "torch_onnx"] and row["verdict"] == "ours-only"
        assert row["bug"] == f"dynamo-onnx {ours}, torch.onnx matches eager"
    ran.clear()
    compat.check_case(SEED, 0, 60, str(tmp_path))  # the full run: both, torch.onnx first
    assert ran == ["torch_onnx", "dynamo_onnx"]


def test_a_worker_that_dies_in_our_export_is_a_crash_of_ours():
    """ONNX Runtime can kill the process (case 264: nn.EmbeddingBag through dynamo_export);
    the exporter that was running is the one that crashed, torch.onnx's outcome stays."""
    done = {"torch_onnx": compat.dataclasses.asdict(compat.Outcome("match"))}
    row = compat._crashed(SEED, 264, {"stage": "dynamo_onnx", "done": done})
    assert row["dynamo_onnx"]["status"] == "crash"
    assert row["torch_onnx"]["status"] == "match"
    assert row["verdict"] == "ours-only" and "crash" in row["bug"]
    row = compat._crashed(SEED, 264, {"stage": "torch_onnx", "done": {}})
    assert row["torch_onnx"]["status"] == "crash" and row["dynamo_onnx"]["status"] == "not-run"
    assert row["verdict"] == "both-fail" and row["bug"] is None


def test_a_smaller_run_is_kept_beside_the_full_one(tmp_path):
    """``--add-run``: the full run's figures stay, the smaller run is a row of its own
    with its bugs and notes; ``--render`` keeps it."""

    def report(seed, cases, bug):
        row = {
            "index": 7, "family": "conv-pool", "title": "t", "form": "positional",
            "verdict": "ours-only" if bug else "ours-match", "bug": bug,
            "dynamo_onnx": {"status": "run-failed", "rule": "X", "detail": "bad"},
            "torch_onnx": {"status": "match", "rule": None, "detail": ""},
        }  # fmt: skip
        rows = [row] * cases
        return {
            "date": "today", "machine": "test", "seconds": 2.0, "cpu_seconds": 1.0,
            "versions": {"torch": "x"},
            "config": {"seed": seed, "start": 0, "timeout": 60, "reference": "on-failure"},
            "summary": compat.summarize(rows), "cases": rows,
        }  # fmt: skip

    full, small = tmp_path / "compat.json", tmp_path / "small.json"
    markdown = tmp_path / "compat.md"
    full.write_text(json.dumps(report(0, 3, None)))
    small.write_text(json.dumps(report(46, 2, "dynamo-onnx run-failed")))
    args = ["--json", str(full), "--markdown", str(markdown)]
    assert compat.main([*args, "--add-run", str(small), "--note", "case 7 left as is"]) == 0
    assert compat.main([*args, "--render"]) == 0
    text = markdown.read_text()
    assert "(seed 0, 3 cases)" in text
    assert "| today | 46 | 0 to 1 | on-failure | 0 | 0 | 2 | 0 | 0 | 0 | 2 |" in text
    assert "- seed 46, cases [7, 7]: conv-pool: run-failed X: bad" in text
    assert "- seed 46: case 7 left as is." in text
    assert len(json.loads(full.read_text())["cases"]) == 3


def test_a_case_runs_alone_and_a_chunk_at_opset_17_matches(capsys):
    """``--case N`` prints the case and its row (``--add-run``'s variable once shadowed the
    ``run`` it calls); seed 0 case 431, ``x.chunk(3, dim=-1)`` at opset 17, was DO402 (a
    Split with num_outputs) and now matches eager."""
    assert compat.main(["--seed", "0", "--case", "431", "--reference", "on-failure"]) == 0
    out = capsys.readouterr().out
    assert "x.chunk(3, dim=-1)" in out
    assert '"verdict": "ours-match"' in out


def test_a_size_the_given_program_refuses_is_not_compared():
    """Seed 46 case 225: ``torch.export.export`` with ``Dim.AUTO`` on a conv1d + max_pool1d
    fixes the length at its example size 11 (the program's own guard refuses 6). dynamo-onnx
    keeps that dimension static, as the program does; torch.onnx names it as a symbol
    ``"11"``, so its model runs at 6. A size the user's program refuses is no size to compare
    at: the case was an ours-only failure and agrees now, both exporters skipping it."""
    [row] = compat.run(46, [225], jobs=0, timeout=120, reference="always")
    ours, theirs = row["dynamo_onnx"], row["torch_onnx"]
    assert row["verdict"] == "agree" and row["bug"] is None, (ours, theirs)
    assert row["outside"] == [1]
    # a case that gives a module has no program to ask: every size is compared
    [row] = compat.run(SEED, [0], jobs=0, timeout=120, reference="on-failure")
    assert "outside" not in row and row["verdict"] == "ours-match"


def test_an_error_of_ours_names_the_line_that_called_the_exporter():
    """Seed 48 case 1433 (take_along_dim, Dim.DYNAMIC on every size: torch fixes them):
    both exporters fail; dynamo-onnx's DO100 is located at the case's export call, which
    the harness must leave first in the stack (a stand-in exporter there made it 'names no
    line of the user's code')."""
    [row] = compat.run(48, [1433], jobs=0, timeout=120, reference="on-failure")
    ours = row["dynamo_onnx"]
    assert (ours["status"], ours["rule"]) == ("export-failed", "DO100")
    source = compat_models.generate(48, 1433).source.splitlines()
    assert source[ours["line"] - 1].strip().startswith("return onnx.export(model, args")
    assert row["bug"] is None


class _Pool(torch.nn.Module):
    def forward(self, x, *, scale):
        return torch.nn.functional.max_pool1d(x, 2) * scale.sum()  # fixes a Dim.AUTO length


class _Double(torch.nn.Module):
    def forward(self, x, *, scale):
        return x * 2 + scale.sum()


@pytest.mark.parametrize(
    ("model", "example", "spec", "accepted", "refused"),
    [
        # a Dim.AUTO torch.export fixed at 11: a SymInt whose expression is the number
        (_Pool(), (3, 4, 11), {0: Dim.AUTO, 2: Dim.AUTO}, [(5, 4, 11)], [(5, 4, 6)]),
        # Dim.AUTO and Dim.DYNAMIC kept dynamic: any size from 2; the rank stays
        (_Double(), (4, 5), {0: Dim.AUTO, 1: Dim.DYNAMIC}, [(7, 30)], [(7, 5, 1)]),
        # a named Dim with bounds, and a dimension left static
        (_Double(), (4, 5), {0: Dim("n", min=2, max=8)}, [(8, 5)], [(9, 5), (4, 6)]),
    ],
)
def test_the_sizes_an_exported_program_accepts(model, example, spec, accepted, refused):
    """``compat.accepts`` reads the program's placeholders and ranges, as its guards check
    them: a static dimension must match, a symbol stays in its range (keyword inputs in the
    program's order)."""
    scale = torch.ones(3)
    program = torch.export.export(
        model, (torch.randn(example),), {"scale": scale}, dynamic_shapes={"x": spec, "scale": None}
    )
    for dims in accepted:
        assert compat.accepts(program, (torch.randn(dims),), {"scale": scale}), dims
    for dims in refused:
        assert not compat.accepts(program, (torch.randn(dims),), {"scale": scale}), dims
