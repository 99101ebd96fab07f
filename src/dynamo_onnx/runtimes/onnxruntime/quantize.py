"""int4 and int8 weights for ONNX Runtime: the quantization pass.

MatMul weights become ``MatMulNBits`` blocks (com.microsoft), quantized by ONNX Runtime's own
``MatMulNBitsQuantizer`` with the settings onnxruntime-genai's model builder uses on the CPU
(``onnxruntime_genai/models/builder.py`` and ``quantization/quant_config.py``; the block
size, symmetry and accuracy level in :mod:`dynamo_onnx.defaults`, op types ``MatMul`` only). As in the builder, the embedding stays
in float (a ``Gather``, which the builder quantizes only when asked to) and the LM head, a
MatMul, is quantized: a folder of ours and the builder's are quantized alike, so their token
agreement and speed compare.

The one rewrite before the quantizer runs is where the weight lives: torch_lib translates
``linear`` as ``MatMul(x, Transpose(W))``, and the quantizer only takes a constant ``B``.
The transposed weight is stored instead (as the builder stores it), then the quantizer runs
on the whole model; the quantized weights are initializers like any other, so saving writes
them as external data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import onnx_ir as ir

from dynamo_onnx.defaults import (
    QUANTIZATION_ACCURACY_LEVEL,
    QUANTIZATION_BLOCK_SIZE,
    QUANTIZATION_PRECISION,
    QUANTIZATION_SYMMETRIC,
)
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import InvalidOptionValueError, OnnxExporterError, OptimizationError
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.logs import dropped
from dynamo_onnx.runtimes.onnxruntime.blockwise import quantizable_here, quantize_lazily
from dynamo_onnx.runtimes.onnxruntime.packed_tensor import concatenated

__all__ = [
    "PRECISIONS",
    "Quantization",
    "QuantizePass",
    "QuantizeRequest",
    "quantizable_matmuls",
    "store_transposed_weights",
]

#: What ``precision`` takes: float weights as exported, or 8-/4-bit MatMul weights.
PRECISIONS = ("fp32", "int8", "int4")
#: The block sizes ``MatMulNBits`` takes (onnxruntime-genai's builder lists the same).
BLOCK_SIZES = (16, 32, 64, 128, 256)
#: ``accuracy_level``: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 activations.
ACCURACY_LEVELS = (0, 1, 2, 3, 4)
#: The logger of ``MatMulNBitsQuantizer`` (it names its module).
_QUANTIZER_LOGGER = "onnxruntime.quantization.matmul_nbits_quantizer"
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@dataclasses.dataclass(frozen=True)
class Quantization:
    """How MatMul weights are quantized. The defaults are the builder's on the CPU."""

    precision: str = QUANTIZATION_PRECISION
    block_size: int = QUANTIZATION_BLOCK_SIZE
    symmetric: bool = QUANTIZATION_SYMMETRIC
    accuracy_level: int = QUANTIZATION_ACCURACY_LEVEL

    @property
    def bits(self) -> int:
        return 8 if self.precision == "int8" else 4

    def problem(self) -> tuple[str, str, str] | None:
        """(option, problem, allowed) for the first value that cannot be used, else None."""
        if self.precision not in PRECISIONS:
            return ("precision", f"is {self.precision!r}", f"give one of {', '.join(PRECISIONS)}")
        if self.block_size not in BLOCK_SIZES:
            allowed = ", ".join(map(str, BLOCK_SIZES))
            return ("block_size", f"is {self.block_size!r}", f"give one of {allowed}")
        if self.accuracy_level not in ACCURACY_LEVELS:
            allowed = ", ".join(map(str, ACCURACY_LEVELS))
            return ("accuracy_level", f"is {self.accuracy_level!r}", f"give one of {allowed}")
        return None


@dataclasses.dataclass(frozen=True)
class QuantizeRequest:
    """The model to quantize (its MatMul weights are stored transposed in place) and how;
    the pass returns the request with the quantized model."""

    model: ir.Model
    quantization: Quantization
    model_location: Location | None = None


def _is_matmul(node: ir.Node) -> bool:
    return node.op_type == "MatMul" and node.domain in ("", "ai.onnx")


def _float_matrix(value: ir.Value | None) -> bool:
    return (
        value is not None
        and value.is_initializer()
        and value.const_value is not None
        and value.dtype in _FLOATS
        and len(value.const_value.shape) == 2
    )


def _transposes_a_weight(node: ir.Node) -> bool:
    """``Transpose`` of a 2-D float initializer read only as the ``B`` of MatMuls."""
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return False
    perm = node.attributes.get_ints("perm", None)
    output = node.outputs[0]
    return (
        _float_matrix(node.inputs[0])
        and (perm is None or list(perm) == [1, 0])
        and not output.is_graph_output()
        and bool(output.uses())
        and all(_is_matmul(user) and index == 1 for user, index in output.uses())
    )


