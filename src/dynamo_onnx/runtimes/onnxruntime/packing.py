"""Packing the projections that read one input into one MatMul: q, k and v (and gate and up)
as onnxruntime-genai's model builder writes them, and GroupQueryAttention's packed form.

A decoder layer computes q, k and v with three linear layers of the same
hidden state, and gate and up with two: three MatMul kernels that each read the
activations (and, with ``MatMulNBits`` at accuracy level 4, quantize them). One MatMul of
the weights concatenated along their outputs, split after, computes the same values with
one kernel and one read. Packing runs on the float model before quantization, so ONNX
Runtime's quantizer sees the packed weight, as in the builder. (On the 1024-wide decoder of
docs/performance.md the CPU time it saves is within the noise: reading the weights, which
packing does not change, is most of a step.)

Then GroupQueryAttention takes the packed projection as its query with empty key and value
inputs (its packed-QKV form): the Split goes away. onnxscript's ``fuse_qkv_gqa`` only
knows the three ``Slice`` nodes of a model that packs q, k, v itself, and drops the
attention's other attributes (a sliding window's ``local_window_size``...):
:class:`PackedQKVOfSplit` is the rewrite for a ``Split``, :class:`PackedQKVOfSlices`
onnxscript's with the attributes kept.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.gqa_packed_qkv import PackedQKVForGQAFusion

from dynamo_onnx.passes.metadata import (
    MODULE_CHAIN,
    MODULE_CLASSES,
    MODULE_PATH,
    NAMESPACE,
    PACKED,
)
from dynamo_onnx.runtimes.onnxruntime.packed_tensor import concatenated

__all__ = [
    "PackProjectionsStep",
    "PackedQKVOfSlices",
    "PackedQKVOfSplit",
    "Projection",
    "pack_projections",
]

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def _is(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


def _constant(value: ir.Value | None, rank: int) -> ir.TensorProtocol | None:
    """The value of an initializer of a float type and ``rank``, if ``value`` is one (also
    listed as a graph input while the fusions run: ``fuse`` takes them out at its end)."""
    if value is None or not value.is_initializer():
        return None
    tensor = value.const_value
    if tensor is None or tensor.dtype not in _FLOATS or len(tensor.shape) != rank:
        return None
    return tensor


@dataclasses.dataclass(frozen=True)
class Projection:
    """``x @ W (+ b)`` with a constant ``W`` (and ``b``): one linear layer of the graph.

    Attributes:
        matmul: the ``MatMul`` node (its input 0 is ``x``).
        weight: the initializer of the weight, as stored.
        transposed: the weight is stored ``[N, K]`` and read through a ``Transpose``
            (torch_lib's ``linear``); else it is stored ``[K, N]``.
        add: the ``Add`` of the bias, the MatMul's only consumer, or None.
        bias: the initializer of the bias (``[N]``), or None.
    """

    matmul: ir.Node
    weight: ir.Value
    transposed: bool
    add: ir.Node | None = None
    bias: ir.Value | None = None

    @property
    def output(self) -> ir.Value:
        """The value the layer computes (after the bias)."""
        return (self.add or self.matmul).outputs[0]

    @property
    def tensor(self) -> ir.TensorProtocol:
        tensor = self.weight.const_value
        assert tensor is not None  # _projection made sure
        return tensor

    @property
    def depth(self) -> int:
        """K: the size of the input's last axis."""
        return int(self.tensor.shape[1 if self.transposed else 0])

    @property
    def width(self) -> int:
        """N: the number of outputs."""
        return int(self.tensor.shape[0 if self.transposed else 1])


def _bias(matmul: ir.Node, width: int, dtype: ir.DataType) -> tuple[ir.Node, ir.Value] | None:
    """The ``Add`` of a constant ``[N]`` bias that is the MatMul's only consumer."""
    uses = list(matmul.outputs[0].uses())
    if len(uses) != 1 or matmul.outputs[0].is_graph_output():
        return None
    add, _ = uses[0]
    if not _is(add, "Add") or len(add.inputs) != 2 or add.outputs[0].is_graph_output():
        return None
    (other,) = [v for v in add.inputs if v is not matmul.outputs[0]] or [None]
    bias = _constant(other, 1)
    if bias is None or bias.dtype != dtype or tuple(bias.shape) != (width,):
        return None
    assert other is not None
    return add, other


def _projection(node: ir.Node) -> Projection | None:
    """``node`` as a :class:`Projection`, or None when it is not a MatMul of a weight."""
    if not _is(node, "MatMul") or len(node.inputs) != 2 or node.inputs[0] is None:
        return None
    if node.outputs[0].is_graph_output():
        return None  # a model's output keeps its producer (the LM head's logits)
    b = node.inputs[1]
    producer = None if b is None else b.producer()
    weight, transposed = b, False
    if _is(producer, "Transpose"):
        assert producer is not None
        perm = producer.attributes.get_ints("perm", None)
        if perm is not None and list(perm) != [1, 0]:
            return None
        weight, transposed = producer.inputs[0], True
    tensor = _constant(weight, 2)
    if tensor is None:
        return None
    assert weight is not None
    projection = Projection(node, weight, transposed)
    found = _bias(node, projection.width, tensor.dtype)
    if found is None:
        return projection
    return dataclasses.replace(projection, add=found[0], bias=found[1])


def _groups(graph: ir.Graph) -> list[list[Projection]]:
    """Projections of one input, by input, weight type and depth; two or more each."""
    groups: dict[tuple[int, ir.DataType, int], list[Projection]] = collections.defaultdict(list)
    for node in graph:
        projection = _projection(node)
        if projection is not None:
            key = (id(node.inputs[0]), projection.tensor.dtype, projection.depth)
            groups[key].append(projection)
    return [group for group in groups.values() if len(group) > 1]


def _joined_name(names: Sequence[str]) -> str:
    """The common prefix and suffix around the parts that differ, joined: ``a.q_proj.weight``,
    ``a.k_proj.weight``, ``a.v_proj.weight`` -> ``a.qkv_proj.weight``, and ``gate_up_proj``
    (the builder's names, and those of models that pack them)."""
    prefix = len(_common_prefix(names))
    suffix = len(_common_prefix([n[prefix:][::-1] for n in names]))
    middles = [n[prefix : len(n) - suffix] for n in names]
    if not all(middles):
        return f"{names[0]}.packed"
    joiner = "" if all(len(m) == 1 for m in middles) else "_"  # qkv_proj, gate_up_proj
    return names[0][:prefix] + joiner.join(middles) + names[0][len(names[0]) - suffix :]


def _common_prefix(texts: Sequence[str]) -> str:
    first, last = min(texts), max(texts)
    size = next((i for i, (a, b) in enumerate(zip(first, last)) if a != b), min(map(len, texts)))
    return first[:size]


def _unique(graph: ir.Graph, name: str) -> str:
    candidate, count = name, 0
    while candidate in graph.initializers:
        count += 1
        candidate = f"{name}.{count}"
    return candidate


def _initializer(graph: ir.Graph, tensor: ir.LazyTensor) -> ir.Value:
    value = ir.Value(
        name=tensor.name,
        shape=ir.Shape(tensor.shape),
        type=ir.TensorType(tensor.dtype),
        const_value=tensor,
    )
    graph.register_initializer(value)
    return value


def _common_origin(nodes: Sequence[ir.Node]) -> dict[str, str]:
    """The origin of the packed node: the innermost module every projection is in
    (``model.layers.0.self_attn`` for ``q_proj``, ``k_proj``, ``v_proj``)."""
    chains = [n.metadata_props.get(MODULE_CHAIN, "").split(";") for n in nodes]
    classes = [n.metadata_props.get(MODULE_CLASSES, "").split(";") for n in nodes]
    depth = 0
    while all(len(c) > depth and c[depth] == chains[0][depth] for c in chains):
        depth += 1
    if depth == 0 or not chains[0][0]:
        return {}
    return {
        MODULE_PATH: chains[0][depth - 1],
        MODULE_CHAIN: ";".join(chains[0][:depth]),
        MODULE_CLASSES: ";".join(classes[0][:depth]),
        NAMESPACE: chains[0][depth - 1],
    }


def _relative(module: str, parent: str) -> str:
    return module[len(parent) + 1 :] if parent and module.startswith(f"{parent}.") else module


def _pack(graph: ir.Graph, group: list[Projection]) -> None:
    """Replace ``group`` by one MatMul (with one bias Add) and a Split of its last axis."""
    first = group[0].matmul
    x = first.inputs[0]
    assert x is not None
    # stored [K, N], the layout of MatMul's B (and of the builder's weights): a Transpose of
    # a new initializer would be folded by the optimizer into an unnamed constant
    names = [p.weight.name or "weight" for p in group]
    name = _unique(graph, _joined_name(names))
    weight = _initializer(graph, concatenated(name, [(p.tensor, p.transposed) for p in group], 1))
    origin = _common_origin([p.matmul for p in group])
    nodes = [ir.node("MatMul", [x, weight])]
    nodes[0].metadata_props[PACKED] = ", ".join(
        _relative(p.matmul.metadata_props.get(MODULE_PATH, ""), origin.get(MODULE_PATH, ""))
        for p in group
    )
    packed = nodes[-1].outputs[0]
    if any(p.bias is not None for p in group):
        bias = _initializer(graph, _packed_bias(graph, name, group))
        nodes.append(ir.node("Add", [packed, bias]))
        packed = nodes[-1].outputs[0]
    widths = ir.node(
        "Constant", [], {"value": ir.tensor(np.array([p.width for p in group], np.int64))}
    )
    split = ir.node("Split", [packed, widths.outputs[0]], {"axis": -1}, num_outputs=len(group))
    nodes += [widths, split]
    for node in nodes:
        node.metadata_props.update(origin)
    graph.insert_before(first, nodes)
    _describe(packed, group)
    for projection, part in zip(group, split.outputs):
        old = projection.output
        part.shape, part.type = old.shape, old.type
        ir.convenience.replace_all_uses_with(old, part)
        kept, old.name = old.name, None
        part.name = kept
    for projection in group:
        _remove(graph, projection)


def _packed_bias(graph: ir.Graph, weight: str, group: list[Projection]) -> ir.LazyTensor:
    """The biases end to end; a projection without one adds zeros (as the builder does).
    Named after the packed weight (``qkv_proj.weight``: ``qkv_proj.bias``)."""
    dtype = group[0].tensor.dtype
    parts = []
    for p in group:
        if p.bias is not None and p.bias.const_value is not None:
            parts.append((p.bias.const_value, False))
        else:
            parts.append((ir.tensor(np.zeros(p.width, dtype.numpy())), False))
    stem = weight.removesuffix("weight")
    name = f"{stem}bias" if stem != weight else f"{weight}.bias"
    return concatenated(_unique(graph, name), parts, 0)


def _describe(packed: ir.Value, group: list[Projection]) -> None:
    """The packed output's type and shape: a part's with the widths summed."""
    like = group[0].output
    packed.type = like.type
    if like.shape is not None and like.shape.rank():
        dims = list(like.shape)
        dims[-1] = sum(p.width for p in group)
        packed.shape = ir.Shape(dims)


def _remove(graph: ir.Graph, projection: Projection) -> None:
    """The projection's nodes, and its weight and bias once nothing reads them."""
    b = projection.matmul.inputs[1]
    if projection.add is not None:
        graph.remove(projection.add, safe=True)
    graph.remove(projection.matmul, safe=True)
    transpose = b.producer() if b is not None else None
    if projection.transposed and transpose is not None and not b.uses():  # type: ignore[union-attr]
        graph.remove(transpose, safe=True)
    for value in (projection.weight, projection.bias):
        if value is not None and value.name and not value.uses() and not value.is_graph_output():
            graph.initializers.pop(value.name, None)
            if value in graph.inputs:  # (``is_graph_input`` can be stale: onnx_ir 1.1)
                graph.inputs.remove(value)


def pack_projections(model: ir.Model) -> int:
    """Pack every group of projections of one input in ``model``'s graph, in place; the
    number of groups packed (a decoder layer has two: q/k/v and gate/up)."""
    groups = _groups(model.graph)
    for group in groups:
        _pack(model.graph, group)
    return len(groups)


class PackProjectionsStep(ir.passes.InPlacePass):
    """Projections of one input (weights stored as initializers) as one MatMul and a Split."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=bool(pack_projections(model)))


def _sizes(split: ir.Node, packed: ir.Value) -> list[int] | None:
    """The sizes of a Split's outputs along its axis, when they are known."""
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        sizes = ir.convenience.get_const_tensor(split.inputs[1])
        return None if sizes is None else [int(s) for s in sizes.numpy().reshape(-1)]
    width = packed.shape[-1] if packed.shape is not None and packed.shape.rank() else None
    parts = len(split.outputs)
    if not isinstance(width, int) or width % parts:
        return None
    return [width // parts] * parts


class PackedQKVOfSplit(pattern.RewriteRuleClassBase):
    """``GroupQueryAttention(q, k, v, ...)`` of ``q, k, v = Split(packed)`` becomes
    ``GroupQueryAttention(packed, None, None, ...)``, GQA's packed-QKV form, with the
    attention's other inputs and attributes as they were."""

    def __init__(self) -> None:
        super().__init__("PackedQKVOfSplit")

    def pattern(self, op: Any, packed: Any) -> Any:
        query, key, value = op.Split(
            packed,
            _allow_other_inputs=True,
            _allow_other_attributes=True,
            _outputs=["query", "key", "value"],
        )
        return op.GroupQueryAttention(
            query,
            key,
            value,
            _allow_other_inputs=True,
            _allow_other_attributes=True,
            _domain="com.microsoft",
            _outputs=["attention", "present_key", "present_value"],
        )

    def check(self, context: Any, packed: ir.Value, query: ir.Value, **values: Any) -> Any:
        result = pattern.MatchResult()
        split, attention = query.producer(), values["attention"].producer()
        assert split is not None and attention is not None
        rank = packed.shape.rank() if packed.shape is not None else None
        if rank != 3:
            return result.fail("The packed projection is not of rank 3 ([B, S, D]).", packed)
        if split.attributes.get_int("axis", 0) not in (-1, 2):
            return result.fail("The Split is not along the last axis.", split)
        heads = attention.attributes.get_int("num_heads", 0)
        kv_heads = attention.attributes.get_int("kv_num_heads", 0)
        sizes = _sizes(split, packed)
        if not heads or not kv_heads or sizes is None or sizes[0] % heads:
            return result.fail("The sizes of the Split or the head counts are unknown.", split)
        head_size = sizes[0] // heads
        if sizes != [heads * head_size, kv_heads * head_size, kv_heads * head_size]:
            return result.fail(
                f"The Split's sizes {sizes} are not q, k, v of {heads} and {kv_heads} heads.",
                split,
            )
        return result

    def rewrite(self, op: Any, packed: ir.Value, attention: ir.Value, **_: Any) -> Any:
        node = attention.producer()
        assert node is not None
        attributes = {name: attr.value for name, attr in node.attributes.items()}
        return op.GroupQueryAttention(
            packed,
            None,
            None,
            *node.inputs[3:],
            **attributes,
            _domain="com.microsoft",
            _outputs=3,
        )


class PackedQKVOfSlices(PackedQKVForGQAFusion):
    """onnxscript's ``fuse_qkv_gqa`` rule (three ``Slice`` nodes of one projection, as a
    model that packs q, k, v itself writes them), keeping the attention's attributes.

    onnxscript 0.7's rewrite writes ``num_heads``, ``kv_num_heads``, ``do_rotary`` and
    ``rotary_interleaved`` only: a sliding window's ``local_window_size``, ``scale`` or ``softcap`` would be dropped, and the attention would
    attend to the whole past."""

    def __init__(self) -> None:
        pattern.RewriteRuleClassBase.__init__(self, "PackedQKVOfSlices", remove_nodes=False)

    def rewrite(self, op: Any, query_sliced: ir.Value, **values: Any) -> Any:
        attention = next(
            user for user, index in query_sliced.uses() if index == 0 and _is_gqa(user)
        )
        outputs = super().rewrite(op, query_sliced=query_sliced, **values)
        packed = outputs[0].producer()
        for name, attribute in attention.attributes.items():
            if name not in packed.attributes:
                packed.attributes[name] = attribute
        return outputs


def _is_gqa(node: ir.Node) -> bool:
    return node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft"
