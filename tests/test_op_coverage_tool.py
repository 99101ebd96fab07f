"""`make coverage` (benchmarks/op_coverage.py) on two operators: both exporters run in the
same process, each sample is compared with eager, and the report says what it measured."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import op_coverage


@pytest.fixture(scope="module")
def results():
    return [op_coverage.check_operator(name, 2, 120) for name in ("sub", "rand_like")]


def test_every_sample_is_run_by_both_exporters_and_compared(results):
    sub, rand_like = results
    assert sub["name"] == "sub" and len(sub["dtypes"]["float32"]) == 2
    assert {"float16", "int64"} <= set(sub["dtypes"])
    for rows in sub["dtypes"].values():
        for row in rows:
            assert row["dynamo_onnx"]["status"] == "match", row
            assert row["torch_onnx"]["status"] in op_coverage.STATUSES
    # random operators are compared on shape and dtype, never reported as mismatches
    statuses = {row["dynamo_onnx"]["status"] for row in rand_like["dtypes"]["float32"]}
    assert statuses <= {"shape-only", "match"} and "shape-only" in statuses


def test_the_report_has_the_figures_and_a_row_per_operator(results):
    summary = op_coverage.summarize(results)
    assert summary["operators_tested"] == 2
    assert summary["float32_good"]["dynamo_onnx"] == 2
    report = {
        "date": "today",
        "machine": "test",
        "seconds": 1.0,
        "versions": {"torch": "x"},
        "config": {"samples": 2, "timeout": 120},
        "summary": summary,
        "operators": results,
    }
    text = op_coverage.markdown(report)
    assert "| float32 operators matching eager (of 2) | **2** |" in text
    assert "| `sub` | ✅ match |" in text
    assert "| `rand_like` | ✅ shape/dtype |" in text


def test_the_readme_quotes_the_figures_of_docs_coverage_json():
    """coverage.json (written by `make coverage`) is the source; README quotes it."""
    import json
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    summary = json.loads((root / "docs" / "coverage.json").read_text())["summary"]
    readme = " ".join((root / "README.md").read_text().split())
    found = re.search(
        r"of torch's (\d+) OpInfo operators with a float32 sample, (\d+) match eager through "
        r"ONNX Runtime here and (\d+) with `torch.onnx.export\(dynamo=True\)`",
        readme,
    )
    assert found, "README no longer states the coverage figures"
    good = summary["float32_good"]
    expected = (summary["operators_tested"], good["dynamo_onnx"], good["torch_onnx"])
    assert tuple(int(g) for g in found.groups()) == expected
    table = (root / "docs" / "coverage.md").read_text()
    assert f"| float32 operators matching eager (of {expected[0]}) | **{expected[1]}** |" in table


def test_an_error_naming_a_file_of_the_checkout_names_it_from_the_checkout():
    error = RuntimeError(
        f"aten::cholesky_inverse at {op_coverage.ROOT}/benchmarks/op_coverage.py:136"
    )
    assert (
        op_coverage._first_line(error) == "aten::cholesky_inverse at benchmarks/op_coverage.py:136"
    )
