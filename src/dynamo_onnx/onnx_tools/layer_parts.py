# size: the split of a graph into layer parts and the checks that make each part its
# layer's alone (folded values, merged weights, reads across layers) go together.
"""Where each node of a template's graph is: the prefix every layer shares, each layer's
body, the suffix after the last layer (:mod:`.layer_repeat`'s docstring says how they are
told apart), the values a body reads from the layer before it, and the check that a
template's two layers of a kind are the same computation."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence

import onnx_ir as ir

from dynamo_onnx.onnx_tools.graph_signatures import (
    GENERATED_NAME,
    digest,
    outer_leaf,
    signatures,
)
from dynamo_onnx.onnx_tools.layer_plan import LayerPlan, LayerRepeatRefused
from dynamo_onnx.onnx_tools.lazy_folding import FoldedTensor, folded_key, folded_leaves

__all__ = ["Body", "Parts", "check_kinds", "check_tails", "partition"]

#: The parts that are no layer (a layer's index minus one is never one of them).
_PREFIX, _SUFFIX = -2, -3


@dataclasses.dataclass
class Body:
    """One template layer's nodes, the values it reads from the layer before it (each under
    the key of the slots that read it) and the values it hands to the next part."""

    nodes: list[ir.Node]
    #: key (the consumers' slots in this body) -> the previous body's value
    incoming: dict[tuple, ir.Value]
    #: key (the slots of the next part that read it) -> this body's value
    outgoing: dict[tuple, ir.Value]


@dataclasses.dataclass
class Parts:
    """A template's graph in parts: the prefix's nodes, each template layer's body, the
    suffix, and what tells a layer's values from the shared ones."""

    prefix: list[ir.Node]
    bodies: list[Body]
    suffix: Body
    part_of: dict[ir.Node, int]
    #: the initializers and graph inputs/outputs that are a layer's: value -> layer
    sources: dict[ir.Value, int]
    #: the layer sources and the values made from one layer's initializers alone
    owned: dict[ir.Value, int]
    #: the initializers with a generated name only one layer reads: value -> that layer
    #: (each copy of the layer has its own, as the whole model's export made them)
    private: dict[ir.Value, int]
    #: the private initializers the optimizer folded from their layer's lazy weights
    #: (:mod:`.lazy_folding`): each copy of the layer computes its own from its weights
    folded: set[ir.Value]
    #: the signature of a value a part reads from outside it (not the layer before it)
    leaf: Callable[[ir.Value], str]


def _reads(node: ir.Node, sources: dict[ir.Value, int]) -> list[ir.Value]:
    """The layer sources ``node`` reads as data: a ``Shape`` of a layer's graph input reads
    only its shape, which every layer's has (the past's length), so it is the prefix's."""
    found = [v for v in node.inputs if v is not None and v in sources]
    if node.op_type == "Shape" and node.domain == "":
        return [v for v in found if not v.is_graph_input()]
    return found


def _graph_sources(graph: ir.Graph, plan: LayerPlan) -> dict[ir.Value, int]:
    """The graph inputs and outputs named by a layer (its initializers are decided by
    :func:`_layer_sources`)."""
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
        layers = [sources[v] for v in _reads(node, sources)]
        layers += [sources[v] for v in node.outputs if v in outputs and v in sources]
        for out in node.outputs:
            for consumer, _ in out.uses():
                if first.get(consumer) is not None:
                    layers.append(first[consumer])  # type: ignore[arg-type]
        first[node] = min(layers) if layers else None
    return first


def _depends(nodes: Sequence[ir.Node], sources: dict[ir.Value, int]) -> set[ir.Node]:
    """The nodes that depend on a layer source."""
    dependent_values: set[ir.Value] = set()
    dependent: set[ir.Node] = set()
    for node in nodes:
        if _reads(node, sources) or any(v in dependent_values for v in node.inputs):
            dependent.add(node)
            dependent_values.update(node.outputs)
    return dependent


def _with_weights_made(
    nodes: Sequence[ir.Node], sources: dict[ir.Value, int]
) -> dict[ir.Value, int]:
    """``sources`` and the values computed from one layer's initializers alone (a weight
    transposed, cast, reshaped: an unoptimized graph computes them), as that layer's: a
    node reading one reads its layer's weight."""
    owned = dict(sources)
    constant: dict[ir.Value, frozenset[int]] = {
        v: frozenset([layer]) for v, layer in sources.items() if v.is_initializer()
    }
    for node in nodes:
        layers: set[int] = set()
        for value in node.inputs:
            if value is None:
                continue
            if value in constant:
                layers |= constant[value]
            elif not value.is_initializer():
                break
        else:
            for out in node.outputs:
                constant[out] = frozenset(layers)
                if len(layers) == 1:
                    owned[out] = next(iter(layers))
    return owned


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
    first = _first_layers(nodes, _with_weights_made(nodes, {**sources, **single}), outputs)
    for value, layer in named.items():
        if value in single or all(first.get(n) == layer for n, _ in value.uses()):
            sources[value] = layer
    return sources


