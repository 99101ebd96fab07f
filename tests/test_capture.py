"""Capture: strategies in order, each failure a finding, a CaptureError when all fail."""

from __future__ import annotations

import onnx
import pytest
import torch
import transformers

import dynamo_onnx
import hf_models
from conftest import line_of
from dynamo_onnx.diagnostics import Level


class Raises(torch.nn.Module):
    """Runs in eager PyTorch; refuses while torch.export traces it (no rule explains it)."""

    def forward(self, x):
        x = x + 1
        if torch.compiler.is_exporting():
            raise ValueError("the model refuses")  # marker: raise
        return x


def test_all_strategies_failing_gives_capture_error_with_every_cause():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(Raises(), (torch.randn(2),))
    error = info.value
    lines = str(error).splitlines()
    assert lines[0].startswith("[DO100 capture-failed]")
    causes = [line for line in lines if line.startswith("  - ")]
    assert len(causes) == 2
    assert "strict=False" in causes[0] and "strict=True" in causes[1]
    assert all("the model refuses" in c for c in causes)
    assert lines[-1].startswith("Fix: Read the capture-strategy-failed findings")
    assert "torch.cond" not in lines[-1]  # the fix of a branch, not of this cause
    strategy_findings = error.diagnostics.by_rule("capture-strategy-failed")
    assert len(strategy_findings) == 2
    line = line_of(Raises.forward, "marker: raise")
    assert strategy_findings[0].primary.line == line
    assert error.diagnostics.by_rule("DO100")[0].primary.line == line
    assert [(p.name, p.outcome) for p in error.diagnostics.passes] == [
        ("validate", "ok"),
        ("capture", "failed"),
    ]


def test_nonstrict_success_records_the_strategy():
    program = dynamo_onnx.export(torch.nn.ReLU(), (torch.randn(2),))
    (finding,) = program.diagnostics.by_rule("capture-strategy-succeeded")
    assert finding.properties["strategy"] == "torch.export.export(strict=False)"
    assert finding.properties["nodes"] >= 3


def test_opset_out_of_range_is_rejected_up_front():
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="opset_version"):
        dynamo_onnx.export(torch.nn.ReLU(), (torch.randn(2),), opset_version=3)


@pytest.mark.parametrize("opset", [20, 23])
def test_export_at_newer_opsets_runs(opset):
    from conftest import SmallCNN

    model, x = SmallCNN().eval(), torch.randn(2, 3, 16, 16)
    program = dynamo_onnx.export(model, (x,), opset_version=opset)
    assert program.model_proto.opset_import[0].version == opset
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-4, rtol=1e-4)


class NormedMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.fc(x).relu())


class SampledMLP(NormedMLP):
    def forward(self, x):
        image = self.norm(self.fc(x).relu()).reshape(1, 1, *x.shape)
        grid = torch.zeros(1, 2, 2, 2)
        return torch.nn.functional.grid_sample(image, grid, align_corners=False)


def test_a_downconversion_that_cannot_happen_names_the_blocking_operators():
    """ONNX has GridSample from opset 16 only, and nothing older expresses it: at 15 it
    blocks, and only it (the LayerNormalization, 17, is lowered)."""
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        dynamo_onnx.export(SampledMLP(), (torch.randn(2, 8),), opset_version=15)
    text = str(info.value)
    assert text.startswith(
        "[DO402 opset-conversion-failed] Could not convert the model from opset 18 to opset 15: "
        "blocked by GridSample (1 node(s): No Previous Version of GridSample exists; the "
        "oldest opset that takes it: 16)"
    )
    (finding,) = info.value.diagnostics.by_rule("DO402")
    assert finding.pass_name == "opset-conversion"
    assert finding.properties["blocking_ops"] == ["GridSample"]
    assert finding.primary.path == __file__
    assert "torch.nn.functional.grid_sample(image, grid" in finding.primary.snippet
    assert "$" not in text


def test_a_downconversion_the_converter_can_do_happens():
    from conftest import MLPModel

    model, x = MLPModel(), torch.randn(2, 8)
    program = dynamo_onnx.export(model, (x,), opset_version=17)
    assert program.model_proto.opset_import[0].version == 17
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-6, rtol=1e-6)


