"""The diagnostic context, findings and the rule catalog, without torch."""

from __future__ import annotations

import logging
import pathlib
import re
import traceback

import pytest

from dynamo_onnx.diagnostics import DiagnosticContext, DiagnosticOptions, Level, Location
from dynamo_onnx.diagnostics.context import exception_frames
from dynamo_onnx.diagnostics.findings import frame_locations, parse_stack_trace
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.rules import catalog, get_rule


def test_levels_are_logging_levels():
    assert Level.NONE == logging.DEBUG
    assert Level.NOTE == logging.INFO
    assert Level.WARNING == logging.WARNING
    assert Level.ERROR == logging.ERROR
    assert Level.WARNING > logging.INFO


def test_catalog_ids_and_names_are_unique_and_well_formed():
    rules = list(catalog())
    assert len({r.id for r in rules}) == len(rules)
    for rule in rules:
        assert re.fullmatch(r"DO\d{3}", rule.id), rule.id
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name), rule.name
        assert rule.short.endswith("."), rule.id
        assert rule.help and rule.full
        assert rule.fix and "\n" not in rule.fix and rule.fix.endswith((".", ")")), rule.id
        assert rule.pass_name in (*PassName.all(), "export"), rule.id
    for pass_name in PassName.all():  # every pass has a failure rule of its own or DO900
        assert catalog().for_pass(pass_name).pass_name in (
            pass_name,
            "finalize",
            "capture",
            "export",
            "verification",  # the session pass: running the model fails as verification does
        )


def test_rule_message_needs_every_field():
    rule = get_rule("unsupported-operator")
    assert rule.fields == ("op", "source", "decomposition")
    assert "`aten::foo`" in rule.format_message(op="aten::foo", source="m.py:3", decomposition="d")
    with pytest.raises(KeyError, match="DO301"):
        rule.format_message(op="aten::foo")


def test_pass_records_duration_and_turns_exceptions_into_findings():
    ctx = DiagnosticContext()
    with ctx.pass_("capture"):
        pass
    with pytest.raises(ZeroDivisionError):
        with ctx.pass_("decomposition"):
            _ = 1 / 0
    assert [(p.name, p.outcome) for p in ctx.passes] == [
        ("capture", "ok"),
        ("decomposition", "failed"),
    ]
    assert all(p.duration_s >= 0 for p in ctx.passes)
    (finding,) = ctx.findings
    assert finding.rule.id == "DO200"
    assert finding.level == Level.ERROR
    assert finding.pass_name == "decomposition"
    assert "ZeroDivisionError: division by zero" in finding.message
    assert finding.primary is not None and finding.primary.path == __file__


def test_an_exception_is_recorded_once():
    ctx = DiagnosticContext()
    with pytest.raises(ValueError):
        with ctx.pass_("translation"):
            try:
                raise ValueError("inner")
            except ValueError as exc:
                ctx.record_exception(exc, "translation-failed")
                raise
    assert len(ctx.findings) == 1


def test_verbosity_filters_rendering_not_recording():
    ctx = DiagnosticContext(DiagnosticOptions(verbosity_level=logging.WARNING))
    ctx.record("capture-strategy-succeeded", strategy="s", nodes=1)
    ctx.record("unsupported-operator", level=Level.WARNING, op="x", source="y", decomposition="d")
    assert len(ctx.findings) == 2
    assert [f.rule.id for f in ctx.visible()] == ["DO301"]


def test_warnings_as_errors_promotes_in_rendering():
    ctx = DiagnosticContext(DiagnosticOptions(warnings_as_errors=True))
    finding = ctx.record(
        "unsupported-operator", level=Level.WARNING, op="x", source="y", decomposition="d"
    )
    assert finding.level == Level.WARNING
    assert ctx.effective_level(finding) == Level.ERROR
    assert ctx.has_errors()


@pytest.mark.parametrize("bad", [5, "INFO", True, None])
def test_invalid_verbosity_is_rejected(bad):
    with pytest.raises(ValueError, match="verbosity_level"):
        DiagnosticOptions(verbosity_level=bad)


def test_stack_trace_parsing_is_innermost_first():
    text = (
        'File "/m/model.py", line 10, in forward\n    x = self.block(x)\n'
        'File "/m/block.py", line 3, in forward\n    return torch.relu(x)\n'
    )
    frames = parse_stack_trace(text)
    assert frames == (Location("/m/block.py", 3, "forward"), Location("/m/model.py", 10, "forward"))


def test_carry_puts_an_earlier_contexts_findings_first_once():
    """export_llm's load context folded into the export's: its findings first (they came
    first), each once however often it is carried, the later context's own kept."""
    load, export = DiagnosticContext(), DiagnosticContext()
    early = load.record("weights-left-in-float", left=1, quantizable=2, precision="int4", names="a")
    late = export.record("model-optimized", before=3, after=2)
    export.carry(load)
    export.carry(load)
    assert export.findings == [early, late]
    assert load.findings == [early]
    export.carry(export)  # itself: nothing new
    assert export.findings == [early, late]


def _inner():
    raise ValueError("here")


def _outer():
    _inner()


def _here():
    return frame_locations(traceback.extract_stack())


def test_a_traceback_and_the_live_stack_become_locations_innermost_first():
    try:
        _outer()
    except ValueError as exc:
        frames = exception_frames(exc)
    this = pathlib.Path(__file__).resolve()
    assert [(f.function, pathlib.Path(f.path).resolve()) for f in frames] == [
        ("_inner", this),
        ("_outer", this),
        ("test_a_traceback_and_the_live_stack_become_locations_innermost_first", this),
    ]
    assert frames[0].line == _inner.__code__.co_firstlineno + 1
    stack = _here()
    assert [f.function for f in stack[:2]] == [
        "_here",
        "test_a_traceback_and_the_live_stack_become_locations_innermost_first",
    ]
    assert stack[0].line == _here.__code__.co_firstlineno + 1


@pytest.mark.e2e
def test_a_failure_outside_any_pass_is_still_an_error_result(monkeypatch):
    import torch

    import dynamo_onnx
    from dynamo_onnx.passes import validate as api

    def broken_registry():
        raise RuntimeError("registry exploded")

    monkeypatch.setattr(api, "OnnxRegistry", broken_registry)
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        dynamo_onnx.export(torch.nn.ReLU(), (torch.randn(2),))
    assert str(info.value).startswith(
        "[DO900 internal-error] Internal error: RuntimeError: registry exploded"
    )
    log = info.value.diagnostics.to_sarif()
    (result,) = log["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("DO900", "error")
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_code_with_no_file_is_the_users_only_when_the_export_was_called_from_such_code():
    """A ``<string>`` frame is transformers' dataclass ``__init__`` when the export was called
    from a file (the CLI's factory), and the user's own code under ``python -c``."""
    library = "/venv/site-packages/transformers/modeling_outputs.py"
    frames = [Location("<string>", 1, "__init__"), Location(library, 40, "forward")]
    from_a_file = DiagnosticContext(
        call_site=Location("/repo/make_model.py", 3, "build"), library_prefixes=["/venv/"]
    )
    assert from_a_file.user_frame(frames) is None
    from_the_command_line = DiagnosticContext(
        call_site=Location("<string>", 1, "<module>"), library_prefixes=["/venv/"]
    )
    assert from_the_command_line.user_frame(frames) == frames[0]
    assert from_a_file.user_frame([Location("/repo/model.py", 9, "forward"), *frames]).line == 9
