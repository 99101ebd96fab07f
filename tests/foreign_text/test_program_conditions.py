"""dynamo_onnx.foreign_text.program_conditions on the conditions of ExportedPrograms recorded
from the real torch (torch-<version>/program_conditions.json beside this file)."""

from __future__ import annotations

import pytest
from recorded import cases

from dynamo_onnx.foreign_text import SizeRef, read_program_conditions


def _conditions(case: str):
    recorded = cases("program_conditions")[case]
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
