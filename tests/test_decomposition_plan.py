"""The decomposition pass re-traces only when the captured graph needs it (DO203)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel, SmallCNN
from dynamo_onnx.diagnostics import Level
from dynamo_onnx.passes.decompose import rewrites
from dynamo_onnx.registry import target_name


def _plan(program):
    (finding,) = program.diagnostics.by_rule("decomposition-plan")
    return finding


def test_functional_translatable_graph_is_not_retraced():
    model = MLPModel()
    program = dynamo_onnx.export(model, (torch.rand(4, 8),))
    plan = _plan(program)
    assert plan.properties["retraced"] is False
    assert plan.pass_name == "decomposition"
    x = torch.rand(4, 8)
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


class InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.add_(1)
        return torch.relu(y)


class AugmentedAssignment(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y += x  # add_ with a tensor of the same dtype
        y *= 0.5
        return y.sin()


class ReadBeforeAndAfter(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        before = y * 3  # reads the value before the write
        y.mul_(2).sub_(1)  # a chain of writes
        torch.relu_(y)
        return before + y


class MaskedInPlace(torch.nn.Module):
    def forward(self, x):
        y = x.exp()
        y.masked_fill_(x > 0, 0.0)
        return y.sum(-1)


class ConvReluInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv(x)).mean((2, 3))


class NormalizedTopK(torch.nn.Module):
    """Mixtral's router: one output of ``topk`` divided in place."""

    def forward(self, x):
        values, _ = x.softmax(-1).topk(2, dim=-1)
        values /= values.sum(dim=-1, keepdim=True)
        return values.log()


#: In-place operators writing a tensor only the graph sees: made out-of-place, no re-trace.
OWN_TENSOR_WRITES = [
    InPlace,
    AugmentedAssignment,
    ReadBeforeAndAfter,
    MaskedInPlace,
    ConvReluInPlace,
    NormalizedTopK,
]


def _example(model: torch.nn.Module, batch: int = 3) -> torch.Tensor:
    return (
        torch.randn(batch, 3, 6, 6) if isinstance(model, ConvReluInPlace) else torch.randn(batch, 4)
    )


@pytest.mark.parametrize("make", OWN_TENSOR_WRITES, ids=lambda m: m.__name__)
def test_in_place_writes_to_the_graphs_own_tensors_need_no_retrace(make):
    torch.manual_seed(0)
    model = make().eval()
    x = _example(model)
    program = dynamo_onnx.export(model, (x,), dynamic_shapes=({0: "batch"},))
    plan = _plan(program)
    assert plan.properties["retraced"] is False
    assert "made out-of-place" in plan.message
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for batch in (2, 5):
        y = _example(model, batch)
        torch.testing.assert_close(program(y)[0], model(y.clone()), atol=1e-5, rtol=1e-5)