class PadsSplitsPools(torch.nn.Module):
    """Opset-18 Pad, Split and LpPool, which ONNX's converter has no adapter down for."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LocalResponseNorm(2)  # a Pad of the channels
        self.reflect = torch.nn.ReflectionPad1d(2)
        self.pool = torch.nn.LPPool1d(2, 2)

    def forward(self, x):
        a, b = x.split([1, 3], dim=1)
        return self.norm(x).sum() + self.reflect(a).sum() + self.pool(b).sum(-1)


@pytest.mark.parametrize("opset", [17, 16, 15])
def test_opset_18_nodes_with_no_adapter_down_are_carried_over_when_they_mean_the_same(opset):
    """compat seed 1 case 7: ``nn.LocalResponseNorm`` at opset 17 was DO402 ("No Adapter To
    Version $17 for Pad"); torch.onnx hands back an opset-18 model. A Pad without the axes
    input (and a Split without num_outputs, an LpPool without ceil_mode) means at 15-17
    what it means at 18: the model is at the opset asked, right against eager at two sizes."""
    model = PadsSplitsPools().eval()
    program = dynamo_onnx.export(
        model, (torch.randn(3, 4, 10),), opset_version=opset, dynamic_shapes={"x": {0: "b"}}
    )
    assert {o.domain: o.version for o in program.model_proto.opset_import}[""] == opset
    assert {"Pad", "Split"} <= {n.op_type for n in program.model_proto.graph.node}
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for batch in (3, 5):
        x = torch.randn(batch, 4, 10)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


class PaddedSample(PadsSplitsPools):
    def forward(self, x):
        image = x.reshape(1, *x.shape)
        grid = torch.zeros(1, 2, 2, 2)
        sampled = torch.nn.functional.grid_sample(image, grid, align_corners=False)
        return super().forward(x) + sampled.sum()


def test_what_blocks_a_conversion_leaves_out_the_nodes_carried_over():
    """At opset 14 the Pad, Split and Pow are carried over (they mean the same since 11,
    13 and 7): what blocks is the GridSample, and only it is named."""
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        dynamo_onnx.export(PaddedSample().eval(), (torch.randn(3, 4, 10),), opset_version=14)
    (finding,) = info.value.diagnostics.by_rule("DO402")
    assert finding.properties["blocking_ops"] == ["GridSample"]


def _older_opset_cases():
    from conftest import MLPModel, SmallCNN

    mlp = (MLPModel(), lambda b: (torch.randn(b, 8),), {"tensor_x": {0: "batch"}})
    cnn = (SmallCNN().eval(), lambda b: (torch.randn(b, 3, 16, 16),), {"x": {0: "batch"}})
    pads = (PadsSplitsPools().eval(), lambda b: (torch.randn(b, 4, 10),), {"x": {0: "b"}})
    torch.manual_seed(0)
    llama = transformers.LlamaModel(transformers.LlamaConfig(**hf_models.DECODER)).eval()
    text = (llama, lambda b: (torch.randint(1, 100, (b, b + 3)),), hf_models.TEXT)
    return {"mlp": mlp, "cnn": cnn, "pads": pads, "llama": text}


@pytest.mark.parametrize(
    ("name", "opset"),
    [("mlp", 11), ("mlp", 13), ("cnn", 14), ("pads", 11), ("pads", 12), ("llama", 14)],
)
def test_operators_whose_later_versions_only_took_types_convert_down(name, opset):
    """ONNX's converter has no adapter down for Mul 14, Pow 15, Gemm 13, Sigmoid 13,
    Reshape 14, Shape 15, BatchNormalization 15...: those versions only took more types or
    added an attribute the node leaves at its default, so the node is carried over (torch.onnx
    hands back an opset-18 model instead). The model is at the opset asked, with no
    attribute of a later opset, right against eager at two sizes."""
    model, make, shapes = _older_opset_cases()[name]
    program = dynamo_onnx.export(model, make(2), opset_version=opset, dynamic_shapes=shapes)
    assert {o.domain: o.version for o in program.model_proto.opset_import}[""] == opset
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for batch in (2, 3):
        args = make(batch)
        want = model(*args)
        want = want.last_hidden_state if hasattr(want, "last_hidden_state") else want
        torch.testing.assert_close(program(*args)[0], want, atol=1e-4, rtol=1e-4)


def test_a_reshape_to_a_computed_shape_converts_below_14():
    """Reshape 14 added ``allowzero``: torch's reshape to a shape computed at run time keeps
    a 0 as a size (``allowzero=1``), which an opset-13 ``Reshape`` reads as "the input's
    size". It was DO402 for a Llama with a dynamic sequence at opset 13; the reshapes are
    lowered (passes/onnx_graph/lowerings.py) and the model matches eager at two sizes."""
    model, make, shapes = _older_opset_cases()["llama"]
    program = dynamo_onnx.export(model, make(2), opset_version=13, dynamic_shapes=shapes)
    assert {o.domain: o.version for o in program.model_proto.opset_import}[""] == 13
    reshapes = [n for n in program.model.graph if n.op_type == "Reshape"]
    assert reshapes and all("allowzero" not in n.attributes for n in reshapes)
    for batch in (2, 3):
        args = make(batch)
        want = model(*args).last_hidden_state
        torch.testing.assert_close(program(*args)[0], want, atol=1e-4, rtol=1e-4)


class Reductions(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=-1, keepdim=True) + x.amax(0) + x.var(-1, keepdim=True)


@pytest.mark.parametrize("optimize", [True, False])
def test_reductions_convert_below_opset_18_and_the_converter_says_nothing(optimize, capfd):
    """torch_lib computes the axes with constant nodes: folded before conversion, and the
    opset-18 attribute ``noop_with_empty_axes`` that ONNX's converter leaves is dropped."""
    model, x = Reductions(), torch.randn(3, 4)
    program = dynamo_onnx.export(model, (x,), opset_version=17, optimize=optimize)
    assert program.model_proto.opset_import[0].version == 17
    reductions = [n for n in program.model.graph if n.op_type.startswith("Reduce")]
    assert reductions and all("noop_with_empty_axes" not in n.attributes for n in reductions)
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)
    assert capfd.readouterr().err == ""


