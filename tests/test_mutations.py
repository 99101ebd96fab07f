"""In-place writes to inputs and buffers, in every spelling, are DO120/DO121 at the user's
line: decided from the program's signature (torch.export records each write, through any
view), located at the lines that write. Models that only read their state get none."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx
from conftest import line_of
from hf_models import gpt2, llama

MUTATION_RULES = ("DO120", "DO121")


class SliceIntoCache(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8))

    def forward(self, x):
        self.cache[:, : x.shape[1]] = x  # marker: write
        return self.cache * 2


class AddThroughSelect(torch.nn.Module):
    def forward(self, x):
        x[0].add_(1)  # marker: write
        return x * 2


class NarrowCopy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(8))

    def forward(self, x):
        self.buf.narrow(0, 0, 4).copy_(x)  # marker: write
        return self.buf + 1


class IndexPut(torch.nn.Module):
    def forward(self, x, idx):
        x.index_put_((idx,), torch.ones(3))  # marker: write
        return x.sum(0, keepdim=True)


class PlusEquals(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls += 1  # marker: write
        return x * self.calls


class MulThroughViewOfView(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("grid", torch.ones(4, 4))

    def forward(self, x):
        self.grid[1:][:, 1:].mul_(2)  # marker: write
        return self.grid + x


class TensorCopyIntoSlice(torch.nn.Module):
    def forward(self, x, y):
        torch.Tensor.copy_(x[..., :2], y)  # marker: write
        return x * 1


class KeywordState(torch.nn.Module):
    def forward(self, x, *, state):
        state[0] = 5.0  # marker: write
        return x + 1


class WholeCopy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.zeros(4))

    def forward(self, x):
        y = x * 3
        self.last.copy_(y)  # marker: write
        return y + 1


class TwoWrites(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))

    def forward(self, x):
        self.buf[0] = 1.0  # marker: write
        self.buf[1:3] = x[:2]  # marker: second
        return x + self.buf


#: (model, args, kwargs, rule, the name the message gives)
CASES = {
    "slice-assignment": (SliceIntoCache, lambda: ((torch.randn(2, 4),), {}), "DO121", "cache"),
    "select-add_": (AddThroughSelect, lambda: ((torch.randn(3, 4),), {}), "DO120", "x"),
    "narrow-copy_": (NarrowCopy, lambda: ((torch.randn(4),), {}), "DO121", "buf"),
    "index_put_": (
        IndexPut,
        lambda: ((torch.randn(4, 3), torch.tensor([0, 2])), {}),
        "DO120",
        "x",
    ),
    "plus-equals": (PlusEquals, lambda: ((torch.randn(3),), {}), "DO121", "calls"),
    "view-of-view-mul_": (
        MulThroughViewOfView,
        lambda: ((torch.randn(4, 4),), {}),
        "DO121",
        "grid",
    ),
    "Tensor.copy_": (
        TensorCopyIntoSlice,
        lambda: ((torch.randn(3, 4), torch.randn(3, 2)), {}),
        "DO120",
        "x",
    ),
    "keyword-input": (
        KeywordState,
        lambda: ((torch.randn(3),), {"state": torch.zeros(3)}),
        "DO120",
        "state",
    ),
    "whole-copy_": (WholeCopy, lambda: ((torch.randn(4),), {}), "DO121", "last"),
}


def _mutations(program):
    return [f for f in program.diagnostics.findings if f.rule.id in MUTATION_RULES]


def _check(finding, cls, rule, name):
    assert finding.rule.id == rule
    assert finding.level.name == "WARNING"
    what = "input" if rule == "DO120" else "buffer"
    assert f"{what} `{name}`" in finding.message
    assert (finding.primary.path, finding.primary.line) == (
        __file__,
        line_of(cls.forward, "marker: write"),
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_spelling_of_an_in_place_write_is_a_warning_at_its_line(case):
    cls, inputs, rule, name = CASES[case]
    args, kwargs = inputs()
    program = dynamo_onnx.export(cls().eval(), args, kwargs=kwargs)
    (finding,) = _mutations(program)
    _check(finding, cls, rule, name)
    assert "`aten::" in finding.message  # the operator that writes, as the user called it


def test_the_onnx_model_computes_with_the_written_values_but_keeps_no_state():
    model = SliceIntoCache().eval()
    x = torch.randn(2, 4)
    program = dynamo_onnx.export(model, (x,))
    expected = SliceIntoCache()(x)
    torch.testing.assert_close(program(x)[0], expected)
    torch.testing.assert_close(program(x)[0], expected)  # the same again: no state kept
    given = torch.randn(3, 4)
    before = given.clone()
    program = dynamo_onnx.export(AddThroughSelect(), (given.clone(),))
    torch.testing.assert_close(program(given)[0], AddThroughSelect()(before.clone()))
    torch.testing.assert_close(given, before)  # the caller's input is not changed


def test_two_writes_to_one_buffer_are_one_finding_with_both_lines():
    program = dynamo_onnx.export(TwoWrites().eval(), (torch.randn(4),))
    (finding,) = _mutations(program)
    _check(finding, TwoWrites, "DO121", "buf")
    assert [r.line for r in finding.related] == [line_of(TwoWrites.forward, "marker: second")]
    assert finding.properties["writes"] == 2


@pytest.mark.parametrize("decomposed", [False, True], ids=["captured", "already-decomposed"])
def test_an_exported_program_given_to_export_is_checked_the_same_way(decomposed):
    for cls, build, rule, name in (CASES["narrow-copy_"], CASES["select-add_"]):
        args, kwargs = build()
        ep = torch.export.export(cls(), args, kwargs)
        if decomposed:  # functional already: the lines come from the nodes' provenance
            ep = ep.run_decompositions()
        program = dynamo_onnx.export(ep)
        (finding,) = _mutations(program)
        _check(finding, cls, rule, name)


def test_a_dynamic_slice_assignment_is_found_at_every_size():
    model = SliceIntoCache().eval()
    program = dynamo_onnx.export(model, (torch.randn(2, 4),), dynamic_shapes=({1: "n"},))
    (finding,) = _mutations(program)
    _check(finding, SliceIntoCache, "DO121", "cache")
    for n in (3, 6):
        x = torch.randn(2, n)
        torch.testing.assert_close(program(x)[0], SliceIntoCache()(x))


class ReadsBuffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(10, 4))
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        rows = self.table[:3]
        picked = self.table.narrow(0, 2, 2).sum(0)
        return x * self.scale[None] + rows.mean(0) + picked


def _clean(build):
    model, args, kwargs, dynamic = build()
    return model, args, kwargs


@pytest.mark.parametrize(
    "build",
    [
        lambda: (ReadsBuffers().eval(), (torch.randn(3, 4),), {}),
        lambda: (
            torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval(),
            (torch.randn(2, 3, 8, 8),),
            {},
        ),
        lambda: _clean(gpt2),
        lambda: _clean(llama),
    ],
    ids=["reads-buffers", "batchnorm-eval", "gpt2", "llama"],
)
def test_a_model_that_only_reads_its_state_has_no_mutation_finding(build):
    model, args, kwargs = build()
    program = dynamo_onnx.export(model, args, kwargs=kwargs)
    assert not _mutations(program)
    assert not [f for f in program.diagnostics.findings if f.level.name == "WARNING"]


def test_batchnorm_in_training_is_training_mode_not_a_buffer_update():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    program = dynamo_onnx.export(model, (torch.randn(8, 4),))
    assert program.diagnostics.by_rule("training-mode")
    assert not _mutations(program)


class ChosenFrequencies(torch.nn.Module):
    """transformers' LongRoPE update (``dynamic_rope_update``): the frequencies are chosen
    from the positions and copied into the buffer at every call, then read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(4))
        self.register_buffer("short", torch.ones(4))
        self.long = torch.full((4,), 0.5)  # a plain attribute, as transformers keeps it

    def forward(self, x, position_ids):
        chosen = torch.where(position_ids.max() + 1 > 8, self.long, self.short)
        self.inv_freq.copy_(chosen)  # marker: write
        return x * self.inv_freq


