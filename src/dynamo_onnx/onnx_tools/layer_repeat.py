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
import dataclasses
import hashlib
import re
from collections.abc import Callable, Hashable, Iterable, Sequence

import onnx_ir as ir

from dynamo_onnx.fake import is_fake

__all__ = [
    "LayerPlan",
    "LayerRepeatRefused",
    "graph_differences",
    "plan_template",
    "repeat_layers",
]

#: The template layers kept of each kind after the first layer: two, so that one is preceded
#: by a layer of its kind's computation (not the first, whose graph differs in a fused model)
#: and the two can be compared.
KEPT_PER_KIND = 2
#: Initializers up to this many elements are compared by value, larger ones by name: the
#: small ones are the constants an optimizer names itself, the large ones the weights.
COMPARED_BY_VALUE = 1024
#: Names onnx_ir and torch.export give values themselves (``val_12``, ``linear_3``): such a
#: value is compared by what it holds or computes, never by its name.
_GENERATED_NAME = re.compile(r"[A-Za-z_]*_\d+")
#: The parts that are no layer (a layer's index minus one is never one of them).
_PREFIX, _SUFFIX = -2, -3


class LayerRepeatRefused(Exception):
    """The template's layers cannot be repeated into the model: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def plan_template(kinds: Sequence[Hashable]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(kept, sources)``: ``kept`` the model's layers the template holds, in order (layer
    0, and for each kind its first two layers after layer 0, one when it has only one);
    ``sources[i]`` the template layer (an index into ``kept``) the model's layer ``i``
    repeats: 0 for layer 0, else the last kept layer of its kind, which a template layer
    precedes (the first layer's graph differs from the others'). None when the template
    would hold as many layers as the model."""
    seen: dict[Hashable, list[int]] = collections.defaultdict(list)
    for index, kind in enumerate(kinds):
        if index > 0 and len(seen[kind]) < KEPT_PER_KIND:
            seen[kind].append(index)
    kept = tuple(sorted({0, *(i for layers in seen.values() for i in layers)}))
    if not kinds or len(kept) >= len(kinds):
        return None
    position = {layer: j for j, layer in enumerate(kept)}
    sources = tuple(0 if i == 0 else position[seen[kind][-1]] for i, kind in enumerate(kinds))
    return kept, sources


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """How to make the model from its template: which template layer each model layer
    repeats, and how layer names read and are rewritten.

    ``layer_of`` gives the layer index in an initializer's, graph input's or graph
    output's name (the template's numbering for the template's names), None for a name of
    no layer; ``renamed`` that name with its index replaced; ``retarget`` the tensor of the
    model's layer ``i`` for the tensor of template layer ``j``'s initializer (a lazy one
    that reads the checkpoint, or the full export's in a test)."""

    kept: tuple[int, ...]
    sources: tuple[int, ...]
    layer_of: Callable[[str], int | None]
    renamed: Callable[[str, int], str]
    retarget: Callable[[ir.TensorProtocol, int, int], ir.TensorProtocol]


# -- where each node is ------------------------------------------------------------------


@dataclasses.dataclass
class _Body:
    """One template layer's nodes, the values it reads from the layer before it (each under
    the key of the slots that read it) and the values it hands to the next part."""

    nodes: list[ir.Node]
    #: key (the consumers' slots in this body) -> the previous body's value
    incoming: dict[tuple, ir.Value]
    #: key (the slots of the next part that read it) -> this body's value
    outgoing: dict[tuple, ir.Value]


@dataclasses.dataclass
class _Parts:
    prefix: list[ir.Node]
    bodies: list[_Body]
    suffix: _Body
    part_of: dict[ir.Node, int]
    #: the initializers and graph inputs/outputs that are a layer's: value -> layer
    sources: dict[ir.Value, int]


def _consumers(value: ir.Value) -> list[tuple[ir.Node, int]]:
    return list(value.uses())


def _graph_sources(graph: ir.Graph, plan: LayerPlan) -> dict[ir.Value, int]:
    """Graph inputs and outputs named by a layer, and the initializers named by a layer
    that only that layer's nodes read (decided in :func:`_partition`)."""
    found: dict[ir.Value, int] = {}
    for value in (*graph.inputs, *graph.outputs):
        layer = plan.layer_of(value.name or "")
        if layer is not None:
            found[value] = layer
    return found


