"""Opset-18 nodes rewritten as nodes an older opset has, where ONNX's converter cannot.

Translation writes opset 18; NPU and embedded toolchains still ask for 11 to 17, and
ONNX's version converter has no adapter down for operators that older opsets lack
(``HardSwish`` is 14, ``LayerNormalization`` 17) nor for ``Reshape``'s ``allowzero`` (14).
Each lowering here is an onnx_ir pass that rewrites such nodes, on the opset-18 model,
into opset-18 nodes the converter (or :mod:`older_opsets`'s carry-over) takes down to the
target: the same values, for every input the original accepts. The opset conversion runs
:func:`lowerings_for` before converting.
"""

from __future__ import annotations

import onnx_ir as ir

from dynamo_onnx.onnx_tools.older_opsets import inferred_types, split_sizes_as_input

__all__ = [
    "CastLikeLowering",
    "ConstantValueLowering",
    "HardSwishLowering",
    "LayerNormLowering",
    "MishLowering",
    "ReshapeAllowZeroLowering",
    "ResizeLowering",
    "SplitLowering",
    "TriluLowering",
    "lowerings_for",
]


def _nodes(model: ir.Model, op_type: str) -> list[ir.Node]:
    """The default domain's ``op_type`` nodes of the model, its functions and subgraphs."""
    return [
        node
        for graph in [model.graph, *model.functions.values()]
        for node in ir.traversal.RecursiveGraphIterator(graph)
        if node.op_type == op_type and node.domain in ("", "ai.onnx")
    ]


def _attr(node: ir.Node, name: str, default: object = None) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _splice(node: ir.Node, tape: ir.tape.Tape, results: list[ir.Value | None]) -> None:
    """Replace ``node`` by the tape's nodes, its outputs by ``results`` (None: unused)."""
    graph = node.graph
    assert graph is not None
    for new in tape.nodes:
        new.metadata_props.update(node.metadata_props)
    old, new_values = [], []
    for output, result in zip(node.outputs, results):
        if result is None:
            continue
        result.name, result.shape = output.name, output.shape
        result.type = output.type
        old.append(output)
        new_values.append(result)
    ir.convenience.replace_nodes_and_values(graph, node, [node], tape.nodes, old, new_values)


def _constant(tape: ir.tape.Tape, tensor: ir.TensorProtocol) -> ir.Value:
    return tape.op("Constant", [], attributes={"value": tensor})


class _Lowering(ir.passes.InPlacePass):
    """A lowering of one operator for models converted to ``target``."""

    #: the operator it rewrites, and the opset from which the target has it as it is
    op_type: str = ""
    needed_below: int = 18

    def __init__(self, target: int) -> None:
        super().__init__()
        self.target = target

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if self.target < self.needed_below:
            for node in _nodes(model, self.op_type):
                modified = self.lower(node) or modified
        return ir.passes.PassResult(model, modified=modified)

    def lower(self, node: ir.Node) -> bool:
        """Rewrite ``node``; False when it is left as it is (the conversion names it)."""
        raise NotImplementedError


class HardSwishLowering(_Lowering):
    """``HardSwish(x)`` (14) is ``x * HardSigmoid(x, alpha=1/6, beta=1/2)`` (6):
    MobileNetV3's activation."""

    op_type, needed_below = "HardSwish", 14

    def lower(self, node: ir.Node) -> bool:
        tape = ir.tape.Tape()
        x = node.inputs[0]
        gate = tape.op("HardSigmoid", [x], attributes={"alpha": 1.0 / 6.0, "beta": 0.5})
        _splice(node, tape, [tape.op("Mul", [x, gate])])
        return True


