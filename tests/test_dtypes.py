"""Every torch dtype ONNX can hold is exported as its ONNX type, with its values; the others
are DO309 at the user's line, never a KeyError."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE, has_onnx_dtype

BYTES = torch.tensor([[0x12, 0x34], [0x56, 0x7F]], dtype=torch.uint8)


class ReturnsBuffer(torch.nn.Module):
    """Returns a weight of the dtype under test next to an ordinary computation."""

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("w", tensor)

    def forward(self, x):
        return self.w, x + 1


def _saved_initializer(tensor: torch.Tensor, tmp_path) -> onnx.TensorProto:
    program = dynamo_onnx.export(ReturnsBuffer(tensor).eval(), (torch.rand(2),))
    path = tmp_path / "m.onnx"
    program.save(path)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    returned = model.graph.output[0].name
    (initializer,) = [i for i in model.graph.initializer if i.name == returned]
    return initializer


@pytest.mark.parametrize(
    ("dtype", "onnx_type", "numpy_type"),
    [
        (torch.float8_e4m3fn, "FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn),
        (torch.float8_e4m3fnuz, "FLOAT8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz),
        (torch.float8_e5m2, "FLOAT8E5M2", ml_dtypes.float8_e5m2),
        (torch.float8_e5m2fnuz, "FLOAT8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz),
        (torch.float8_e8m0fnu, "FLOAT8E8M0", ml_dtypes.float8_e8m0fnu),
    ],
)
def test_float8_weights_keep_their_type_and_bits(dtype, onnx_type, numpy_type, tmp_path):
    initializer = _saved_initializer(BYTES.view(dtype), tmp_path)
    assert onnx.TensorProto.DataType.Name(initializer.data_type) == onnx_type
    assert list(initializer.dims) == [2, 2]
    expected = BYTES.numpy().view(numpy_type).astype(np.float32)
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(initializer).astype(np.float32), expected
    )


def test_float4_pairs_become_twice_as_many_float4_values(tmp_path):
    """float4_e2m1fn_x2 packs two values per byte, low nibble first: [2, 2] -> [2, 4]."""
    initializer = _saved_initializer(BYTES.view(torch.float4_e2m1fn_x2), tmp_path)
    assert onnx.TensorProto.DataType.Name(initializer.data_type) == "FLOAT4E2M1"
    assert list(initializer.dims) == [2, 4]
    nibbles = np.array([[0x2, 0x1, 0x4, 0x3], [0x6, 0x5, 0xF, 0x7]], dtype=np.uint8)
    expected = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(initializer).astype(np.float32), expected
    )


@pytest.mark.parametrize(
    ("dtype", "onnx_type", "expected"),
    [
        (torch.int4, "INT4", [[2, 4], [6, -1]]),
        (torch.uint4, "UINT4", [[2, 4], [6, 15]]),
        (torch.int2, "INT2", [[-2, 0], [-2, -1]]),
        (torch.uint2, "UINT2", [[2, 0], [2, 3]]),
    ],
)
def test_sub_byte_integers_are_packed_by_onnx(dtype, onnx_type, expected, tmp_path):
    """torch keeps one value per byte (its low bits); ONNX stores them packed."""
    initializer = _saved_initializer(BYTES.view(dtype), tmp_path)
    assert onnx.TensorProto.DataType.Name(initializer.data_type) == onnx_type
    values = onnx.numpy_helper.to_array(initializer).astype(np.int64)
    np.testing.assert_array_equal(values, np.array(expected))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_integers_run_in_onnx_runtime(dtype):
    def widen(x, y):  # what eager computes on these dtypes: no arithmetic, bitwise yes
        return torch.bitwise_and(x, y), torch.cat([x, y]).to(torch.int64)

    x = torch.tensor([1, 7, 200, 65535], dtype=dtype)
    y = torch.tensor([3, 1, 55, 0], dtype=dtype)
    for shapes in (None, {"x": {0: "n"}, "y": {0: "n"}}):
        program = dynamo_onnx.export(widen, (x, y), dynamic_shapes=shapes)
        assert program.model.graph.inputs[0].dtype.name == str(dtype).removeprefix("torch.").upper()
        sizes = (4, 7) if shapes else (4,)
        for n in sizes:
            a, b = (torch.randint(0, 60000, (n,)).to(dtype) for _ in range(2))
            for got, want in zip(program(a, b), widen(a, b), strict=True):
                assert got.dtype == want.dtype
                assert torch.equal(got, want)


def selects(mask, x, y):
    return torch.where(mask, x, y)  # marker: where


def test_a_node_onnx_runtime_has_no_kernel_for_is_a_warning_at_the_users_line():
    """Where on uint16 is valid ONNX that ONNX Runtime's CPU provider cannot run: the model is
    handed back (other runtimes may run it), with DO409 naming the node and the line."""
    x = torch.tensor([1, 2], dtype=torch.uint16)
    program = dynamo_onnx.export(selects, (torch.tensor([True, False]), x, x))
    (finding,) = program.diagnostics.by_rule("runtime-kernel-missing")
    assert finding.level.name == "WARNING"
    assert finding.primary.line == line_of(selects, "marker: where")
    assert "(Where on bool, uint16, uint16)" in finding.message
    assert not program.diagnostics.by_rule("model-invalid")


def test_complex32_is_exported_as_float16_pairs(tmp_path):
    """ONNX has no complex32: like complex64 it becomes its [..., 2] reals, in float16."""
    tensor = torch.tensor([1 + 2j, -3 + 0.5j], dtype=torch.complex32)
    initializer = _saved_initializer(tensor, tmp_path)
    assert onnx.TensorProto.DataType.Name(initializer.data_type) == "FLOAT16"
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(initializer), np.array([[1, 2], [-3, 0.5]], dtype=np.float16)
    )


def test_every_torch_dtype_is_mapped_or_named_as_having_no_onnx_type():
    """The table is the whole answer: what is not in it is exactly what ONNX lacks."""
    dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    missing = sorted(str(d) for d in dtypes if not has_onnx_dtype(d))
    assert all(
        any(
            word in name
            for word in ("qint", "quint", "bits", "int1", "int3", "int5", "int6", "int7")
        )
        for name in missing
    ), missing
    assert torch.float4_e2m1fn_x2 in TORCH_TO_ONNX_DTYPE
    assert has_onnx_dtype(torch.complex32)


def quantized(x):
    q = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)  # marker: qint8
    return q.dequantize() * 2


def test_a_dtype_onnx_lacks_is_do309_at_the_users_line_not_a_key_error():
    with pytest.raises(dynamo_onnx.TranslationError) as info:
        dynamo_onnx.export(quantized, (torch.rand(3),))
    error = info.value
    assert error.rule_id == "DO309"
    (finding,) = error.diagnostics.by_rule("dtype-not-in-onnx")
    assert finding.properties["dtype"] == "torch.qint8"
    assert finding.primary.line == line_of(quantized, "marker: qint8")
    assert "torch.qint8 tensor, which ONNX has no type for" in str(error)
    assert "x.dequantize()" in str(error)  # the fix


def test_a_weight_of_a_dtype_onnx_lacks_names_the_weight():
    bits = BYTES.view(torch.bits8)
    with pytest.raises(dynamo_onnx.TranslationError) as info:
        dynamo_onnx.export(ReturnsBuffer(bits), (torch.rand(2),))
    assert info.value.rule_id == "DO309"
    assert "The buffer `w` at" in str(info.value)
    assert "torch.bits8" in str(info.value)
