"""Dynamic shapes: named symbolic dims in the ONNX model, and runs at other sizes."""

from __future__ import annotations

import json

import pytest
import torch

import dynamo_onnx
from conftest import MLPModel, line_of
from dynamo_onnx.diagnostics import Level

transformers = pytest.importorskip("transformers")


#: Every finding here is the same, at the same line, however the caller configured logging.
pytestmark = pytest.mark.usefixtures("caller_logging")


def _dims(value):
    return [str(d) for d in value.shape]


def test_seed_mlp_dynamic_true_runs_at_batch_1_3_64():
    model = MLPModel()
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    program = dynamo_onnx.dynamo_export(model, torch.rand(97, 8), export_options=options)
    (graph_input,) = program.model.graph.inputs
    assert _dims(graph_input) == ["tensor_x_dim_0", "8"]  # derived from the input name
    for batch in (1, 3, 64):
        x = torch.rand(batch, 8)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_gpt2_with_named_dynamic_batch_and_sequence():
    cfg = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    model = transformers.GPT2Model(cfg).eval()
    program = dynamo_onnx.export(
        model,
        (torch.randint(0, 100, (2, 7)),),
        dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"}},
    )
    assert _dims(program.model.graph.inputs[0]) == ["batch", "sequence"]
    assert _dims(program.model.graph.outputs[0]) == ["batch", "sequence", "32"]
    for shape in ((1, 7), (4, 33)):
        ids = torch.randint(0, 100, shape)
        with torch.no_grad():
            expected = model(ids)[0]
        torch.testing.assert_close(program(ids)[0], expected, atol=1e-4, rtol=1e-4)


def test_dim_objects_and_shared_names():
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    batch = torch.export.Dim("batch")
    program = dynamo_onnx.export(
        Add(),
        (torch.randn(3, 4), torch.randn(3, 4)),
        dynamic_shapes=({0: batch}, {0: "batch"}),
    )
    assert [_dims(v) for v in program.model.graph.inputs] == [["batch", "4"], ["batch", "4"]]
    x = torch.randn(5, 4)
    torch.testing.assert_close(program(x, x)[0], x + x)


class Concatenates(torch.nn.Module):
    def forward(self, x, *pasts):
        return tuple(torch.cat([p, x], dim=1) for p in pasts)


@pytest.mark.parametrize("spelling", ["strings", "dims"])
def test_the_names_given_to_tensors_a_parameter_holds_are_the_models(spelling):
    """``*pasts`` (or a list parameter) holds several tensors, each with its spec in a
    tuple: each dimension gets the name given, not ``pasts_0_dim_1``."""
    batch, past, new = (
        ("batch", "past", "new")
        if spelling == "strings"
        else (torch.export.Dim("batch"), torch.export.Dim("past"), torch.export.Dim("new"))
    )
    spec = {"x": {0: batch, 1: new}, "pasts": ({0: batch, 1: past}, {0: batch, 1: past})}
    program = dynamo_onnx.export(
        Concatenates(),
        (torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)),
        input_names=["x", "past_0", "past_1"],
        dynamic_shapes=spec,
    )
    assert [_dims(v) for v in program.model.graph.inputs] == [
        ["batch", "new", "4"],
        ["batch", "past", "4"],
        ["batch", "past", "4"],
    ]
    assert _dims(program.model.graph.outputs[0]) == ["batch", "new + past", "4"]


class Specializes(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if x.shape[0] == 4:  # marker: specializes
            return y + 1
        return y - 1


def test_a_specialized_dynamic_dimension_is_a_warning_with_its_line():
    from conftest import line_of

    program = dynamo_onnx.export(
        Specializes(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: "batch", 1: "features"}}
    )
    (warning,) = program.diagnostics.by_rule("dynamic-dim-specialized")
    assert warning.properties["input"] == "x" and warning.properties["dim"] == 0
    assert warning.properties["value"] == 4
    assert warning.primary.line == line_of(Specializes.forward, "marker: specializes")
    assert f"at tests/test_dynamic_shapes.py:{warning.primary.line}" in warning.message
    assert _dims(program.model.graph.inputs[0]) == ["4", "features"]  # the other stays dynamic
    x = torch.randn(4, 9)
    torch.testing.assert_close(program(x)[0], Specializes()(x))


