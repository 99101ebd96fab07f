"""Opsets 11 to 17 with dynamic shapes on the models NPU and embedded toolchains run
(issue 46): torchvision's resnet18 and mobilenet_v3 as their operators (torchvision does not
import beside this torch: the blocks are written here), and a transformer block. Each is at
the opset asked, valid for ONNX's checker, and right against eager at two batch sizes."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

import dynamo_onnx
from dynamo_onnx.diagnostics import Level


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 conv + BatchNorm, a strided 1x1 shortcut."""

    def __init__(self, channels: int, stride: int = 1) -> None:
        super().__init__()
        given = channels // stride
        self.conv1 = nn.Conv2d(given, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1:
            self.downsample = nn.Sequential(
                nn.Conv2d(given, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNetLike(nn.Module):
    """resnet18's stem, two stages, adaptive average pool, flatten and fc."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(8), BasicBlock(8))
        self.layer2 = nn.Sequential(BasicBlock(16, stride=2), BasicBlock(16))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(x, 1))


class SqueezeExcitation(nn.Module):
    """torchvision's SqueezeExcitation as MobileNetV3 uses it (hardsigmoid scale)."""

    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.activation(self.fc1(self.avgpool(x)))
        return self.scale_activation(self.fc2(scale)) * x


class MobileNetV3Like(nn.Module):
    """mobilenet_v3's stem, an inverted residual (expand, depthwise, SE, project) with
    hardswish, and its classifier (Linear, Hardswish, Dropout, Linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish()
        )
        self.block = nn.Sequential(
            nn.Conv2d(8, 16, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            nn.Conv2d(16, 16, 5, 1, 2, groups=16, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            SqueezeExcitation(16, 8),
            nn.Conv2d(16, 8, 1, bias=False),
            nn.BatchNorm2d(8),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(8, 12), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(12, 10)
        )

    def forward(self, x):
        x = self.stem(x)
        x = self.avgpool(x + self.block(x))
        return self.classifier(torch.flatten(x, 1))


class EncoderBlock(nn.Module):
    """A pre-norm transformer block over token ids: embeddings, LayerNorm, causal
    multi-head attention (a triu mask), GELU MLP, softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.norm1 = nn.LayerNorm(16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, ids):
        h = self.embed(ids)
        a = self.norm1(h)
        length = ids.shape[1]
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
        h = h + self.attention(a, a, a, attn_mask=mask, need_weights=False)[0]
        return torch.softmax(h + self.mlp(self.norm2(h)), -1)


class DecoderLike(nn.Module):
    """A UNet/VAE decoder's operators: reflect-padded conv, GroupNorm, SiLU, bilinear and
    nearest upsampling, average pooling, chunk, tanh-GELU and Mish, a channels-last
    LayerNorm, softmax, amax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
        self.norm = nn.GroupNorm(2, 8)
        self.smooth = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.pool = nn.AvgPool2d(2)
        self.layer_norm = nn.LayerNorm(8)

    def forward(self, x):
        y = nn.functional.silu(self.norm(self.conv(x)))
        y = self.pool(self.smooth(y) + self.nearest(y))
        a, b = y.chunk(2, dim=1)
        z = torch.cat([nn.functional.gelu(a, approximate="tanh"), nn.functional.mish(b)], 1)
        z = self.layer_norm(z.permute(0, 2, 3, 1))
        return torch.softmax(z.flatten(1, 2), -1).mean(-1) + z.amax(dim=(1, 2)).sum(-1, True)


def _images(batch):
    return (torch.randn(batch, 3, 32, 32),)


def _ids(batch):
    return (torch.randint(0, 50, (batch, batch + 3)),)


def _decoder_images(batch):
    return (torch.randn(batch, 3, 8 + 4 * batch, 20 - 2 * batch),)


CASES = {
    "decoder": (DecoderLike, _decoder_images, {"x": {0: "batch", 2: "height", 3: "width"}}),
    "resnet": (ResNetLike, _images, {"x": {0: "batch"}}),
    "mobilenet_v3": (MobileNetV3Like, _images, {"x": {0: "batch"}}),
    "transformer": (EncoderBlock, _ids, {"ids": {0: "batch", 1: "sequence"}}),
}


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("name", sorted(CASES))
def test_models_export_at_older_opsets_with_dynamic_shapes(name, opset):
    """It was DO402 with nothing written: Reshape (allowzero, 14), HardSwish (14),
    ReduceMean at 11 (no adapter from 13), Constant's value_ints at 11, LayerNormalization
    (17), Trilu (14), Mish (18), CastLike (15), Split(num_outputs) (18) and Resize without
    roi (13) are lowered to older operators."""
    make_model, make_args, shapes = CASES[name]
    model = make_model().eval()
    program = dynamo_onnx.export(model, make_args(2), opset_version=opset, dynamic_shapes=shapes)
    proto = program.model_proto
    assert {o.domain: o.version for o in proto.opset_import}[""] == opset
    onnx.checker.check_model(proto, full_check=True)
    newer = {"HardSwish", "LayerNormalization", "Trilu", "Mish", "CastLike"}
    assert not newer & {n.op_type for n in proto.graph.node}
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]
    for batch in (2, 5):
        args = make_args(batch)
        torch.testing.assert_close(program(*args)[0], model(*args), atol=1e-5, rtol=1e-4)


def test_the_cnns_at_opset_11_need_no_if():
    """The flatten's Reshape keeps the batch as the input's size: allowzero is dropped
    without the If an NPU toolchain may not take."""
    program = dynamo_onnx.export(
        ResNetLike().eval(), _images(2), opset_version=11, dynamic_shapes={"x": {0: "batch"}}
    )
    assert "If" not in {n.op_type for n in program.model_proto.graph.node}


class Sampled(nn.Module):
    def forward(self, x, grid):
        return nn.functional.grid_sample(x, grid, align_corners=False)  # marker: grid


def test_what_no_older_opset_expresses_is_named_with_the_oldest_opset_that_works():
    from conftest import line_of

    args = (torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1)
    with pytest.raises(dynamo_onnx.SerializationError) as info:
        dynamo_onnx.export(Sampled(), args, opset_version=13)
    (finding,) = info.value.diagnostics.by_rule("DO402")
    assert finding.properties["blocking_ops"] == ["GridSample"]
    assert "GridSample (1 node(s): No Previous Version of GridSample exists; the oldest " in (
        finding.message
    )
    assert "the oldest opset that takes it: 16" in finding.message
    assert "Fix: Export at the oldest opset the message names for each blocking operator" in (
        str(info.value)
    )
    assert finding.primary.line == line_of(Sampled.forward, "marker: grid")
    program = dynamo_onnx.export(Sampled(), args, opset_version=16)
    torch.testing.assert_close(program(*args)[0], Sampled()(*args), atol=1e-5, rtol=1e-5)


def test_the_torch_onnx_call_with_dynamic_axes_at_opset_11():
    """The call NPU users copy from torch.onnx's tutorial: input names and dynamic_axes."""
    model = MobileNetV3Like().eval()
    program = dynamo_onnx.export(
        model,
        _images(2),
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=11,
        dynamo=True,
    )
    proto = program.model_proto
    assert {o.domain: o.version for o in proto.opset_import}[""] == 11
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    (x,) = _images(3)
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-4)
