"""dynamo_onnx.foreign_text.ort_errors on ONNX Runtime's and the ONNX checker's errors
recorded from the real ONNX Runtime and onnx (torch-<version>/ort_errors.json beside this
file)."""

from __future__ import annotations

from recorded import cases

from dynamo_onnx.foreign_text import InputMismatch, UnsupportedType, read_ort_error


def _ort(case: str):
    return read_ort_error(cases("ort_errors")[case]["text"])


def test_a_run_failure_names_its_node_and_the_reason_without_cpp():
    reshape = _ort("run_reshape")
    assert reshape.failed_node == "reshape_n1"
    assert reshape.reason == (
        "The input tensor cannot be reshaped to the requested shape. "
        "Input shape:{3,8}, requested shape:{2,8}"
    )
    squeeze = _ort("run_squeeze")
    assert squeeze.failed_node == "squeeze_n1"
    assert squeeze.reason == "Dimension of input 1 must be 1 instead of 2"
    assert squeeze.input_mismatch == InputMismatch(None, 1, expected="1", got="2")
    assert reshape.input_mismatch is None and reshape.unsupported_type is None


def test_an_input_refused_at_run_time_by_dimension_or_type():
    dims = _ort("run_invalid_dimensions")
    assert dims.input_mismatch == InputMismatch("x", 0, expected="2", got="3")
    assert dims.failed_node is None
    assert dims.reason == "Got invalid dimensions for input: x for the following indices"
    dtype = _ort("run_input_type")
    assert dtype.input_mismatch == InputMismatch(
        None, None, expected="tensor(float)", got="tensor(double)"
    )


def test_load_and_checker_failures_name_the_node_and_the_unsupported_type():
    mismatch = _ort("load_type_mismatch")
    assert mismatch.nodes == ("add_n0",) and mismatch.unsupported_type is None
    for case in ("load_unsupported_type", "check_unsupported_type"):
        error = _ort(case)
        assert error.nodes == ("relu_n0",), case
        assert error.unsupported_type == UnsupportedType("Relu", "bool"), case
