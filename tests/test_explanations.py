"""Explanations that are right (issue 46): torch's cause kept whole, the cause decided
before the blame, and fixes that name the real remedy, each at the user's line."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import dynamo_onnx
from conftest import line_of


class AliasingCond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x[:1], lambda x: x, (x,))  # marker: cond


def test_a_graph_break_keeps_torchs_cause_in_every_capture_finding():
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(AliasingCond(), (torch.randn(3, 4),))
    diagnostics = info.value.diagnostics
    line = line_of(AliasingCond.forward, "marker: cond")
    findings = diagnostics.by_rule("DO101") + diagnostics.by_rule("DO100")
    assert len(findings) == 3
    for finding in findings:
        assert finding.primary.line == line
        assert "Got graph break/error: Encountered aliasing during higher order op" in (
            finding.message
        )
        assert "Replace `return input` with `return input.clone()`" in finding.message
    message = str(info.value)
    assert message.startswith("[DO100 capture-failed]")
    assert "Replace `return input` with `return input.clone()`" in message
    assert "Fix: Read the capture-strategy-failed findings: each gives torch.export's root" in (
        message
    )


def _linear_half():
    half = torch.randn(2, 4, dtype=torch.float16)
    return dynamo_onnx.export(torch.nn.Linear(4, 3), (half,))  # marker: half


def _linear_half_kw():
    model = torch.nn.Linear(4, 3)
    return dynamo_onnx.export(model, (), kwargs={"input": torch.randn(2, 4).half()})  # marker: kw


class HalfInside(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x) * 2  # marker: user line


@pytest.mark.parametrize(
    ("call", "function", "marker"),
    [
        (_linear_half, _linear_half, "marker: half"),
        (_linear_half_kw, _linear_half_kw, "marker: kw"),
        (
            lambda: dynamo_onnx.export(HalfInside(), (torch.randn(2, 4, dtype=torch.float16),)),
            HalfInside.forward,
            "marker: user line",
        ),
    ],
)
def test_an_input_the_model_refuses_is_the_inputs_fault_not_a_function_to_register(
    call, function, marker
):
    """torch.export's fake tensors let a float16 input through a float32 Linear; ONNX
    Runtime refuses the model. Eager PyTorch refuses the call too: DO127, not DO407."""
    with pytest.raises(dynamo_onnx.OnnxExporterError) as info:
        call()
    message = str(info.value)
    assert message.startswith("[DO127 example-inputs-do-not-fit]")
    assert "mat1 and mat2 must have the same dtype" in message
    assert "Fix: Pass example inputs with the shapes and dtypes the model takes" in message
    assert "OnnxRegistry.register_op" not in message
    (finding,) = info.value.diagnostics.by_rule("DO127")
    assert finding.primary.line == line_of(function, marker)
    assert not info.value.diagnostics.by_rule("DO407")


class Seq2Seq(torch.nn.Module):
    """PyTorch's sequence-to-sequence tutorial: a causal target mask, given as a tensor."""

    def __init__(self, causal_flag: bool | None = None) -> None:
        super().__init__()
        self.transformer = torch.nn.Transformer(
            d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32
        )
        self.causal_flag = causal_flag

    def forward(self, src, tgt):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.size(0))
        if self.causal_flag is None:
            return self.transformer(src, tgt, tgt_mask=mask)  # marker: transformer
        return self.transformer(src, tgt, tgt_mask=mask, tgt_is_causal=self.causal_flag)


class CausalEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.size(1))
        return self.encoder(x, mask=mask)  # marker: encoder


SEQ = (torch.randn(5, 2, 16), torch.randn(4, 2, 16))


