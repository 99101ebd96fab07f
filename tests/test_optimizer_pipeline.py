"""The optimization pass runs onnxscript's optimizer pass for pass, with its quadratic
``SlicesSplit`` rule replaced by a linear rewrite: the result is the same model."""

from __future__ import annotations

import collections

import onnx_ir as ir
import onnxruntime as ort
import onnxscript.optimizer
import pytest
import torch

import dynamo_onnx
import hf_models
from dynamo_onnx.onnx_tools.optimizer_pipeline import run_optimizer, weights_kept


def _ops(model):
    return collections.Counter(node.op_type for node in model.graph)


def _run(model, feeds):
    session = ort.InferenceSession(ir.serde.serialize_model(model).SerializeToString())
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


@pytest.mark.parametrize("build", [hf_models.llama, hf_models.gpt2], ids=["llama", "gpt2"])
def test_same_model_as_onnxscripts_optimizer(build):
    model, args, kwargs, shapes = build()
    program = dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, optimize=False)
    theirs = ir.serde.deserialize_model(program.model_proto)
    ours = ir.serde.deserialize_model(program.model_proto)
    onnxscript.optimizer.optimize_ir(theirs, should_fold=weights_kept)  # weights kept alike
    run_optimizer(ours)
    assert _ops(ours) == _ops(theirs)
    feeds = [a.numpy() for a in [*args, *kwargs.values()]]
    for mine, other in zip(_run(ours, feeds), _run(theirs, feeds), strict=True):
        assert (mine == other).all()


def _halves_model(size: int) -> ir.Model:
    """``Concat(x[..., h:], x[..., :h])`` with 4-input slices (no steps), as the rule wants."""
    half = size // 2
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, size]))

    def ints(name, values):
        return ir.Value(name=name, const_value=ir.tensor(values, dtype=ir.DataType.INT64))

    axes = ints("axes", [-1])
    starts0, ends0, starts1, ends1 = (
        ints(n, v) for n, v in (("s0", [0]), ("e0", [half]), ("s1", [half]), ("e1", [size]))
    )
    first = ir.node("Slice", [x, starts0, ends0, axes])
    second = ir.node("Slice", [x, starts1, ends1, axes])
    joined = ir.node("Concat", [second.outputs[0], first.outputs[0]], attributes={"axis": -1})
    joined.outputs[0].name = "rotated"
    graph = ir.Graph(
        [x],
        joined.outputs,
        nodes=[first, second, joined],
        initializers=[axes, starts0, ends0, starts1, ends1],
        opset_imports={"": 20},
    )
    return ir.Model(graph, ir_version=10)


def test_halves_of_an_even_axis_become_one_split_and_an_odd_axis_keeps_its_slices():
    """onnxscript's SlicesSplit, made linear: the same Split for halves of 8; for 5 it
    would make ``Split(num_outputs=2)``, which cuts 3 + 2 where the slices cut 2 + 3, so
    odd sizes keep their slices (and the values stay right)."""
    for size, splits in ((8, 1), (5, 0)):
        ours = _halves_model(size)
        run_optimizer(ours)
        assert _ops(ours)["Split"] == splits and _ops(ours)["Slice"] == 2 - 2 * splits
        x = torch.randn(2, size)
        (got,) = _run(ours, [x.numpy()])
        half = size // 2
        torch.testing.assert_close(torch.from_numpy(got), torch.cat((x[:, half:], x[:, :half]), -1))
