"""Inline save streams the weights: same ModelProto as ir.save, no copy of the weights."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

import dynamo_onnx
from dynamo_onnx.io import protowriter
from dynamo_onnx.io.onnx_file import initializers_layout


class ManyDtypes(torch.nn.Module):
    """Weights and buffers of several dtypes and shapes, including empty and scalar."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("halves", torch.randn(8).half())
        self.register_buffer("brains", torch.randn(8).bfloat16())
        self.register_buffer("index", torch.arange(8))
        self.register_buffer("mask", torch.tensor([True, False] * 4))
        self.register_buffer("scale", torch.tensor(1.5))
        self.register_buffer("empty", torch.zeros(0, 8))

    def forward(self, x):
        y = self.lin(x) * self.scale + self.halves.float() + self.brains.float()
        y = torch.where(self.mask, y, y[:, self.index.flip(0)])
        return torch.cat([y, self.empty.expand(0, 8)], dim=0)


@pytest.mark.parametrize("as_inputs", [False, True])
def test_streamed_file_is_the_same_model_as_ir_save(tmp_path, as_inputs):
    model = ManyDtypes().eval()
    x = torch.randn(3, 8)
    program = dynamo_onnx.export(model, (x,))
    assert all(protowriter.streamable(v) for v in program.model.graph.initializers.values())
    ours = tmp_path / "ours.onnx"
    program.save(ours, keep_initializers_as_inputs=as_inputs)
    reference = tmp_path / "reference.onnx"
    with initializers_layout(
        program.model, include_initializers=True, keep_initializers_as_inputs=as_inputs
    ):
        ir.save(program.model, reference)
    assert onnx.load(ours) == onnx.load(reference)
    assert ours.stat().st_size == reference.stat().st_size
    onnx.checker.check_model(onnx.load(ours), full_check=True)
    session = ort.InferenceSession(str(ours), providers=["CPUExecutionProvider"])
    names = [i.name for i in onnx.load(ours).graph.input]
    assert ("lin.weight" in names) == as_inputs  # as inputs, with their values as defaults
    feeds = {"x": x.numpy()}
    (got,) = session.run(None, feeds)
    torch.testing.assert_close(torch.from_numpy(got), model(x).detach(), atol=1e-5, rtol=1e-5)
    # the model in memory still has its initializers after the save
    assert "lin.weight" in program.model.graph.initializers


def test_varint_lengths_past_one_byte_and_past_2_21():
    assert protowriter._varint(0) == b"\x00"
    assert protowriter._varint(300) == b"\xac\x02"
    assert protowriter._varint(2**21) == b"\x80\x80\x80\x01"


def test_the_direct_writer_stages_pads_and_truncates(tmp_path):
    """Writes of any size, across the staging buffer's end, give the file those bytes
    exactly (the last block padded for O_DIRECT, then cut): checked on a plain fd."""
    import os

    from dynamo_onnx.io.direct_file import BUFFER_BYTES, DirectFile

    pieces = [b"a", bytes(range(256)) * 20, os.urandom(BUFFER_BYTES + 123), b"tail" * 999]
    path = tmp_path / "direct.bin"
    with DirectFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)) as file:
        for piece in pieces:
            assert file.write(memoryview(piece)) == len(piece)
    assert path.read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("staged", [0, 4096, 4096 * 3 + 5])
def test_the_direct_writer_writes_page_aligned_buffers_from_where_they_are(tmp_path, staged):
    """A page-aligned buffer (the save's filled ones) after whole blocks staged is written
    from its own memory, its tail staged; after a part block, it is staged: the same bytes
    either way, on a real O_DIRECT file where the file system allows it."""
    import os

    from dynamo_onnx.io.direct_file import BUFFER_BYTES, open_direct, page_aligned_bytes

    head = os.urandom(staged)
    big = page_aligned_bytes(2 * BUFFER_BYTES + 1000)
    big[:] = os.urandom(big.nbytes)
    aligned = page_aligned_bytes(BUFFER_BYTES)
    aligned[:] = os.urandom(BUFFER_BYTES)
    path = tmp_path / "direct.bin"
    file = open_direct(path)
    if file is None:
        pytest.skip("no O_DIRECT on this file system")
    with file:
        for piece in (head, big, aligned, b"end"):
            assert file.write(piece) == len(piece)
    assert path.read_bytes() == head + bytes(big) + bytes(aligned) + b"end"


def test_a_large_model_saved_past_the_page_cache_is_the_same_file(tmp_path, monkeypatch):
    """Above DIRECT_BYTES the weights are written with O_DIRECT where the file system
    allows it, else the usual way: the file is the same, byte for byte, either way."""
    from dynamo_onnx.io import onnx_file

    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 7))
    program = dynamo_onnx.export(model, (torch.randn(2, 1024),))
    monkeypatch.setattr(onnx_file, "DIRECT_BYTES", 1 << 20)  # 4 MiB of weights: direct
    program.save(tmp_path / "direct.onnx")
    monkeypatch.setattr(onnx_file, "DIRECT_BYTES", 1 << 62)  # never
    program.save(tmp_path / "buffered.onnx")
    assert (tmp_path / "direct.onnx").read_bytes() == (tmp_path / "buffered.onnx").read_bytes()
    x = torch.randn(2, 1024)
    session = ort.InferenceSession(str(tmp_path / "direct.onnx"))
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x), atol=1e-4, rtol=1e-4)