def _batch_by_tensor(x: torch.Tensor, dim: object) -> torch.export.ShapesCollection:
    collection = torch.export.ShapesCollection()
    collection[x] = {0: dim}
    return collection


def _batch_of_three(x: torch.Tensor) -> torch.export.AdditionalInputs:
    examples = torch.export.AdditionalInputs()
    examples.add((torch.randn(3, 8),))
    return examples


@pytest.mark.parametrize(
    "spec",
    [
        lambda x: _batch_by_tensor(x, torch.export.Dim.AUTO),
        lambda x: _batch_by_tensor(x, torch.export.Dim("batch")),
        _batch_of_three,
    ],
    ids=["ShapesCollection-AUTO", "ShapesCollection-Dim", "AdditionalInputs"],
)
def test_an_example_of_size_one_in_a_spec_by_tensor_is_traced_at_two(spec):
    """A ShapesCollection (or AdditionalInputs) is resolved by parameter before the
    capture, as a dict is: the batch of 1 is traced at 2 (DO129) and stays dynamic. It was
    kept static at 1 with no finding."""
    model, x = torch.nn.Linear(8, 3).eval(), torch.randn(1, 8)
    program = dynamo_onnx.export(model, (x,), dynamic_shapes=spec(x))
    (note,) = program.diagnostics.by_rule("DO129")
    assert "Input `input` dimension 0 has size 1 in the example" in note.message
    assert note.primary.path == __file__
    assert _dims(program.model.graph.inputs[0])[1] == "8"
    assert not _dims(program.model.graph.inputs[0])[0].isdigit()
    for batch in (1, 4):
        inputs = torch.randn(batch, 8)
        torch.testing.assert_close(program(inputs)[0], model(inputs))


def test_an_example_of_size_one_for_a_dynamic_dimension_is_traced_at_two(capfd):
    x = torch.randn(1, 8)
    program = dynamo_onnx.export(MLPModel(), (x,), dynamic_shapes={"tensor_x": {0: "batch"}})
    (note,) = program.diagnostics.by_rule("dynamic-dim-example-widened")
    assert "Input `tensor_x` dimension 0 has size 1 in the example" in note.message
    assert note.primary.path == __file__  # the export call
    assert not program.diagnostics.by_rule("dynamic-dim-example-too-small")
    assert _dims(program.model.graph.inputs[0]) == ["batch", "8"]
    model = MLPModel()
    program = dynamo_onnx.export(model, (x,), dynamic_shapes={"tensor_x": {0: "batch"}})
    for batch in (1, 3):
        inputs = torch.randn(batch, 8)
        torch.testing.assert_close(program(inputs)[0], model(inputs), atol=1e-5, rtol=1e-4)
    assert "create_env" not in capfd.readouterr().err, "torch's shape log is not printed"


class OnlyOneRow(torch.nn.Module):
    def forward(self, x):
        return x.view(8)  # holds for a batch of 1 only


def test_a_size_one_example_the_model_needs_is_a_warning_and_stays_static():
    program = dynamo_onnx.export(
        OnlyOneRow(), (torch.randn(1, 8),), dynamic_shapes={"x": {0: "batch"}}
    )
    (warning,) = program.diagnostics.by_rule("dynamic-dim-example-too-small")
    assert "Input `x` dimension 0 is meant to be dynamic but the example has size 1" in (
        warning.message
    )
    assert _dims(program.model.graph.inputs[0]) == ["1", "8"]


def test_the_torch_onnx_tutorial_call_keeps_its_batch_dynamic_as_torch_onnx_does():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 5), torch.nn.Flatten(), torch.nn.LazyLinear(10)
    )
    x = torch.randn(1, 3, 32, 32)
    model(x)
    model.eval()
    ours = dynamo_onnx.export(
        model, (x,), input_names=["input"], dynamic_axes={"input": {0: "batch_size"}}
    )
    theirs = torch.onnx.export(
        model, (x,), input_names=["input"], dynamic_axes={"input": {0: "batch_size"}}, dynamo=True
    )
    for mine, other in (
        (ours.model.graph.inputs, theirs.model.graph.inputs),
        (ours.model.graph.outputs, theirs.model.graph.outputs),
    ):
        assert [_dims(v) for v in mine] == [_dims(v) for v in other]
    assert _dims(ours.model.graph.inputs[0]) == ["batch_size", "3", "32", "32"]
    (note,) = ours.diagnostics.by_rule("dynamic-dim-example-widened")
    assert "Input `input` dimension 0" in note.message  # the caller's name of the input
    assert not [f for f in ours.diagnostics.findings if f.level >= Level.WARNING]


