"""One fixture per rule: a small model or call that produces the rule, with its level and the
line it points at (``# marker: DOnnn`` in this file), or None where the rule has no line of
its own. Every rule of the catalog is here, or in NOT_FROM_A_FIXTURE with the reason."""

from __future__ import annotations

import dataclasses
import inspect
import io
import pathlib

import numpy
import pytest
import torch

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext, Level
from dynamo_onnx.passes.onnx_graph import optimize as optimize_pass
from dynamo_onnx.rules import catalog
from dynamo_onnx.runtimes.onnxruntime import fusions as fusions_module
from dynamo_onnx.runtimes.onnxruntime import quantize as quantize_pass

HERE = pathlib.Path(__file__).resolve()
SOURCE = HERE.read_text().splitlines()
X = torch.randn(2, 4)
X1 = torch.randn(1, 4)
X6 = torch.randn(6, 4)
BATCH = {"x": {0: "b"}}


def marker_line(rule_id: str) -> int:
    return next(i for i, text in enumerate(SOURCE, 1) if f"# marker: {rule_id}" in text)


def diagnostics_of(call) -> DiagnosticContext:
    """The diagnostics of a call that exports: from the program, or from the error."""
    try:
        result = call()
    except dynamo_onnx.OnnxExporterError as error:
        assert error.diagnostics is not None
        return error.diagnostics
    return result.diagnostics


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


class Sampled(torch.nn.Module):
    """A grid sample: ONNX has GridSample from opset 16 only (nothing older expresses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("grid", torch.linspace(-1, 1, 12).reshape(1, 3, 2, 2))

    def forward(self, x):
        image = x.reshape(1, 1, *x.shape)
        return torch.nn.functional.grid_sample(  # marker: DO402
            image, self.grid, align_corners=False
        )


class Refuses(torch.nn.Module):
    """Runs in eager PyTorch, refuses to be exported: no rule of its own explains it."""

    def forward(self, x):
        if torch.compiler.is_exporting():
            raise ValueError("no")  # marker: DO100
        return x


class OnTheMetaDevice(torch.nn.Module):
    def __init__(self, device: str = "meta") -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3, device=device)

    def forward(self, x):
        return self.lin(x)  # marker: DO138


def _weights_made_in_fake_mode(tmp_path):
    with dynamo_onnx.enable_fake_mode():
        model, x = OnTheMetaDevice(), torch.randn(2, 4)
    return dynamo_onnx.export(model, (x,))


class CallsKernel(torch.nn.Module):
    def forward(self, x):
        return x + x.data_ptr() % 2  # marker: DO126


class WantsEight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.lin(x)  # marker: DO127


class Branches(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # marker: DO104
            return x + 1
        return x - 1


class Reshapes(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, 4)  # marker: DO106


class ReturnsInt(torch.nn.Module):
    def forward(self, x):  # marker: DO110
        return x.shape[0]


class EmitsCustomNode(torch.nn.Module):
    def forward(self, x):
        return torch.onnx.ops.symbolic(  # marker: DO310
            "custom_domain::CustomOp", (x,), {"alpha": 2.0}, dtype=x.dtype, shape=x.shape
        )


class ReturnsNoneToo(torch.nn.Module):
    def forward(self, x):
        return x + 1, None  # marker: DO311


class Mutates(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        flat = y.view(-1)  # sees the write below: re-traced, its view becomes a reshape
        y.add_(1)
        return flat * 2


class Promotes(torch.nn.Module):
    def forward(self, x, n):
        return x * n


class BranchesOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:  # marker: DO124
            return x + 1
        return x - 1


class Bessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)  # marker: DO301


class Conditional(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))  # marker: DO307


class Scans(torch.nn.Module):
    def forward(self, x):
        return torch.ops.higher_order.associative_scan(lambda a, b: a + b, [x], ())  # marker: DO308


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)  # marker: DO120
        return x * 2


class CountsCalls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)  # marker: DO121
        return x * self.calls


class Drops(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x)  # marker: DO122


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)  # marker: DO123


@torch.library.custom_op("dxfixture::bump", mutates_args=())
def bump(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@bump.register_fake
def _(x):
    return torch.empty_like(x)


class Bumps(torch.nn.Module):
    def forward(self, x):
        return bump(x)  # marker: DO407


class BumpsTwice(torch.nn.Module):
    def forward(self, x):
        return bump(x) * 2  # marker: DO204


@torch.library.custom_op("dxfixture::host_sort", mutates_args=())
def host_sort(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(numpy.sort(x.numpy(), axis=-1))


@host_sort.register_fake
def _(x):
    return torch.empty_like(x)


class SortsOnHost(torch.nn.Module):
    def forward(self, x):
        return host_sort(x)  # marker: DO205


class CausalMaskGiven(torch.nn.Module):
    """PyTorch's seq2seq tutorial: nn.Transformer compares the mask with a causal one."""

    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.size(1))
        return self.encoder(x, mask=mask)  # marker: DO139