class FusedProjection(torch.nn.Module):
    """GPT-2's attention: one projection split in three (the optimizer makes it a Split)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).split(8, dim=-1)
        return q * k + v


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_split_below_opset_18_has_no_num_outputs_after_optimization(dynamic):
    """onnxscript's optimizer writes ``Split(num_outputs=3)`` at any opset; below 18 ONNX
    Runtime refuses the attribute: the sizes become the ``split`` input."""
    model, x = FusedProjection().eval(), torch.randn(2, 5, 8)
    shapes = {"x": {0: "batch", 1: "sequence"}} if dynamic else None
    program = dynamo_onnx.export(model, (x,), opset_version=17, dynamic_shapes=shapes)
    splits = [n for n in program.model.graph if n.op_type == "Split"]
    assert splits and all("num_outputs" not in n.attributes for n in splits)
    for batch, length in ((2, 5), (3, 9)) if dynamic else ((2, 5),):
        x = torch.randn(batch, length, 8)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


class TwoInputs(torch.nn.Module):
    def forward(self, x, y, scale=1.0, *, mask):
        return (x + y) * scale * mask


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            lambda x: dynamo_onnx.dynamo_export(TwoInputs(), x),
            "dynamo_onnx.dynamo_export(model, <Tensor>, y, mask=mask)",
        ),
        (
            lambda x: dynamo_onnx.export(TwoInputs(), (x,), kwargs={"mask": x}),
            'dynamo_onnx.export(model, (<Tensor>, y), kwargs={"mask": <Tensor>})',
        ),
    ],
)
def test_a_missing_input_is_named_in_the_call_to_write(call, expected):
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        call(torch.randn(2))
    text = str(info.value)
    assert "missing a required argument: 'y'" in text
    assert text.split("Call it as: ", 1)[1].split("\n", 1)[0] == expected


class LinearModel(torch.nn.Module):
    """The seed article's model."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


