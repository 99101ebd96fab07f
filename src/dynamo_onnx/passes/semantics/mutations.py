"""Where forward writes its inputs and buffers: the FX nodes behind each mutation that a
functional program's signature records.

The decision that something is written is the signature's (``buffers_to_mutate``,
``user_inputs_to_mutate`` of the decomposed program). The lines come from the program as
captured, where the in-place operators are as the user wrote them: an operator that writes
its argument (the schema says so, ``Tensor(a!)``), followed through the views it writes
into (``slice``, ``select``, ``narrow``: their result aliases their first argument) back
to the input. A write that left no in-place node there (a program given already
functional) is found in the functional program from the nodes' provenance
(``meta["from_node"]``: the in-place operator each node was made from).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.export import graph_signature as gs

from dynamo_onnx.registry import target_name

__all__ = ["mutation_sites", "scratch_buffers"]

#: (the FX node that writes, the operator's name as the messages give it).
Write = tuple[torch.fx.Node, str]


def _schema(node: torch.fx.Node) -> Any:
    return getattr(node.target, "_schema", None) if node.op == "call_function" else None


def _written_arguments(node: torch.fx.Node) -> Iterator[Any]:
    """The arguments an in-place operator writes to (``self`` of ``add_``, ``out``...)."""
    schema = _schema(node)
    if schema is None or not schema.is_mutable:
        return
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        if index < len(node.args):
            yield node.args[index]
        elif argument.name in node.kwargs:
            yield node.kwargs[argument.name]


def _aliased_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node whose memory ``node``'s result shares: the first argument of a view or of
    an in-place operator (their schemas give result and argument the same alias set), the
    tensor a ``getitem`` takes from a ``split``; None for anything else."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        source = node.args[0]
        return source if isinstance(source, torch.fx.Node) else None
    schema = _schema(node)
    if schema is None or not schema.returns or not schema.arguments or not node.args:
        return None
    result, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    if result is None or first is None or not (set(result.before_set) & set(first.before_set)):
        return None
    base = node.args[0]
    return base if isinstance(base, torch.fx.Node) else None


def _base(value: Any) -> torch.fx.Node | None:
    """The placeholder whose memory ``value`` is (through views), or None."""
    seen = 0
    while isinstance(value, torch.fx.Node) and value.op != "placeholder" and seen < 10_000:
        value, seen = _aliased_input(value), seen + 1
    return value if isinstance(value, torch.fx.Node) and value.op == "placeholder" else None


def _input_keys(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """Placeholder name -> how a mutation names it: the buffer's or parameter's name, a
    user input's placeholder name."""
    keys = {}
    for spec in ep.graph_signature.input_specs:
        if not isinstance(spec.arg, gs.TensorArgument):
            continue
        if spec.kind == gs.InputKind.USER_INPUT:
            keys[spec.arg.name] = spec.arg.name
        elif spec.kind in (gs.InputKind.BUFFER, gs.InputKind.PARAMETER) and spec.target:
            keys[spec.arg.name] = spec.target
    return keys


def _in_place_writes(ep: torch.export.ExportedProgram) -> dict[str, list[Write]]:
    """Every in-place operator of the graph, by the input it writes (through views)."""
    keys = _input_keys(ep)
    sites: dict[str, list[Write]] = {}
    for node in ep.graph.nodes:
        for argument in _written_arguments(node):
            base = _base(argument)
            if base is not None and base.name in keys:
                sites.setdefault(keys[base.name], []).append((node, target_name(node.target)))
    return sites


def _made_from_in_place(node: torch.fx.Node) -> tuple[str, str] | None:
    """The in-place operator a node of a functional program was made from (its
    provenance): (that node's name, the operator as ``aten::copy_``), or None."""
    pending = list(node.meta.get("from_node") or ())
    while pending:
        source = pending.pop()
        target = str(getattr(source, "target", ""))  # "aten.copy_.default"
        namespace, _, rest = target.partition(".")
        name, _, overload = rest.partition(".")
        if namespace and name.endswith("_") and not name.startswith("_"):
            op = f"{namespace}::{name}" + (f".{overload}" if overload != "default" else "")
            return str(getattr(source, "name", "")), op
        pending.extend(getattr(source, "from_node", None) or ())
    return None