class CausalMaskFlagged(CausalMaskGiven):
    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.size(1))
        return self.encoder(x, mask=mask, is_causal=True)


def _float_then_quantized():
    program = dynamo_onnx.export(torch.nn.Sequential(torch.nn.Linear(4, 3)).eval(), (X,))
    program.quantize("int8")
    return program


def _quantized_linear(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, torch.qint8)
    return dynamo_onnx.export(quantized, (X,))  # marker: DO141


@dataclasses.dataclass
class Halves:
    first: torch.Tensor
    second: torch.Tensor


class ReturnsHalves(torch.nn.Module):
    def forward(self, x):
        return Halves(x[:1], x[1:])  # marker: DO142


def quantizes(x):
    return torch.quantize_per_tensor(x, 0.1, 0, torch.qint8).dequantize()  # marker: DO309


def selects(mask, x, y):
    return torch.where(mask, x, y)  # marker: DO409


def _uint16_where(tmp_path):
    x = torch.tensor([1, 2], dtype=torch.uint16)
    return dynamo_onnx.export(selects, (torch.tensor([True, False]), x, x))


def _float_plus_int(x):
    """A wrong ONNX function: Add of a float and an int64."""
    from onnxscript import opset18 as op

    return op.Add(x, op.Constant(value_int=1))


def _invalid_model(tmp_path):
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(_float_plus_int, "dxfixture", "bump")
    return dynamo_onnx.export(Bumps(), (X,), registry=registry)


def _doubles_rows(x):
    """A wrong ONNX function: twice the rows torch says the operator returns."""
    from onnxscript import opset18 as op

    return op.Concat(x, x, axis=0)


def _checker_only(tmp_path):
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(_doubles_rows, "dxfixture", "bump")
    return dynamo_onnx.export(BumpsTwice(), (X,), registry=registry)


def _strict_dim(tmp_path):
    batch = torch.export.Dim("batch")
    return dynamo_onnx.export(BranchesOnSize(), (X6,), dynamic_shapes={"x": {0: batch}})


def _scripted(tmp_path):
    return dynamo_onnx.export(torch.jit.script(Lin()), (X,))  # marker: DO113


def _size_one_example(tmp_path):
    return dynamo_onnx.export(Lin(), (X[:0],), dynamic_shapes=BATCH)  # marker: DO105


def _size_one_widened(tmp_path):
    return dynamo_onnx.export(Lin(), (X1,), dynamic_shapes=BATCH)  # marker: DO129


def _aten_fallback(tmp_path):
    aten = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
    return dynamo_onnx.export(Lin(), (X,), operator_export_type=aten)  # marker: DO112


def _nan_model() -> Lin:
    model = Lin()
    with torch.no_grad():
        model.lin.weight[0, 0] = float("nan")
    return model


def _fake_program():
    with dynamo_onnx.enable_fake_mode() as fake:
        model = Lin()
        x = torch.randn(2, 4)
    options = dynamo_onnx.ExportOptions(fake_context=fake)
    return dynamo_onnx.dynamo_export(model, x, export_options=options)


def _save_fake(tmp_path):
    program = _fake_program()
    with pytest.raises(dynamo_onnx.FakeWeightsError):
        program.save(tmp_path / "m.onnx")
    return program


def _apply_wrong_weights(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,))
    with pytest.raises(dynamo_onnx.WeightsMismatchError):
        program.apply_weights({"lin.weight": torch.zeros(1)})
    return program