class LayerNormLowering(_Lowering):
    """``LayerNormalization`` (17) as its definition: the mean and variance over the axes
    from ``axis`` on, in float32 for smaller types (``stash_type=1``), scaled and shifted.
    Its optional ``Mean`` and ``InvStdDev`` outputs are the intermediate values. Needs the
    input's rank (a model of torch's always has it)."""

    op_type, needed_below = "LayerNormalization", 17

    def lower(self, node: ir.Node) -> bool:
        x, scale = node.inputs[0], node.inputs[1]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        if x is None or x.shape is None or x.dtype is None or scale is None:
            return False
        rank = len(x.shape)
        axis = int(_attr(node, "axis", -1))  # type: ignore[arg-type]
        axes = list(range(axis % rank, rank))
        epsilon = float(_attr(node, "epsilon", 1e-5))  # type: ignore[arg-type]
        stash = ir.DataType(int(_attr(node, "stash_type", 1)))  # type: ignore[arg-type]
        tape = ir.tape.Tape()
        cast = x.dtype != stash
        data = tape.op("Cast", [x], attributes={"to": int(stash)}) if cast else x
        axes_value = _constant(tape, ir.tensor(axes, dtype=ir.DataType.INT64))
        mean = tape.op("ReduceMean", [data, axes_value], attributes={"keepdims": 1})
        centered = tape.op("Sub", [data, mean])
        squares = tape.op("Mul", [centered, centered])
        variance = tape.op("ReduceMean", [squares, axes_value], attributes={"keepdims": 1})
        eps = _constant(tape, ir.tensor(epsilon, dtype=stash))
        inverse = tape.op("Reciprocal", [tape.op("Sqrt", [tape.op("Add", [variance, eps])])])
        normed = tape.op("Mul", [centered, inverse])
        if cast:
            normed = tape.op("Cast", [normed], attributes={"to": int(x.dtype)})
        result = tape.op("Mul", [normed, scale])
        if bias is not None:
            result = tape.op("Add", [result, bias])
        extra = [mean, inverse][: max(len(node.outputs) - 1, 0)]
        _splice(node, tape, [result, *extra])
        return True


class ReshapeAllowZeroLowering(_Lowering):
    """``Reshape(allowzero=1)`` (14) to a shape computed at run time: torch's reshape keeps
    a 0 as a size, which an older ``Reshape`` reads as "the input's size there".

    Where the output's size at a position is a number other than 0, or the input's own
    size at that position (the same symbol: the batch of ``flatten(x, 1)``), both readings
    agree, and ``allowzero`` is dropped. Elsewhere the node becomes an ``If``: a shape with
    a 0 (an empty input) gives the empty tensor of that shape (``ConstantOfShape``), any
    other the ``Reshape`` as it was.
    """

    op_type, needed_below = "Reshape", 14

    def lower(self, node: ir.Node) -> bool:
        if _attr(node, "allowzero", 0) != 1:
            return False
        shape = node.inputs[1]
        known = ir.convenience.get_const_tensor(shape) if shape is not None else None
        if known is not None and 0 in known.numpy().reshape(-1).tolist():
            return False  # a literal 0 in a constant shape: the conversion names it
        if known is not None or _zero_reads_the_same(node):
            del node.attributes["allowzero"]
            return True
        return self._as_if(node)

    @staticmethod
    def _as_if(node: ir.Node) -> bool:
        data, shape, out = node.inputs[0], node.inputs[1], node.outputs[0]
        if data is None or shape is None or data.dtype is None:
            return False
        tape = ir.tape.Tape()
        zero = _constant(tape, ir.tensor(0, dtype=ir.DataType.INT64))
        zeros = tape.op(
            "Cast", [tape.op("Equal", [shape, zero])], attributes={"to": int(ir.DataType.INT64)}
        )
        any_zero = tape.op("ReduceMax", [zeros], attributes={"keepdims": 0})
        condition = tape.op("Cast", [any_zero], attributes={"to": int(ir.DataType.BOOL)})
        empty = ir.tape.Tape()
        filled = empty.op("ConstantOfShape", [shape])
        empty_out = empty.op("Cast", [filled], attributes={"to": int(data.dtype)})
        whole = ir.tape.Tape()
        whole_out = whole.op("Reshape", [data, shape])
        for value in (empty_out, whole_out):
            value.dtype, value.shape = out.dtype, out.shape
        branches = {
            "then_branch": ir.Graph([], [empty_out], nodes=empty.nodes, name="empty"),
            "else_branch": ir.Graph([], [whole_out], nodes=whole.nodes, name="reshaped"),
        }
        result = tape.op("If", [condition], attributes=branches)
        _splice(node, tape, [result])
        return True