def _incoming(
    nodes: list[ir.Node],
    read_from: Callable[[ir.Value], bool],
    leaf: Callable[[ir.Value], str],
    where: str,
) -> dict[tuple, ir.Value]:
    """The values ``nodes`` read from the part before them, each under a key of the slots
    that read it: their operators and input indices, which a layer of another kind or the
    last part reads the same way; where two values have the same slots, what computes the
    readers too (the incoming values by their slots)."""
    members = set(nodes)
    read: list[ir.Value] = []
    for node in nodes:
        for value in node.inputs:
            if value is not None and read_from(value) and value not in read:
                read.append(value)

    def slots(value: ir.Value) -> tuple:
        return tuple(sorted((n.domain, n.op_type, i) for n, i in value.uses() if n in members))

    shallow = collections.Counter(slots(v) for v in read)
    keyed: dict[ir.Value, str] = {}
    if any(count > 1 for count in shallow.values()):
        # the values told apart by their slots by those, the others alike
        unnamed = {v: digest("incoming", slots(v), shallow[slots(v)] == 1) for v in read}
        _, keyed_nodes = signatures(nodes, lambda v: unnamed.get(v) or leaf(v))
        keyed = {node: key for key, node in keyed_nodes}  # type: ignore[misc]
    incoming: dict[tuple, ir.Value] = {}
    for value in read:
        key = slots(value)
        if shallow[key] > 1:
            key = (key, tuple(sorted((keyed[n], i) for n, i in value.uses() if n in members)))
        if key in incoming:
            raise LayerRepeatRefused(
                f"{where} reads two values of the layer before it in the same way: which is "
                "which cannot be told"
            )
        incoming[key] = value
    return incoming


def partition(graph: ir.Graph, plan: LayerPlan) -> Parts:
    nodes = list(graph)
    _refuse_subgraphs(nodes)
    count = len(plan.kept)
    sources = _layer_sources(graph, plan)
    folded = _folded_in_layers(graph, plan)
    outputs = set(graph.outputs)
    owned = _with_weights_made(nodes, {**sources, **folded})
    part_of = _parts_of(nodes, owned, outputs)
    _take_private_prefix(nodes, part_of, sources, outputs)
    bad = sorted({layer for layer in part_of.values() if layer >= count})
    if bad:
        raise LayerRepeatRefused(f"the template has {count} layers but its names give layers {bad}")
    grouped: dict[int, list[ir.Node]] = collections.defaultdict(list)
    for node in nodes:
        grouped[part_of[node]].append(node)

    def part(value: ir.Value) -> int | None:
        producer = value.producer()
        return part_of.get(producer) if producer is not None else None

    prefix_of, _ = signatures(grouped[_PREFIX], outer_leaf)
    _check_folded_read_by_their_layer(folded, part_of)
    _check_layer_weights_unshared(graph, plan, sources, part_of)

    def leaf(value: ir.Value) -> str:
        """A value a part reads from outside it: its layer's name as layer 0's, or what
        the prefix computes, or what it holds (what it is computed from, for a value
        folded from its layer's weights)."""
        if value in sources:
            return digest("layer", plan.renamed(value.name or "", 0))
        if value in folded:
            tensor = value.const_value
            assert tensor is not None
            return folded_key(tensor, lambda name: plan.renamed(name, 0))
        return prefix_of.get(value) or outer_leaf(value)

    bodies = []
    for j in range(count):
        _check_reads(grouped[j], j, part, sources)
        incoming = _incoming(
            grouped[j], lambda v, j=j: part(v) == j - 1, leaf, f"template layer {j}"
        )
        bodies.append(Body(grouped[j], incoming, {}))
    if bodies and bodies[0].incoming:
        raise LayerRepeatRefused("the first layer reads values of no layer before it")
    suffix_nodes = grouped[_SUFFIX]
    _check_suffix_reads(suffix_nodes, part, count)
    suffix = Body(
        suffix_nodes,
        _incoming(suffix_nodes, lambda v: part(v) == count - 1, leaf, "the last part"),
        {},
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
    private = _private_initializers(graph, sources, part_of)
    return Parts(
        grouped[_PREFIX], bodies, suffix, part_of, sources, owned, private, set(folded), leaf
    )


def _refuse_subgraphs(nodes: list[ir.Node]) -> None:
    for node in nodes:
        if any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for a in node.attributes.values()
        ):
            raise LayerRepeatRefused(
                f"node {node.name!r} ({node.op_type}) has a subgraph: its layer cannot be told"
            )


