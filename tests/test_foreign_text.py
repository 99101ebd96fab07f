"""dynamo_onnx.foreign_text on text recorded from the real torch and ONNX Runtime
(tests/fixtures/foreign_text/<version>/, re-recorded by its record.py): a release that
rewords a message fails here, naming the case, instead of silently turning a finding off."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

import pytest
import torch

from conftest import line_of
from dynamo_onnx import foreign_text
from dynamo_onnx.diagnostics import Location
from dynamo_onnx.foreign_text import (
    CreatedSymbol,
    FailureKind,
    GraphBreak,
    InputMismatch,
    Remainder,
    SizeRef,
    Unparsed,
    UnsupportedType,
    converter_message,
    fx_node_target,
    kernel_registered_in_python,
    read_capture_failure,
    read_ort_error,
    read_program_conditions,
    read_shape_log,
    rewrite_traceback_paths,
    symbol_renamer,
    symbols_in,
)
from dynamo_onnx.passes.base import ShapeLogRecord
from dynamo_onnx.passes.capture.causes import known_cause

ROOT = pathlib.Path(__file__).resolve().parent / "fixtures" / "foreign_text"
#: The recordings these tests read: the torch the project supports.
FIXTURES = ROOT / "torch-2.13"


def _recorder() -> Any:
    """record.py as a module: its models carry the markers of the lines torch names."""
    spec = importlib.util.spec_from_file_location("foreign_text_record", ROOT / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _recorder()


def _cases(kind: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{kind}.json").read_text())["cases"]


def _log(case: str):
    return read_shape_log(ShapeLogRecord(m) for m in _cases("shape_log")[case])


# -- the symbolic-shape log ---------------------------------------------------------------------


def test_a_size_branch_is_a_guard_at_the_users_line_with_the_symbol_torch_made():
    log = _log("narrowed")
    assert log.symbols == (CreatedSymbol("s77", "x", 0, example=8, low=2, high=None),)
    (guard,) = log.guards
    assert guard.expression == "s77 > 4" and guard.symbols == {"s77"}
    assert guard.frame is not None and guard.frame.path_tail.endswith("foreign_text/record.py")
    assert guard.frame.line == line_of(RECORDER.Narrowed.forward, "marker: narrowed")
    assert guard.frame.function == "forward"
    assert (guard.remainder, guard.same, guard.fixed_value, guard.is_equality) == (
        None,
        None,
        None,
        False,
    )
    assert log.unparsed == () and log.symbol_of("x", 0) == "s77" and log.symbol_of("x", 1) is None


def test_a_reshape_by_32_is_a_remainder_guard_and_suppressed_guards_are_skipped():
    log = _log("divisible")
    assert [g.expression for g in log.guards] == [
        "Eq(Mod(s77, 32), 0)",
        "32*((s77//32)) >= 2",
        "Ne((s77//32), 1)",
        "Ne((s77//32), 0)",
        "((s77//32)) >= 2",
    ]  # the four "[guard suppressed]" ones hold for no program
    assert log.guards[0].remainder == Remainder("s77", 32, equal=True)
    assert log.guards[0].frame is not None and log.guards[0].frame.function == "infer_size"
    assert all(g.remainder is None for g in log.guards[1:])


def test_a_remainder_that_must_not_be_zero_and_one_over_a_product():
    log = _log("reshaped")
    by_text = {g.expression: g for g in log.guards}
    assert by_text["Ne(Mod(s77, 12), 0)"].remainder == Remainder("s77", 12, equal=False)
    assert by_text["Eq(Mod(s27*s77, 12), 0)"].remainder is None  # of a product: not one dim's
    assert by_text["Eq(s27*s77, 24)"].symbols == {"s27", "s77"}
    assert log.dims_of(by_text["Eq(s27*s77, 24)"]) == (("x", 0), ("x", 1))
    assert log.dims_of(by_text["Ne(Mod(s77, 12), 0)"]) == (("x", 0),)
    assert by_text["Eq(TruncToInt(IntTrueDiv(s27*s77, 2)), 12)"].fixed_value == "12"
    assert [(s.symbol, s.input, s.dim, s.example) for s in log.symbols] == [
        ("s77", "x", 0, 4),
        ("s27", "x", 1, 6),
    ]


def test_a_size_used_as_a_number_is_a_guard_fixing_its_value():
    log = _log("half_slice")
    fixed, at_least = log.guards
    assert fixed.expression == "Eq(TruncToInt(IntTrueDiv(s77, 2)), 4)"
    assert fixed.fixed_value == "4" and fixed.is_equality
    assert fixed.frame is not None
    assert fixed.frame.line == line_of(RECORDER.HalfSlice.forward, "marker: half")
    assert at_least.expression == "s77 >= 4" and at_least.fixed_value is None


def test_two_sizes_made_one_and_a_size_made_a_constant():
    (same,) = _log("same_length").guards
    assert same.same == ("s77", "s17") and same.fixed_value is None
    assert _log("same_length").symbol_of("y", 0) == "s17"
    (specialized,) = _log("specialized").guards
    assert specialized.expression == "Eq(s77, 8)"
    assert specialized.same is None  # 8 is a number, not a symbol made equal
    assert specialized.fixed_value is None  # a symbol's own value: the program's specialization


def test_a_reworded_guard_or_symbol_is_kept_unparsed_not_dropped():
    log = read_shape_log(
        ShapeLogRecord(m)
        for m in (
            "create_symbol s77 := 8 from L['x'].size()[0]",  # a rewording
            "eval: Eq(s77, 8) was added as a guard",
            "create_env",
            "eval [guard suppressed] Ne(s77, 0) [guard added] (x.py:1 in f)",
            "eval s77 == 8 [statically known]",  # DEBUG records a caller's logging lets in
            "create_symbol s12 duck sized L['y'].size()[0]",
        )
    )
    assert log.symbols == () and log.guards == ()
    assert foreign_text.is_about_a_guard("eval: Eq(s77, 8) was added as a guard")
    assert not foreign_text.is_about_a_guard("eval [guard suppressed] Ne(s77, 0) [guard added]")
    assert not foreign_text.is_about_a_guard("set_replacement s77 = s17 (solve) VR[2, int_oo]")
    assert log.unparsed == (
        Unparsed("symbol", "create_symbol s77 := 8 from L['x'].size()[0]"),
        Unparsed("guard", "eval: Eq(s77, 8) was added as a guard"),
    )


# -- the program's conditions -------------------------------------------------------------------


def _conditions(case: str):
    recorded = _cases("program_conditions")[case]
    return read_program_conditions(recorded["conditions"], recorded["user_inputs"])


def test_a_truncated_half_is_a_condition_fixing_a_computed_size():
    half, at_least = _conditions("half_slice")
    assert half.code == "math.trunc(L['x'].size()[0] / 2) == 4"
    assert half.sizes == (SizeRef("x", 0, "L['x'].size()[0]"),)
    assert (half.expression, half.value) == ("math.trunc(L['x'].size()[0] / 2)", "4")
    assert half.fixes_a_computed_size and half.truncates
    assert half.written_with(lambda name: f"`{name}`") == "math.trunc(`x`.size()[0] / 2) == 4"
    assert [half.holds_at({("x", 0): n}) for n in (8, 9, 16, 10)] == [True, True, False, False]
    assert half.holds_at({("y", 0): 8}) is None  # a size not given: not evaluated
    assert at_least.expression is None and not at_least.fixes_a_computed_size
    assert at_least.holds_at({("x", 0): 4}) is True and at_least.holds_at({("x", 0): 3}) is False


def test_bare_sizes_and_remainders_are_not_computed_sizes():
    (specialized,) = _conditions("specialized")
    assert specialized.expression == "L['x'].size()[0]" and specialized.value == "8"
    assert not specialized.fixes_a_computed_size
    divisible = _conditions("divisible")
    assert divisible[0].code == "(L['x'].size()[0] % 32) == 0"
    assert divisible[0].value == "0" and not divisible[0].fixes_a_computed_size
    assert [divisible[0].holds_at({("x", 0): n}) for n in (64, 96, 65)] == [True, True, False]


def test_a_condition_over_two_inputs_and_a_product():
    (same,) = _conditions("same_length")
    assert [(s.input, s.dim) for s in same.sizes] == [("x", 0), ("y", 0)]
    assert same.holds_at({("x", 0): 3, ("y", 0): 3}) is True
    assert same.holds_at({("x", 0): 3, ("y", 0): 4}) is False
    reshaped = {c.code: c for c in _conditions("reshaped")}
    pairs = reshaped["((L['x'].size()[1]*L['x'].size()[0]) // 12) == 2"]
    assert pairs.fixes_a_computed_size and not pairs.truncates
    assert pairs.holds_at({("x", 0): 4, ("x", 1): 6}) is True
    assert pairs.holds_at({("x", 0): 8, ("x", 1): 12}) is False


def test_flat_argument_names_become_the_inputs_names():
    """Newer torch names inputs by position (``L['flat_args'][1]``)."""
    (condition,) = read_program_conditions(
        ["math.trunc(L['flat_args'][1].size()[0] / 2) == 4"], ["x", "y"]
    )
    assert condition.code == "math.trunc(L['y'].size()[0] / 2) == 4"
    assert condition.sizes == (SizeRef("y", 0, "L['y'].size()[0]"),)
    assert condition.holds_at({("y", 0): 9}) is True


@pytest.mark.parametrize(
    "code",
    [
        "__import__('os').system('true') == 0",
        "L['x'].size()[0].__class__ == 0",
        "[c for c in ()] == []",
        "L['x'].size()[0] in (1, 2)",
    ],
)
def test_a_condition_that_is_not_arithmetic_on_sizes_is_never_run(code):
    """The condition is evaluated by walking its syntax (numbers, sizes, operators, math's
    rounding), never by ``eval``: anything else is "cannot tell"."""
    (condition,) = read_program_conditions([code], ["x"])
    assert condition.holds_at({("x", 0): 2}) is None


# -- torch.export's failures --------------------------------------------------------------------


def _failure(case: str):
    recorded = _cases("capture_errors")[case]
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


# -- ONNX Runtime and the checker ---------------------------------------------------------------


def _ort(case: str):
    return read_ort_error(_cases("ort_errors")[case]["text"])


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


# -- smaller texts ------------------------------------------------------------------------------


def test_symbols_and_their_renaming_respect_whole_names():
    assert symbols_in("32*((s77//32)) + u0 >= s7") == {"s77", "u0", "s7"}
    rename = symbol_renamer({"s7": "batch", "s77": "seq"})
    assert rename("2*s77 + s7") == "2*seq + batch"
    assert symbol_renamer({})("s7") == "s7"


def test_the_small_texts_of_onnx_torch_and_tracebacks():
    assert converter_message("No Adapter From Version $13 for Gemm") == (
        "No Adapter From Version 13 for Gemm"
    )
    kernel = torch.library.get_kernel("aten::relu", "CPU")
    assert not kernel_registered_in_python(repr(kernel))  # a C++ kernel
    assert kernel_registered_in_python("SafeKernelFunction(... registered at /m/ops.py:12)")
    assert fx_node_target(
        "%relu : [num_users=1] = call_function[target=torch.ops.aten.relu.default]"
    ) == ("aten.relu.default")
    trace = '  File "/a/model.py", line 3, in forward\n    x = 1\n  File "/lib/t.py", line 9, in f'
    rewritten = rewrite_traceback_paths(trace, lambda p: "model.py" if p == "/a/model.py" else None)
    assert rewritten == (
        '  File "model.py", line 3, in forward\n    x = 1\n  File "/lib/t.py", line 9, in f'
    )


def test_a_mention_is_of_a_whole_name_or_expression():
    assert foreign_text.mentions("32*s52", "s52") and foreign_text.mentions("32*s52", "32*s52")
    assert not foreign_text.mentions("32*s520", "s52")


def test_a_guard_keeps_the_python_stack_capture_saw_and_a_forced_one_reads_the_same():
    """The user's line is in the stack capture kept with the record, not in torch's text."""
    stack = (Location("/m/model.py", 3, "forward"),)
    (narrowed,) = [m for m in _cases("shape_log")["narrowed"] if m.startswith("eval")]
    forced = narrowed.replace("eval ", "eval (forcing_spec) ", 1)
    plain, forcing = read_shape_log(
        [ShapeLogRecord(narrowed, stack), ShapeLogRecord(forced)]
    ).guards
    assert plain.stack == stack and forcing.stack == ()
    assert plain.expression == forcing.expression == "s77 > 4"


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
