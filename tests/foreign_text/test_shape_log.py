"""dynamo_onnx.foreign_text.shape_log on torch's symbolic-shape log recorded from the real
torch (torch-<version>/shape_log.json beside this file, re-recorded by record.py): a release
that rewords a message fails here, naming the case, instead of silently turning a finding
off."""

from __future__ import annotations

from recorded import RECORDER, cases

from conftest import line_of
from dynamo_onnx import foreign_text
from dynamo_onnx.diagnostics import Location
from dynamo_onnx.foreign_text import CreatedSymbol, Remainder, Unparsed, read_shape_log
from dynamo_onnx.passes.base import ShapeLogRecord


def _log(case: str):
    return read_shape_log(ShapeLogRecord(m) for m in cases("shape_log")[case])


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


def test_a_guard_keeps_the_python_stack_capture_saw_and_a_forced_one_reads_the_same():
    """The user's line is in the stack capture kept with the record, not in torch's text."""
    stack = (Location("/m/model.py", 3, "forward"),)
    (narrowed,) = [m for m in cases("shape_log")["narrowed"] if m.startswith("eval")]
    forced = narrowed.replace("eval ", "eval (forcing_spec) ", 1)
    plain, forcing = read_shape_log(
        [ShapeLogRecord(narrowed, stack), ShapeLogRecord(forced)]
    ).guards
    assert plain.stack == stack and forcing.stack == ()
    assert plain.expression == forcing.expression == "s77 > 4"