@pytest.mark.parametrize(
    ("model", "args", "marker", "argument", "mask"),
    [
        (Seq2Seq(), SEQ, "marker: transformer", "tgt_is_causal", "tgt_mask"),
        (CausalEncoder(), (torch.randn(2, 5, 16),), "marker: encoder", "is_causal", "mask"),
    ],
)
def test_a_branch_inside_torchs_transformer_names_the_argument_not_torch_cond(
    model, args, marker, argument, mask
):
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(model.eval(), args)
    message = str(info.value)
    assert message.startswith("[DO139 library-branch-on-value]")
    assert "_detect_is_causal_mask" in message
    assert f"pass `{argument}=True` with the causal `{mask}`" in message
    assert "torch.cond" not in message
    assert "Fix: Pass the argument the message names" in message
    (finding,) = info.value.diagnostics.by_rule("DO139")
    assert finding.primary.line == line_of(type(model).forward, marker)
    assert not info.value.diagnostics.by_rule("DO104")


def test_the_transformer_with_its_causal_flag_exports_and_matches_eager():
    model = Seq2Seq(causal_flag=True).eval()
    program = dynamo_onnx.export(model, SEQ)
    assert not [f for f in program.diagnostics.findings if f.level.name in ("WARNING", "ERROR")]
    torch.testing.assert_close(program(*SEQ)[0], model(*SEQ), atol=1e-4, rtol=1e-4)


def _quantized_dynamic():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


class HoldsQuantized(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _quantized_dynamic()

    def forward(self, x):
        return self.body(x) + 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize(
    ("make", "path"), [(_quantized_dynamic, "`0`"), (HoldsQuantized, "`body.0`")]
)
def test_a_torch_ao_quantized_model_is_pointed_to_program_quantize(make, path):
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(make(), (torch.randn(2, 4),))  # marker: quantized call
    message = str(info.value)
    assert message.startswith("[DO141 quantized-module]")
    assert f"{path}: torch.ao.nn.quantized.dynamic.Linear" in message
    assert "program.quantize(" in message and "Export the float model" in message
    (finding,) = info.value.diagnostics.by_rule("DO141")
    fn = test_a_torch_ao_quantized_model_is_pointed_to_program_quantize
    assert finding.primary.line == line_of(fn, "marker: quantized call")
    assert not info.value.diagnostics.by_rule("DO309")


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


class ReturnsPair(torch.nn.Module):
    def forward(self, x):
        return Pair(x + 1, x * 2)  # marker: pair


class Plain:
    def __init__(self, value: torch.Tensor) -> None:
        self.value = value


class ReturnsPlain(torch.nn.Module):
    def forward(self, x):
        return Plain(x + 1)  # marker: plain


@pytest.mark.parametrize(
    ("model", "marker", "registration"),
    [
        (ReturnsPair(), "marker: pair", "call `torch.export.register_dataclass(Pair)`"),
        (ReturnsPlain(), "marker: plain", "register `Plain` with `torch.utils._pytree"),
    ],
)
def test_an_unregistered_output_class_names_its_registration(model, marker, registration):
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(model, (torch.randn(2, 3),))
    message = str(info.value)
    assert message.startswith("[DO142 output-type-not-registered]")
    assert registration in message
    assert "Fix: Register the class with torch's pytree before exporting" in message
    (finding,) = info.value.diagnostics.by_rule("DO142")
    assert finding.primary.line == line_of(type(model).forward, marker)


class AutocastBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.lin(x)  # marker: autocast


class AmpAutocastBlock(AutocastBlock):
    def forward(self, x):
        x = x * 2
        with torch.amp.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = self.lin(x)  # marker: amp
        return y.float()


class AutocastDecorated(AutocastBlock):
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, x):
        return self.lin(x)  # marker: decorated


@pytest.mark.parametrize(
    ("model", "marker"),
    [
        (AutocastBlock(), "marker: autocast"),
        (AmpAutocastBlock(), "marker: amp"),
        (AutocastDecorated(), "marker: decorated"),
    ],
)
def test_a_finding_inside_an_autocast_region_keeps_the_users_line(model, marker):
    """ONNX Runtime has no CPU Gemm for bfloat16 (DO409): the finding names the line in
    the autocast region, not 'an unknown line'."""
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="DO409") as warned:
        program = dynamo_onnx.export(model, (torch.randn(2, 4),))
    (finding,) = program.diagnostics.by_rule("DO409")
    line = line_of(type(model).forward, marker)
    assert finding.primary.line == line
    assert f"called at tests/test_explanations.py:{line}" in finding.message
    assert "unknown line" not in finding.message
    (shown,) = [str(w.message) for w in warned if "DO409" in str(w.message)]
    assert "Fix: Cast the operands to a type ONNX Runtime computes with" in shown


