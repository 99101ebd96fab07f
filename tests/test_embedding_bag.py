"""``nn.EmbeddingBag`` runs in ONNX Runtime and matches eager PyTorch.

torch_lib's function loops over the bags (``SequenceEmpty``, ``Loop``,
``ConcatFromSequence``); with the indices' shape static, ONNX Runtime's graph optimizations
made the process segfault when the model ran. Every model here runs in a subprocess, so a
crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import dynamo_onnx

_RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    inputs = np.load(sys.argv[2])
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    np.save(sys.argv[3], session.run(None, feeds)[0])
    """
)


def _run_in_subprocess(program, args, tmp_path):
    """The ONNX model's first output on ``args``, computed by ONNX Runtime (default graph
    optimizations, as users run it) in another process."""
    model_path, inputs_path, output_path = (
        tmp_path / "model.onnx",
        tmp_path / "inputs.npz",
        tmp_path / "output.npy",
    )
    program.save(str(model_path))
    names = [value.name for value in program.model.graph.inputs]
    np.savez(inputs_path, **{n: a.numpy() for n, a in zip(names, args, strict=True)})
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(model_path), str(inputs_path), str(output_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return torch.from_numpy(np.load(output_path))


class Bags(torch.nn.Module):
    def __init__(self, mode, padding_idx=None):
        super().__init__()
        torch.manual_seed(0)
        self.bag = torch.nn.EmbeddingBag(10, 6, mode=mode, padding_idx=padding_idx)

    def forward(self, ids, offsets=None, per_sample_weights=None):
        return self.bag(ids, offsets, per_sample_weights=per_sample_weights)


def _ids(*shape):
    ids = torch.randint(0, 10, shape, generator=torch.Generator().manual_seed(sum(shape)))
    ids.view(-1)[0] = 3  # the padding index of the models that have one
    return ids


@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_2d_bags_run_and_match_eager_static_as_dynamo_export_makes_them(
    mode, padding_idx, tmp_path
):
    model = Bags(mode, padding_idx).eval()
    ids = _ids(3, 5)
    program = dynamo_onnx.dynamo_export(model, ids)  # compat case 264: static shapes
    assert not [n for n in program.model.graph if n.op_type == "Loop"]
    torch.testing.assert_close(_run_in_subprocess(program, (ids,), tmp_path), model(ids))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_2d_bags_with_dynamic_dims_match_eager_at_two_sizes(mode, tmp_path):
    model = Bags(mode).eval()
    program = dynamo_onnx.export(model, (_ids(3, 5),), dynamic_shapes=({0: "batch", 1: "seq"},))
    for shape in ((2, 3), (4, 7)):
        ids = _ids(*shape)
        got = _run_in_subprocess(program, (ids,), tmp_path)
        torch.testing.assert_close(got, model(ids))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_1d_bags_with_offsets_and_an_empty_bag_match_eager_at_two_sizes(mode, tmp_path):
    model = Bags(mode).eval()
    example = (_ids(8), torch.tensor([0, 2, 2, 5]))
    program = dynamo_onnx.export(model, example, dynamic_shapes=({0: "n"}, {0: "bags"}))
    for args in (example, (_ids(5), torch.tensor([0, 1, 4]))):
        got = _run_in_subprocess(program, args, tmp_path)
        torch.testing.assert_close(got, model(*args))


def test_per_sample_weights_weigh_each_index_of_a_sum(tmp_path):
    model = Bags("sum").eval()
    weights = torch.rand(8, generator=torch.Generator().manual_seed(1))
    example = (_ids(8), torch.tensor([0, 2, 2, 5]), weights)
    program = dynamo_onnx.export(model, example, dynamic_shapes=({0: "n"}, {0: "bags"}, {0: "n"}))
    for args in (example, (_ids(5), torch.tensor([0, 1, 4]), weights[:5])):
        got = _run_in_subprocess(program, args, tmp_path)
        torch.testing.assert_close(got, model(*args))
