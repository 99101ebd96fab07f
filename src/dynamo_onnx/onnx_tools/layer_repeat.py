"""A model with many repeated layers made from a template with a few: its layers repeated in
the ONNX graph.

Capturing a decoder costs time in proportion to its layers, though every layer after the
first is the same computation as the others of its kind. A template (the same model with a
few layers: the first, and two of each kind after it) goes through the whole pipeline once
(capture, translation, optimization, fusions); this module then writes the model's graph by
cloning each template layer as many times as the model has layers of its kind, and checks
first that the template's two layers of a kind are the same computation up to their index
(else it refuses: :class:`LayerRepeatRefused`, and the caller captures the whole model).

Where a layer's nodes are, in a fused graph too: a *layer source* is an initializer, graph
input or graph output whose name holds a layer index (``LayerPlan.layer_of``). A node that
depends on no layer source is the *prefix* (shared by every layer: embedding, masks, rotary
caches, shape constants); one that depends on some but whose descendants use or produce no
layer source is the *suffix* (final norm, head); any other node is in the layer of the
smallest index among the sources it and its descendants use or produce: a residual sum that
only layer ``k + 1`` reads, or a fused norm that adds layer ``k``'s residual and applies layer
``k + 1``'s weight, is in layer ``k + 1``. An initializer named by a layer but read by nodes
of several layers (an optimizer merged equal tensors) is shared, like the prefix's.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

import onnx_ir as ir

from dynamo_onnx.onnx_tools.graph_signatures import graph_differences
from dynamo_onnx.onnx_tools.layer_parts import check_kinds, check_tails, partition
from dynamo_onnx.onnx_tools.layer_plan import (
    LayerPlan,
    LayerRepeatRefused,
    plan_template,
)

__all__ = [
    "LayerPlan",
    "LayerRepeatRefused",
    "graph_differences",
    "plan_template",
    "repeat_layers",
]


class _Writer:
    """The new graph's values and nodes, each made once, with names no other value has."""

    def __init__(self) -> None:
        self.nodes: list[ir.Node] = []
        self.used: set[str] = set()

    def name(self, wanted: str) -> str:
        name, count = wanted, 0
        while name in self.used:
            count += 1
            name = f"{wanted}_{count}"
        self.used.add(name)
        return name

    def value(self, like: ir.Value, name: str, tensor: ir.TensorProtocol | None = None) -> ir.Value:
        value = ir.Value(
            name=self.name(name),
            type=like.type,
            shape=like.shape.copy() if like.shape is not None else None,
            doc_string=like.doc_string,
            const_value=tensor if tensor is not None else like.const_value,
            metadata_props=dict(like.metadata_props) or None,
        )
        return value

    def clone(
        self, node: ir.Node, mapped: Callable[[ir.Value], ir.Value], tag: str
    ) -> list[ir.Value]:
        """``node`` again, reading ``mapped`` inputs; its outputs' names tagged."""
        inputs = [None if v is None else mapped(v) for v in node.inputs]
        outputs = [self.value(v, f"{v.name}{tag}") for v in node.outputs]
        clone = ir.Node(
            node.domain,
            node.op_type,
            inputs,
            list(node.attributes.values()),
            overload=node.overload,
            outputs=outputs,
            version=node.version,
            name=self.name(f"{node.name}{tag}") if node.name else None,
            doc_string=node.doc_string,
            metadata_props=dict(node.metadata_props) or None,
        )
        self.nodes.append(clone)
        return outputs


def _expanded(
    values: Sequence[ir.Value], sources: dict[ir.Value, int], plan: LayerPlan
) -> list[tuple[ir.Value, int | None]]:
    """``values`` (the template's graph inputs, outputs or initializers) in the model's
    order: each run of layer values once per model layer repeating a layer of the run,
    in layer order, as the whole model's export orders them."""
    result: list[tuple[ir.Value, int | None]] = []
    run: list[ir.Value] = []

    def flush() -> None:
        by_layer: dict[int, list[ir.Value]] = collections.defaultdict(list)
        for value in run:
            by_layer[sources[value]].append(value)
        for i, source in enumerate(plan.sources):
            result.extend((v, i) for v in by_layer.get(source, ()))
        run.clear()

    for value in values:
        if value in sources:
            run.append(value)
            continue
        flush()
        result.append((value, None))
    flush()
    return result