def _parts_of(
    nodes: list[ir.Node], owned: dict[ir.Value, int], outputs: set[ir.Value]
) -> dict[ir.Node, int]:
    """Each node's part: the prefix when it depends on no layer's weight, else the first
    layer it depends on, or the suffix when that is none."""
    first = _first_layers(nodes, owned, outputs)
    dependent = _depends(nodes, owned)
    part_of: dict[ir.Node, int] = {}
    for node in nodes:
        if node not in dependent:
            part_of[node] = _PREFIX
        elif first[node] is None:
            part_of[node] = _SUFFIX
        else:
            part_of[node] = first[node]  # type: ignore[assignment]
    return part_of


def _check_suffix_reads(
    suffix_nodes: list[ir.Node], part: Callable[[ir.Value], int | None], count: int
) -> None:
    for node in suffix_nodes:
        for value in node.inputs:
            if value is not None and part(value) not in (None, _PREFIX, _SUFFIX, count - 1):
                raise LayerRepeatRefused(
                    f"the model's last part ({node.op_type} {node.name!r}) reads template "
                    f"layer {part(value)}, not the last one"
                )


def _private_initializers(
    graph: ir.Graph, sources: dict[ir.Value, int], part_of: dict[ir.Node, int]
) -> dict[ir.Value, int]:
    """Initializers with generated names that one layer alone reads, by that layer."""
    return {
        value: readers.pop()
        for value in graph.initializers.values()
        if value not in sources
        and GENERATED_NAME.fullmatch(value.name or "")
        and len(readers := {part_of[n] for n, _ in value.uses()}) == 1
        and 0 <= next(iter(readers))
    }


def _folded_in_layers(graph: ir.Graph, plan: LayerPlan) -> dict[ir.Value, int]:
    """The initializers with a generated name that the optimizer folded from one layer's
    lazy weights (:mod:`.lazy_folding`), by that layer: placed as its weights are. Refused
    when such a value reads several layers' weights."""
    found: dict[ir.Value, int] = {}
    for value in graph.initializers.values():
        tensor = value.const_value
        if not isinstance(tensor, FoldedTensor) or not GENERATED_NAME.fullmatch(value.name or ""):
            continue
        leaves = [t.name or "" for t in folded_leaves(tensor)]
        layers = sorted({layer for name in leaves if (layer := plan.layer_of(name)) is not None})
        if len(layers) > 1:
            raise LayerRepeatRefused(
                f"the optimization folded weights of template layers {layers} into one value "
                f"{value.name!r}: a repeated layer cannot compute its own"
            )
        if layers:
            found[value] = layers[0]
    return found


def _check_folded_read_by_their_layer(
    folded: dict[ir.Value, int], part_of: dict[ir.Node, int]
) -> None:
    """Refused when nodes of another part read a value folded from a layer's weights (the
    optimizer merged equal values of several layers into one): a repeated layer would
    read the template's."""
    for value, layer in folded.items():
        readers = {part_of[n] for n, _ in value.uses()}
        if readers - {layer}:
            weight = next(
                t.name
                for t in folded_leaves(value.const_value)  # type: ignore[arg-type]
            )
            raise LayerRepeatRefused(
                f"the optimization folded template layer {layer}'s weight `{weight}` into a "
                f"value merged with other layers' ({_read_by(readers)}): a repeated layer "
                "cannot compute its own"
            )


def _check_layer_weights_unshared(
    graph: ir.Graph, plan: LayerPlan, sources: dict[ir.Value, int], part_of: dict[ir.Node, int]
) -> None:
    """Refused when an initializer named by a layer is read by nodes of other parts: the
    optimizer merged equal weights of several layers into one (an untrained checkpoint's
    norms, all ones), and a repeated layer would read the template's."""
    for value in graph.initializers.values():
        layer = plan.layer_of(value.name or "")
        if layer is None or value in sources:
            continue
        readers = {part_of[n] for n, _ in value.uses()}
        raise LayerRepeatRefused(
            f"the optimization merged template layer {layer}'s weight `{value.name}` with "
            f"equal weights of other layers ({_read_by(readers)}): a repeated layer cannot "
            "read its own"
        )


def _read_by(parts: set[int]) -> str:
    """Who reads a value: ``read by template layers 0, 2 and the last part``."""
    layers = sorted(p for p in parts if p >= 0)
    named = [f"template layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"]
    named = (named if layers else []) + [
        name for p, name in ((_PREFIX, "the prefix"), (_SUFFIX, "the last part")) if p in parts
    ]
    return "read by " + " and ".join(named)