class ReshapesToTwo(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, -1)  # marker: reshape


class ReshapesToFixed(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, 3, 2)  # marker: fixed-reshape


class AddsBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.ones(2, 6))

    def forward(self, x):
        return x + self.table  # marker: buffer


class Loops(torch.nn.Module):
    def forward(self, x):
        out = x[0]
        for i in range(x.shape[0]):  # marker: loop
            out = out + x[i]
        return out


@pytest.mark.parametrize(
    ("model", "marker"),
    [
        (ReshapesToFixed, "marker: fixed-reshape"),
        (AddsBuffer, "marker: buffer"),
        (Loops, "marker: loop"),
    ],
)
def test_a_dimension_asked_dynamic_that_became_static_is_a_warning_at_the_users_line(model, marker):
    program = dynamo_onnx.export(model(), (torch.rand(2, 6),), dynamic_shapes=({0: "batch"},))
    (finding,) = program.diagnostics.by_rule("dynamic-dim-specialized")
    assert "Input `x` dimension 0" in finding.message and "the constant 2" in finding.message
    assert (finding.primary.path, finding.primary.line) == (
        __file__,
        line_of(model.forward, marker),
    )
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["2", "6"]


class BranchesOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:  # marker: narrowed
            return x + 1
        return x - 1


class Bounded(torch.nn.Module):
    def forward(self, x):
        return x[:64] if x.shape[0] <= 64 else x  # marker: bounded


def test_a_narrowed_range_is_a_warning_with_the_range_the_line_and_the_spec(tmp_path):
    program = dynamo_onnx.export(
        BranchesOnSize(), (torch.rand(6, 3),), dynamic_shapes=({0: "batch"},), report=True,
        artifacts_dir=tmp_path,
    )  # fmt: skip
    (finding,) = program.diagnostics.by_rule("dynamic-dim-narrowed")
    assert "dynamic only for sizes of 5 or more" in finding.message
    assert 'torch.export.Dim("batch", min=5)' in finding.message
    line = line_of(BranchesOnSize.forward, "marker: narrowed")
    assert (finding.primary.path, finding.primary.line) == (__file__, line)
    log = json.loads((tmp_path / "BranchesOnSize.sarif").read_text())
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DO124"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    # what the warning is about: below the range, ONNX keeps the branch taken for the example
    small = torch.rand(3, 3)
    assert not torch.allclose(program(small)[0], BranchesOnSize()(small))
    # declaring the range as the finding says removes the warning
    batch = torch.export.Dim("batch", min=5)
    declared = dynamo_onnx.export(
        BranchesOnSize(), (torch.rand(6, 3),), dynamic_shapes=({0: batch},)
    )
    assert not declared.diagnostics.by_rule("dynamic-dim-narrowed")


def test_an_upper_bound_is_a_narrowed_range_too():
    program = dynamo_onnx.export(Bounded(), (torch.rand(8, 3),), dynamic_shapes=({0: "batch"},))
    (finding,) = program.diagnostics.by_rule("dynamic-dim-narrowed")
    assert "max=" in finding.message
    assert finding.primary.line == line_of(Bounded.forward, "marker: bounded")


def test_a_dim_that_does_not_fit_is_refined_as_torch_suggests_and_said(tmp_path):
    batch = torch.export.Dim("batch")  # strict: torch.export alone fails on this model
    program = dynamo_onnx.export(
        BranchesOnSize(), (torch.rand(6, 3),), dynamic_shapes=({0: batch},), report=True,
        artifacts_dir=tmp_path,
    )  # fmt: skip
    (finding,) = program.diagnostics.by_rule("dynamic-shapes-refined")
    assert finding.level.name == "WARNING"
    assert "batch = Dim('batch', min=5)" in finding.message
    assert "dynamic_shapes=({0: Dim('batch', min=5)},)" in finding.message
    line = line_of(BranchesOnSize.forward, "marker: narrowed")
    assert (finding.primary.path, finding.primary.line) == (__file__, line)
    assert not program.diagnostics.by_rule("dynamic-dim-narrowed")  # one finding, one cause
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["batch", "3"]
    for size in (5, 9):
        x = torch.rand(size, 3)
        torch.testing.assert_close(program(x)[0], BranchesOnSize()(x))