def _first_layers(
    nodes: Sequence[ir.Node], sources: dict[ir.Value, int], outputs: set[ir.Value]
) -> dict[ir.Node, int | None]:
    """F(n): the smallest layer among the sources ``n`` and its descendants read or make."""
    first: dict[ir.Node, int | None] = {}
    for node in reversed(nodes):
        layers = [sources[v] for v in node.inputs if v is not None and v in sources]
        layers += [sources[v] for v in node.outputs if v in outputs and v in sources]
        for out in node.outputs:
            for consumer, _ in out.uses():
                if first.get(consumer) is not None:
                    layers.append(first[consumer])  # type: ignore[arg-type]
        first[node] = min(layers) if layers else None
    return first


def _depends(nodes: Sequence[ir.Node], sources: dict[ir.Value, int]) -> set[ir.Node]:
    """The nodes that depend on a layer source."""
    dependent_values: set[ir.Value] = {v for v in sources}
    dependent: set[ir.Node] = set()
    for node in nodes:
        if any(v is not None and v in dependent_values for v in node.inputs):
            dependent.add(node)
            dependent_values.update(node.outputs)
    return dependent


def _layer_sources(graph: ir.Graph, plan: LayerPlan) -> dict[ir.Value, int]:
    """Every layer source: graph inputs and outputs named by a layer, and the initializers
    named by a layer that only nodes of that layer read. An initializer read by one node is
    its layer's; one read by several is its layer's when every reader is in that layer once
    the others are placed (an optimizer merges equal tensors of several layers into one,
    named after the first)."""
    nodes = list(graph)
    outputs = set(graph.outputs)
    sources = _graph_sources(graph, plan)
    named = {
        v: layer
        for v in graph.initializers.values()
        if (layer := plan.layer_of(v.name or "")) is not None
    }
    single = {v: layer for v, layer in named.items() if len({n for n, _ in v.uses()}) == 1}
    first = _first_layers(nodes, {**sources, **single}, outputs)
    for value, layer in named.items():
        if value in single or all(first.get(n) == layer for n, _ in value.uses()):
            sources[value] = layer
    return sources


def _slot_key(body_nodes: set[ir.Node], value: ir.Value) -> tuple:
    """A value read across parts, by the slots of ``body_nodes`` that read it."""
    return tuple(
        sorted((n.domain, n.op_type, index) for n, index in value.uses() if n in body_nodes)
    )


def _incoming(nodes: list[ir.Node], read_from: Callable[[ir.Value], bool], where: str) -> dict:
    members = set(nodes)
    incoming: dict[tuple, ir.Value] = {}
    for node in nodes:
        for value in node.inputs:
            if value is None or not read_from(value) or value in incoming.values():
                continue
            key = _slot_key(members, value)
            if key in incoming:
                raise LayerRepeatRefused(
                    f"{where} reads two values of the layer before it in the same way "
                    f"({key}): which is which cannot be told"
                )
            incoming[key] = value
    return incoming


def _partition(graph: ir.Graph, plan: LayerPlan) -> _Parts:
    nodes = list(graph)
    for node in nodes:
        if any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for a in node.attributes.values()
        ):
            raise LayerRepeatRefused(
                f"node {node.name!r} ({node.op_type}) has a subgraph: its layer cannot be told"
            )
    count = len(plan.kept)
    sources = _layer_sources(graph, plan)
    outputs = set(graph.outputs)
    first = _first_layers(nodes, sources, outputs)
    dependent = _depends(nodes, sources)
    part_of: dict[ir.Node, int] = {}
    for node in nodes:
        if node not in dependent:
            part_of[node] = _PREFIX
        elif first[node] is None:
            part_of[node] = _SUFFIX
        else:
            part_of[node] = first[node]  # type: ignore[assignment]
    bad = sorted({layer for layer in part_of.values() if layer >= count})
    if bad:
        raise LayerRepeatRefused(f"the template has {count} layers but its names give layers {bad}")
    grouped: dict[int, list[ir.Node]] = collections.defaultdict(list)
    for node in nodes:
        grouped[part_of[node]].append(node)

    def part(value: ir.Value) -> int | None:
        producer = value.producer()
        return part_of.get(producer) if producer is not None else None

    bodies = []
    for j in range(count):
        _check_reads(grouped[j], j, part, sources, plan)
        incoming = _incoming(grouped[j], lambda v, j=j: part(v) == j - 1, f"template layer {j}")
        bodies.append(_Body(grouped[j], incoming, {}))
    if bodies and bodies[0].incoming:
        raise LayerRepeatRefused("the first layer reads values of no layer before it")
    suffix_nodes = grouped[_SUFFIX]
    for node in suffix_nodes:
        for value in node.inputs:
            if value is not None and part(value) not in (None, _PREFIX, _SUFFIX, count - 1):
                raise LayerRepeatRefused(
                    f"the model's last part ({node.op_type} {node.name!r}) reads template "
                    f"layer {part(value)}, not the last one"
                )
    suffix = _Body(
        suffix_nodes, _incoming(suffix_nodes, lambda v: part(v) == count - 1, "the last part"), {}
    )
    for j, body in enumerate(bodies):
        after = bodies[j + 1] if j + 1 < count else suffix
        body.outgoing = dict(after.incoming)
        for node in body.nodes:
            for value in node.outputs:
                if value in outputs and sources.get(value) != j:
                    raise LayerRepeatRefused(
                        f"template layer {j} makes the graph output {value.name!r}, which is "
                        "not named by its layer"
                    )
    return _Parts(grouped[_PREFIX], bodies, suffix, part_of, sources)