def _take_private_prefix(
    nodes: Sequence[ir.Node],
    part_of: dict[ir.Node, int],
    sources: dict[ir.Value, int],
    outputs: set[ir.Value],
) -> None:
    """The prefix's nodes that only one layer reads (an unoptimized graph computes its
    mask and shapes again in each layer) moved into that layer: each of its copies has
    them, as the whole model's export does."""
    for node in reversed(nodes):
        if part_of[node] != _PREFIX:
            continue
        readers = {part_of[n] for out in node.outputs for n, _ in out.uses()}
        if any(out in outputs for out in node.outputs) or len(readers) != 1:
            continue
        (layer,) = readers
        if layer >= 0 and all(sources.get(v, layer) == layer for v in node.inputs if v):
            part_of[node] = layer


def _check_reads(
    nodes: list[ir.Node],
    j: int,
    part: Callable[[ir.Value], int | None],
    sources: dict[ir.Value, int],
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


def _keyed(parts: Parts, body: Body) -> list[tuple[str, ir.Node]]:
    """The signatures of ``body``'s nodes: the values it reads from the layer before it
    by their keys, its layer's names as layer 0's."""
    incoming = {v: key for key, v in body.incoming.items()}

    def leaf(value: ir.Value) -> str:
        if value in incoming:
            return digest("incoming", incoming[value])
        return parts.leaf(value)

    return signatures(body.nodes, leaf)[1]


def _body_keys(parts: Parts, j: int, plan: LayerPlan) -> list:
    """Template layer ``j``'s nodes' signatures, its layer's names read as layer 0's."""
    keyed = _keyed(parts, parts.bodies[j])
    outputs = sorted(
        plan.renamed(v.name or "", 0)
        for n in parts.bodies[j].nodes
        for v in n.outputs
        if v in parts.sources
    )
    return [*sorted(k for k, _ in keyed), *outputs]


def check_kinds(parts: Parts, plan: LayerPlan) -> None:
    """Each template layer a model layer repeats is the same computation as the template's
    other layer of its kind, up to their index: else the repetition would guess."""
    for j, layer in enumerate(plan.kept):
        last = plan.sources[layer]
        if j == 0 or last == j:
            continue
        if _body_keys(parts, j, plan) != _body_keys(parts, last, plan):
            raise LayerRepeatRefused(
                f"the model's layers {layer} and {plan.kept[last]}, of one kind, are not the "
                f"same computation up to their index{_first_difference(parts, j, last)}"
            )


def _first_difference(parts: Parts, j: int, other: int) -> str:
    """Where template layer ``j`` first differs from layer ``other`` (the nodes after it
    differ because of it): its node and what it reads."""
    theirs = collections.Counter(key for key, _ in _keyed(parts, parts.bodies[other]))
    for key, node in _keyed(parts, parts.bodies[j]):
        if theirs[key] == 0:
            read = ", ".join(repr(v.name) for v in node.inputs if v is not None)
            return f": its {node.op_type} node {node.name!r} reading {read} has no equal there"
        theirs[key] -= 1
    return ": they make other outputs"


def _tail(parts: Parts, body: Body, layer: int | None) -> list[str]:
    """The signatures of the nodes of ``body`` (template layer ``layer``'s, None for the
    suffix) that read nothing of that layer: what the layer before it computes last (an
    expert's product, a residual sum), placed after it because only the next part reads it."""
    own: set[ir.Value] = {v for v, k in parts.owned.items() if k == layer}
    tail = []
    for key, node in _keyed(parts, body):
        if any(v in own for v in node.inputs if v is not None):
            own.update(node.outputs)
        else:
            tail.append(key)
    return sorted(tail)


def check_tails(parts: Parts, plan: LayerPlan) -> None:
    """Each model layer's copy starts with the tail of the template layer before its
    template layer (and the suffix with the last one's): refused when that tail is not the
    one the model's previous layer leaves, which a kind two layers have in the template
    shows (a mixture-of-experts layer before a dense one)."""
    count = len(plan.kept)

    def left_by(p: int) -> list[str] | None:
        """The tail template layer ``p``'s kind leaves: in the part after ``p`` or after
        the template's other layer of that kind; None when neither is a layer."""
        for q in (p, *(j for j, layer in enumerate(plan.kept) if plan.sources[layer] == p)):
            if q + 1 < count:
                return _tail(parts, parts.bodies[q + 1], q + 1)
        return None

    for i in range(1, len(plan.sources) + 1):
        before = plan.sources[i - 1]
        if i < len(plan.sources):
            here, where = plan.sources[i], f"the model's layer {i}"
            if here == before + 1:
                continue
            found = _tail(parts, parts.bodies[here], here)
        else:
            here, where = count, "the model's last part"
            if before == count - 1:
                continue
            found = left_by(count - 1)
        if found is None or left_by(before) != found:
            raise LayerRepeatRefused(
                f"{where} would start with what template layer {here - 1} leaves, which is "
                f"not what the model's layer {i - 1} (template layer {before}) leaves"
            )