def _functional_writes(value: torch.fx.Node) -> list[Write]:
    """The nodes of a functional program that compute a written value, one per in-place
    operator they were made from, in program order.

    Walks back from the value through the nodes made from in-place operators (a
    ``select_scatter`` and, once decomposed, its ``where``/``expand``...) and the nodes
    functionalization added with no provenance (the final ``copy`` into an input); an
    ordinary computation or an input ends the walk.
    """
    order = {node: index for index, node in enumerate(value.graph.nodes)}
    found: dict[str, Write] = {}
    seen: set[torch.fx.Node] = set()
    pending = [value]
    while pending:
        node = pending.pop()
        if node in seen or node.op != "call_function":
            continue
        seen.add(node)
        made_from = _made_from_in_place(node)
        if made_from is None and node.meta.get("from_node"):
            continue  # a computation of the user's, not a write
        if made_from is not None:
            source, op = made_from
            earlier = found.get(source)
            if earlier is None or order[node] < order[earlier[0]]:
                found[source] = (node, op)
        pending.extend(node.all_input_nodes)
    return sorted(found.values(), key=lambda write: order[write[0]])


def mutation_sites(
    captured: torch.export.ExportedProgram, functional: torch.export.ExportedProgram
) -> dict[str, list[Write]]:
    """For each input, buffer or parameter the functional program's signature says is
    written, the nodes that write it, in program order (empty when none can be found)."""
    in_place = _in_place_writes(captured)
    outputs = {n.name: n for n in functional.graph.nodes}
    sites: dict[str, list[Write]] = {}
    for spec in functional.graph_signature.output_specs:
        if spec.target is None or spec.kind not in (
            gs.OutputKind.BUFFER_MUTATION,
            gs.OutputKind.PARAMETER_MUTATION,
            gs.OutputKind.USER_INPUT_MUTATION,
        ):
            continue
        writes = in_place.get(spec.target)
        if not writes:
            value = outputs.get(getattr(spec.arg, "name", ""))
            writes = _functional_writes(value) if value is not None else []
        sites[spec.target] = writes
    return sites


def _read_in(ep: torch.export.ExportedProgram) -> set[str]:
    """The inputs (keyed as in :func:`_input_keys`) that a node reads: an argument based on
    them (through views) of a node that neither writes it nor is itself a view."""
    keys = _input_keys(ep)
    read: set[str] = set()
    for node in ep.graph.nodes:
        if node.op != "call_function" or _aliased_input(node) is not None:
            continue
        written = {id(a) for a in _written_arguments(node)}
        for argument in node.all_input_nodes:
            base = _base(argument)
            if base is not None and base.name in keys and id(argument) not in written:
                read.add(keys[base.name])
    return read


def scratch_buffers(
    captured: torch.export.ExportedProgram, functional: torch.export.ExportedProgram
) -> frozenset[str]:
    """The written buffers that forward rewrites whole and then reads, never reading the
    value it was given: a rotary embedding's ``inv_freq`` of two scalings (LongRoPE),
    chosen from the positions by ``torch.where`` and copied in at every call. In the
    functional program every read after the write takes the new value, so the buffer's
    placeholder has no user; in the captured one, a node reads the buffer after the write. Not keeping the update changes no output:
    the next run computes it again. A buffer only written (state for the caller to read,
    ``self.last.copy_(y)``) is none of them."""
    buffers = functional.graph_signature.inputs_to_buffers
    unread = {
        buffers[node.name]
        for node in functional.graph.nodes
        if node.op == "placeholder" and node.name in buffers and not node.users
    }
    return frozenset(unread & _read_in(captured)) if unread else frozenset()
