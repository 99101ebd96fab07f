"""The semantics pass alone: what the program does that ONNX will not do the same way."""

from __future__ import annotations

import torch
from helpers import program_state

from conftest import line_of
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.decompose import DecomposePass
from dynamo_onnx.passes.semantics import SemanticsPass


class Dropped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x)


class Counts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x * 2


def test_training_mode_is_one_finding_naming_the_module():
    ctx = DiagnosticContext()
    SemanticsPass()(ctx, program_state(Dropped().train(), (torch.randn(4),)))
    (finding,) = ctx.by_rule("DO122")
    assert "`drop`" in finding.message
    assert not ctx.by_rule("DO123")  # the dropout's draw is DO122's, not repeated


def test_an_eval_mode_model_has_no_finding():
    ctx = DiagnosticContext()
    SemanticsPass()(ctx, program_state(Dropped().eval(), (torch.randn(4),)))
    assert not [f for f in ctx.findings if f.level.name in ("WARNING", "ERROR")]


def test_a_buffer_the_forward_updates_is_reported():
    # The pass runs after decomposition: the program is functional and its signature
    # names the buffer; the captured program gives the line.
    ctx = DiagnosticContext()
    state = DecomposePass()(ctx, program_state(Counts().eval(), (torch.randn(4),)))
    assert state.captured_program is not None
    SemanticsPass()(ctx, state)
    (finding,) = ctx.by_rule("buffer-mutated")
    assert "calls" in finding.message
    assert finding.primary.line == line_of(Counts.forward, "add_")


def test_a_captured_program_alone_has_no_mutation_in_its_signature():
    # torch.export's captured graph keeps the in-place operator and an empty signature:
    # what the pass decides from is the functional program's.
    ctx = DiagnosticContext()
    SemanticsPass()(ctx, program_state(Counts().eval(), (torch.randn(4),)))
    assert not ctx.by_rule("buffer-mutated")