class BlocksOf32(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] % 32 == 0:  # marker: divisible
            return x.view(-1, 32, 3).sum(1)
        return x[:1]


def test_a_branch_on_divisibility_is_a_warning_with_the_multiple_spec():
    """torch.export keeps the range [2, inf) but the graph holds only for multiples of 32:
    at 40 the ONNX model would reshape where eager slices."""
    program = dynamo_onnx.export(BlocksOf32(), (torch.rand(64, 3),), dynamic_shapes=({0: "b"},))
    (finding,) = program.diagnostics.by_rule("dynamic-dim-narrowed")
    assert "dynamic only for multiples of 32 because of `Eq(Mod(" in finding.message
    assert 'declare it as 32 * torch.export.Dim("b_div_32")' in finding.message
    assert finding.primary.line == line_of(BlocksOf32.forward, "marker: divisible")
    declared = 32 * torch.export.Dim("b_div_32")
    program = dynamo_onnx.export(
        BlocksOf32(), (torch.rand(64, 3),), dynamic_shapes=({0: declared},)
    )
    assert not program.diagnostics.by_rule("dynamic-dim-narrowed")
    x = torch.rand(96, 3)
    torch.testing.assert_close(program(x)[0], BlocksOf32()(x))


def test_a_branch_on_not_divisible_says_no_dim_expresses_it():
    program = dynamo_onnx.export(BlocksOf32(), (torch.rand(63, 3),), dynamic_shapes=({0: "b"},))
    (finding,) = program.diagnostics.by_rule("dynamic-dim-narrowed")
    assert "dynamic only for sizes that are not multiples of 32" in finding.message
    assert "no Dim spec expresses that: rewrite the line with torch.cond" in finding.message
    assert finding.primary.line == line_of(BlocksOf32.forward, "marker: divisible")
    x = torch.rand(64, 3)  # the size the warning is about: ONNX slices where eager reshapes
    assert program(x)[0].shape != BlocksOf32()(x).shape


class ViewsBlocks(torch.nn.Module):
    def forward(self, x):
        return x.view(-1, 32, 3).sum(1)  # marker: view


def test_a_strict_dim_refined_to_a_multiple_runs_and_torch_prints_nothing(capfd):
    """The constraint violation of the first attempt is the DO125 finding, not torch's
    "Error while creating guard" log with its stack on stderr."""
    batch = torch.export.Dim("batch")
    program = dynamo_onnx.export(ViewsBlocks(), (torch.rand(64, 3),), dynamic_shapes=({0: batch},))
    (finding,) = program.diagnostics.by_rule("dynamic-shapes-refined")
    assert "batch = 32*_batch" in finding.message
    for size in (32, 96):
        x = torch.rand(size, 3)
        torch.testing.assert_close(program(x)[0], ViewsBlocks()(x))
    assert "Error while creating guard" not in capfd.readouterr().err


