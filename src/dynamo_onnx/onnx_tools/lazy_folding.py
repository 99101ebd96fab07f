"""Constants the optimizer folds from lazy weights, kept lazy: the folded value is the
node's computation re-applied to its inputs each time it is read.

onnxscript's constant folding evaluates a node whose inputs are all constants and stores
the result as a new initializer (an ``ir.Tensor`` of the values it computed). On a model
whose weights are lazy reads of a checkpoint (``io.streamed_weights``), a small weight's
computation is folded so: an RMS norm that scales by ``1 + weight``, attention sinks
reshaped once per layer. The folded tensor then holds the values of the weights read at export,
and nothing says which weights they came from; a model whose layers are repeated from a
template's (``onnx_tools.layer_repeat``) could not give a repeated layer its own.

:class:`LazyFoldConstantsPass` is onnxscript's pass with one change: a folded value computed
from a lazy input is a :class:`FoldedTensor`, a lazy tensor that evaluates the same node
(the ONNX reference implementation of its operator, which the folding itself calls, with
the same attributes) on its inputs when read. Its bytes are those the folding computed,
and a repeated layer evaluates it with its reads redirected to its own weights
(the family's layer template), as it does the weights themselves. Keeping
the computation out of the folding instead would leave a node the whole model's export
does not have (its graph and data file are the reference), so the folding is kept and
only its result's provenance is.

A folded value's inputs are small (the optimizer folds no node reading a weight over
``optimizer_pipeline._WEIGHT_BYTES``), so evaluating it again when it is read costs little.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import onnx.reference.ops
import onnx_ir as ir

from dynamo_onnx.onnx_tools.graph_signatures import digest, tensor_key

__all__ = ["FoldedTensor", "folded_key", "folded_leaves", "lazy_folding_pass", "refolded"]


class FoldedTensor(ir.LazyTensor):
    """A constant folded from lazy inputs: ``op`` (domain, type, opset version and its
    attributes as the reference implementation takes them) applied to ``inputs`` (the
    tensors the folded node read, lazy or not) when its data is read."""

    __slots__ = ("attributes", "inputs", "op")

    def __init__(
        self,
        op: tuple[str, str, int],
        attributes: dict[str, Any],
        inputs: Sequence[ir.TensorProtocol | None],
        like: ir.TensorProtocol,
    ) -> None:
        self.op, self.attributes, self.inputs = op, attributes, tuple(inputs)
        name = like.name
        super().__init__(
            lambda: ir.tensor(self.evaluated(), name=name),
            dtype=like.dtype,
            shape=like.shape,
            name=name,
        )

    def evaluated(self) -> np.ndarray:
        """The node's output on its inputs' values now (as the folding computed it)."""
        domain, op_type, version = self.op
        arrays = [None if t is None else _array(t) for t in self.inputs]
        implementation = onnx.reference.ops.load_op(domain, op_type, version)
        return np.asarray(implementation.eval(*arrays, **self.attributes))


def _array(tensor: ir.TensorProtocol) -> np.ndarray:
    """``tensor``'s values as the folding reads an input (``_get_numpy_value``)."""
    array = tensor.numpy()
    if tensor.dtype != ir.DataType.STRING:
        array = array.view(tensor.dtype.numpy())
    return array


def _is_lazy(tensor: ir.TensorProtocol | None) -> bool:
    return isinstance(tensor, ir.LazyTensor) and not tensor.cache


def _attribute(attr: ir.Attr) -> Any:
    """An attribute as the folding passes it to the reference implementation."""
    if attr.type == ir.AttributeType.TENSOR:
        return ir.serde.serialize_tensor(attr.value)
    return attr.value


def folded_leaves(tensor: ir.TensorProtocol) -> Iterator[ir.TensorProtocol]:
    """The lazy tensors a folded ``tensor`` is computed from (``tensor`` itself when it is
    no folded value)."""
    if not isinstance(tensor, FoldedTensor):
        yield tensor
        return
    for source in tensor.inputs:
        if isinstance(source, FoldedTensor):
            yield from folded_leaves(source)
        elif _is_lazy(source):
            yield source  # type: ignore[misc]


def folded_key(tensor: ir.TensorProtocol, leaf: Callable[[str], str]) -> str:
    """What a folded ``tensor`` computes, the names of its lazy leaves read by ``leaf``
    (a repeated layer's name as its template layer's): two layers' folded values that
    compute alike from their own weights have one key."""
    if not isinstance(tensor, FoldedTensor):
        return leaf(tensor.name or "") if _is_lazy(tensor) else digest(tensor_key(tensor))
    inputs = tuple("" if t is None else folded_key(t, leaf) for t in tensor.inputs)
    attributes = tuple(sorted((k, repr(v)) for k, v in tensor.attributes.items()))
    return digest("folded", tensor.op, attributes, inputs)


def lazy_folding_pass(base: type[ir.passes.InPlacePass]) -> type[ir.passes.InPlacePass]:
    """onnxscript's ``FoldConstantsPass`` (``base``) whose folded initializers computed from
    a lazy input are :class:`FoldedTensor`\\ s."""

    class LazyFoldConstantsPass(base):  # type: ignore[valid-type,misc]
        def new_initializer(self, node: ir.Node, array: Any) -> ir.Value | None:
            value = super().new_initializer(node, array)
            inputs = [None if v is None else v.const_value for v in node.inputs]
            if value is None or value.const_value is None or not any(map(_is_lazy, inputs)):
                return value
            graph = node.graph
            version = node.version
            if version is None and graph is not None:
                version = graph.opset_imports.get(node.domain)
            if version is None:
                return value
            attributes = {name: _attribute(a) for name, a in node.attributes.items()}
            value.const_value = FoldedTensor(
                (node.domain, node.op_type, version), attributes, inputs, value.const_value
            )
            return value

    LazyFoldConstantsPass.__name__ = base.__name__
    return LazyFoldConstantsPass


def refolded(
    tensor: ir.TensorProtocol, replace: Callable[[ir.TensorProtocol], ir.TensorProtocol]
) -> ir.TensorProtocol:
    """A folded ``tensor`` computed as it is from other leaves: each lazy leaf replaced by
    ``replace(leaf)`` (a layer's weights by another layer's, given by value)."""
    if not isinstance(tensor, FoldedTensor):
        return replace(tensor) if _is_lazy(tensor) else tensor
    inputs = [None if t is None else refolded(t, replace) for t in tensor.inputs]
    return FoldedTensor(tensor.op, tensor.attributes, inputs, tensor)
