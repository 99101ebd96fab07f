"""The defaults the exporter picks a number for live in dynamo_onnx.defaults: the public
signatures take them from there, and the docs and the rules' help state the same values
(a default changed in one line fails here until its docs follow)."""

from __future__ import annotations

import inspect
import pathlib

import pytest

from dynamo_onnx import defaults
from dynamo_onnx.rules import catalog

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def _sci(value: float) -> str:
    """``1e-4`` as the docs write it."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _parameters(function) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(function).parameters.items()}


def test_the_public_signatures_take_their_defaults_from_one_place():
    from dynamo_onnx import ONNXProgram
    from dynamo_onnx.llm_folder import export_llm
    from dynamo_onnx.runtimes.onnxruntime.quantize import Quantization

    quantize, verify = _parameters(ONNXProgram.quantize), _parameters(ONNXProgram.verify)
    llm, spec = _parameters(export_llm), Quantization()
    assert quantize["precision"] == spec.precision == defaults.QUANTIZATION_PRECISION
    for name, value in (
        ("block_size", defaults.QUANTIZATION_BLOCK_SIZE),
        ("symmetric", defaults.QUANTIZATION_SYMMETRIC),
        ("accuracy_level", defaults.QUANTIZATION_ACCURACY_LEVEL),
    ):
        assert quantize[name] == llm[name] == getattr(spec, name) == value, name
    assert (verify["atol"], verify["rtol"]) == (defaults.VERIFY_ATOL, defaults.VERIFY_RTOL)


@pytest.mark.parametrize(
    ("document", "phrase"),
    [
        (
            "usage.md",
            f"`block_size={defaults.QUANTIZATION_BLOCK_SIZE}`, "
            f"`symmetric={defaults.QUANTIZATION_SYMMETRIC}`",
        ),
        ("usage.md", f"`accuracy_level={defaults.QUANTIZATION_ACCURACY_LEVEL}`"),
        (
            "usage.md",
            f"atol={_sci(defaults.VERIFY_ATOL)}, rtol={_sci(defaults.VERIFY_RTOL)}",
        ),
        ("llm.md", f"blocks of {defaults.QUANTIZATION_BLOCK_SIZE} weights"),
        ("llm.md", f"accuracy level\n{defaults.QUANTIZATION_ACCURACY_LEVEL} (`accuracy_level`"),
        ("performance.md", f"blocks of {defaults.QUANTIZATION_BLOCK_SIZE}"),
    ],
)
def test_the_docs_state_the_defaults(document, phrase):
    assert phrase in (DOCS / document).read_text(), f"docs/{document} lacks {phrase!r}"


def test_the_quantization_rule_states_the_defaults():
    help_text = catalog().get("DO506").help
    assert (
        f"block_size={defaults.QUANTIZATION_BLOCK_SIZE}, "
        f"symmetric={defaults.QUANTIZATION_SYMMETRIC}, "
        f"accuracy_level={defaults.QUANTIZATION_ACCURACY_LEVEL}"
    ) in help_text


def test_the_docs_check_can_fail():
    """The helper writes a tolerance as the docs do, and a wrong value is not found."""
    assert (_sci(1e-4), _sci(1e-3), _sci(5e-3)) == ("1e-4", "1e-3", "5e-3")
    assert "atol=1e-5" not in (DOCS / "usage.md").read_text()