def _check_reads(
    nodes: list[ir.Node],
    j: int,
    part: Callable[[ir.Value], int | None],
    sources: dict[ir.Value, int],
    plan: LayerPlan,
) -> None:
    """A body reads the prefix, shared initializers and graph inputs, its own layer's
    sources and the layer just before it; anything else is refused."""
    for node in nodes:
        for value in node.inputs:
            if value is None:
                continue
            layer = sources.get(value)
            if layer is not None and layer != j:
                raise LayerRepeatRefused(
                    f"template layer {j} ({node.op_type} {node.name!r}) reads {value.name!r} "
                    f"of layer {layer}"
                )
            made_in = part(value)
            if made_in is not None and made_in not in (_PREFIX, j, j - 1):
                raise LayerRepeatRefused(
                    f"template layer {j} ({node.op_type} {node.name!r}) reads a value of "
                    f"template layer {made_in}, not of the layer just before it"
                )


# -- structural signatures ---------------------------------------------------------------


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def _tensor_key(tensor: ir.TensorProtocol | None) -> object:
    """What a small readable tensor holds; its type and shape otherwise."""
    if tensor is None:
        return None
    raw = getattr(tensor, "raw", None)
    head = (str(tensor.dtype), tuple(tensor.shape.numpy()))
    if is_fake(raw) or tensor.size > COMPARED_BY_VALUE:
        return head
    return (*head, _digest(tensor.tobytes()))


def _attribute_key(attr: ir.Attr) -> object:
    if attr.type == ir.AttributeType.TENSOR:
        return (attr.name, _tensor_key(attr.as_tensor()))
    if attr.type == ir.AttributeType.TENSORS:
        return (attr.name, tuple(_tensor_key(t) for t in attr.as_tensors()))
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return (attr.name, "graph", id(attr))
    return (attr.name, str(attr.type), repr(attr.value))


def _node_key(node: ir.Node, inputs: Iterable[str]) -> str:
    attributes = tuple(sorted(_attribute_key(a) for a in node.attributes.values()))
    return _digest(node.domain, node.op_type, node.overload, attributes, tuple(inputs))


def _initializer_key(value: ir.Value) -> str:
    """A generated name says nothing: such an initializer is what it holds; a named one
    (a weight) its name, type and shape."""
    name = value.name or ""
    held = _tensor_key(value.const_value)
    if _GENERATED_NAME.fullmatch(name) and isinstance(held, tuple) and len(held) == 3:
        return _digest("constant", held)
    return _digest("initializer", name, held if not isinstance(held, tuple) else held[:2])


def _signatures(
    nodes: Iterable[ir.Node], leaf: Callable[[ir.Value], str]
) -> tuple[dict[ir.Value, str], list[tuple[str, ir.Node]]]:
    """Each value's signature (what computes it, its node names and value names aside),
    and each node's, in the order given (a topological one)."""
    of: dict[ir.Value, str] = {}
    keyed: list[tuple[str, ir.Node]] = []
    for node in nodes:
        inputs = ["" if v is None else of[v] if v in of else leaf(v) for v in node.inputs]
        key = _node_key(node, inputs)
        keyed.append((key, node))
        for index, out in enumerate(node.outputs):
            of[out] = _digest(key, index)
    return of, keyed


def _shape_key(value: ir.Value) -> tuple:
    return (str(value.type), str(value.shape))