def test_seed_article_call_gets_a_finding_not_a_torch_export_crash():
    model, dummy_input = LinearModel(5, 3), torch.randn(1, 5)
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.dynamo_export(  # marker: seed call
            model, args=(dummy_input,), opset_version=11, export_params=True, verbose=True
        )
    text = str(info.value)
    assert text.startswith("[DO103 inputs-do-not-match-forward] forward(x) does not accept")
    assert "args, opset_version, export_params, verbose" in text
    assert "dynamo_onnx.dynamo_export(model, <Tensor>)" in text
    assert "dynamo_onnx.export(model, (<Tensor>,), opset_version=11)" in text
    (finding,) = info.value.diagnostics.by_rule("DO103")
    assert finding.properties["unexpected"] == ["args", "opset_version", "export_params", "verbose"]
    assert finding.primary.line == line_of(
        test_seed_article_call_gets_a_finding_not_a_torch_export_crash, "marker: seed call"
    )
    assert not info.value.diagnostics.by_rule("capture-strategy-failed"), (
        "stopped before torch.export"
    )


def test_missing_positional_input_is_named():
    with pytest.raises(
        dynamo_onnx.InvalidExportOptionsError, match="missing a required argument: 'x'"
    ):
        dynamo_onnx.export(LinearModel(5, 3), ())


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # marker: data-dependent
            return x * 2
        return x - 1


class DataDependentWhile(torch.nn.Module):
    def forward(self, x):
        while x.sum() < 10:  # marker: data-dependent
            x = x * 2
        return x