def _save_to_directory(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,))
    with pytest.raises(dynamo_onnx.SaveError):
        program.save(tmp_path)
    return program


def _save_without_weights(tmp_path):
    return dynamo_onnx.export(Lin(), (X,), tmp_path / "m.onnx", export_params=False)


def _external_data_to_a_buffer(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,))
    with pytest.raises(dynamo_onnx.SaveError):
        program.save(io.BytesIO(), external_data=True)
    return program


def _optimize_module_functions(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,), module_functions=True)
    program.optimize()  # inlines the layer functions
    return program


def _optimize(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,))
    program.optimize()
    return program


class TinyNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        # over the heads' axis, not the last: no RMS norm pattern of ONNX Runtime's
        return self.weight * x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)  # marker: DO504


class TinyAttention(torch.nn.Module):
    """Attention with a norm and a rotary embedding none of ONNX Runtime's fusions take (its
    scores soft-capped: neither MultiHeadAttention nor GroupQueryAttention matches)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = TinyNorm()

    def forward(self, q, k, v, cos, sin):
        q = self.norm(q)
        half = torch.cat((-q[..., 4:], q[..., :4]), dim=-1)  # marker: DO505
        q = q * cos + half * sin
        scores = 30.0 * torch.tanh(q @ k.transpose(-1, -2) / 30.0)
        return torch.softmax(scores, dim=-1) @ v  # marker: DO503


class AttentionLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = TinyAttention()

    def forward(self, q, k, v, cos, sin):
        return self.attn(q, k, v, cos, sin)


def _unfused_for_onnxruntime(tmp_path):
    qkv = tuple(torch.randn(1, 2, 3, 8) for _ in range(3))
    rotary = (torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8))
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning):
        return dynamo_onnx.export(AttentionLayer(), qkv + rotary, optimize="onnxruntime")


class SectionedRotaryAttention(torch.nn.Module):
    """A rotary of three position rows per token (a temporal, a height and a width row, each
    rotating its own section of the head), as a multi-axis rotary computes it: no fused
    kernel of ONNX Runtime's takes several positions per token."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 100.0 ** (torch.arange(4) / 4.0))

    def forward(self, q, positions):
        freqs = positions[..., None].float() * self.inv_freq  # (3 rows, tokens, 4)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (
            torch.cat([t[i % 3] for i, t in enumerate(table.split([1, 2, 1] * 2, -1))], -1)
            for table in (emb.cos(), emb.sin())
        )
        half = torch.cat((-q[..., 4:], q[..., :4]), dim=-1)  # marker: DO543
        return q * cos + half * sin


