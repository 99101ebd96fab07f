"""The quantization pass on hand-built models: weights stored as MatMulNBits takes them,
ONNX Runtime's quantizer on every MatMul with a constant weight, the values kept."""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from dynamo_onnx.defaults import QUANTIZATION_ACCURACY_LEVEL, QUANTIZATION_BLOCK_SIZE
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError
from dynamo_onnx.passes.base import run_pipeline
from dynamo_onnx.runtimes.onnxruntime.quantize import (
    Quantization,
    QuantizePass,
    QuantizeRequest,
    quantizable_matmuls,
    store_transposed_weights,
)

K, N, VOCAB = 64, 48, 10


def _linear_model(tied: bool = False) -> tuple[ir.Model, np.ndarray]:
    """``y = x @ W.T`` as torch_lib writes ``linear`` (MatMul of a Transpose), and, when
    ``tied``, an embedding ``Gather`` reading the same weight (an embedding tied to the
    LM head). Also a MatMul of two computed values, which stays in float."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((N, K)).astype(np.float32)
    x = ir.Value(name="x", shape=ir.Shape(["b", K]), type=ir.TensorType(ir.DataType.FLOAT))
    w = ir.Value(
        name="lin.weight",
        shape=ir.Shape([N, K]),
        type=ir.TensorType(ir.DataType.FLOAT),
        const_value=ir.tensor(weight, name="lin.weight"),
    )
    transpose = ir.node("Transpose", [w], attributes={"perm": [1, 0]})
    matmul = ir.node("MatMul", [x, transpose.outputs[0]])
    y = matmul.outputs[0]
    y.name = "y"
    square = ir.node("MatMul", [y, ir.node("Transpose", [y]).outputs[0]])
    nodes = [transpose, matmul, square.inputs[1].producer(), square]
    outputs = [y, square.outputs[0]]
    inputs = [x]
    if tied:
        ids = ir.Value(name="ids", shape=ir.Shape(["b"]), type=ir.TensorType(ir.DataType.INT64))
        gather = ir.node("Gather", [w, ids])
        gather.outputs[0].name = "embedded"
        nodes.append(gather)
        outputs.append(gather.outputs[0])
        inputs.append(ids)
    square.outputs[0].name = "square"
    graph = ir.Graph(inputs, outputs, nodes=nodes, initializers=[w], opset_imports={"": 20})
    return ir.Model(graph, ir_version=10), weight


def _run(model: ir.Model, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


@pytest.mark.parametrize("tied", [False, True], ids=["own-weight", "tied-to-a-gather"])
def test_the_weight_is_stored_transposed_and_the_values_stay(tied):
    model, weight = _linear_model(tied)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, K)).astype(np.float32)}
    if tied:
        feeds["ids"] = np.array([0, 5, 2], dtype=np.int64)
    before = _run(model, feeds)
    assert quantizable_matmuls(model) == 1
    assert store_transposed_weights(model) == 1
    matmul = next(n for n in model.graph if n.op_type == "MatMul")
    stored = matmul.inputs[1]
    assert stored.is_initializer()
    np.testing.assert_array_equal(stored.const_value.numpy(), weight.T)
    # a weight read elsewhere keeps its name; otherwise the copy takes it
    assert stored.name == ("lin.weight.T" if tied else "lin.weight")
    assert sorted(model.graph.initializers) == (
        ["lin.weight", "lin.weight.T"] if tied else ["lin.weight"]
    )
    assert [n.op_type for n in model.graph].count("Transpose") == 1  # the computed one
    after = _run(model, feeds)
    for b, a in zip(before, after):
        np.testing.assert_array_equal(b, a)
    assert quantizable_matmuls(model) == 1


#: The error allowed, as a fraction of the largest output: weights and (accuracy level 4)
#: activations are rounded to 8 or 4 bits.
@pytest.mark.parametrize(("precision", "bits", "error"), [("int8", 8, 0.02), ("int4", 4, 0.1)])
def test_every_constant_weight_matmul_becomes_matmulnbits_with_the_builders_settings(
    precision, bits, error
):
    model, weight = _linear_model(tied=True)
    x = np.random.default_rng(2).standard_normal((3, K)).astype(np.float32)
    ctx = DiagnosticContext()
    result = run_pipeline(ctx, [QuantizePass()], QuantizeRequest(model, Quantization(precision)))
    ops = [n.op_type for n in result.model.graph]
    assert ops.count("MatMulNBits") == 1 and ops.count("MatMul") == 1 and "Gather" in ops
    node = next(n for n in result.model.graph if n.op_type == "MatMulNBits")
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    assert attributes == {
        "K": K,
        "N": N,
        "bits": bits,
        "block_size": QUANTIZATION_BLOCK_SIZE,
        "accuracy_level": QUANTIZATION_ACCURACY_LEVEL,
    }
    (y, _, embedded) = _run(result.model, {"x": x, "ids": np.array([1, 2, 3], dtype=np.int64)})
    want = x @ weight.T
    assert np.abs(y - want).max() <= error * np.abs(want).max()
    assert np.abs(y - want).max() > 0  # quantized, not the float weights
    np.testing.assert_array_equal(embedded, weight[[1, 2, 3]])  # the embedding stays float
    (note,) = ctx.by_rule("DO506")
    assert note.message.startswith(
        f"Quantized 1 MatMul weights to {precision} (MatMulNBits, block size "
        f"{QUANTIZATION_BLOCK_SIZE}, symmetric, accuracy level {QUANTIZATION_ACCURACY_LEVEL}); "
        "1 MatMuls without a constant weight stay in float"
    )


def test_fp32_changes_nothing_and_an_unknown_precision_is_do109():
    model, _ = _linear_model()
    ctx = DiagnosticContext()
    same = run_pipeline(ctx, [QuantizePass()], QuantizeRequest(model, Quantization("fp32")))
    assert same.model is model and [n.op_type for n in model.graph].count("Transpose") == 2
    assert not ctx.by_rule("DO506")
    for bad, option in [
        (Quantization("int3"), "precision"),
        (Quantization(block_size=48), "block_size"),
    ]:
        with pytest.raises(InvalidOptionValueError) as info:
            run_pipeline(ctx, [QuantizePass()], QuantizeRequest(model, bad))
        assert str(info.value).startswith(f"[DO109 invalid-option] `{option}` is ")


def test_quantizing_leaves_the_root_logger_as_it_was():
    """Importing ONNX Runtime's quantizer calls logging.basicConfig(level=INFO): every
    library's INFO records would be printed in the caller's process from then on."""
    code = textwrap.dedent(
        f"""
        import logging, sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from test_pass_quantize import _linear_model
        from dynamo_onnx.diagnostics import DiagnosticContext
        from dynamo_onnx.passes.base import run_pipeline
        from dynamo_onnx.runtimes.onnxruntime.quantize import (
            Quantization, QuantizePass, QuantizeRequest)
        run_pipeline(DiagnosticContext(), [QuantizePass()],
                     QuantizeRequest(_linear_model()[0], Quantization("int4")))
        root = logging.getLogger()
        print(len(root.handlers), root.level)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", str(logging.WARNING)], done.stderr


