"""The external data file is written while the next weights are made (``io/data_file.py``):
the same two files as ``ir.save``, byte for byte, whatever the tensors' kinds and sizes; the
weights evaluated in threads a bounded number ahead of the write; an error or Ctrl-C in the
middle raised as it was and no file left behind."""

from __future__ import annotations

import threading
import time
import weakref

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest
import torch

from dynamo_onnx.defaults import SAVE_TENSORS_AHEAD
from dynamo_onnx.io import data_file, onnx_file
from dynamo_onnx.tensors import torch_tensor_to_ir


def _model(tensors: list[ir.TensorProtocol]) -> ir.Model:
    """A graph that adds up its initializers' shapes: enough for ``ir.save``."""
    values = []
    for tensor in tensors:
        value = ir.Value(name=tensor.name, shape=tensor.shape, type=ir.TensorType(tensor.dtype))
        value.const_value = tensor
        values.append(value)
    shapes = [ir.node("Shape", [v]) for v in values]
    out = shapes[0].outputs[0]
    out.name = "out"
    graph = ir.Graph([], [out], nodes=shapes, initializers=values, opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


def _lazy(tensor: ir.TensorProtocol, seen: list | None = None, delay: float = 0.0):
    def evaluate() -> ir.TensorProtocol:
        if seen is not None:
            seen.append((tensor.name, threading.current_thread().name))
        time.sleep(delay)
        return tensor

    return ir.LazyTensor(evaluate, dtype=tensor.dtype, shape=tensor.shape, name=tensor.name)


def _kinds() -> list[ir.TensorProtocol]:
    """Tensors of every kind a save meets, most over the inline threshold (256 bytes), of
    very different sizes: NumPy and torch arrays, 16-bit floats NumPy lacks, packed int4,
    a transposed (non-contiguous) view, booleans, a tiny inline one and lazy ones."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((700, 3000)).astype(np.float32)  # 8.4 MB
    return [
        ir.tensor(big, name="big"),
        ir.tensor(rng.standard_normal(3).astype(np.float32), name="inline"),
        torch_tensor_to_ir(torch.randn(300, 7).bfloat16(), "torch_bf16"),
        ir.tensor(rng.standard_normal((33, 9)).astype(ml_dtypes.bfloat16), name="np_bf16"),
        ir.Tensor(
            rng.integers(-8, 8, (40, 31)).astype(np.int8), dtype=ir.DataType.INT4, name="int4"
        ),
        ir.tensor(big[:100, :50].T, name="view"),
        ir.tensor(rng.random(999) > 0.5, name="mask"),
        _lazy(ir.tensor(np.arange(5000, dtype=np.int64), name="lazy_ids")),
        _lazy(torch_tensor_to_ir(torch.randn(64, 64).half(), "lazy_torch")),
        ir.tensor(np.float16(2.5) * np.ones(1, np.float16), name="one"),
    ]


def _ir_save(model: ir.Model, path) -> None:
    ir.save(model, path, external_data=f"{path.name}.data", size_threshold_bytes=256)


@pytest.mark.parametrize("direct", [True, False])
def test_the_two_files_are_ir_saves_byte_for_byte(tmp_path, monkeypatch, direct):
    """Written past the page cache (O_DIRECT, where the file system allows it) or not."""
    monkeypatch.setattr(onnx_file, "DIRECT_BYTES", 1 if direct else 1 << 62)
    model = _model(_kinds())
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    onnx_file.save(model, tmp_path / "ours" / "m.onnx", external_data=True)
    _ir_save(model, tmp_path / "theirs" / "m.onnx")
    for name in ("m.onnx.data", "m.onnx"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes()
    loaded = ir.load(tmp_path / "ours" / "m.onnx")
    for name, value in model.graph.initializers.items():
        np.testing.assert_array_equal(
            loaded.graph.initializers[name].const_value.numpy(), value.const_value.numpy()
        )
    # the model in memory keeps its own tensors (lazy ones stay lazy)
    assert isinstance(model.graph.initializers["lazy_ids"].const_value, ir.LazyTensor)


def test_a_model_that_holds_external_tensors_is_saved_again_the_same(tmp_path):
    """Loaded from a saved folder, its weights are ExternalTensors: saved to another
    folder, the files are the first ones (onnx_ir's own save handles those)."""
    _ir_save(_model(_kinds()), tmp_path / "first.onnx")
    again = tmp_path / "again"
    again.mkdir()
    onnx_file.save(ir.load(tmp_path / "first.onnx"), again / "first.onnx", external_data=True)
    assert (again / "first.onnx.data").read_bytes() == (tmp_path / "first.onnx.data").read_bytes()


@pytest.mark.parametrize(
    "sizes",
    [[256, 2_000_000, 300, 70_000, 1, 500_000, 1000], [100_000] * 4 + [1] + [100_000] * 2],
    ids=["varied", "equal"],
)
def test_the_weights_are_made_in_threads_ahead_of_the_write(tmp_path, sizes):
    """Tensors of 4 bytes to 8 MB: they are made in the save's threads, in file order, the
    next ones while one is written, and never more alive than those and the one written."""
    rng = np.random.default_rng(1)
    alive, most = [0], [0]
    lock = threading.Lock()
    seen: list = []

    def gone() -> None:
        with lock:
            alive[0] -= 1

    def lazy(index: int, size: int) -> ir.LazyTensor:
        array = rng.standard_normal(size).astype(np.float32)

        def evaluate() -> ir.TensorProtocol:
            seen.append((f"w{index}", threading.current_thread().name))
            copy = array.copy()
            with lock:
                alive[0] += 1
                most[0] = max(most[0], alive[0])
            weakref.finalize(copy, gone)
            return ir.tensor(copy, name=f"w{index}")

        return ir.LazyTensor(
            evaluate, dtype=ir.DataType.FLOAT, shape=ir.Shape([size]), name=f"w{index}"
        )

    tensors = [lazy(i, n) for i, n in enumerate(sizes)]
    progress: list = []

    def slow_progress(*args: int) -> None:  # the write of each tensor takes a while
        progress.append(args)
        time.sleep(0.05)

    onnx_file.save(_model(tensors), tmp_path / "m.onnx", external_data=True, progress=slow_progress)
    expected = [t for t in tensors if t.nbytes > 256]  # w4 is inline, in the model's file
    written = [(name, thread.split("_")[0]) for name, thread in seen if name != "w4"]
    assert written == [(t.name, data_file.THREAD_NAME) for t in expected]
    assert most[0] == SAVE_TENSORS_AHEAD + 1  # made while one is written, never more
    data = (tmp_path / "m.onnx.data").read_bytes()
    assert data == b"".join(t.numpy().tobytes() for t in expected)
    total = sum(t.nbytes for t in expected)
    assert progress[-1] == (len(expected), len(expected), total, total)
    assert [p[0] for p in progress] == list(range(1, len(expected) + 1))


class Unreadable(OSError):
    """What a checkpoint's read raises: the save must raise this one, unchanged."""


@pytest.mark.parametrize("interrupt", [False, True])
def test_an_error_or_ctrl_c_in_the_middle_leaves_no_file(tmp_path, interrupt):
    """A tensor that cannot be made (raised in the thread that makes it), or Ctrl-C in the
    caller's thread while the file is written: the same exception, no file, no thread."""
    tensors = [ir.tensor(np.full(100_000, i, np.float32), name=f"w{i}") for i in range(6)]

    def fail() -> ir.TensorProtocol:
        raise Unreadable(5, "shard 2 ends inside tensor w3")

    if interrupt:
        progress = _interrupt_at(3)
    else:
        tensors[3] = ir.LazyTensor(
            fail, dtype=ir.DataType.FLOAT, shape=ir.Shape([100_000]), name="w3"
        )
        progress = None
    expected = KeyboardInterrupt if interrupt else Unreadable
    with pytest.raises(expected) as raised:
        onnx_file.save(_model(tensors), tmp_path / "m.onnx", external_data=True, progress=progress)
    if not interrupt:
        assert str(raised.value) == "[Errno 5] shard 2 ends inside tensor w3"
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith(data_file.THREAD_NAME)]


def _interrupt_at(index: int):
    def progress(done: int, *_: int) -> None:
        if done == index:
            raise KeyboardInterrupt

    return progress


def test_a_tensor_of_another_size_than_declared_is_refused(tmp_path):
    """The offsets follow the declared sizes, as onnx_ir's: a lazy tensor that gives other
    bytes would shift every weight after it."""
    wrong = ir.LazyTensor(
        lambda: ir.tensor(np.zeros(100, np.float32)),
        dtype=ir.DataType.FLOAT,
        shape=ir.Shape([200]),
        name="wrong",
    )
    with pytest.raises(ValueError, match="'wrong' gave 400 bytes for its 800"):
        onnx_file.save(_model([wrong]), tmp_path / "m.onnx", external_data=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_evaluated_ahead_keeps_the_order_and_the_bound_of_items_held(workers):
    """Items that take very different times come out in order; ``workers`` are made while
    the consumer holds one, never more."""
    delays = [0.03, 0.0, 0.02, 0.0, 0.0, 0.01, 0.0, 0.02]
    made, taken, most = [0], [0], [0]
    lock = threading.Lock()

    def evaluate(i: int) -> int:
        with lock:
            made[0] += 1
            most[0] = max(most[0], made[0] - taken[0])
        time.sleep(delays[i])
        return i * i

    got = []
    for value in data_file.evaluated_ahead(range(8), evaluate, workers):
        got.append(value)
        time.sleep(0.01)  # the consumer's write
        with lock:
            taken[0] += 1
    assert got == [i * i for i in range(8)]
    assert most[0] == workers + 1


def test_a_checkpoint_cut_short_fails_the_streamed_save_with_do406_and_no_folder_files(tmp_path):
    """The weights are read in the save's thread: a shard that ends inside a tensor (one
    the save is the first to read) fails
    export-llm with the save's error (the read's cause, the tensor named) in the caller's
    thread, and no model or data file is left in the output folder."""
    import transformers

    import dynamo_onnx
    import hf_models
    from test_export_llm_cli import _tokenizer

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**hf_models.DECODER, "hidden_size": 64})
    folder = tmp_path / "llama"
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    _point_past_the_end(folder / "model.safetensors", "model.layers.1.mlp.down_proj.weight")
    with pytest.raises(dynamo_onnx.OnnxExporterError) as raised:
        dynamo_onnx.export_llm(folder, tmp_path / "out")
    message = str(raised.value)
    assert message.startswith("[DO406 save-failed]") and "ends inside tensor" in message
    assert not list((tmp_path / "out").glob("model.onnx*"))
    assert not [t for t in threading.enumerate() if t.name.startswith(data_file.THREAD_NAME)]


def _point_past_the_end(shard, name: str) -> None:
    """The safetensors header of ``shard`` with tensor ``name``'s bytes past the file's end
    (a file cut short where that tensor is, the others still readable)."""
    import json
    import struct

    raw = shard.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    start, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [start + len(raw), end + len(raw)]
    text = json.dumps(header).encode()
    shard.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])


def test_with_a_budget_the_largest_items_are_made_alone():
    """Sizes as a budget: two small items are made while one is held, a large one (the
    LM head of a model) only when nothing else is held or made."""
    sizes = [1, 1, 1, 1, 10, 1, 10, 10, 1, 1, 1]
    held: list[int] = []
    lock = threading.Lock()
    seen: list[list[int]] = []

    def evaluate(i: int) -> int:
        with lock:
            held.append(i)
            seen.append(list(held))
        time.sleep(0.01)
        return i

    for value in data_file.evaluated_ahead(
        range(len(sizes)), evaluate, 2, size=lambda i: sizes[i], budget=10
    ):
        time.sleep(0.02)
        with lock:
            held.remove(value)
    for items in seen:
        assert sum(sizes[i] for i in items) <= 10 or len(items) == 1, items
    assert any(len(items) == 3 for items in seen)  # small ones two ahead