class Doubles(torch.nn.Module):
    def forward(self, x, scale=None):
        return x * 2 if scale is None else x * scale


class CarriesItsArguments(torch.onnx.ExportableModule):
    """torch.onnx's own example of an ExportableModule."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Doubles()

    def forward(self, x):
        return self.model(x)

    def example_arguments(self):
        return (torch.randn(2, 3, 8, 8),), None

    def input_names(self):
        return ("input",)

    def output_names(self):
        return ("output",)

    def dynamic_shapes(self):
        return ({0: "batch_size"},)


class KeywordsOnly(torch.onnx.ExportableModule):
    """Only the required method: keyword example arguments, names and shapes left out."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Doubles()

    def forward(self, x, scale):
        return self.model(x, scale)

    def example_arguments(self):
        return (), {"x": torch.randn(2, 3), "scale": torch.tensor(3.0)}


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_an_exportable_module_exports_with_no_other_argument():
    """As torch.onnx.export(module) in torch 2.13: names, spec and example from the module."""
    module = CarriesItsArguments().eval()
    program = dynamo_onnx.export(module)
    graph = program.model_proto.graph
    assert [(i.name, _dims(i)) for i in graph.input] == [("input", ["batch_size", 3, 8, 8])]
    assert [o.name for o in graph.output] == ["output"]
    x = torch.randn(5, 3, 8, 8)  # another batch: the spec came from the module
    torch.testing.assert_close(program(x)[0], module(x))
    reference = torch.onnx.export(CarriesItsArguments().eval())
    assert [(i.name, _dims(i)) for i in reference.model_proto.graph.input] == [
        (i.name, _dims(i)) for i in graph.input
    ]


def test_an_exportable_modules_keyword_example_arguments_are_used():
    module = KeywordsOnly().eval()
    program = dynamo_onnx.export(module)
    assert [i.name for i in program.model_proto.graph.input] == ["x", "scale"]
    x, scale = torch.randn(2, 3), torch.tensor(3.0)
    torch.testing.assert_close(program(x=x, scale=scale)[0], module(x, scale))


def test_explicit_arguments_win_over_the_exportable_modules_own():
    module = CarriesItsArguments().eval()
    # explicit names and spec beside the module's example
    program = dynamo_onnx.export(module, input_names=["image"], dynamic_shapes=None)
    assert [(i.name, _dims(i)) for i in program.model_proto.graph.input] == [
        ("image", ["batch_size", 3, 8, 8])
    ]  # None means "not given": the module's spec, as in torch.onnx
    # explicit example inputs: the module is an ordinary module (torch.onnx's contract)
    program = dynamo_onnx.export(module, (torch.randn(4, 3, 2, 2),))
    (value,) = program.model_proto.graph.input
    assert _dims(value) == [4, 3, 2, 2] and value.name != "input"
    assert [o.name for o in program.model_proto.graph.output] != ["output"]


def test_input_observer_arguments_and_spec_export_as_given():
    """torch.onnx.InputObserver infers the arguments and the spec from real calls."""
    model = Doubles().eval()
    observer = torch.onnx.InputObserver()
    with observer(model):
        model(torch.randn(2, 3))
        model(torch.randn(5, 3))
    args = observer.infer_arguments()
    spec = observer.infer_dynamic_shapes()
    program = dynamo_onnx.export(model, args, dynamic_shapes=spec)
    (value,) = program.model_proto.graph.input
    assert isinstance(_dims(value)[0], str) and _dims(value)[1] == 3
    x = torch.randn(7, 3)
    torch.testing.assert_close(program(x)[0], model(x))


