"""Streamed weights written into the save's reused buffers (``io/fill.py``): the same bytes
and the same findings as their evaluation gives, from a real safetensors checkpoint."""

from __future__ import annotations

import functools
import gc
import weakref

import numpy as np
import onnx_ir as ir
import pytest
import torch
from safetensors.torch import save_file

from dynamo_onnx.io import data_file
from dynamo_onnx.io.checkpoint import open_checkpoint
from dynamo_onnx.io.fill import Fillable, Scratch, copy_array
from dynamo_onnx.io.streamed_weights import (
    StreamedTensor,
    WeightStream,
    non_finite_count,
    torch_non_finite_count,
)
from dynamo_onnx.runtimes.onnxruntime.packed_tensor import PackedTensor, concatenated
from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE


def _checkpoint(tmp_path, dtype: torch.dtype):
    """Projections of a GQA attention and an MLP (q 64x32, k/v 16x32, gate/up 48x32) and an
    embedding, stored in ``dtype``, with a NaN and an inf planted in ``k``."""
    generator = torch.Generator().manual_seed(0)
    shapes = {"q": (64, 32), "k": (16, 32), "v": (16, 32), "gate": (48, 32), "up": (48, 32)}
    tensors = {n: torch.randn(s, generator=generator).to(dtype) for n, s in shapes.items()}
    tensors["embed"] = torch.randn(100, 32, generator=generator).to(dtype)
    tensors["k"][3, 5] = float("nan")
    tensors["k"][7, 1] = float("inf")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return open_checkpoint(tmp_path)


def _read(checkpoint, name, dtype):
    return checkpoint.read(name, dtype).numpy()


def _read_stored(checkpoint, name, scratch):
    return checkpoint.read_into(name, scratch.take("read", checkpoint.stored(name).nbytes))


def _streamed(stream: WeightStream, checkpoint, name: str, target: torch.dtype):
    stored = checkpoint.stored(name)
    return stream.lazy(
        name,
        TORCH_TO_ONNX_DTYPE[target],
        ir.Shape(stored.shape),
        functools.partial(_read, checkpoint, name, target),
        functools.partial(_read_stored, checkpoint, name),
    )


def _weights(stream: WeightStream, checkpoint, target: torch.dtype) -> list[ir.TensorProtocol]:
    """What a fused decoder's save meets: packed q/k/v and gate/up (each part transposed),
    packed without a transpose, and a weight alone."""
    parts = {n: _streamed(stream, checkpoint, n, target) for n in ("q", "k", "v", "gate", "up")}
    return [
        _streamed(stream, checkpoint, "embed", target),
        concatenated("qkv", [(parts["q"], True), (parts["k"], True), (parts["v"], True)], 1),
        concatenated("gate_up", [(parts["gate"], True), (parts["up"], True)], 1),
        concatenated("kv_rows", [(parts["k"], False), (parts["v"], False)], 0),
    ]


def _expected(checkpoint, target: torch.dtype) -> bytes:
    """The bytes of :func:`_weights`, made from the checkpoint with NumPy, independently."""
    a = {n: checkpoint.read(n, target).numpy() for n in ("q", "k", "v", "gate", "up", "embed")}
    arrays = [
        a["embed"],
        np.concatenate([a["q"].T, a["k"].T, a["v"].T], 1),
        np.concatenate([a["gate"].T, a["up"].T], 1),
        np.concatenate([a["k"], a["v"]], 0),
    ]
    return b"".join(np.ascontiguousarray(x).tobytes() for x in arrays)


@pytest.mark.parametrize(
    ("stored", "target"),
    [
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.float32, torch.float32),
        # narrowing: not exact, every part falls back to its own evaluation
        (torch.float32, torch.float16),
    ],
)
@pytest.mark.parametrize("how", ["filled", "evaluated"])
def test_streamed_weights_give_the_checkpoints_bytes_and_count_its_non_finite_values(
    tmp_path, stored, target, how
):
    checkpoint = _checkpoint(tmp_path, stored)
    stream = WeightStream()
    weights = _weights(stream, checkpoint, target)
    assert all(isinstance(t, Fillable) for t in weights)
    if how == "evaluated":  # what a reader of the lazy tensors (the quantizer) gets
        written = b"".join(t.numpy().tobytes() for t in weights)
    else:
        data_file.write_data_file(weights, tmp_path / "w.data", direct=False)
        written = (tmp_path / "w.data").read_bytes()
    assert written == _expected(checkpoint, target)
    assert stream.read == {"q", "k", "v", "gate", "up", "embed"}
    assert stream.non_finite == {"k": (2, 16 * 32)}