class ChosenThenUpdated(ChosenFrequencies):
    def forward(self, x, position_ids):
        out = super().forward(x, position_ids)
        self.inv_freq.mul_(2)  # marker: second
        return out


@pytest.mark.parametrize("spelling", ["module", "exported-program"])
def test_a_buffer_rewritten_whole_then_read_at_every_call_is_no_finding(spelling):
    """The ONNX model computes the buffer again at every run, so not keeping the update
    changes no output (DO121 would be a false warning); a model that hands the written value
    back (WholeCopy) or updates it after reading is still DO121."""
    model = ChosenFrequencies().eval()
    args = (torch.randn(2, 4), torch.arange(12)[None])
    shapes = (None, {1: torch.export.Dim("n", min=2, max=64)})
    if spelling == "module":
        program = dynamo_onnx.export(model, args, dynamic_shapes=shapes)
    else:
        program = dynamo_onnx.export(torch.export.export(model, args, dynamic_shapes=shapes))
    assert _mutations(program) == []
    for length in (4, 12):  # both branches, at every call
        feeds = (torch.randn(2, 4), torch.arange(length)[None])
        torch.testing.assert_close(program(*feeds)[0], ChosenFrequencies()(*feeds))
    program = dynamo_onnx.export(ChosenThenUpdated().eval(), args)
    (finding,) = _mutations(program)
    assert finding.rule.id == "DO121" and "buffer `inv_freq`" in finding.message
