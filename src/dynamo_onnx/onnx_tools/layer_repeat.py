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
of several layers (an optimizer merged equal tensors) is refused: a repeated layer would
read the template's values. A constant the optimizer folded from one layer's lazy weights
(:mod:`.lazy_folding`: a norm that scales by ``1 + weight``) is that layer's: each copy computes its own
from its weights (``plan.retarget``), and the template's two layers of a kind are compared
by what it is computed from, not by its values.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

import onnx_ir as ir

from dynamo_onnx.onnx_tools.graph_signatures import GENERATED_NAME, graph_differences
from dynamo_onnx.onnx_tools.layer_parts import Parts, check_kinds, check_tails, partition
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
        """``wanted``, or another name like it; a generated one (``add_51``) stays one
        (``add_52``): such a name says nothing, and is compared by what it holds."""
        name, count = wanted, 0
        generated = GENERATED_NAME.fullmatch(wanted)
        stem, _, number = wanted.rpartition("_")
        while name in self.used:
            count += 1
            name = f"{stem}_{int(number) + count}" if generated else f"{wanted}_{count}"
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
    in layer order, as the whole model's export orders them. A run whose layers start
    again (the values a pass made for every layer, then another pass's: GPT-OSS's folded
    router weights, then its packed q/k/v) is that many runs."""
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
            if run and sources[value] < sources[run[-1]]:
                flush()
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
    if model.functions:
        raise LayerRepeatRefused("the template has model-local functions")
    if len(plan.sources) == 0 or plan.sources[0] != 0:
        raise LayerRepeatRefused("the model's first layer must repeat the template's first")
    if any(s == 0 for s in plan.sources[1:]):
        raise LayerRepeatRefused("only the model's first layer can repeat the template's first")
    parts = partition(model.graph, plan)
    check_kinds(parts, plan)
    check_tails(parts, plan)
    return _Repeater(parts, plan).model(model)


class _Repeater:
    """The model's values made from the template's: the shared ones once, a layer's
    sources and own constants once per model layer."""

    def __init__(self, parts: Parts, plan: LayerPlan) -> None:
        self.parts, self.plan = parts, plan
        self.writer = _Writer()
        self.shared: dict[ir.Value, ir.Value] = {}  # template value -> new, outside layers
        self.layered: dict[str, ir.Value] = {}  # a model layer's source by its name
        self.private: dict[tuple[ir.Value, int], ir.Value] = {}  # a layer's own constants

    def layer_value(self, value: ir.Value, i: int) -> ir.Value:
        """Template source ``value`` as model layer ``i``'s: its name, its tensor."""
        name = self.plan.renamed(value.name or "", i)
        if name not in self.layered:
            tensor = None
            if value.const_value is not None:
                tensor = self.plan.retarget(value.const_value, self.parts.sources[value], i)
            self.layered[name] = self.writer.value(value, name, tensor)
        return self.layered[name]

    def shared_value(self, value: ir.Value) -> ir.Value:
        if value not in self.shared:
            self.shared[value] = self.writer.value(value, value.name or "")
        return self.shared[value]

    def private_value(self, value: ir.Value, i: int) -> ir.Value:
        """A layer's own constant as model layer ``i``'s: the template's, or, folded from
        its layer's weights, computed from layer ``i``'s (``plan.retarget``)."""
        if (value, i) not in self.private:
            tensor = None
            if value in self.parts.folded and value.const_value is not None:
                tensor = self.plan.retarget(value.const_value, self.parts.private[value], i)
            self.private[value, i] = self.writer.value(value, value.name or "", tensor)
        return self.private[value, i]

    def outer(self, value: ir.Value) -> ir.Value:
        """A value the prefix or the suffix reads from outside its part."""
        if value in self.parts.sources:  # the shape of a layer's input (a size all share)
            return self.layer_value(value, _shape_source(self.parts.sources[value], self.plan))
        if value not in self.shared:
            raise LayerRepeatRefused(f"{value.name!r} is read before it is made")
        return self.shared[value]

    def layer(self, i: int, handed: dict[tuple, ir.Value]) -> dict[tuple, ir.Value]:
        """Model layer ``i`` cloned, reading what the layer before it ``handed``; returns
        what it hands the next part."""
        body = self.parts.bodies[self.plan.sources[i]]
        reads = _matched(body.incoming, handed, f"the model's layer {i}")
        local = {old: reads[key] for key, old in body.incoming.items()}

        def mapped(value: ir.Value) -> ir.Value:
            if value in local:
                return local[value]
            if value in self.parts.sources:
                return self.layer_value(value, i)
            if value in self.parts.private:
                return self.private_value(value, i)
            return self.outer(value)

        for node in body.nodes:
            for old, new in zip(node.outputs, self.writer.clone(node, mapped, f"__{i}")):
                if old in self.parts.sources:  # a graph output of the layer: its name
                    self.writer.used.discard(new.name or "")
                    new.name = self.writer.name(self.plan.renamed(old.name or "", i))
                    self.layered[new.name] = new
                local[old] = new
        return {key: local[v] for key, v in body.outgoing.items()}

    def model(self, template: ir.Model) -> ir.Model:
        graph, parts, plan = template.graph, self.parts, self.plan
        # the names the caller sees first, so that a clone never takes one
        inputs = [
            self.shared_value(v) if i is None else self.layer_value(v, i)
            for v, i in _expanded(graph.inputs, parts.sources, plan)
        ]
        initializers = [
            self.shared_value(v)
            if i is None
            else self.private_value(v, i)
            if v in parts.private
            else self.layer_value(v, i)
            for v, i in _expanded(
                list(graph.initializers.values()), {**parts.sources, **parts.private}, plan
            )
        ]
        for node in parts.prefix:
            for old, new in zip(node.outputs, self.writer.clone(node, self.outer, "")):
                self.shared[old] = new
        handed: dict[tuple, ir.Value] = {}
        for i in range(len(plan.sources)):
            handed = self.layer(i, handed)
        reads = _matched(parts.suffix.incoming, handed, "the model's last part")
        local = {old: reads[key] for key, old in parts.suffix.incoming.items()}
        for node in parts.suffix.nodes:
            made = self.writer.clone(node, lambda v: local[v] if v in local else self.outer(v), "")
            local.update(zip(node.outputs, made))
        outputs = [
            self.layered[plan.renamed(v.name or "", i)]
            if i is not None
            else local[v]
            if v in local
            else self.outer(v)
            for v, i in _expanded(graph.outputs, parts.sources, plan)
        ]
        return _model_like(
            template, ir.Graph(inputs, outputs, nodes=self.writer.nodes, initializers=initializers)
        )


def _model_like(template: ir.Model, graph: ir.Graph) -> ir.Model:
    """``graph`` in a model with the template's graph and model fields."""
    old = template.graph
    graph.name, graph.doc_string = old.name, old.doc_string
    graph.opset_imports.update(old.opset_imports)
    graph.metadata_props.update(old.metadata_props)
    return ir.Model(
        graph,
        ir_version=template.ir_version,
        producer_name=template.producer_name,
        producer_version=template.producer_version,
        domain=template.domain,
        model_version=template.model_version,
        doc_string=template.doc_string,
        metadata_props=dict(template.metadata_props) or None,
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