def _fused_matmul_of_a_weight(node: ir.Node) -> bool:
    """``com.microsoft::FusedMatMul(x, W)`` that is a plain product with a 2-D float weight
    (``alpha`` 1, no transpose of ``x`` or of the batches): what ORT's fusions make of
    ``MatMul(x, Transpose(W))`` (``optimize="onnxruntime"``), which the quantizer skips."""
    if node.op_type != "FusedMatMul" or node.domain != "com.microsoft" or len(node.inputs) != 2:
        return False
    attrs = node.attributes
    plain = (
        attrs.get_float("alpha", 1.0) == 1.0
        and attrs.get_int("transA", 0) == 0
        and attrs.get_int("transBatchA", 0) == 0
        and attrs.get_int("transBatchB", 0) == 0
    )
    return plain and _float_matrix(node.inputs[1])


def _as_matmuls(model: ir.Model) -> None:
    """Each plain ``FusedMatMul`` of a weight back to ``MatMul(x, W)`` (``transB`` as a
    ``Transpose`` of the weight, which :func:`store_transposed_weights` then stores), so
    that a model optimized for ONNX Runtime is quantized as the plain one is."""
    graph = model.graph
    for node in list(graph):
        if not _fused_matmul_of_a_weight(node):
            continue
        x, weight = node.inputs
        b = weight
        if node.attributes.get_int("transB", 0):
            transpose = ir.node("Transpose", [weight], attributes={"perm": [1, 0]})
            graph.insert_before(node, transpose)
            b = transpose.outputs[0]
        matmul = ir.node("MatMul", [x, b], name=node.name)
        graph.insert_before(node, matmul)
        matmul.outputs[0].shape, matmul.outputs[0].type = (
            node.outputs[0].shape,
            node.outputs[0].type,
        )
        name = node.outputs[0].name
        ir.convenience.replace_all_uses_with(
            node.outputs[0], matmul.outputs[0], replace_graph_outputs=True
        )
        node.outputs[0].name = None
        matmul.outputs[0].name = name  # the graph output keeps its name (``logits``)
        graph.remove(node, safe=True)


def _transposed(tensor: ir.TensorProtocol, name: str) -> ir.LazyTensor:
    """``tensor`` transposed, computed when read: the quantizer reads each weight once,
    and a weight streamed from a checkpoint is in memory only while it is written (and
    transposed in its file's dtype: ``packing.concatenated`` of one part)."""
    return concatenated(name, [(tensor, True)], 1)


def store_transposed_weights(model: ir.Model) -> int:
    """Store ``W^T`` for every ``MatMul(x, Transpose(W))``, in place; returns how many.

    The transposed copy takes the weight's name when nothing else reads the weight (the
    external data then names the layer's weight); a weight also read elsewhere (an
    embedding tied to the LM head) keeps its name and the copy is ``<name>.T``. A plain
    ``FusedMatMul`` of a weight (ORT's fusions) is a ``MatMul`` again first."""
    _as_matmuls(model)
    graph = model.graph
    count = 0
    for node in list(graph):
        if not _transposes_a_weight(node):
            continue
        weight = node.inputs[0]
        assert weight is not None and weight.const_value is not None and weight.name
        shared = len(weight.uses()) > 1
        name = f"{weight.name}.T" if shared else weight.name
        if not shared:
            graph.initializers.pop(weight.name)
        tensor = _transposed(weight.const_value, name)
        transposed = ir.Value(
            name=name,
            shape=ir.Shape(tensor.shape),
            type=ir.TensorType(weight.dtype),
            const_value=tensor,
        )
        graph.register_initializer(transposed)
        ir.convenience.replace_all_uses_with(node.outputs[0], transposed)
        graph.remove(node, safe=True)
        count += 1
    return count


def quantizable_matmuls(model: ir.Model) -> int:
    """MatMuls whose ``B`` is a 2-D float weight, stored as is or transposed, and plain
    ``FusedMatMul``s of one: those ``MatMulNBitsQuantizer`` quantizes once the weights are
    stored transposed."""
    count = 0
    for node in model.graph:
        if _fused_matmul_of_a_weight(node):
            count += 1
            continue
        if not _is_matmul(node) or len(node.inputs) < 2 or node.inputs[1] is None:
            continue
        b = node.inputs[1]
        producer = b.producer()
        if _float_matrix(b) or (producer is not None and _transposes_a_weight(producer)):
            count += 1
    return count


def _weights_mib(model: ir.Model) -> float:
    return (
        sum(
            v.const_value.nbytes
            for v in model.graph.initializers.values()
            if v.const_value is not None
        )
        / 2**20
    )


