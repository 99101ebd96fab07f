"""GraphBuilder: one ONNX graph being built from FX nodes.

It owns what a scope needs (the ONNX value of every FX node in scope, the cache of shared
constants, the prefix of node and value names) and is the public interface helpers use to
add to a graph: control-flow subgraphs and per-node fallbacks build through it, never
through the translator's internals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Union

import onnx_ir as ir
import torch
import torch.fx

from dynamo_onnx.passes.translate.recorder import ConstantCache
from dynamo_onnx.passes.translate.values import set_type_and_shape
from dynamo_onnx.tensors import onnx_dtype, torch_tensor_to_ir

__all__ = ["Bound", "GraphBuilder", "Subgraph"]


def _owned(value: ir.Value, meta: Any, nodes: list[ir.Node], taken: list[ir.Value]) -> ir.Value:
    """``value`` if one of ``nodes`` computes it (and no earlier output of the FX node is it,
    ``taken``), else a new node's copy of it (appended to ``nodes``).

    A torch_lib function may hand back a value it did not compute: its input unchanged
    (``logsumexp`` of a 0-d tensor returns ``self``), or an earlier node's result. Naming
    and typing that value as this FX node's result would rename and retype the graph input
    or the earlier result, so the node gets its own value: an ``Identity``, or a ``Cast``
    when torch's result has another dtype (``logsumexp`` of an int64 scalar is float32).
    """
    if value is None:
        return value
    producer = value.producer()
    if producer is not None and any(producer is n for n in nodes) and value not in taken:
        taken.append(value)
        return value
    wanted: ir.DataType | None = None
    if isinstance(meta, torch.Tensor) and not meta.dtype.is_complex:
        wanted = onnx_dtype(meta.dtype)  # complex values travel as float pairs: no cast
    elif isinstance(meta, (bool, torch.SymBool)):
        wanted = ir.DataType.BOOL
    elif isinstance(meta, (int, torch.SymInt)):
        wanted = ir.DataType.INT64
    if wanted is not None and value.dtype is not None and value.dtype != wanted:
        copy = ir.Node("", "Cast", [value], [ir.AttrInt64("to", wanted.value)], num_outputs=1)
    else:
        copy = ir.Node("", "Identity", [value], num_outputs=1)
    nodes.append(copy)
    return copy.outputs[0]


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """A ``get_attr`` node that names an FX sub-module (a branch or a loop body)."""

    name: str
    module: torch.fx.GraphModule


#: What an FX node stands for in ONNX: a value, several (a tuple result), or a sub-module.
Bound = Union[ir.Value, tuple[ir.Value, ...], Subgraph]


class GraphBuilder:
    """Builds one ONNX graph (the main graph or a subgraph) of ``model``.

    Args:
        model: the model the graph belongs to (ONNX functions the nodes call go there).
        graph: the graph nodes are added to.
        prefix: put before every node and value name made here, so that a decomposed
            node's or a subgraph's names never collide with the outer graph's.
        constants: the cache of ``Constant`` values shared by the nodes of this graph.
    """

    def __init__(
        self,
        model: ir.Model,
        graph: ir.Graph,
        prefix: str = "",
        constants: ConstantCache | None = None,
    ) -> None:
        self.model = model
        self.graph = graph
        self.prefix = prefix
        self.constants: ConstantCache = constants if constants is not None else {}
        self._values: dict[str, Bound] = {}

    # -- scopes ------------------------------------------------------------------------

    def scope(self, prefix: str, graph: ir.Graph | None = None) -> GraphBuilder:
        """A builder for a nested scope: a decomposed node's nodes (same graph) or a
        control-flow subgraph (``graph``). Constants made for the outer graph are visible
        inside, but constants made in a subgraph must stay in it, so its cache is a copy."""
        target = graph if graph is not None else self.graph
        constants = self.constants if target is self.graph else dict(self.constants)
        return GraphBuilder(self.model, target, prefix, constants)

    # -- values ------------------------------------------------------------------------

    def bind(self, name: str, value: Bound) -> None:
        """Make ``value`` what the FX node ``name`` stands for in this scope."""
        self._values[name] = value

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __getitem__(self, name: str) -> Bound:
        return self._values[name]

    def value(self, name: str) -> ir.Value:
        """The single ONNX value of an FX node."""
        bound = self._values[name]
        if not isinstance(bound, ir.Value):
            raise TypeError(f"FX node {name!r} stands for {type(bound).__name__}, not one value")
        return bound

    def convert(self, arg: Any) -> Any:
        """An FX argument as onnxscript expects it: values for nodes, ints for dtypes."""
        if isinstance(arg, torch.fx.Node):
            return self._values[arg.name]
        if isinstance(arg, (list, tuple)):
            return [self.convert(a) for a in arg]
        if isinstance(arg, torch.dtype):
            return onnx_dtype(arg)
        if isinstance(arg, (torch.device, torch.memory_format, torch.layout)):
            return str(arg)
        return arg

    def scalar(self, name: str, number: bool | int | float) -> ir.Value:
        """A Python number as a 0-d tensor (bool, int64 or float32), as SymBool, SymInt
        and SymFloat values are in ONNX: a ``Constant`` node in this graph."""
        kind = type(number)
        dtype = {bool: ir.DataType.BOOL, int: ir.DataType.INT64}.get(kind, ir.DataType.FLOAT)
        tensor = ir.tensor(number, dtype=dtype)
        node = ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], num_outputs=1)
        node.name = node.outputs[0].name = f"{self.prefix}{name}"
        node.outputs[0].dtype, node.outputs[0].shape = dtype, ir.Shape([])
        self.graph.append(node)
        return node.outputs[0]

    def new_value(self, name: str, meta: Any) -> ir.Value:
        """A value typed from an FX ``meta["val"]``, named in this scope."""
        value = ir.Value(name=f"{self.prefix}{name}")
        set_type_and_shape(value, meta)
        return value

    def add_initializer(
        self, name: str, tensor: torch.Tensor, value: ir.Value | None = None
    ) -> ir.Value:
        """A weight or constant tensor of the graph, without copying its data; ``value``
        (a placeholder's, already used by nodes) becomes the initializer if given."""
        value = value if value is not None else ir.Value()
        value.name = name
        value.const_value = torch_tensor_to_ir(tensor, name)
        set_type_and_shape(value, tensor)
        self.graph.initializers[name] = value
        return value

    def stand_in(self, node: torch.fx.Node) -> None:
        """Typed stand-in values for a node that could not be translated, so that later
        nodes can still be translated and checked (translation collects every problem)."""
        meta = node.meta.get("val")
        if isinstance(meta, (list, tuple)):
            self.bind(
                node.name, tuple(self.new_value(f"{node.name}__{i}", m) for i, m in enumerate(meta))
            )
        else:
            self.bind(node.name, self.new_value(node.name, meta))

    # -- nodes -------------------------------------------------------------------------

    def adopt(
        self,
        node: torch.fx.Node,
        outputs: Any,
        nodes: Sequence[ir.Node],
        props: Mapping[str, str],
        functions: Mapping[ir.OperatorIdentifier, Any] | None = None,
    ) -> None:
        """Add the ONNX nodes translated from ``node``: name and type its outputs, tag every
        node with its origin (``props``), and add the functions they call to the model."""
        meta = node.meta.get("val")
        nodes = list(nodes)
        if isinstance(outputs, Sequence) and not isinstance(outputs, ir.Value):
            metas = meta if isinstance(meta, (list, tuple)) else [meta] * len(outputs)
            taken: list[ir.Value] = []
            outputs = tuple(_owned(v, m, nodes, taken) for v, m in zip(outputs, metas))
        else:
            outputs = _owned(outputs, meta, nodes, [])
        if isinstance(outputs, tuple):
            metas = meta if isinstance(meta, (list, tuple)) else [meta] * len(outputs)
            for i, (value, m) in enumerate(zip(outputs, metas)):
                value.name = f"{self.prefix}{node.name}__{i}"
                set_type_and_shape(value, m)
        else:
            outputs.name = f"{self.prefix}{node.name}"
            if not isinstance(meta, (list, tuple)):
                set_type_and_shape(outputs, meta)
        self.bind(node.name, outputs)
        for i, onnx_node in enumerate(nodes):
            onnx_node.name = f"{self.prefix}{node.name}_n{i}"
            onnx_node.metadata_props.update(props)
        self.graph.extend(nodes)
        for identifier, function in (functions or {}).items():
            if identifier not in self.model.functions:
                self.model.functions[identifier] = ir.serde.deserialize_function(
                    function.to_function_proto()
                )

    def emit(
        self,
        node: torch.fx.Node,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: Sequence[ir.Attr],
        props: Mapping[str, str],
    ) -> None:
        """One ONNX node standing for ``node`` (as many outputs as the FX node has)."""
        meta = node.meta.get("val")
        count = len(meta) if isinstance(meta, (list, tuple)) else 1
        onnx_node = ir.Node("", op_type, inputs, attributes, num_outputs=count)
        outputs: Any = (
            tuple(onnx_node.outputs) if isinstance(meta, (list, tuple)) else onnx_node.outputs[0]
        )
        self.adopt(node, outputs, [onnx_node], props)

    def set_outputs(self, values: Sequence[ir.Value]) -> None:
        """Make ``values`` the outputs of this (sub)graph.

        ONNX wants outputs produced inside their graph: a result computed outside (an
        operand of a ``cond`` inside a branch, a weight) goes through an ``Identity``. Inputs used as
        outputs and repeated outputs are onnx_ir's ``OutputFixPass``'s job (finalize).
        """
        outputs: list[ir.Value] = []
        for i, value in enumerate(values):
            producer = value.producer()
            outside = value.const_value is not None or value.is_initializer()
            if producer is not None:
                outside = producer.graph is not self.graph
            if outside:
                identity = ir.Node(
                    "", "Identity", [value], num_outputs=1, name=f"{self.prefix}out{i}"
                )
                identity.outputs[0].name = f"{self.prefix}out{i}"
                identity.outputs[0].dtype, identity.outputs[0].shape = value.dtype, value.shape
                self.graph.append(identity)
                value = identity.outputs[0]
            outputs.append(value)
        self.graph.outputs.extend(outputs)