class InterleavedRotaryAttention(torch.nn.Module):
    """The same three position rows, their sections interleaved (each frequency's row is its
    index modulo 3, written into row 0's angles by slice assignment) rather than side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 100.0 ** (torch.arange(6) / 6.0))

    def forward(self, q, positions):
        freqs = positions[..., None].float() * self.inv_freq  # (3 rows, tokens, 6)
        angles = freqs[0].clone()
        for row in (1, 2):
            angles[..., row::3] = freqs[row, ..., row::3]
        emb = torch.cat((angles, angles), dim=-1)
        half = torch.cat((-q[..., 6:], q[..., :6]), dim=-1)
        return q * emb.cos() + half * emb.sin()


class SectionedRotaryLayer(torch.nn.Module):
    def __init__(self, attn: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.attn = attn if attn is not None else SectionedRotaryAttention()

    def forward(self, q, positions):
        return self.attn(q, positions)


def _multi_axis_rotary(tmp_path):
    positions = torch.arange(15).reshape(3, 5)
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning):  # DO503: no softmax, no attention fuses
        return dynamo_onnx.export(
            SectionedRotaryLayer(), (torch.randn(1, 2, 5, 8), positions), optimize="onnxruntime"
        )


@pytest.mark.parametrize(
    ("attn", "head", "sections"),
    [(SectionedRotaryAttention, 8, 6), (InterleavedRotaryAttention, 12, 3)],
    ids=["side-by-side", "interleaved"],
)
def test_a_multi_axis_rotary_is_a_note_however_its_sections_are_assembled(attn, head, sections):
    positions = torch.arange(15).reshape(3, 5)
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning):  # DO503 only
        program = dynamo_onnx.export(
            SectionedRotaryLayer(attn()),
            (torch.randn(1, 2, 5, head), positions),
            optimize="onnxruntime",
        )
    (note,) = program.diagnostics.by_rule("DO543")
    assert note.properties["variant"].startswith(
        f"its cos/sin is {sections} sections of one table taken at 3 position rows per token"
    )
    assert not program.diagnostics.by_rule("DO505")
    assert [f.rule.id for f in program.diagnostics.findings if f.level.name == "WARNING"] == [
        "DO503"
    ]


def test_a_rotary_of_one_position_row_that_does_not_fuse_stays_a_warning():
    """The DO505 fixture (cos and sin given as inputs): a fused form exists, no note."""
    program = _unfused_for_onnxruntime(None)
    assert program.diagnostics.by_rule("DO505") and not program.diagnostics.by_rule("DO543")


def _broken_optimizer(tmp_path, monkeypatch):
    program = dynamo_onnx.export(Lin(), (X,))
    monkeypatch.setattr(optimize_pass, "run_optimizer", lambda m: 1 / 0)
    with pytest.raises(dynamo_onnx.OptimizationError):
        program.optimize()
    return program


def _quantize(tmp_path):
    program = dynamo_onnx.export(Lin(), (X,))
    program.quantize("int8")
    return program


def _broken_quantizer(tmp_path, monkeypatch):
    program = dynamo_onnx.export(Lin(), (X,))
    monkeypatch.setattr(quantize_pass, "_quantized", lambda model, how: 1 / 0)
    with pytest.raises(dynamo_onnx.OptimizationError):
        program.quantize("int4")
    return program


def _quantizer_leaving_weights(tmp_path, monkeypatch):
    """A quantizer that takes nothing: the MatMul of the projection's weight stays in float
    (a Linear without bias on 3-D input is a MatMul; Lin's is a Gemm, which none takes)."""
    projection = torch.nn.Linear(4, 32, bias=False)  # torch's code: the finding is at the call
    program = dynamo_onnx.export(projection, (torch.randn(2, 3, 4),))  # marker: DO509
    monkeypatch.setattr(quantize_pass, "_quantized", lambda model, how: model)
    program.quantize("int4")
    return program


def _fusion_breaking_the_model(tmp_path, monkeypatch):
    """onnxscript 0.7's own MultiHeadAttention rules (no check of the Reshape they replace)
    on a GPT-2 with its cache: the fused attention hands a Gemm a 3-D tensor."""
    import transformers  # only this fixture needs it
    from onnxscript.rewriter.ort_fusions import mha

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=4, n_embd=64, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    cache = transformers.DynamicCache(config=config)
    cache.update(torch.randn(2, 4, 3, 16), torch.randn(2, 4, 3, 16), 0)
    inputs = {
        "input_ids": torch.randint(0, 100, (2, 2)),
        "attention_mask": torch.ones(2, 5, dtype=torch.int64),
        "past_key_values": cache,
    }
    program = dynamo_onnx.export(model, (), kwargs=inputs)
    monkeypatch.setattr(
        fusions_module,
        "mha_rewrites",
        lambda has_past_present: (
            mha.mha_rules_with_past if has_past_present else mha.mha_rules_no_past
        ),
    )
    with pytest.raises(dynamo_onnx.OptimizationError):
        program.optimize("onnxruntime")
    return program


def _not_a_model_folder(tmp_path):
    return dynamo_onnx.export_llm(tmp_path / "missing", tmp_path / "out")


def _verify(reference_offset):
    def call(tmp_path):
        model = Lin()
        program = dynamo_onnx.export(model, (X,))
        program.verify((X,), reference=lambda x: model(x) + reference_offset)
        return program

    return call


class DoublesRelu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2  # marker: DO604


def _runs_at_two_only(tmp_path, dynamic_shapes=BATCH):  # a fixture's call
    """A registered ONNX function written for the traced batch of 2: the ONNX model does
    not run at the second size verification tries (with ``dynamic_shapes=None``, the
    rule's fix: the batch is static, and there is no other size)."""
    from onnxscript import opset18 as op

    def relu_of_two_rows(x):
        return op.Relu(op.Reshape(x, op.Constant(value_ints=[2, 4])))

    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(relu_of_two_rows, "aten", "relu")
    program = dynamo_onnx.export(
        DoublesRelu(), (X,), dynamic_shapes=dynamic_shapes, registry=registry
    )
    program.verify((X,))
    return program


def _unwritable_reports(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning):
        return dynamo_onnx.export(Lin(), (X,), report=True, artifacts_dir=blocker / "sub")


def _mismatched_spec(tmp_path):
    return dynamo_onnx.export(Lin(), (X,), dynamic_shapes={"x": [{0: "b"}]})  # marker: DO131


def _unknown_axes_key(tmp_path):
    return dynamo_onnx.export(Lin(), (X,), dynamic_axes={"xx": [0]})  # marker: DO132


#: rule id -> (call(tmp_path[, monkeypatch]), line marker or None)
FIXTURES = {
    "DO100": (lambda t: dynamo_onnx.export(Refuses(), (X,)), "DO100"),
    "DO101": (lambda t: dynamo_onnx.export(Refuses(), (X,)), "DO100"),
    "DO102": (lambda t: dynamo_onnx.export(Lin(), (X,)), None),
    "DO103": (lambda t: dynamo_onnx.dynamo_export(Lin(), X, opset=11), "DO103"),  # marker: DO103
    "DO104": (lambda t: dynamo_onnx.export(Branches(), (X,)), "DO104"),
    "DO105": (_size_one_example, "DO105"),
    "DO106": (
        lambda t: dynamo_onnx.export(Reshapes(), (X,), dynamic_shapes={"x": {0: "b"}}),
        "DO106",
    ),
    "DO107": (lambda t: dynamo_onnx.export(42, (X,)), "DO107"),  # marker: DO107
    "DO108": (lambda t: dynamo_onnx.export(Lin(), [X]), "DO108"),  # marker: DO108
    "DO109": (lambda t: dynamo_onnx.export(Lin(), (X,), opset_version=0), "DO109"),  # marker: DO109
    "DO110": (lambda t: dynamo_onnx.export(ReturnsInt(), (X,)), "DO110"),
    "DO111": (lambda t: dynamo_onnx.export(Lin(), (X,), profile=True), "DO111"),  # marker: DO111
    "DO112": (_aten_fallback, "DO112"),
    "DO113": (_scripted, "DO113"),
    "DO120": (lambda t: dynamo_onnx.export(MutatesInput(), (X.clone(),)), "DO120"),
    "DO121": (lambda t: dynamo_onnx.export(CountsCalls(), (X,)), "DO121"),
    "DO122": (lambda t: dynamo_onnx.export(Drops().train(), (X,)), "DO122"),
    "DO123": (lambda t: dynamo_onnx.export(Noisy(), (X,)), "DO123"),
    "DO124": (lambda t: dynamo_onnx.export(BranchesOnSize(), (X6,), dynamic_shapes=BATCH), "DO124"),
    "DO125": (_strict_dim, "DO124"),
    "DO126": (lambda t: dynamo_onnx.export(CallsKernel(), (X,)), "DO126"),
    "DO128": (lambda t: dynamo_onnx.export(Lin(), (X,), dynamic_shapes=True), None),
    "DO129": (_size_one_widened, "DO129"),
    "DO131": (_mismatched_spec, "DO131"),
    "DO132": (_unknown_axes_key, "DO132"),
    "DO127": (lambda t: dynamo_onnx.export(WantsEight(), (X,)), "DO127"),
    "DO138": (lambda t: dynamo_onnx.export(OnTheMetaDevice(), (X,)), "DO138"),
    "DO139": (
        lambda t: dynamo_onnx.export(CausalMaskGiven().eval(), (torch.randn(2, 3, 4),)),
        "DO139",
    ),
    "DO141": (_quantized_linear, "DO141"),
    "DO142": (lambda t: dynamo_onnx.export(ReturnsHalves(), (X,)), "DO142"),
    "DO201": (lambda t: dynamo_onnx.export(Mutates(), (X,)), None),
    "DO202": (lambda t: dynamo_onnx.export(Promotes(), (X, torch.tensor(3))), None),
    "DO203": (lambda t: dynamo_onnx.export(Lin(), (X,)), None),
    "DO204": (lambda t: dynamo_onnx.export(BumpsTwice(), (X,)), "DO204"),
    "DO205": (lambda t: dynamo_onnx.export(SortsOnHost(), (X,)), "DO205"),
    "DO301": (lambda t: dynamo_onnx.export(Bessel(), (X,)), "DO301"),
    "DO302": (lambda t: dynamo_onnx.export(Lin(), (X,)), None),
    "DO304": (lambda t: dynamo_onnx.export(Lin(), (X,)), None),
    "DO307": (lambda t: dynamo_onnx.export(Conditional(), (X,)), "DO307"),
    "DO308": (lambda t: dynamo_onnx.export(Scans(), (X,)), "DO308"),
    "DO309": (lambda t: dynamo_onnx.export(quantizes, (X,)), "DO309"),
    "DO310": (lambda t: dynamo_onnx.export(EmitsCustomNode(), (X,)), "DO310"),
    "DO311": (lambda t: dynamo_onnx.export(ReturnsNoneToo(), (X,)), "DO311"),
    "DO401": (lambda t: dynamo_onnx.export(_nan_model(), (X,)), None),
    "DO402": (lambda t: dynamo_onnx.export(Sampled(), (X,), opset_version=15), "DO402"),
    "DO403": (_save_fake, None),
    "DO407": (_invalid_model, "DO407"),
    "DO409": (_uint16_where, "DO409"),
    "DO410": (_checker_only, "DO204"),
    "DO404": (_apply_wrong_weights, None),
    "DO405": (lambda t: dynamo_onnx.export(Lin(), (X,), module_functions=True), None),
    "DO406": (_save_to_directory, None),
    "DO411": (_save_without_weights, None),
    "DO412": (_external_data_to_a_buffer, None),
    "DO413": (_optimize_module_functions, None),
    "DO500": (_broken_optimizer, None),
    "DO501": (_optimize, None),
    "DO502": (lambda t: dynamo_onnx.export(Lin(), (X,), optimize="onnxruntime"), None),
    "DO503": (_unfused_for_onnxruntime, "DO503"),
    "DO504": (_unfused_for_onnxruntime, "DO504"),
    "DO505": (_unfused_for_onnxruntime, "DO505"),
    "DO543": (_multi_axis_rotary, "DO543"),
    "DO506": (_quantize, None),
    "DO507": (_not_a_model_folder, None),
    "DO508": (_broken_quantizer, None),
    "DO509": (_quantizer_leaving_weights, "DO509"),
    "DO512": (_fusion_breaking_the_model, None),
    "DO601": (_verify(1.0), None),
    "DO602": (_verify(0.0), None),
    "DO604": (lambda t: _runs_at_two_only(t), "DO604"),
    "DO901": (_unwritable_reports, None),
}

#: Rules no small fixture can produce, and where they are tested instead.
NOT_FROM_A_FIXTURE = {
    "DO200": "a bug in a torch decomposition; the pass's failure rule (test_diagnostic_context)",
    "DO300": "a translation crash outside any operator; the pass's failure rule",
    "DO303": "needs a registered function that raises: test_unsupported_operators",
    "DO305": "needs two registered functions: test_dispatch",
    "DO306": "needs a registered function that fails: test_fallback_and_coverage",
    "DO130": "needs a transformers mixture-of-experts model: test_llm_cache (Mixtral)",
    "DO525": "needs transformers' PhiMoE rotary embedding: test_llm_compat (PhiMoE)",
    "DO415": "needs a transformers sliding-window model: test_llm_cache (Gemma 2, Mistral)",
    "DO510": "needs a transformers sliding-window model fused: test_ort_fusions (Mistral, Gemma 2)",
    "DO511": "needs a transformers attention fused into MultiHeadAttention: test_ort_fusions (GPT-2, a Llama of head size 8)",
    "DO513": "needs a saved transformers checkpoint missing a tensor: test_llm_folder_checks",
    "DO514": "needs a folder onnxruntime-genai refuses: test_llm_folder_checks (an eos id outside the vocabulary)",
    "DO515": "no transformers LM reaches it since the plain fallback of sliding layers: test_llm_folder_checks runs the folder check on a folder without genai_config.json",
    "DO400": "a finalize crash; the pass's failure rule",
    "DO600": "ONNX Runtime failing to run a valid model; the pass's failure rule",
    "DO603": "needs a wrong registered function: test_verification",
    "DO900": "an internal error: test_diagnostic_context (a broken registry)",
    "DO902": "a command-line write failure: test_cli::test_exit_code_table",
    "DO903": "a command-line unreadable log: test_cli::test_exit_code_table",
    "DO414": "a report written after the export: test_files (no finding is recorded)",
    "DO140": "a command-line factory that raises: test_cli::test_a_raising_factory_is_located_at_its_raise",
    "DO143": "a command-line export interrupted by SIGINT: test_cli::test_ctrl_c_ends_with_130_and_the_reports",
    "DO516": "needs onnxruntime-genai not importable during export-llm: test_llm_folder_checks (sys.modules, a shadowing module)",
    "DO540": "needs a Whisper checkpoint exported by export-llm: test_speech_folder",
    "DO541": "needs transformers' Qwen2.5-VL vision tower: test_vision_folder",
    "DO542": "needs a Qwen2.5-VL checkpoint's image processor: test_vision_folder",
    "DO532": "needs export_llm of a safetensors folder: test_streamed_export_llm",
    "DO533": "needs export_llm of a checkpoint larger than its export's peak: test_llm_layer_copy",
    "DO534": "needs export_llm's layer copy: test_llm_layer_copy",
    "DO535": "needs a fusion that is wrong for a model's layer: none is known",
    "DO536": "needs export_llm of a checkpoint deeper than its template: test_llm_template",
    "DO537": "needs export_llm of a checkpoint whose template is refused: test_llm_template",
}


def test_every_rule_has_a_fixture_or_a_reason():
    ids = {r.id for r in catalog() if not r.deprecated}
    assert set(FIXTURES) | set(NOT_FROM_A_FIXTURE) == ids
    assert not set(FIXTURES) & set(NOT_FROM_A_FIXTURE)


@pytest.mark.parametrize("rule_id", sorted(FIXTURES))
def test_fixture_produces_its_rule_at_its_level_and_line(rule_id, tmp_path, monkeypatch):
    call, marker = FIXTURES[rule_id]
    takes_monkeypatch = len(inspect.signature(call).parameters) == 2
    ctx = diagnostics_of(
        lambda: call(tmp_path, monkeypatch) if takes_monkeypatch else call(tmp_path)
    )
    rule = catalog().get(rule_id)
    findings = ctx.by_rule(rule_id)
    assert findings, [f.rule.id for f in ctx.findings]
    finding = findings[0]
    assert finding.level.name.lower() == rule.level
    if marker is not None:
        assert finding.primary is not None, finding
        assert (finding.primary.path, finding.primary.line) == (str(HERE), marker_line(marker))
    log = ctx.to_sarif()
    assert any(r["ruleId"] == rule_id for r in log["runs"][0]["results"]) or rule.level == "none"


def test_an_invalid_model_names_the_onnx_node_the_fx_node_and_the_line(tmp_path):
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        _invalid_model(tmp_path)
    message = str(info.value)
    assert message.startswith("[DO407 model-invalid] The ONNX model is invalid at node `bump_n")
    assert "from FX node `bump`" in message
    assert f"called at tests/{HERE.name}:{marker_line('DO407')}" in message
    assert "Type parameter (T) of Optype (Add) bound to different types" in message


def test_a_fusion_that_breaks_the_model_fails_and_leaves_the_program_as_it_was(monkeypatch):
    program = _fusion_breaking_the_model(None, monkeypatch)
    (finding,) = program.diagnostics.by_rule("DO512")
    assert finding.properties["op_type"] == "Gemm"
    assert "Input 0 expected to have rank 2 but has rank 3" in finding.message
    assert not [n for n in program.model.graph if n.domain == "com.microsoft"]  # not fused
    model = program.reference
    cache = type(model(torch.zeros(1, 1, dtype=torch.int64)).past_key_values)(config=model.config)
    cache.update(torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16), 0)
    ids = torch.randint(0, 100, (1, 3))
    mask = torch.ones(1, 5, dtype=torch.int64)
    got = program(input_ids=ids, attention_mask=mask, past_key_values=cache)
    want = model(input_ids=ids, attention_mask=mask, past_key_values=cache).logits
    torch.testing.assert_close(got[0], want.detach(), atol=1e-4, rtol=1e-4)