class DataDependentElif(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 5:
            return x
        elif x.max() == 1:  # marker: data-dependent
            return -x
        return x


@pytest.mark.parametrize(
    ("model", "expression"),
    [
        (DataDependent, "x.sum() > 0"),
        (DataDependentWhile, "x.sum() < 10"),
        (DataDependentElif, "x.max() == 1"),
    ],
    ids=["if", "while", "elif"],
)
def test_data_dependent_control_flow_says_in_words_which_branch(model, expression):
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(model(), (torch.randn(3),))
    line = line_of(model.forward, "marker: data-dependent")
    text = str(info.value)
    assert text.startswith(
        f"[DO104 data-dependent-control-flow] The branch at tests/test_capture.py:{line} "
        f"depends on the value of a tensor (`{expression}`, which torch traced as `u0 == 1`): "
        "torch.export records one path through forward"
    )
    assert "GuardOnDataDependentSymNode" not in text and "Size-like" not in text
    assert "torch.cond" in text
    (finding,) = info.value.diagnostics.by_rule("DO104")
    assert finding.primary.line == line
    assert finding.properties["torch_message"].startswith("GuardOnDataDependentSymNode: ")
    assert "Eq(u0, 1)" in finding.properties["torch_message"]
    assert "torch.cond" in finding.rule.help and "torch._check" in finding.rule.help


class LoopsByAValue(torch.nn.Module):
    def forward(self, x, n):
        for _ in range(int(n.sum())):  # marker: by value
            x = x * 2
        return x


def test_a_tensors_value_used_as_a_number_is_a_size_or_index_not_a_branch():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(LoopsByAValue(), (torch.rand(3), torch.tensor([1, 2])))
    line = line_of(LoopsByAValue.forward, "marker: by value")
    assert str(info.value).startswith(
        f"[DO104 data-dependent-control-flow] The size or index at tests/test_capture.py:{line} "
        "depends on the value of a tensor (`range(int(n.sum()))`, which torch traced as `u0`)"
    )
    (finding,) = info.value.diagnostics.by_rule("DO104")
    assert "Could not extract specialized integer" in finding.properties["torch_message"]


def test_torch_conditions_read_as_python():
    import sympy

    from dynamo_onnx.passes.capture.causes import readable_condition

    u0, u1 = sympy.symbols("u0 u1", integer=True)
    assert readable_condition(sympy.Eq(u0, 1)) == "u0 == 1"
    assert readable_condition(sympy.Ne(u0 + 1, u1)) == "u0 + 1 != u1"
    assert readable_condition(sympy.And(u0 >= 0, u1 < 3)) in (
        "(u0 >= 0) and (u1 < 3)",
        "(u1 < 3) and (u0 >= 0)",
    )
    assert readable_condition(u1) == "u1"


def test_the_expression_of_the_users_line(tmp_path):
    from dynamo_onnx.diagnostics import Location
    from dynamo_onnx.passes.capture.causes import source_expression

    source = tmp_path / "model.py"
    source.write_text(
        "if x.sum() > 0:  # a comment\n"
        "    elif (x > 1).any():\n"
        "    while bool(x.max() < 3):\n"
        "    y = x[: int(n)]\n"
        "    return torch.zeros(n.item())\n"
        "    for i in range(n.item()):\n"
    )
    got = [source_expression(Location(str(source), line)) for line in range(1, 7)]
    assert got == [
        "x.sum() > 0",
        "(x > 1).any()",
        "bool(x.max() < 3)",
        "x[:int(n)]",
        "torch.zeros(n.item())",
        "range(n.item())",
    ]
    assert source_expression(Location(str(source), 99)) is None


def test_strict_modes_data_dependent_text_is_still_known():
    """Strict mode raises no guard object, only text (recorded from torch 2.13)."""
    from dynamo_onnx.foreign_text import read_capture_failure
    from dynamo_onnx.passes.capture.causes import known_cause

    recorded = (
        "Data-dependent branching\n  Explanation: Detected data-dependent branching (e.g. "
        "`if my_tensor.sum() > 0:`). Dynamo does not support tracing dynamic control flow."
    )
    cause = known_cause(read_capture_failure("Unsupported", recorded))
    assert cause is not None and cause.rule == "data-dependent-control-flow"
    pointer = read_capture_failure("RuntimeError", "Cannot access data pointer of Tensor")
    assert known_cause(pointer).rule == "untraceable-kernel"
    other = read_capture_failure("TypeError", "linear(): argument 'input' must be Tensor")
    assert known_cause(other) is None


def test_a_strategy_failures_stack_is_innermost_first_without_repeats():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(Raises(), (torch.randn(2),))
    (non_strict, _) = info.value.diagnostics.by_rule("capture-strategy-failed")
    raise_line = (__file__, line_of(Raises.forward, "marker: raise"))
    # the user's frame once, where the exception happened: the innermost frame
    assert [(f.path, f.line) for f in non_strict.stack].count(raise_line) == 1
    assert (non_strict.stack[0].path, non_strict.stack[0].line) == raise_line
    log = info.value.diagnostics.to_sarif()
    for result in log["runs"][0]["results"]:
        for stack in result.get("stacks", []):
            assert stack["message"]["text"] == "Python stack, innermost frame first."


class CallsKernel(torch.nn.Module):
    """Stands for a C++/CUDA extension or ctypes reading the tensor's memory."""

    def forward(self, x):
        address = x.data_ptr()  # marker: kernel
        return x * (1 + address % 1)


def test_a_kernel_torch_cannot_trace_is_its_own_error_with_the_custom_op_fix():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(CallsKernel(), (torch.rand(3),))
    assert info.value.rule_id == "DO126"
    text = str(info.value)
    assert (
        "forward hands a tensor's memory to code torch cannot trace at tests/test_capture.py:"
        in text
    )
    assert "Fix: Wrap the kernel in torch.library.custom_op" in text
    (finding,) = info.value.diagnostics.by_rule("untraceable-kernel")
    assert finding.primary.line == line_of(CallsKernel.forward, "marker: kernel")


def test_numpy_in_forward_is_traced_by_torch_and_exports():
    """torch 2.13 traces .numpy() and numpy calls on it: no rule needed, the model runs."""

    class ToNumpy(torch.nn.Module):
        def forward(self, x):
            return x / float(x.numpy().max())

    x = torch.rand(3) + 1
    program = dynamo_onnx.export(ToNumpy(), (x,))
    torch.testing.assert_close(program(x * 2)[0], ToNumpy()(x * 2))


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x):
        features = self.conv(x)  # marker: conv
        return self.head(features.flatten(1))  # marker: head