def _two_layers(seed: int = 2) -> ir.Model:
    """Two MatMuls of stored weights (K not a multiple of the block: padded), a weight
    read by both, and a MatMul of computed values."""
    rng = np.random.default_rng(seed)
    x = ir.Value(name="x", shape=ir.Shape(["b", 40]), type=ir.TensorType(ir.DataType.FLOAT))
    weights = {
        name: ir.Value(
            name=name,
            shape=ir.Shape(shape),
            type=ir.TensorType(ir.DataType.FLOAT),
            const_value=ir.tensor(rng.standard_normal(shape).astype(np.float32), name=name),
        )
        for name, shape in (("a.weight", [40, 24]), ("b.weight", [24, 24]))
    }
    first = ir.node("MatMul", [x, weights["a.weight"]], name="first")
    second = ir.node("MatMul", [first.outputs[0], weights["b.weight"]], name="second")
    third = ir.node("MatMul", [second.outputs[0], weights["b.weight"]], name="third")
    square = ir.node("MatMul", [third.outputs[0], third.outputs[0]], name="square")
    square.outputs[0].name = "y"
    graph = ir.Graph(
        [x],
        [square.outputs[0]],
        nodes=[first, second, third, square],
        initializers=list(weights.values()),
        opset_imports={"": 20},
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [4, 8])
def test_weights_quantized_one_at_a_time_are_the_quantizers_bytes(bits, symmetric):
    """blockwise writes the graph MatMulNBitsQuantizer writes, with lazy weights whose bytes
    are its own: same nodes, attributes, initializer names, order and bytes (issue 44)."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from dynamo_onnx.runtimes.onnxruntime.blockwise import quantize_lazily
    from dynamo_onnx.runtimes.onnxruntime.quantize import _weight_quantizer

    whole = MatMulNBitsQuantizer(
        ir.to_proto(_two_layers()),
        bits=bits,
        block_size=32,
        is_symmetric=symmetric,
        accuracy_level=4,
        quant_format=QuantFormat.QOperator,
        op_types_to_quantize=("MatMul",),
    )
    whole.process()
    expected = whole.model.model
    model = _two_layers()
    quantization = Quantization("int8" if bits == 8 else "int4", 32, symmetric, 4)
    assert (
        quantize_lazily(
            model,
            _weight_quantizer(quantization),
            bits=bits,
            block_size=32,
            symmetric=symmetric,
            accuracy_level=4,
        )
        == 3
    )
    assert all(isinstance(v.const_value, ir.LazyTensor) for v in model.graph.initializers.values())
    got = ir.to_proto(model)
    assert [(n.op_type, n.name, list(n.input), list(n.output)) for n in got.graph.node] == [
        (n.op_type, n.name, list(n.input), list(n.output)) for n in expected.graph.node
    ]
    for mine, theirs in zip(got.graph.node, expected.graph.node):
        assert {a.name: a for a in mine.attribute} == {a.name: a for a in theirs.attribute}
    # the quantizer adds a weight's tensors again for each MatMul that reads it: once here
    theirs = {}
    for t in expected.graph.initializer:
        theirs.setdefault(t.name, (t.name, t.data_type, list(t.dims), ir.from_proto(t).tobytes()))
    assert [(t.name, t.data_type, list(t.dims), t.raw_data) for t in got.graph.initializer] == list(
        theirs.values()
    )
    assert {o.domain: o.version for o in got.opset_import} == {
        o.domain: o.version for o in expected.opset_import
    }