class InterruptedWhileCaptured(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            raise KeyboardInterrupt  # as Ctrl-C arrives while torch.export traces
        return x + 1


def test_ctrl_c_in_a_python_caller_stays_a_keyboard_interrupt_with_the_reports(tmp_path):
    """A Python caller gets its KeyboardInterrupt back (not an export error), with the
    context attached and report=True's reports saying it was interrupted, never blaming
    the model (no DO100)."""
    with pytest.raises(KeyboardInterrupt) as info:
        dynamo_onnx.export(
            InterruptedWhileCaptured(), (torch.randn(2),), report=True, artifacts_dir=tmp_path
        )
    ctx = info.value.diagnostics
    assert [f.rule.id for f in ctx.findings if f.level.name == "ERROR"] == ["DO143"]
    assert ctx.findings[-1].message.startswith("The export was interrupted during capture")
    assert [(p.name, p.outcome) for p in ctx.passes][-1] == ("capture", "interrupted")
    (sarif,) = tmp_path.glob("*.sarif")
    log = json.loads(sarif.read_text())
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert [r["ruleId"] for r in log["runs"][0]["results"]][-1] == "DO143"


class SelectsWithoutGrad(torch.nn.Module):
    def forward(self, mask, x):
        with torch.no_grad():
            return torch.where(mask, x, x)  # marker: no_grad


def test_a_finding_inside_a_no_grad_region_keeps_the_users_line():
    """ONNX Runtime has no Where for uint16 (DO409), inside torch.no_grad()."""
    x = torch.tensor([1, 2], dtype=torch.uint16)
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="DO409"):
        program = dynamo_onnx.export(SelectsWithoutGrad(), (torch.tensor([True, False]), x))
    (finding,) = program.diagnostics.by_rule("DO409")
    assert finding.primary.line == line_of(SelectsWithoutGrad.forward, "marker: no_grad")
    assert "unknown line" not in finding.message


class TakesAlongDim(torch.nn.Module):
    def forward(self, x, idx):
        return torch.take_along_dim(x, idx, dim=-1)


@pytest.mark.parametrize(
    "spec",
    [
        {"x": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}, "idx": {0: "b", 1: "s"}},
        ({0: torch.export.Dim.DYNAMIC}, {0: torch.export.Dim.DYNAMIC}),
    ],
    ids=["by-name", "by-position"],
)
def test_a_dynamic_dim_torch_fixed_keeps_torchs_conflicts_in_the_cause(spec):
    """make compat's seed 48 case 1433: torch.export fixes take_along_dim's sizes, which
    Dim.DYNAMIC refuses. The causes ended at torch's first line ("Found the following
    conflicts ...:", "Constraints violated (...)!"): the conflicts and torch's remedy
    that follow are kept; DO100 is at the export call."""
    x, idx = torch.randn(3, 5, 6), torch.randint(0, 6, (3, 5, 2))
    with pytest.raises(dynamo_onnx.CaptureError) as info:
        dynamo_onnx.export(TakesAlongDim(), (x, idx), dynamic_shapes=spec)  # marker: call
    message = str(info.value)
    assert message.startswith("[DO100 capture-failed]")
    assert "Fix: Read the capture-strategy-failed findings" in message
    diagnostics = info.value.diagnostics
    (error,) = diagnostics.by_rule("DO100")
    fn = test_a_dynamic_dim_torch_fixed_keeps_torchs_conflicts_in_the_cause
    assert error.primary.line == line_of(fn, "marker: call")
    causes = " ".join(f.message for f in diagnostics.by_rule("DO101"))
    assert "tracing inferred a static shape of 3 for dimension inputs['x'].shape[0]" in causes
    assert "replace it with either Dim.STATIC or Dim.AUTO" in causes
    # torch's remedy works: Dim.AUTO keeps what the model allows dynamic
    auto = torch.export.Dim.AUTO
    program = dynamo_onnx.export(TakesAlongDim(), (x, idx), dynamic_shapes=({0: auto},) * 2)
    x, idx = torch.randn(4, 5, 6), torch.randint(0, 6, (4, 5, 2))
    torch.testing.assert_close(program(x, idx)[0], TakesAlongDim()(x, idx))