def graph_differences(a: ir.Model, b: ir.Model, limit: int = 10) -> list[str]:
    """How the graphs of ``a`` and ``b`` differ, up to the names of nodes and of the
    values a node makes or an optimizer names (empty: the same computation). Graph inputs
    and outputs are compared by name, type and shape, named initializers by name, type and
    shape, generated ones and small constants by value."""

    def leaf(value: ir.Value) -> str:
        if value.is_initializer():
            return _initializer_key(value)
        return _digest("input", value.name)

    found: list[str] = []
    left, keyed_a = _signatures(a.graph, leaf)
    right, keyed_b = _signatures(b.graph, leaf)
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
    init_a = collections.Counter(_initializer_key(v) for v in a.graph.initializers.values())
    init_b = collections.Counter(_initializer_key(v) for v in b.graph.initializers.values())
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


# -- the self-check ----------------------------------------------------------------------


def _body_keys(parts: _Parts, j: int, plan: LayerPlan, prefix_of: dict[ir.Value, str]) -> list:
    """Template layer ``j``'s nodes' signatures, its layer's names read as layer 0's."""
    incoming = {v: key for key, v in parts.bodies[j].incoming.items()}

    def leaf(value: ir.Value) -> str:
        if value in incoming:
            return _digest("incoming", incoming[value])
        if value in parts.sources:
            return _digest("layer", plan.renamed(value.name or "", 0))
        if value in prefix_of:
            return prefix_of[value]
        if value.is_initializer():
            return _initializer_key(value)
        return _digest("input", value.name)

    _, keyed = _signatures(parts.bodies[j].nodes, leaf)
    outputs = sorted(
        plan.renamed(v.name or "", 0)
        for n in parts.bodies[j].nodes
        for v in n.outputs
        if v in parts.sources
    )
    return [*sorted(k for k, _ in keyed), *outputs]


def _check_kinds(parts: _Parts, plan: LayerPlan, prefix_of: dict[ir.Value, str]) -> None:
    """Each template layer a model layer repeats is the same computation as the template's
    other layer of its kind, up to their index: else the repetition would guess."""
    for j, layer in enumerate(plan.kept):
        last = plan.sources[layer]
        if j == 0 or last == j:
            continue
        if _body_keys(parts, j, plan, prefix_of) != _body_keys(parts, last, plan, prefix_of):
            raise LayerRepeatRefused(
                f"the model's layers {layer} and {plan.kept[last]}, of one kind, are not the "
                "same computation up to their index"
            )


# -- writing the model -------------------------------------------------------------------


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
    parts = _partition(graph, plan)
    prefix_of, _ = _signatures(
        parts.prefix,
        lambda v: _initializer_key(v) if v.is_initializer() else _digest("input", v.name),
    )
    _check_kinds(parts, plan, prefix_of)

    writer = _Writer()
    shared: dict[ir.Value, ir.Value] = {}  # template value -> new value, outside layers
    layered: dict[tuple[ir.Value, int], ir.Value] = {}  # (template source, model layer)

    def layer_value(value: ir.Value, i: int) -> ir.Value:
        if (value, i) not in layered:
            j = parts.sources[value]
            name = plan.renamed(value.name or "", i)
            tensor = None
            if value.const_value is not None:
                tensor = plan.retarget(value.const_value, j, i)
            layered[value, i] = writer.value(value, name, tensor)
        return layered[value, i]

    def shared_value(value: ir.Value) -> ir.Value:
        if value not in shared:
            shared[value] = writer.value(value, value.name or "")
        return shared[value]

    # the names the caller sees first, so that a clone never takes one
    inputs = [
        shared_value(v) if i is None else layer_value(v, i)
        for v, i in _expanded(graph.inputs, parts.sources, plan)
    ]
    initializers = [
        shared_value(v) if i is None else layer_value(v, i)
        for v, i in _expanded(list(graph.initializers.values()), parts.sources, plan)
    ]

    def outer(value: ir.Value) -> ir.Value:
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
            return outer(value)

        for node in body.nodes:
            made = writer.clone(node, mapped, f"__{i}")
            for old, new in zip(node.outputs, made):
                if old in parts.sources:  # a graph output of the layer: its name
                    writer.used.discard(new.name or "")
                    new.name = writer.name(plan.renamed(old.name or "", i))
                    layered[old, i] = new
                local[old] = new
        handed = {key: local[v] for key, v in body.outgoing.items()}
    suffix_reads = _matched(parts.suffix.incoming, handed, "the model's last part")
    local = {old: suffix_reads[key] for key, old in parts.suffix.incoming.items()}
    for node in parts.suffix.nodes:
        made = writer.clone(node, lambda v: local[v] if v in local else outer(v), "")
        local.update(zip(node.outputs, made))

    def output(value: ir.Value, i: int | None) -> ir.Value:
        if i is not None:
            return layered[value, i]
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
