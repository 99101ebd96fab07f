"""Write an ONNX model with inline weights by streaming the weights into the file.

The usual way, ``ir.save`` (like ``onnx.save``), builds a ``ModelProto`` that holds a copy
of every weight and serializes it to one ``bytes`` object before writing: two extra copies
of the weights in memory and most of the save time (docs/performance.md).

Protobuf's wire format lets us do without: a message is a sequence of fields, a nested
message is its length followed by its bytes, and repeated fields may come in any order
relative to other fields. So the model is serialized without its initializers (small), and
each initializer is written as a ``TensorProto`` field of the graph, with its header
serialized by protobuf and its ``raw_data`` bytes written straight from the tensor's memory
(``tofile``). Only lengths have to be known up front, and they are. ``onnx.load`` reads the
result into the same ``ModelProto`` as ``ir.save`` would produce (tested field for field).
"""

from __future__ import annotations

from typing import Any, Protocol

import onnx
import onnx_ir as ir

__all__ = ["Writable", "streamable", "write_model"]

_LEN = 2  # wire type of length-delimited fields
_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_RAW_DATA = 9  # TensorProto.raw_data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int) -> bytes:
    return _varint(field << 3 | _LEN)


def streamable(value: ir.Value) -> bool:
    """Whether the initializer's data can be streamed as ``raw_data`` (not strings)."""
    tensor = value.const_value
    return (
        tensor is not None
        and tensor.dtype != ir.DataType.STRING
        and tensor.dtype.bitwidth % 8 == 0  # 4-bit types pack two values in a byte
        and not isinstance(tensor, ir.ExternalTensor)
    )


def _header(value: ir.Value) -> bytes:
    """The initializer's ``TensorProto`` without its data."""
    tensor = value.const_value
    assert tensor is not None
    proto = onnx.TensorProto(
        name=value.name or "",
        data_type=int(tensor.dtype),
        dims=[int(d) for d in tensor.shape],
    )
    if tensor.doc_string:
        proto.doc_string = tensor.doc_string
    for key, text in tensor.metadata_props.items():
        proto.metadata_props.add(key=key, value=text)
    return proto.SerializeToString()


def _prepend_value_infos(
    graph: onnx.GraphProto, initializers: list[ir.Value], input_names: set[str | None]
) -> None:
    """Type and shape of initializers that are not inputs, first, as ``ir.save`` has them."""
    infos = [
        ir.serde.serialize_value(value)
        for value in initializers
        if value.name
        and value.name not in input_names
        and (
            value.shape is not None
            or value.type is not None
            or value.metadata_props
            or value.doc_string
        )
    ]
    if infos:
        rest = list(graph.value_info)
        del graph.value_info[:]
        graph.value_info.extend(infos + rest)


class Writable(Protocol):
    """What ``write_model`` writes to: a binary file, or ``direct_file.DirectFile``."""

    def write(self, data: Any, /) -> int: ...


def write_model(model: ir.Model, file: Writable) -> None:
    """Serialize ``model`` to ``file`` with every initializer's data streamed.

    Every initializer must be :func:`streamable`. The model is unchanged afterwards.
    """
    graph = model.graph
    initializers = list(graph.initializers.values())
    graph.initializers.clear()
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value in initializers:
            graph.initializers.add(value)
    _prepend_value_infos(proto.graph, initializers, {v.name for v in graph.inputs})
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    parts = []
    for value in initializers:
        tensor = value.const_value
        assert tensor is not None
        header = _header(value)
        size = tensor.nbytes
        data_field = _key(_TENSOR_RAW_DATA) + _varint(size)
        body = len(header) + len(data_field) + size
        parts.append((_key(_GRAPH_INITIALIZER) + _varint(body) + header + data_field, tensor))
    graph_length = len(graph_bytes) + sum(len(prefix) + t.nbytes for prefix, t in parts)
    file.write(proto.SerializeToString())
    file.write(_key(_MODEL_GRAPH) + _varint(graph_length))
    file.write(graph_bytes)
    for prefix, tensor in parts:
        file.write(prefix)
        if hasattr(tensor, "tofile"):
            tensor.tofile(file)
        else:
            file.write(tensor.tobytes())