@pytest.mark.parametrize(
    ("shape", "marker", "words"),
    [
        ((1, 1, 8, 8), "conv", "to have 3 channels"),  # a grey image for an RGB model
        ((1, 3, 8, 8), "head", "shapes cannot be multiplied"),  # the wrong image size
    ],
)
def test_example_inputs_the_model_itself_rejects_point_at_the_line(shape, marker, words):
    """The most common "failed export": eager PyTorch fails the same way on these inputs."""
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(Classifier(), (torch.randn(*shape),))
    assert info.value.rule_id == "DO127"
    text = str(info.value)
    assert "The model fails on the example inputs at tests/test_capture.py:" in text
    assert "in PyTorch itself" in text and words in text
    (finding,) = info.value.diagnostics.by_rule("example-inputs-do-not-fit")
    assert finding.primary.line == line_of(Classifier.forward, f"marker: {marker}")
    with pytest.raises(RuntimeError):  # eager agrees (in its own words)
        Classifier()(torch.randn(*shape))


class QuantizedWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        q = torch.quantize_per_tensor(torch.rand(3), 0.1, 0, torch.qint8)
        self.register_buffer("w", q)

    def forward(self, x):
        return self.w.dequantize() + x


def test_a_quantized_weight_is_the_dtype_error_not_a_meta_tensor_message():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(QuantizedWeight(), (torch.rand(3),))
    assert info.value.rule_id == "DO309"
    assert "is a quantized tensor, which ONNX has no type for" in str(info.value)


class Lin(torch.nn.Module):
    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4, device=device)

    def forward(self, x):
        return self.lin(x)  # marker: lin


@pytest.mark.parametrize(
    "build",
    [
        lambda: Lin().to("meta"),
        lambda: Lin(device="meta"),
        lambda: Lin().to_empty(device="meta"),
    ],
    ids=["to-meta", "device-argument", "to_empty"],
)
def test_weights_on_the_meta_device_with_cpu_inputs_say_so(build):
    """Was DO100 whose fix spoke of torch.cond; torch.onnx says "Failed to export the
    model with torch.export" and the FakeTensorDeviceMismatchError."""
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(build(), (torch.randn(2, 4),))
    line = line_of(Lin.forward, "marker: lin")
    text = str(info.value)
    assert text.startswith(
        "[DO138 devices-differ] The model's weights are on the meta device and its inputs on "
        f"the cpu device: forward cannot mix them at tests/test_capture.py:{line} "
    )
    assert "enable_fake_mode()" in text and "apply_weights" in text
    assert "torch.cond" not in text
    (finding,) = info.value.diagnostics.by_rule("devices-differ")
    assert finding.primary.line == line


def test_weights_made_in_fake_mode_with_inputs_made_there_export():
    with dynamo_onnx.enable_fake_mode():
        model, x = Lin(), torch.randn(2, 4)
    program = dynamo_onnx.export(model, (x,))
    assert not program.diagnostics.by_rule("devices-differ")


@pytest.mark.parametrize(
    ("call", "args", "words"),
    [
        ("export", ("hello",), "must be Tensor, not str"),
        ("dynamo_export", ("hello",), "must be Tensor, not str"),
        ("export", (torch.randn(2, 3),), "shapes cannot be multiplied"),
    ],
    ids=["a-string", "a-string-2.1-api", "wrong-size"],
)
def test_inputs_eager_pytorch_refuses_are_the_models_failure_not_the_exports(call, args, words):
    """DO127 when eager fails as well (was DO100 for the string)."""
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        if call == "export":
            dynamo_onnx.export(Lin(), args)
        else:
            dynamo_onnx.dynamo_export(Lin(), *args)
    line = line_of(Lin.forward, "marker: lin")
    text = str(info.value)
    assert text.startswith(
        "[DO127 example-inputs-do-not-fit] The model fails on the example inputs at "
        f"tests/test_capture.py:{line}, in PyTorch itself: "
    )
    assert words in text.splitlines()[0]
    with pytest.raises((TypeError, RuntimeError), match=words):
        Lin()(*args)  # eager agrees, in the same words


def test_the_eager_check_puts_the_buffers_back():
    class Normalizes(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(4)  # training mode: eager updates its statistics

        def forward(self, x):
            y = self.norm(x)
            if torch.compiler.is_exporting():
                raise ValueError("refuses to be exported")
            return y

    model = Normalizes()
    before = model.norm.running_mean.clone()
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(model, (torch.randn(8, 4) + 5,))
    assert info.value.rule_id == "DO100"
    torch.testing.assert_close(model.norm.running_mean, before)
