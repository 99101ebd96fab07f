"""dynamo_onnx.foreign_text.capture_failures on torch.export's and eager PyTorch's exceptions
recorded from the real torch (torch-<version>/capture_failures.json beside this file)."""

from __future__ import annotations

import pytest
from recorded import cases

from dynamo_onnx.foreign_text import (
    FailureKind,
    GraphBreak,
    Unparsed,
    read_capture_failure,
)
from dynamo_onnx.passes.capture.causes import known_cause


def _failure(case: str):
    recorded = cases("capture_failures")[case]
    return read_capture_failure(recorded["type"], recorded["text"])


def test_a_data_dependent_branch_in_both_modes():
    non_strict = _failure("data_dependent_non_strict")
    assert non_strict.exception_type == "GuardOnDataDependentSymNode"
    assert non_strict.kind is FailureKind.DATA_DEPENDENT
    assert non_strict.data_dependent_expression == "Eq(u0, 1)"
    strict = _failure("data_dependent_strict")
    assert (strict.exception_type, strict.kind) == ("Unsupported", FailureKind.DATA_DEPENDENT)
    assert strict.data_dependent_expression is None  # strict mode gives no condition
    for failure in (non_strict, strict):
        assert known_cause(failure).rule == "data-dependent-control-flow"


def test_a_data_pointer_and_a_quantized_weight():
    pointer = _failure("data_pointer")
    assert pointer.kind is FailureKind.DATA_POINTER
    assert known_cause(pointer).rule == "untraceable-kernel"
    quantized = _failure("quantized")
    assert (quantized.exception_type, quantized.kind) == (
        "UnsupportedFakeTensorException",
        FailureKind.QUANTIZED,
    )
    cause = known_cause(quantized)
    assert cause.rule == "dtype-not-in-onnx" and dict(cause.fields)["dtype"] == "quantized"
    assert not pointer.inputs_do_not_fit and not quantized.constraints_violated


def test_a_spec_torch_refuses_with_its_violation_and_suggested_fix():
    failure = _failure("constraints_violated")
    assert failure.constraints_violated and failure.kind is None
    assert failure.violations == (
        "Not all values of n = L['x'].size()[0] in the specified range satisfy the generated "
        "guard 5 <= L['x'].size()[0] and L['x'].size()[0] <= IntInfinity()",
    )
    assert failure.suggested_fixes == ("n = Dim('n', min=5)",)


def test_eager_pytorchs_error_on_inputs_that_do_not_fit():
    failure = _failure("eager_shapes")
    assert failure.inputs_do_not_fit and failure.kind is None
    assert known_cause(failure) is None  # told only when the model cannot run eagerly
    unknown = read_capture_failure("TypeError", "linear(): argument 'input' must be Tensor")
    assert (unknown.kind, unknown.inputs_do_not_fit, unknown.violations) == (None, False, ())


@pytest.mark.parametrize("case", ["cond_aliasing_non_strict", "cond_aliasing_strict"])
def test_a_graph_break_keeps_torchs_cause_explanation_and_hints(case):
    """TorchDynamo's first line says only "Got graph break/error:"; the cause follows."""
    failure = _failure(case)
    assert isinstance(failure.graph_break, GraphBreak)
    assert failure.graph_break.headline == "Encountered aliasing during higher order op tracing"
    assert failure.graph_break.details == ("Higher Order Operator: torch.cond",)
    assert "Replace `return input` with `return input.clone()`" in failure.graph_break.hints[0]
    cause = failure.root_cause
    assert cause.startswith("This higher order operator doesn't work")
    assert "Got graph break/error: Encountered aliasing" in cause
    assert "Higher order ops do not support aliasing" in cause
    assert "0x" not in cause and "Developer debug context" not in cause  # no address, no graph


def test_a_graph_break_in_other_words_is_quoted_not_lost():
    text = "Not captured. Got graph break/error:\n\n\n"
    failure = read_capture_failure("Unsupported", text)
    assert isinstance(failure.graph_break, Unparsed)
    other = read_capture_failure("Unsupported", "x. Got graph break/error:\nSomething new\n")
    assert other.graph_break == GraphBreak("Something new")
    assert other.root_cause == "x. Got graph break/error: Something new."


def test_an_output_type_with_no_pytree_registration_is_named_in_both_modes():
    assert (
        _failure("dataclass_output_non_strict").unregistered_output
        == "record._dataclass_output.<locals>.Pair"
    )
    assert _failure("dataclass_output_strict").unregistered_output == "Pair"
    assert _failure("eager_shapes").unregistered_output is None