@contextlib.contextmanager
def _root_logger_kept() -> Iterator[None]:
    """The root logger's handlers and level put back after the block: importing
    ``matmul_nbits_quantizer`` calls ``logging.basicConfig(level=INFO)``, which would
    print every library's INFO records in the caller's process from then on."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


def _quantizer_classes() -> tuple[Any, Any]:
    """``MatMulNBitsQuantizer`` and ``QuantFormat``, imported when first needed (a slow import)."""
    with _root_logger_kept():
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            MatMulNBitsQuantizer,
        )
    return MatMulNBitsQuantizer, QuantFormat


def _weight_quantizer(quantization: Quantization) -> Any:
    """ONNX Runtime's per-weight quantizer (``DefaultWeightOnlyQuantizer``) with the
    settings ``MatMulNBitsQuantizer`` would give it."""
    with _root_logger_kept():
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            DefaultWeightOnlyQuantizer,
        )
    config = DefaultWeightOnlyQuantConfig(
        block_size=quantization.block_size,
        is_symmetric=quantization.symmetric,
        accuracy_level=quantization.accuracy_level,
        quant_format=QuantFormat.QOperator,
        op_types_to_quantize=("MatMul",),
        bits=quantization.bits,
    )
    return DefaultWeightOnlyQuantizer(config)


def _quantized(model: ir.Model, quantization: Quantization) -> ir.Model:
    """The MatMul weights quantized by ONNX Runtime's code, one weight at a time when the
    model is saved (``blockwise``: the bytes ``MatMulNBitsQuantizer`` writes, without a
    copy of the whole model); a model with subgraphs goes through the quantizer whole
    (as a ModelProto, what it takes), which walks them."""
    if quantizable_here(model):
        quantize_lazily(
            model,
            _weight_quantizer(quantization),
            bits=quantization.bits,
            block_size=quantization.block_size,
            symmetric=quantization.symmetric,
            accuracy_level=quantization.accuracy_level,
        )
        return model
    MatMulNBitsQuantizer, QuantFormat = _quantizer_classes()  # classes
    quantizer = MatMulNBitsQuantizer(
        ir.to_proto(model),
        bits=quantization.bits,
        block_size=quantization.block_size,
        is_symmetric=quantization.symmetric,
        accuracy_level=quantization.accuracy_level,
        quant_format=QuantFormat.QOperator,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    return ir.from_proto(quantizer.model.model)


class QuantizePass:
    """``QuantizeRequest`` -> the request with the quantized model (DO506 says what
    changed: MatMuls quantized, kept in float, weight sizes)."""

    name: ClassVar[str] = PassName.QUANTIZATION
    error_type: ClassVar[type[OnnxExporterError]] = OptimizationError
    changes_input: ClassVar[bool] = True  # the weights are stored transposed in place

    def __call__(self, ctx: DiagnosticContext, request: QuantizeRequest) -> QuantizeRequest:
        quantization = request.quantization
        problem = quantization.problem()
        if problem is not None:
            option, what, allowed = problem
            ctx.fail(
                "invalid-option",
                InvalidOptionValueError,
                request.model_location,
                option=option,
                problem=what,
                allowed=allowed,
            )
        if quantization.precision == "fp32":
            return request
        before = _weights_mib(request.model)
        quantizable = quantizable_matmuls(request.model)
        store_transposed_weights(request.model)
        # The quantizer logs each MatMul it skips (attention's, whose B is computed) at INFO
        # through the root logger's configuration: not the user's concern.
        with dropped(_QUANTIZER_LOGGER):
            model = _quantized(request.model, quantization)
        ops = [n.op_type for n in model.graph]
        ctx.record(
            "model-quantized",
            locations=[request.model_location],
            quantized=ops.count("MatMulNBits"),
            precision=quantization.precision,
            block_size=quantization.block_size,
            scheme="symmetric" if quantization.symmetric else "asymmetric",
            accuracy_level=quantization.accuracy_level,
            float_matmuls=ops.count("MatMul"),
            before=f"{before:.1f}",
            after=f"{_weights_mib(model):.1f}",
        )
        left = [
            n.name or n.outputs[0].name or "?"
            for n in model.graph
            if (_is_matmul(n) and len(n.inputs) > 1 and _float_matrix(n.inputs[1]))
            or _fused_matmul_of_a_weight(n)
        ]
        if left and ops.count("MatMulNBits") < quantizable:
            ctx.record(
                "weights-left-in-float",
                locations=[request.model_location],
                left=len(left),
                quantizable=quantizable,
                precision=quantization.precision,
                names=", ".join(f"`{name}`" for name in left[:5])
                + (f" and {len(left) - 5} more" if len(left) > 5 else ""),
            )
        return dataclasses.replace(request, model=model)