# -- fixes that work: each rule's fix applied to its fixture, and the finding is gone ------


class BranchesWithCond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


class ReshapesBySize(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1)


class ReturnsTensor(torch.nn.Module):
    def forward(self, x):
        return torch.tensor(x.shape[0])


class MutatesCopy(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y.add_(1)
        return y * 2


class CountsAsInput(torch.nn.Module):
    def forward(self, x, calls):
        calls = calls + 1
        return x * calls, calls


class NoiseAsInput(torch.nn.Module):
    def forward(self, x, noise):
        return x + noise


def _refined_spec(tmp_path):
    ctx = diagnostics_of(lambda: _strict_dim(tmp_path))
    (refined,) = ctx.by_rule("dynamic-shapes-refined")
    spec = eval(refined.properties["spec"], {"Dim": torch.export.Dim})  # the spec it gives
    return dynamo_onnx.export(BranchesOnSize(), (X6,), dynamic_shapes=spec)


#: rule id -> the fixture's call with the rule's fix applied.
FIXED = {
    "DO103": lambda t: dynamo_onnx.export(Lin(), (X,), opset_version=18),
    "DO104": lambda t: dynamo_onnx.export(BranchesWithCond(), (X,)),
    "DO105": lambda t: dynamo_onnx.export(Lin(), (X,), dynamic_shapes=BATCH),
    "DO106": lambda t: dynamo_onnx.export(ReshapesBySize(), (X,), dynamic_shapes=BATCH),
    "DO108": lambda t: dynamo_onnx.export(Lin(), (X,)),
    "DO109": lambda t: dynamo_onnx.export(Lin(), (X,), opset_version=18),
    "DO110": lambda t: dynamo_onnx.export(ReturnsTensor(), (X,)),
    "DO111": lambda t: dynamo_onnx.export(Lin(), (X,)),
    "DO112": lambda t: dynamo_onnx.export(Lin(), (X,)),
    "DO113": lambda t: dynamo_onnx.export(Lin(), (X,)),
    "DO120": lambda t: dynamo_onnx.export(MutatesCopy(), (X,)),
    "DO121": lambda t: dynamo_onnx.export(CountsAsInput(), (X, torch.zeros(1))),
    "DO122": lambda t: dynamo_onnx.export(Drops().eval(), (X,)),
    "DO123": lambda t: dynamo_onnx.export(NoiseAsInput(), (X, torch.rand_like(X))),
    "DO124": lambda t: dynamo_onnx.export(
        BranchesOnSize(), (X6,), dynamic_shapes={"x": {0: torch.export.Dim("b", min=5)}}
    ),
    "DO125": _refined_spec,
    "DO127": lambda t: dynamo_onnx.export(WantsEight(), (torch.randn(2, 8),)),
    "DO131": lambda t: dynamo_onnx.export(Lin(), (X,), dynamic_shapes={"x": {0: "b"}}),
    "DO132": lambda t: dynamo_onnx.export(Lin(), (X,), dynamic_axes={"x": [0]}),
    "DO138": _weights_made_in_fake_mode,
    "DO139": lambda t: dynamo_onnx.export(CausalMaskFlagged().eval(), (torch.randn(2, 3, 4),)),
    "DO141": lambda t: _float_then_quantized(),
    "DO402": lambda t: dynamo_onnx.export(Sampled(), (X,), opset_version=16),
    "DO604": lambda t: _runs_at_two_only(t, dynamic_shapes=None),
}


@pytest.mark.parametrize("rule_id", sorted(FIXED))
def test_the_rules_fix_applied_to_its_fixture_removes_the_finding(rule_id, tmp_path):
    ctx = diagnostics_of(lambda: FIXED[rule_id](tmp_path))
    assert not ctx.by_rule(rule_id), [f.message for f in ctx.by_rule(rule_id)]
    assert ctx.success, [f.message for f in ctx.findings if f.level >= Level.ERROR]