class ViewTakenBeforeTheWrite(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        flat = y.view(-1)  # sees the write below
        y.add_(1)
        return flat * 1


class WrittenSlice(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[:, 0].add_(10)  # writes through a view into y
        return y.cos()


class WrittenInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class WrittenAndReturned(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.add_(1)
        return y


class PromotingWrite(torch.nn.Module):
    def forward(self, x):
        y = (x * 10).to(torch.int32)
        y.add_(torch.ones_like(x, dtype=torch.int64))  # stays int32; add would give int64
        return y


#: Writes someone else can see, or whose out-of-place form has another dtype: re-traced.
SEEN_WRITES = [
    ViewTakenBeforeTheWrite,
    WrittenSlice,
    WrittenInput,
    WrittenAndReturned,
    PromotingWrite,
]


@pytest.mark.parametrize("make", SEEN_WRITES, ids=lambda m: m.__name__)
def test_in_place_writes_others_can_see_force_the_retrace_and_say_so(make):
    x = torch.randn(3, 4)
    program = dynamo_onnx.export(make(), (x.clone(),))
    plan = _plan(program)
    assert plan.properties["retraced"] is True
    assert "made out-of-place" not in plan.message
    y = torch.randn(3, 4)
    torch.testing.assert_close(program(y.clone())[0], make()(y.clone()))


def test_the_rewrite_changes_only_the_graphs_own_writes():
    """On the captured graph: add_ becomes add and the reader after it reads add's result;
    a write through a view stays."""
    ep = torch.export.export(ReadBeforeAndAfter(), (torch.randn(3, 4),))
    assert rewrites.functionalize_inplace(ep) == 3
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert not any(t._schema.is_mutable for t in targets)
    assert torch.ops.aten.relu.default in targets and torch.ops.aten.sub.Tensor in targets
    x = torch.randn(3, 4)
    torch.testing.assert_close(ep.module()(x), ReadBeforeAndAfter()(x))
    seen = torch.export.export(WrittenSlice(), (torch.randn(3, 4),))
    assert rewrites.functionalize_inplace(seen) == 0


class WithoutBatchNorm(dynamo_onnx.OnnxRegistry):
    """A registry that lacks the ONNX function for ``aten.batch_norm``."""

    def supports(self, target, opset=None):
        return target_name(target) != "aten::batch_norm" and super().supports(target, opset)

    def functions_for(self, name, opset=None):
        return [] if name == "aten::batch_norm" else super().functions_for(name, opset)


def test_composite_operator_without_onnx_function_decomposes_alone_or_by_a_retrace():
    """aten.batch_norm is CompositeImplicitAutograd (in no decomposition table): with static
    shapes its node decomposes alone (DO306); with a dynamic batch the program is re-traced."""
    model = SmallCNN().eval()
    x = torch.rand(2, 3, 16, 16)
    static = dynamo_onnx.export(model, (x,), registry=WithoutBatchNorm())
    assert _plan(static).properties["retraced"] is False
    fallbacks = static.diagnostics.by_rule("decomposition-fallback")
    assert any(f.properties["fx_node"].startswith("batch_norm") for f in fallbacks)
    torch.testing.assert_close(static(x)[0], model(x), atol=1e-5, rtol=1e-5)

    batch = torch.export.Dim("batch", min=1, max=64)
    dynamic = dynamo_onnx.export(
        model, (x,), dynamic_shapes=({0: batch},), registry=WithoutBatchNorm()
    )
    plan = _plan(dynamic)
    assert plan.properties["retraced"] is True
    assert "`aten::batch_norm` has no ONNX function and dynamic shapes" in plan.message
    x5 = torch.rand(5, 3, 16, 16)
    torch.testing.assert_close(dynamic(x5)[0], model(x5), atol=1e-5, rtol=1e-5)


class ToSameDtype(torch.nn.Module):
    def forward(self, x):
        return x.float()  # an aten.to that changes nothing, and is the output


def test_no_op_to_as_output_keeps_its_node():
    """Found by the fuzzer: erasing it left the signature naming a node that was gone."""
    x = torch.randn(2, 3)
    program = dynamo_onnx.export(ToSameDtype(), (x,))
    torch.testing.assert_close(program(x)[0], x)


def test_reshapes_to_a_static_shape_lose_their_minus_one_and_the_optimizer_drops_no_ops():
    class Heads(torch.nn.Module):
        def forward(self, x):
            y = x.view(1, -1, 4, 8)  # already [1, 3, 4, 8]: a no-op reshape
            return (y * 2).reshape(1, 4, -1)

    x = torch.randn(1, 3, 4, 8)
    ep = torch.export.export(Heads(), (x,))
    assert rewrites.static_reshape_sizes(ep.graph_module) == 2
    sizes = [n.args[1] for n in ep.graph.nodes if n.target in rewrites._RESHAPES]
    assert sizes == [[1, 3, 4, 8], [1, 4, 24]]

    program = dynamo_onnx.export(Heads(), (x,))
    program.optimize()
    (reshape,) = [n for n in program.model.graph if n.op_type == "Reshape"]  # the no-op is gone
    assert ir.convenience.get_const_tensor(reshape.inputs[1]).numpy().tolist() == [1, 4, 24]
    torch.testing.assert_close(program(x)[0], Heads()(x))


def test_dynamic_reshapes_keep_their_minus_one():
    class Flatten(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], -1)

    x = torch.randn(3, 4, 5)
    program = dynamo_onnx.export(Flatten(), (x,), dynamic_shapes={"x": {0: "batch"}})
    torch.testing.assert_close(program(torch.randn(7, 4, 5))[0].shape, torch.Size([7, 20]))


def test_batch_norm_layers_need_no_retrace_and_match_eager():
    class Norms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.running = torch.nn.BatchNorm2d(3)
            self.plain = torch.nn.BatchNorm2d(3, affine=False)
            self.batch_stats = torch.nn.BatchNorm2d(3, track_running_stats=False)

        def forward(self, x):
            return self.batch_stats(self.plain(self.running(x)))

    torch.manual_seed(0)
    model = Norms()
    for norm in (model.running, model.plain):
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2.0)
    model.running.weight.data.uniform_(0.5, 1.5)
    model = model.eval()
    x = torch.randn(2, 3, 5, 5)
    program = dynamo_onnx.export(model, (x,))
    (plan,) = program.diagnostics.by_rule("decomposition-plan")
    assert plan.properties["retraced"] is False
    ops = [n.op_type for n in program.model.graph]
    assert ops.count("BatchNormalization") == 3
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)