class NarrowBySize(torch.nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return x.narrow(0, 1, n // 2), x[:, : x.shape[1] - n // 4]


def test_a_size_computed_from_a_dynamic_dim_stays_an_integer_index(caller_logging):
    """``narrow``'s length is a SymInt in its schema: it is not cast to the tensor's dtype
    (the model was invalid: Add of int64 and float)."""
    model, x = NarrowBySize(), torch.randn(8, 6)
    program = dynamo_onnx.export(model, (x,), dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    other = torch.randn(12, 8)
    for got, want in zip(program(other), model(other)):
        torch.testing.assert_close(got, want)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]


class TruncatedHalf(torch.nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return x[: int(n / 2)]  # marker: truncated-half


def test_a_number_torch_keeps_constant_is_a_warning_at_its_line(caller_logging):
    """``int(n / 2)`` is a float truncated: torch.export keeps 4 (its module checks
    ``trunc(n / 2) == 4`` when called, ONNX cannot): the ONNX model slices 4 rows at every
    size, and says so."""
    program = dynamo_onnx.export(
        TruncatedHalf(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: "batch"}}
    )
    assert program(torch.randn(12, 3))[0].shape[0] == 4  # eager: 6
    (finding,) = [f for f in program.diagnostics.by_rule("DO124") if "trunc" in f.message]
    assert "sizes where `math.trunc(x.size()[0] / 2) == 4`" in finding.message
    assert "uses 4 at every size" in finding.message
    assert "`n // 2`, not `int(n / 2)`" in finding.message
    assert finding.primary.snippet.endswith("# marker: truncated-half")


class HalvedReshape(torch.nn.Module):
    def forward(self, x):
        n, m = x.shape
        return x.reshape(int(n * m / 2), 2)


def test_a_size_check_that_holds_at_other_sizes_is_no_warning():
    """``reshape(int(n * m / 2), 2)``: torch.export's program checks
    ``(n * m) // trunc(n * m / 2) == 2`` (an equality with a constant, like a truncated
    size kept constant), but it holds at every even size and the model computes the size
    at run time: no DO124, and the model is right at other sizes (torch.onnx's is not)."""
    dims = ({0: torch.export.Dim("n"), 1: torch.export.Dim("m")},)
    program = dynamo_onnx.export(HalvedReshape(), (torch.randn(4, 6),), dynamic_shapes=dims)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for shape in ((4, 6), (6, 8), (3, 2)):
        x = torch.randn(*shape)
        torch.testing.assert_close(program(x)[0], HalvedReshape()(x))


class BlockReshape(torch.nn.Module):
    """Qwen2.5-VL's vision tower in small: patches embedded by a convolution, then grouped
    by blocks of 4 (``reshape(n // 4, 4, -1)``), which holds for multiples of 4 only."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv3d(3, 8, kernel_size=2, stride=2)

    def forward(self, x):
        x = self.proj(x.view(-1, 3, 2, 2, 2)).view(-1, 8)
        n = x.shape[0]
        return x.reshape(n // 4, 4, -1)[torch.arange(n // 4)].reshape(n, -1)


def test_a_size_declared_a_multiple_is_probed_at_multiples():
    """The size check of ``reshape(n // 4, 4, -1)`` holds at every multiple of 4: declared
    ``4 * Dim``, no DO124 (the probe steps by 4); declared any size, the warning stays."""
    model, x = BlockReshape(), torch.randn(12, 24)
    multiple = {"x": {0: torch.export.Dim("blocks") * 4}}
    program = dynamo_onnx.export(model, (x,), dynamic_shapes=multiple)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    other = torch.randn(20, 24)
    torch.testing.assert_close(program(other)[0], model(other))
    program = dynamo_onnx.export(model, (x,), dynamic_shapes={"x": {0: "n"}})
    assert program.diagnostics.by_rule("DO124")


class CausalMask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(32, 32).tril())

    def forward(self, x):
        n = x.shape[1]
        return x.masked_fill(self.mask[:n, :n] == 0, -1.0)  # marker: sliced-buffer


@pytest.mark.parametrize(
    "seq",
    [torch.export.Dim("seq"), torch.export.Dim("seq", max=32)],
    ids=["unbounded", "bounded"],
)
def test_a_buffer_sliced_by_a_dynamic_size_exports_valid_up_to_its_size(seq):
    """The buffer bounds ``seq`` to 32 (torch suggests ``max=32``), and torch also guards
    ``seq != 32`` (its slice of the whole buffer), which no Dim expresses: the retry defers
    such guards, as torch.onnx does, instead of failing. The one restriction the user must
    hear about, seq <= 32, is the warning at their line; at 32 itself the model runs."""
    model = CausalMask()
    program = dynamo_onnx.export(
        model, (torch.randn(3, 5, 5),), dynamic_shapes={"x": {1: seq, 2: seq}}
    )
    warnings = [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    if seq.max == 32:  # the spec already fits: nothing to say
        assert not warnings
    else:
        (finding,) = warnings
        assert finding.rule.id == "DO125"
        assert "seq = Dim('seq', max=32)" in finding.message
        assert "L['x'].size()[1] <= 32" in finding.message  # what torch's fix is for
        line = line_of(CausalMask.forward, "marker: sliced-buffer")
        assert (finding.primary.path, finding.primary.line) == (__file__, line)
    for size in (9, 32):
        x = torch.randn(3, size, size)
        torch.testing.assert_close(program(x)[0], model(x))


class TakeAlongDim(torch.nn.Module):
    def forward(self, x, idx):
        return torch.take_along_dim(x, idx, dim=-1)  # marker: take-along


def _indices(batch, seq):
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, seq, 6, generator=g), torch.randint(
        0, 6, (batch, seq, 2), generator=g
    )


def _input_dims(program) -> dict[str, list]:
    return {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in program.model_proto.graph.input
    }


@pytest.mark.parametrize(
    "spelling",
    [
        lambda m, a: dynamo_onnx.dynamo_export(
            m, *a, export_options=dynamo_onnx.ExportOptions(dynamic_shapes=True)
        ),
        lambda m, a: dynamo_onnx.export(m, a, dynamic_shapes=True),
        lambda m, a: dynamo_onnx.export(
            m,
            a,
            dynamic_shapes={
                "x": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},
                "idx": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},
            },
        ),
        lambda m, a: dynamo_onnx.export(
            m,
            a,
            input_names=["x", "idx"],
            dynamic_axes={"x": {0: "batch", 1: "seq"}, "idx": {0: "batch", 1: "seq"}},
        ),
    ],
    ids=["dynamo_export", "dynamic_shapes=True", "Dim.AUTO", "dynamic_axes"],
)
def test_sizes_torch_fixes_in_an_operators_trace_stay_dynamic_where_the_model_runs(spelling):
    """``torch.take_along_dim`` reads its inputs' sizes as integers in torch's trace, so
    torch.export fixes 3 and 5 though the model runs at any size (compat case 481: torch.onnx
    keeps them). Captured again with the guards deferred, they stay dynamic: right against
    eager at other sizes, and nothing to warn about, in each spelling of the request."""
    program = spelling(TakeAlongDim(), _indices(3, 5))
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    assert not program.diagnostics.by_rule("DO128")
    dims = _input_dims(program)
    assert all(isinstance(d, str) for d in dims["x"][:2] + dims["idx"][:2]), dims
    for batch, seq in ((3, 5), (5, 9), (2, 2)):
        x, idx = _indices(batch, seq)
        torch.testing.assert_close(program(x, idx)[0], TakeAlongDim()(x, idx))


class LinearAfterTake(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 4)

    def forward(self, x, idx):
        taken = torch.take_along_dim(x, idx, dim=-1)
        return self.linear(taken)  # marker: linear-features


class SizeBranch(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 5:  # marker: size-branch
            return x * 2
        return x * 3


def test_sizes_the_model_needs_stay_static_with_the_line_that_fixes_them():
    """Where eager refuses another size (a Linear's 2 features) or computes something else
    there (a branch on the size), the deferred capture's program is not kept for that
    dimension: it stays static, listed in the DO128 note at the line that fixes it, while
    the sizes only torch's trace fixed stay dynamic."""
    model = LinearAfterTake().eval()
    program = dynamo_onnx.export(model, _indices(3, 5), dynamic_shapes=True)
    dims = _input_dims(program)
    assert isinstance(dims["x"][0], str) and isinstance(dims["x"][1], str), dims
    assert dims["idx"][2] == 2, dims
    (note,) = program.diagnostics.by_rule("DO128")
    assert "`idx` dimension 2 = 2" in note.message
    line = line_of(LinearAfterTake.forward, "marker: linear-features")
    assert (note.primary.path, note.primary.line) == (__file__, line)
    for batch, seq in ((3, 5), (4, 7)):
        x, idx = _indices(batch, seq)
        torch.testing.assert_close(program(x, idx)[0], model(x, idx))

    program = dynamo_onnx.export(SizeBranch(), (torch.randn(3, 5),), dynamic_shapes=True)
    assert _input_dims(program)["x"] == ["x_dim_0", 5]
    (note,) = program.diagnostics.by_rule("DO128")
    assert "`x` dimension 1 = 5" in note.message
    line = line_of(SizeBranch.forward, "marker: size-branch")
    assert (note.primary.path, note.primary.line) == (__file__, line)
    x = torch.randn(4, 5)
    torch.testing.assert_close(program(x)[0], SizeBranch()(x))


class ShiftRight(torch.nn.Module):
    def forward(self, x):
        y = torch.zeros_like(x)
        y[:, 1:] = x[:, :-1]
        return y


class MiddleColumns(torch.nn.Module):
    def forward(self, x):
        return x[:, 1:3]


class SlicedMask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(32, 32).tril(), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        return x.masked_fill(self.mask[:n, :n] == 0, -1.0)


class Conv1dK3(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(4, 4, 3)

    def forward(self, x):
        return self.conv(x)


def _export_each_way(model, x, dims):
    """The same dynamic dims, spelled as torch.onnx's ``dynamic_axes`` and as
    ``dynamic_shapes`` names, through ``export`` and ``dynamo_export``."""
    yield dynamo_onnx.export(model, (x,), input_names=["x"], dynamic_axes={"x": dims})
    yield dynamo_onnx.export(model, (x,), dynamic_shapes={"x": dims})
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    yield dynamo_onnx.dynamo_export(model, x, export_options=options)


@pytest.mark.parametrize(
    ("model", "make", "dims", "sizes"),
    [
        # torch keeps the derived size n - 1 off 0 and 1 (range n >= 3): the program is
        # valid at every size, 1 and 2 included
        (ShiftRight, lambda b, n: torch.rand(b, n, 6), {0: "batch", 1: "seq"}, (1, 2, 9)),
        # x[:, 1:3] gets n >= 3; below, eager and ONNX both clamp the slice
        (MiddleColumns, lambda b, n: torch.rand(b, n, 6), {0: "batch", 1: "seq"}, (1, 2, 9)),
        # the 32-row mask: n <= 32 is the model's own (eager fails at 33 too)
        (SlicedMask, lambda b, n: torch.rand(b, n, n), {0: "batch", 1: "n", 2: "n"}, (2, 32)),
        # kernel 3 needs 3 steps: eager rejects 1 and 2 as the ONNX model does
        (Conv1dK3, lambda b, n: torch.rand(b, 4, n), {0: "batch", 2: "length"}, (3, 17)),
    ],
    ids=["shift-right", "middle-columns", "mask-sliced-by-size", "conv1d-k3"],
)
def test_a_range_narrowed_where_the_program_still_holds_is_no_warning(model, make, dims, sizes):
    model = model().eval()
    for program in _export_each_way(model, make(3, 5), dims):
        assert not program.diagnostics.by_rule("dynamic-dim-narrowed")
        assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
        for size in sizes:
            x = make(2, size)
            torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


class SlicesOnlyWhenLong(torch.nn.Module):
    def forward(self, x):
        return x[:, 1:3] * 2 if x.shape[1] >= 3 else x  # marker: slices when long


def test_a_slice_behind_a_branch_on_the_size_is_still_a_narrowed_range():
    model = SlicesOnlyWhenLong()
    for program in _export_each_way(model, torch.rand(3, 5, 6), {0: "batch", 1: "seq"}):
        (finding,) = program.diagnostics.by_rule("dynamic-dim-narrowed")
        assert "dynamic only for sizes of 3 or more" in finding.message
        line = line_of(SlicesOnlyWhenLong.forward, "marker: slices when long")
        assert (finding.primary.path, finding.primary.line) == (__file__, line)
        # the finding is true: below the range the ONNX model keeps the long branch
        small = torch.rand(2, 2, 6)
        assert program(small)[0].shape != model(small).shape


class BranchesOnWidth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[1] > 4:  # marker: width-branch
            return self.fc(x[:, 1:3])
        return self.fc(x)


def test_a_narrowed_range_in_fake_mode_is_still_a_warning():
    """The range probe cannot run a model without data (both runs would raise, and so
    "agree"): in fake mode the narrowing stays a warning, as with real weights."""
    for fake in (True, False):
        if fake:
            with dynamo_onnx.enable_fake_mode():
                model, x = BranchesOnWidth(), torch.randn(2, 6, 4)
        else:
            model, x = BranchesOnWidth(), torch.randn(2, 6, 4)
        program = dynamo_onnx.export(model, (x,), dynamic_shapes={"x": {1: "n"}})
        (finding,) = program.diagnostics.by_rule("DO124")
        line = line_of(BranchesOnWidth.forward, "marker: width-branch")
        assert (finding.primary.path, finding.primary.line) == (__file__, line), fake


@pytest.mark.parametrize("spec", [{"x": {0: "b"}}, ({0: "b"},)], ids=["by-name", "by-position"])
def test_a_reshape_that_holds_at_every_size_keeps_the_dimension_a_named_axis_asked(spec):
    """``x.reshape(2, -1)`` of a (b, 4) input holds at every b (2 rows of 2*b): torch.export
    fixes b at the example's 2 all the same; the deferred capture keeps it, right at b = 3.
    Of a (b, 3) input it holds at even b only: eager refuses b = 3, so b stays static with
    DO106 at the line (the warning tests/test_trusted_findings.py shows on the terminal)."""
    model = ReshapesToTwo()
    program = dynamo_onnx.export(model, (torch.rand(2, 4),), dynamic_shapes=spec)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["b", "4"]
    for batch in (2, 3, 5):
        x = torch.rand(batch, 4)
        torch.testing.assert_close(program(x)[0], model(x))
    program = dynamo_onnx.export(model, (torch.rand(2, 3),), dynamic_shapes=spec)
    (finding,) = program.diagnostics.by_rule("dynamic-dim-specialized")
    assert (finding.primary.path, finding.primary.line) == (
        __file__,
        line_of(ReshapesToTwo.forward, "marker: reshape"),
    )
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["2", "3"]


class ViewOfAView(torch.nn.Module):
    """PyTorch's own exporter test (test_view_dynamic_zero_dim)."""

    def forward(self, x):
        return x.view(-1, 2).view(1, -1)


def _by_tensor(x: torch.Tensor, dim: object) -> torch.export.ShapesCollection:
    collection = torch.export.ShapesCollection()
    collection[x] = {0: dim}
    return collection


def _more_examples(x: torch.Tensor) -> torch.export.AdditionalInputs:
    examples = torch.export.AdditionalInputs()
    examples.add((torch.ones(6),))
    return examples


#: Each spelling of "dimension 0 of x is dynamic" a user can write, given the example x.
VIEW_SPELLINGS = {
    "dynamic_axes": lambda x: {"dynamic_axes": {"input_1": [0]}, "input_names": ["input_1"]},
    "dynamic_axes-named": lambda x: {"dynamic_axes": {"x": {0: "n"}}},
    "named": lambda x: {"dynamic_shapes": {"x": {0: "n"}}},
    "Dim.DYNAMIC": lambda x: {"dynamic_shapes": ({0: torch.export.Dim.DYNAMIC},)},
    "Dim.AUTO": lambda x: {"dynamic_shapes": ({0: torch.export.Dim.AUTO},)},
    "Dim": lambda x: {"dynamic_shapes": {"x": {0: torch.export.Dim("n")}}},
    "Dim-range": lambda x: {"dynamic_shapes": [{0: torch.export.Dim("n", min=0, max=64)}]},
    # by tensor: resolved by parameter before the capture, whose repeated example
    # (DO129) is new tensors a collection keyed by tensor did not know
    "ShapesCollection-AUTO": lambda x: {"dynamic_shapes": _by_tensor(x, torch.export.Dim.AUTO)},
    "ShapesCollection-Dim": lambda x: {"dynamic_shapes": _by_tensor(x, torch.export.Dim("n"))},
    "AdditionalInputs": lambda x: {"dynamic_shapes": _more_examples(x)},
}


@pytest.mark.parametrize("spelling", list(VIEW_SPELLINGS))
def test_a_view_of_a_view_runs_at_every_size_zero_included(spelling):
    """Traced at size 2, ``x.size(0) // 2`` is 1 and torch fixes the second view to
    [1, 2]: the ONNX Reshape refused sizes 0 and 6 (issue 46), with no finding. The example
    is repeated (DO129, a note at the export call), and the model computes the view at
    every size, as torch.onnx's does, whatever the spelling of the dynamic dimension."""
    x = torch.ones(2)
    program = dynamo_onnx.export(ViewOfAView(), (x,), **VIEW_SPELLINGS[spelling](x))
    for size in (0, 2, 6):
        x = torch.arange(size, dtype=torch.float32)
        torch.testing.assert_close(program(x)[0], ViewOfAView()(x))
    # DO124, where given: the view needs an even size, which is true
    assert {f.rule.id for f in program.diagnostics.findings if f.level >= Level.WARNING} <= {
        "DO124"
    }
    (note,) = program.diagnostics.by_rule("DO129")
    assert note.level == Level.NOTE and note.primary.path == __file__
    assert "has size 2 in the example, which made a size computed from it 1" in note.message