def _zero_reads_the_same(node: ir.Node) -> bool:
    """Whether, at every position, the output's size is 0 only where the input's is 0
    too (by torch's sizes: a number other than 0, or a product of sizes each also a factor
    of the input's size there, as ``2*b`` from ``b``): a 0 then means the same with or
    without ``allowzero``."""
    data, out = node.inputs[0], node.outputs[0]
    if data is None or data.shape is None or out.shape is None:
        return False
    for index, size in enumerate(out.shape):
        if isinstance(size, int):
            if size == 0:
                return False
            continue
        factors = _factors(size)
        there = data.shape[index] if index < len(data.shape) else None
        if factors is None or there is None or isinstance(there, int):
            return False
        input_factors = _factors(there)
        if input_factors is None or not factors <= input_factors:
            return False
    return True


def _factors(size: ir.SymbolicDim) -> set[str] | None:
    """The sizes whose product (with numbers other than 0) a symbolic size is, or None
    when it is more than a product (``b+1``, ``b//2``) or unknown."""
    if size.value is None:
        return None
    parts = [part.strip() for part in size.value.split("*")]
    if not all(part.isidentifier() or (part.isdigit() and int(part) > 0) for part in parts):
        return None
    return {part for part in parts if part.isidentifier()}


class TriluLowering(_Lowering):
    """``Trilu`` (14; ``torch.triu``/``tril``, causal masks) as a ``Where`` on the
    comparison of each element's column minus its row with ``k``, sizes read at run time."""

    op_type, needed_below = "Trilu", 14

    def lower(self, node: ir.Node) -> bool:
        x = node.inputs[0]
        if x is None or x.dtype is None:
            return False
        k = node.inputs[1] if len(node.inputs) > 1 else None
        tape = ir.tape.Tape()
        int64 = ir.DataType.INT64
        shape = tape.op("Shape", [x])
        zero, one = (_constant(tape, ir.tensor(v, dtype=int64)) for v in (0, 1))
        sizes = [
            tape.op("Gather", [shape, _constant(tape, ir.tensor(i, dtype=int64))]) for i in (-2, -1)
        ]
        rows = tape.op("Range", [zero, sizes[0], one])
        column = _constant(tape, ir.tensor([-1, 1], dtype=int64))
        columns = tape.op("Range", [zero, sizes[1], one])
        offset = tape.op("Sub", [columns, tape.op("Reshape", [rows, column])])
        k = k if k is not None else zero
        upper = _attr(node, "upper", 1) == 1
        dropped = tape.op("Less" if upper else "Greater", [offset, k])
        if x.dtype == ir.DataType.BOOL:  # (ONNX Runtime's Where takes bool from 16)
            result = tape.op("And", [x, tape.op("Not", [dropped])])
        else:
            fill = _constant(tape, ir.tensor(0, dtype=x.dtype))
            result = tape.op("Where", [dropped, fill, x])
        _splice(node, tape, [result])
        return True


class MishLowering(_Lowering):
    """``Mish(x)`` (18) is ``x * tanh(softplus(x))`` (1, 6)."""

    op_type, needed_below = "Mish", 18

    def lower(self, node: ir.Node) -> bool:
        tape = ir.tape.Tape()
        x = node.inputs[0]
        gate = tape.op("Tanh", [tape.op("Softplus", [x])])
        _splice(node, tape, [tape.op("Mul", [x, gate])])
        return True


#: ONNX's names of tensor types (``tensor(float)``) -> their data types.
_DTYPES = {f"tensor({dtype.name.lower()})": dtype for dtype in ir.DataType}


