"""``MatMulNBits`` weights quantized one at a time, when the model is saved.

``MatMulNBitsQuantizer.process()`` takes the whole model as a ``ModelProto``: a copy of
every float weight, then every quantized one beside it, at once (several times the
weights' size at the peak: docs/performance.md). The graph it writes is simple and known, so it is written here
without the data: each ``MatMul(x, W)`` of a 2-D float weight becomes
``MatMulNBits(x, W_Q<bits>, W_scales[, W_zero_points])`` with the attributes and names the
quantizer gives them, and the quantized tensors are lazy: the first read of ``W_Q4``
quantizes ``W`` with the quantizer's own per-weight code
(``DefaultWeightOnlyQuantizer.qbits_block_quant``, ONNX Runtime's C++ kernels), and its
scales wait for their read, which comes next as they are written next. The bytes are the
quantizer's (tested against the whole-model run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

__all__ = ["quantizable_here", "quantize_lazily"]

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_MS_DOMAIN = "com.microsoft"


class _Quantized:
    """One weight's quantization, computed once when a part is first read and kept until
    every part has been read (then dropped: the next save quantizes again)."""

    def __init__(self, weight: ir.TensorProtocol, quantize: Callable[[np.ndarray], Any]) -> None:
        self._weight = weight
        self._quantize = quantize
        self._parts: dict[int, np.ndarray] | None = None
        self._pending: set[int] = set()
        self._lock = threading.Lock()
        self.count = 0

    def part(self, index: int) -> np.ndarray:
        with self._lock:
            if self._parts is None or index not in self._pending:
                array = self._weight.numpy()
                bfloat16 = array.dtype == "bfloat16" or self._weight.dtype == ir.DataType.BFLOAT16
                if bfloat16:
                    array = array.astype(np.float32)
                packed, scales, zero_points = self._quantize(np.ascontiguousarray(array))
                if bfloat16:
                    scales = scales.astype(ir.DataType.BFLOAT16.numpy())
                self._parts = {0: packed, 1: scales, 2: zero_points}
                self._pending = set(range(self.count))
            self._pending.discard(index)
            array = self._parts[index]
            if not self._pending:
                self._parts = None
            return array


def _lazy(
    name: str, dtype: ir.DataType, shape: tuple[int, ...], quantized: _Quantized, index: int
) -> ir.Value:
    quantized.count = max(quantized.count, index + 1)

    def evaluate() -> ir.TensorProtocol:
        return ir.tensor(quantized.part(index), name=name)

    tensor = ir.LazyTensor(evaluate, dtype=dtype, shape=ir.Shape(shape), name=name)
    return ir.Value(name=name, shape=ir.Shape(shape), type=ir.TensorType(dtype), const_value=tensor)


def _weight(node: ir.Node) -> ir.Value | None:
    """``B`` of a plain ``MatMul`` when it is a 2-D float initializer."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    b = node.inputs[1]
    if b is None or not b.is_initializer() or b.const_value is None:
        return None
    tensor = b.const_value
    if tensor.dtype not in _FLOATS or len(tensor.shape) != 2:
        return None
    return b


def quantize_lazily(
    model: ir.Model,
    quantizer: Any,
    *,
    bits: int,
    block_size: int,
    symmetric: bool,
    accuracy_level: int,
) -> int:
    """Each ``MatMul`` of a 2-D float weight as ``MatMulNBits`` of lazily quantized
    weights, in place, as ``MatMulNBitsQuantizer`` (QOperator format) writes it; returns how
    many. ``quantizer`` is a ``DefaultWeightOnlyQuantizer`` of the same settings."""
    graph = model.graph
    kpack = 8 // bits
    count = 0
    # a weight read by several MatMuls is quantized once (the quantizer would add its
    # initializers again under the same names, once per MatMul)
    done: dict[str, list[ir.Value]] = {}
    for node in list(graph):
        b = _weight(node)
        if b is None:
            continue
        assert b.const_value is not None and b.name
        rows, cols = (int(d) for d in b.const_value.shape)
        k_blocks = (rows + block_size - 1) // block_size
        blob = (block_size + kpack - 1) // kpack
        if b.name not in done:
            quantized = _Quantized(b.const_value, quantizer.qbits_block_quant)
            scale_type = b.const_value.dtype
            parts = [
                _lazy(f"{b.name}_Q{bits}", ir.DataType.UINT8, (cols, k_blocks, blob), quantized, 0),
                _lazy(f"{b.name}_scales", scale_type, (cols, k_blocks), quantized, 1),
            ]
            if not symmetric:
                zp = (cols, (k_blocks + kpack - 1) // kpack)
                parts.append(_lazy(f"{b.name}_zero_points", ir.DataType.UINT8, zp, quantized, 2))
            for value in parts:
                graph.register_initializer(value)
            done[b.name] = parts
        inputs = [node.inputs[0], *done[b.name]]
        attributes: dict[str, int] = {"K": rows, "N": cols, "bits": bits, "block_size": block_size}
        if accuracy_level:
            attributes["accuracy_level"] = accuracy_level
        output = node.outputs[0]
        replacement = ir.node(
            "MatMulNBits",
            inputs,
            attributes=attributes,
            domain=_MS_DOMAIN,
            name=f"{node.name}_Q{bits}" if node.name else "",
        )
        replacement.metadata_props.update(node.metadata_props)
        graph.insert_before(node, replacement)
        new_output = replacement.outputs[0]
        new_output.shape, new_output.type = output.shape, output.type
        ir.convenience.replace_all_uses_with(output, new_output, replace_graph_outputs=True)
        name, output.name = output.name, None
        new_output.name = name
        graph.remove(node, safe=True)
        if not b.uses() and not b.is_graph_output():
            graph.initializers.pop(b.name, None)
            if b in graph.inputs:
                graph.inputs.remove(b)
        count += 1
    if count:
        model.opset_imports.setdefault(_MS_DOMAIN, 1)
    return count


def quantizable_here(model: ir.Model) -> bool:
    """Whether :func:`quantize_lazily` quantizes what ``MatMulNBitsQuantizer`` would: the
    main graph has no subgraph (an ``If``'s or a ``Loop``'s body, which the quantizer
    also walks)."""
    return not any(
        attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for node in model.graph
        for attr in node.attributes.values()
    )