def test_a_packed_tensor_of_other_parts_is_filled_from_its_evaluation(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((5, 4))
    packed = concatenated(
        "ab", [(ir.tensor(a, name="a"), True), (ir.tensor(b.astype(np.float32), name="b"), True)], 1
    )
    assert isinstance(packed, PackedTensor)
    out = torch.empty(4, 11)
    packed.fill(out, Scratch())
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a.T, b.T.astype(np.float32)], 1))


class _Recorded:
    """A Fillable tensor that records the memory it is given."""

    def __init__(self, name: str, given: list[int]) -> None:
        self.name, self.dtype, self.shape = name, ir.DataType.FLOAT, ir.Shape([256, 64])
        self.nbytes = 256 * 64 * 4
        self._given = given

    def fill(self, out: torch.Tensor, scratch: Scratch) -> None:
        self._given.append(out.data_ptr())
        out.fill_(float(len(self._given)))


def test_the_save_reuses_its_buffers_from_tensor_to_tensor(tmp_path):
    given: list[int] = []
    tensors = [_Recorded(f"w{i}", given) for i in range(12)]
    data_file.write_data_file(tensors, tmp_path / "w.data", direct=True, ahead=1)  # type: ignore[arg-type]
    written = np.fromfile(tmp_path / "w.data", dtype=np.float32).reshape(12, -1)
    np.testing.assert_array_equal(
        written, np.repeat(np.arange(1, 13, dtype=np.float32), 256 * 64).reshape(12, -1)
    )
    assert len(given) == 12 and len(set(given)) <= 2  # the one written and the one made


def test_the_buffers_are_dropped_where_other_tensors_follow(tmp_path, monkeypatch):
    """An int4 model's float embedding comes before its quantized weights: the buffers
    it was written from must not stay held while those are made."""
    given: list[int] = []
    buffers: list[weakref.ref] = []
    allocate = data_file._page_aligned

    def recorded(nbytes: int) -> torch.Tensor:
        tensor = allocate(nbytes)
        buffers.append(weakref.ref(tensor))
        return tensor

    monkeypatch.setattr(data_file, "_page_aligned", recorded)
    alive: list[int] = []

    def later() -> ir.TensorProtocol:
        gc.collect()
        alive.append(sum(ref() is not None for ref in buffers))
        return ir.tensor(np.zeros((256, 64), np.float32))

    plain = [
        ir.LazyTensor(later, dtype=ir.DataType.FLOAT, shape=ir.Shape([256, 64])) for _ in range(3)
    ]
    tensors = [_Recorded("a", given), _Recorded("b", given), *plain, _Recorded("c", given)]
    data_file.write_data_file(tensors, tmp_path / "w.data", direct=False, ahead=1)  # type: ignore[arg-type]
    assert len(given) == 3 and len(buffers) >= 2
    assert alive[-1] == 0  # by the third plain tensor, no buffer is held


def test_the_torch_count_of_non_finite_values_is_numpys():
    rng = np.random.default_rng(1)
    values = rng.standard_normal(10_000).astype(np.float32) * 1e37  # their sum overflows
    assert torch_non_finite_count(torch.from_numpy(values)) == non_finite_count(values) == 0
    values[[3, 70, 9000]] = [np.nan, np.inf, -np.inf]
    for dtype in (torch.float32, torch.bfloat16):
        assert torch_non_finite_count(torch.from_numpy(values).to(dtype), chunk=1000) == 3
    assert torch_non_finite_count(torch.arange(5)) == 0
    assert torch_non_finite_count(torch.empty(0)) == 0


def test_read_into_reads_the_stored_tensor_into_the_buffer_given(tmp_path):
    checkpoint = _checkpoint(tmp_path, torch.bfloat16)
    buffer = torch.zeros(10_000, dtype=torch.uint8)
    tensor = checkpoint.read_into("gate", buffer)
    assert tensor.dtype == torch.bfloat16 and tuple(tensor.shape) == (48, 32)
    assert tensor.data_ptr() == buffer.data_ptr()
    assert torch.equal(tensor, checkpoint.read("gate"))


def test_copy_array_copies_bfloat16_bytes_torch_from_numpy_refuses():
    import ml_dtypes

    array = np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4)
    out = torch.empty(3, 4, dtype=torch.bfloat16)
    copy_array(out, array)
    assert out.float().tolist() == array.astype(np.float32).tolist()


def test_a_streamed_tensor_narrowing_its_values_is_not_handed_stored(tmp_path):
    checkpoint = _checkpoint(tmp_path, torch.float32)
    stream = WeightStream()
    tensor = _streamed(stream, checkpoint, "gate", torch.float16)
    assert isinstance(tensor, StreamedTensor)
    assert tensor.stored(Scratch()) is None
    widened = _streamed(stream, checkpoint, "gate", torch.float64)
    assert widened.stored(Scratch()).dtype == torch.float32  # type: ignore[union-attr]