class CastLikeLowering(_Lowering):
    """``CastLike(x, like)`` (15) is ``Cast(x, to=<like's type>)`` when that type is known
    (torch_lib writes it for its constants)."""

    op_type, needed_below = "CastLike", 15

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # the types ONNX's inference finds, for values translation left untyped: only for a
        # target that lowers (the inference serializes the whole graph, weights aside)
        lowers = self.target < self.needed_below and _nodes(model, self.op_type)
        self.types = inferred_types(model) if lowers else {}
        return super().call(model)

    def lower(self, node: ir.Node) -> bool:
        like = node.inputs[1]
        dtype = like.dtype if like is not None else None
        dtype = dtype if dtype is not None else node.outputs[0].dtype  # (like's type)
        if dtype is None and like is not None:
            dtype = _DTYPES.get(self.types.get(str(like.name), ""))
        if dtype is None:
            return False
        tape = ir.tape.Tape()
        _splice(node, tape, [tape.op("Cast", [node.inputs[0]], attributes={"to": int(dtype)})])
        return True


class SplitLowering(_Lowering):
    """``Split(num_outputs=n)`` (18) on an axis of static size: the sizes as the input
    (13), which the conversion carries over (``chunk`` on channels)."""

    op_type, needed_below = "Split", 18

    def lower(self, node: ir.Node) -> bool:
        if "num_outputs" not in node.attributes:
            return False
        split_sizes_as_input(node)
        return "num_outputs" not in node.attributes


class ResizeLowering(_Lowering):
    """``Resize`` (18, 13) without its optional ``roi`` or ``scales`` gets them empty, as
    its opset-11 version requires them; with no opset-18 attribute away from its default,
    the node then reads the same from 11 and is carried over."""

    op_type, needed_below = "Resize", 13

    def lower(self, node: ir.Node) -> bool:
        inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
        if inputs[1] is not None and inputs[2] is not None:
            return False
        tape = ir.tape.Tape()
        for index in (1, 2):
            if inputs[index] is None:
                inputs[index] = _constant(tape, ir.tensor([], dtype=ir.DataType.FLOAT))
        graph = node.graph
        assert graph is not None
        for new in tape.nodes:
            new.metadata_props.update(node.metadata_props)
        graph.insert_before(node, tape.nodes)
        if inputs[3] is None:
            inputs = inputs[:3]
        node.resize_inputs(len(inputs))
        for index, value in enumerate(inputs):
            node.replace_input_with(index, value)
        return True


class ConstantValueLowering(_Lowering):
    """``Constant(value_int(s)=...)`` and the other typed attributes (12) as a ``value``
    tensor (9): what torch_lib writes for small integer vectors."""

    op_type, needed_below = "Constant", 12

    _TYPED = {
        "value_int": ir.DataType.INT64,
        "value_ints": ir.DataType.INT64,
        "value_float": ir.DataType.FLOAT,
        "value_floats": ir.DataType.FLOAT,
    }

    def lower(self, node: ir.Node) -> bool:
        (name,) = node.attributes.keys() if len(node.attributes) == 1 else (None,)
        if name not in self._TYPED:
            return False
        value = node.attributes.pop(name).value
        node.attributes["value"] = ir.AttrTensor(
            "value", ir.tensor(value, dtype=self._TYPED[name], name=node.outputs[0].name)
        )
        return True


#: The lowerings in the order they run (a lowering may write nodes a later one lowers).
_LOWERINGS: tuple[type[_Lowering], ...] = (
    HardSwishLowering,
    LayerNormLowering,
    ReshapeAllowZeroLowering,
    TriluLowering,
    MishLowering,
    CastLikeLowering,
    SplitLowering,
    ResizeLowering,
    ConstantValueLowering,
)


def lowerings_for(target: int) -> ir.passes.Sequential:
    """Every lowering for a model converted to ``target``, as one onnx_ir pass."""
    return ir.passes.Sequential(*(lowering(target) for lowering in _LOWERINGS))