def repeat_layers(model: ir.Model, plan: LayerPlan) -> ir.Model:
    """A new model with ``len(plan.sources)`` layers made from the template ``model``
    (left as it was; its tensors are shared, not copied), each model layer ``i`` a clone
    of template layer ``plan.sources[i]`` reading its own initializers (``plan.retarget``)
    and I/O names (``plan.renamed``). Raises :class:`LayerRepeatRefused` with the reason
    when the template's layers cannot be told apart or are not the same computation."""
    graph = model.graph
    if model.functions:
        raise LayerRepeatRefused("the template has model-local functions")
    if len(plan.sources) == 0 or plan.sources[0] != 0:
        raise LayerRepeatRefused("the model's first layer must repeat the template's first")
    if any(s == 0 for s in plan.sources[1:]):
        raise LayerRepeatRefused("only the model's first layer can repeat the template's first")
    parts = partition(graph, plan)
    check_kinds(parts, plan)
    check_tails(parts, plan)

    writer = _Writer()
    shared: dict[ir.Value, ir.Value] = {}  # template value -> new value, outside layers
    layered: dict[str, ir.Value] = {}  # a model layer's source by its name

    def layer_value(value: ir.Value, i: int) -> ir.Value:
        name = plan.renamed(value.name or "", i)
        if name not in layered:
            tensor = None
            if value.const_value is not None:
                tensor = plan.retarget(value.const_value, parts.sources[value], i)
            layered[name] = writer.value(value, name, tensor)
        return layered[name]

    def shared_value(value: ir.Value) -> ir.Value:
        if value not in shared:
            shared[value] = writer.value(value, value.name or "")
        return shared[value]

    private: dict[tuple[ir.Value, int], ir.Value] = {}  # a layer's own constants

    def private_value(value: ir.Value, i: int) -> ir.Value:
        if (value, i) not in private:
            private[value, i] = writer.value(value, value.name or "")
        return private[value, i]

    # the names the caller sees first, so that a clone never takes one
    inputs = [
        shared_value(v) if i is None else layer_value(v, i)
        for v, i in _expanded(graph.inputs, parts.sources, plan)
    ]
    initializers = [
        shared_value(v)
        if i is None
        else private_value(v, i)
        if v in parts.private
        else layer_value(v, i)
        for v, i in _expanded(
            list(graph.initializers.values()), {**parts.sources, **parts.private}, plan
        )
    ]

    def outer(value: ir.Value) -> ir.Value:
        if value in parts.sources:  # the shape of a layer's input (a size all share)
            return layer_value(value, _shape_source(parts.sources[value], plan))
        if value not in shared:
            raise LayerRepeatRefused(f"{value.name!r} is read before it is made")
        return shared[value]

    for node in parts.prefix:
        for old, new in zip(node.outputs, writer.clone(node, outer, "")):
            shared[old] = new
    handed: dict[tuple, ir.Value] = {}
    for i, source in enumerate(plan.sources):
        body = parts.bodies[source]
        local: dict[ir.Value, ir.Value] = {}
        wanted = {key: v for key, v in body.incoming.items()}
        reads = _matched(wanted, handed, f"the model's layer {i}")
        for key, old in wanted.items():
            local[old] = reads[key]

        def mapped(value: ir.Value, i: int = i, local: dict = local) -> ir.Value:
            if value in local:
                return local[value]
            if value in parts.sources:
                return layer_value(value, i)
            if value in parts.private:
                return private_value(value, i)
            return outer(value)

        for node in body.nodes:
            made = writer.clone(node, mapped, f"__{i}")
            for old, new in zip(node.outputs, made):
                if old in parts.sources:  # a graph output of the layer: its name
                    writer.used.discard(new.name or "")
                    new.name = writer.name(plan.renamed(old.name or "", i))
                    layered[new.name] = new
                local[old] = new
        handed = {key: local[v] for key, v in body.outgoing.items()}
    suffix_reads = _matched(parts.suffix.incoming, handed, "the model's last part")
    local = {old: suffix_reads[key] for key, old in parts.suffix.incoming.items()}
    for node in parts.suffix.nodes:
        made = writer.clone(node, lambda v: local[v] if v in local else outer(v), "")
        local.update(zip(node.outputs, made))

    def output(value: ir.Value, i: int | None) -> ir.Value:
        if i is not None:
            return layered[plan.renamed(value.name or "", i)]
        return local.get(value) or outer(value)

    outputs = [output(v, i) for v, i in _expanded(graph.outputs, parts.sources, plan)]
    new_graph = ir.Graph(
        inputs,
        outputs,
        nodes=writer.nodes,
        initializers=initializers,
        doc_string=graph.doc_string,
        opset_imports=dict(graph.opset_imports),
        name=graph.name,
        metadata_props=dict(graph.metadata_props) or None,
    )
    return ir.Model(
        new_graph,
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
        doc_string=model.doc_string,
        metadata_props=dict(model.metadata_props) or None,
    )


def _shape_source(j: int, plan: LayerPlan) -> int:
    """The model layer whose input the prefix reads the shape of where the template reads
    template layer ``j``'s: the one as far from the last layer (torch.export takes a size
    shared by every layer's input from a layer counted from the end), layer 0 for 0."""
    return 0 if j == 0 else len(plan.sources) - len(plan.kept) + j


def _matched(
    wanted: dict[tuple, ir.Value], handed: dict[tuple, ir.Value], where: str
) -> dict[tuple, ir.Value]:
    """The values the previous layer hands, under the keys a layer reads them by: the same
    keys, or one value each side."""
    if set(wanted) == set(handed):
        return handed
    if len(wanted) == len(handed) == 1:
        return {next(iter(wanted)): next(iter(handed.values()))}
    raise LayerRepeatRefused(
        f"{where} reads {len(wanted)} values of the layer before it, which hands "
        f"{len(handed)} in other slots ({sorted(wanted)} against {sorted(handed)})"
    )
