"""What a graph computes, its names aside: a signature for each value and node (a digest of
the operator, its attributes and the signatures of its inputs), and the differences of two
graphs read from them. A model made another way (its layers repeated from a template's,
:mod:`.layer_repeat`) is checked against the model exported whole with it."""

from __future__ import annotations

import collections
import hashlib
import re
from collections.abc import Callable, Iterable

import onnx_ir as ir

from dynamo_onnx.fake import is_fake

__all__ = [
    "GENERATED_NAME",
    "digest",
    "graph_differences",
    "initializer_key",
    "node_key",
    "outer_leaf",
    "signatures",
    "tensor_key",
]

#: Operators whose inputs can be given in any order (the capture writes ``a + b`` or
#: ``b + a`` for one size, as the layers before it were traced).
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal"})
#: Names onnx_ir and torch.export give values themselves (``val_12``, ``linear_3``): such a
#: value is compared by what it holds or computes, never by its name.
GENERATED_NAME = re.compile(r"[A-Za-z_]*_\d+")


def digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def tensor_key(tensor: ir.TensorProtocol | None, limit: int | None = None) -> object:
    """What a readable tensor of at most ``limit`` elements (None: any) holds; its type
    and shape otherwise."""
    if tensor is None:
        return None
    head = (str(tensor.dtype), tuple(tensor.shape.numpy()))
    if is_fake(getattr(tensor, "raw", None)) or (limit is not None and tensor.size > limit):
        return head
    return (*head, digest(tensor.tobytes()))


def _attribute_key(attr: ir.Attr) -> object:
    if attr.type == ir.AttributeType.TENSOR:
        return (attr.name, tensor_key(attr.as_tensor()))
    if attr.type == ir.AttributeType.TENSORS:
        return (attr.name, tuple(tensor_key(t) for t in attr.as_tensors()))
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return (attr.name, "graph", id(attr))
    return (attr.name, str(attr.type), repr(attr.value))


def node_key(node: ir.Node, inputs: Iterable[str]) -> str:
    attributes = tuple(sorted(_attribute_key(a) for a in node.attributes.values()))
    return digest(node.domain, node.op_type, node.overload, attributes, tuple(inputs))


def initializer_key(value: ir.Value) -> str:
    """A generated name says nothing: such an initializer is what it holds (its type and
    shape when it is fake); a named one (a weight, never read here) its name, type and
    shape."""
    name = value.name or ""
    if GENERATED_NAME.fullmatch(name):
        return digest("constant", tensor_key(value.const_value, limit=None))
    return digest("initializer", name, tensor_key(value.const_value, limit=0))


def signatures(
    nodes: Iterable[ir.Node], leaf: Callable[[ir.Value], str]
) -> tuple[dict[ir.Value, str], list[tuple[str, ir.Node]]]:
    """Each value's signature (what computes it, its node names and value names aside),
    and each node's, in the order given (a topological one)."""
    of: dict[ir.Value, str] = {}
    keyed: list[tuple[str, ir.Node]] = []
    for node in nodes:
        inputs = ["" if v is None else of[v] if v in of else leaf(v) for v in node.inputs]
        sizes = _declared_sizes(node)
        if sizes is not None:
            inputs = [sizes]
        elif node.domain == "" and node.op_type in COMMUTATIVE:
            inputs.sort()
        key = node_key(node, inputs)
        keyed.append((key, node))
        for index, out in enumerate(node.outputs):
            of[out] = digest(key, index)
    return of, keyed


def _declared_sizes(node: ir.Node) -> str | None:
    """The sizes a ``Shape`` of a graph input reads, when its declared shape names them:
    every input declaring those dimension names has those sizes, so which input the
    capture read them from (torch.export takes a size shared by several inputs from any
    of them) is no difference."""
    if node.op_type != "Shape" or node.domain != "" or len(node.inputs) != 1:
        return None
    value = node.inputs[0]
    if value is None or not value.is_graph_input() or value.shape is None:
        return None
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", None)
    dims = list(value.shape)[start:end]
    if not all(isinstance(d, int) or d.value is not None for d in dims):
        return None
    return digest("sizes", tuple(d if isinstance(d, int) else d.value for d in dims))


def outer_leaf(value: ir.Value) -> str:
    """An initializer by :func:`initializer_key`, a graph input by its name."""
    if value.is_initializer():
        return initializer_key(value)
    return digest("input", value.name)


def _shape_key(value: ir.Value) -> tuple:
    """A value's type and shape; a dimension that is a sum by its terms in order (the
    capture writes ``a + b`` or ``b + a`` for one length)."""
    dims = () if value.shape is None else tuple(value.shape)
    return (
        str(value.type),
        value.shape is None,
        tuple(" + ".join(sorted(str(d).split(" + "))) for d in dims),
    )


def graph_differences(a: ir.Model, b: ir.Model, limit: int = 10) -> list[str]:
    """How the graphs of ``a`` and ``b`` differ, up to the names of nodes and of the
    values a node makes or an optimizer names (empty: the same computation). Graph inputs
    and outputs are compared by name, type and shape, named initializers by name, type and
    shape, generated ones and small constants by value."""

    leaf = outer_leaf
    found: list[str] = []
    left, keyed_a = signatures(a.graph, leaf)
    right, keyed_b = signatures(b.graph, leaf)
    inputs_a = [(v.name, *_shape_key(v)) for v in a.graph.inputs]
    inputs_b = [(v.name, *_shape_key(v)) for v in b.graph.inputs]
    if inputs_a != inputs_b:
        found.append(f"graph inputs differ: {_first_mismatch(inputs_a, inputs_b)}")
    out_a = [(v.name, *_shape_key(v)) for v in a.graph.outputs]
    out_b = [(v.name, *_shape_key(v)) for v in b.graph.outputs]
    if out_a != out_b:
        found.append(f"graph outputs differ: {_first_mismatch(out_a, out_b)}")
    else:
        for va, vb in zip(a.graph.outputs, b.graph.outputs):
            if left.get(va, leaf(va)) != right.get(vb, leaf(vb)):
                found.append(f"graph output {va.name!r} is computed differently")
    count_a = collections.Counter(key for key, _ in keyed_a)
    count_b = collections.Counter(key for key, _ in keyed_b)
    if len(keyed_a) != len(keyed_b):
        found.append(f"{len(keyed_a)} nodes against {len(keyed_b)}")
    for keyed, other, side in ((keyed_a, count_b, "first"), (keyed_b, count_a, "second")):
        extra = collections.Counter(k for k, _ in keyed) - other
        for key, node in keyed:
            if extra[key] > 0:
                extra[key] -= 1
                found.append(
                    f"node {node.name!r} ({node.domain or 'ai.onnx'}::{node.op_type}, "
                    f"inputs {[v.name if v else None for v in node.inputs]}) of the {side} "
                    "graph has no equal in the other"
                )
            if len(found) >= limit:
                return found[:limit]
    init_a = collections.Counter(initializer_key(v) for v in a.graph.initializers.values())
    init_b = collections.Counter(initializer_key(v) for v in b.graph.initializers.values())
    if init_a != init_b:
        found.append(
            f"initializers differ: {sum((init_a - init_b).values())} of the first and "
            f"{sum((init_b - init_a).values())} of the second have no equal in the other"
        )
    return found[:limit]


def _first_mismatch(a: list, b: list) -> str:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at {index}: {x} against {y}"
    return f"{len(a)} against {len(b)}"
