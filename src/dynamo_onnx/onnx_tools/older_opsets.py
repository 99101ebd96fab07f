"""Opset-18 nodes in a model of an older opset: attributes taken out, nodes carried over.

ONNX's version converter leaves some attributes on the nodes it converts down, and
onnxscript's optimizer writes ``Split(num_outputs=...)`` whatever the model's opset: both
the opset conversion and the optimization passes call :func:`drop_newer_attributes` after
them. The converter also has no adapter down from 18 for some operators whose opset-18 form,
as torch_lib writes it, means what the older one does: :func:`hidden_from_converter` carries
those over unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import onnx
import onnx_ir as ir

from dynamo_onnx.onnx_tools.loading import weights_as_inputs

__all__ = [
    "carried_over",
    "drop_newer_attributes",
    "hidden_from_converter",
    "inferred_types",
    "split_sizes_as_input",
]

#: A domain the version converter leaves alone, for the nodes it must not look at.
_HIDDEN = "dynamo_onnx.hidden"


#: Reductions that took ``noop_with_empty_axes`` with their axes input in opset 18.
_REDUCTIONS_18 = frozenset(
    {
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSumSquare",
    }
)


def drop_newer_attributes(model: ir.Model, target: int) -> None:
    """Attributes of opset 18 that the converter leaves, or the optimizer writes, on the
    nodes of a model of an older opset ``target``, which ONNX Runtime rejects
    ("Unrecognized attribute").

    A reduction's ``noop_with_empty_axes`` (the converter moves the axes back to an
    attribute but keeps it; ``ReduceSum`` took it in 13, the others in 18): at its default
    (0) it says nothing and is dropped (at 1 it is kept: the checker then names the node).
    ``Reshape``'s ``allowzero`` and ``BatchNormalization``'s ``training_mode`` (14) where
    they change nothing; below 13, ``Split``'s constant sizes input as its attribute. ``Split``'s ``num_outputs`` (an attention that
    splits its fused projection in three): the sizes become the ``split`` input when the
    axis is static; on a dynamic axis the attribute goes, and ``Split`` without sizes
    makes as many equal parts as it has outputs, as ``num_outputs`` did for a divisible
    size.
    """
    if target >= 18:
        return
    graphs = [model.graph, *model.functions.values()]
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in _REDUCTIONS_18 or (target < 13 and node.op_type == "ReduceSum"):
                attr = node.attributes.get("noop_with_empty_axes")
                if attr is not None and attr.value == 0:
                    del node.attributes["noop_with_empty_axes"]
            elif node.op_type == "Split" and "num_outputs" in node.attributes:
                split_sizes_as_input(node)
            if target < 13 and node.op_type == "Split" and len(node.inputs) > 1:
                _split_sizes_as_attribute(node)
            elif target < 14 and node.op_type == "Reshape" and "allowzero" in node.attributes:
                if _attr(node, "allowzero") == 0 or _no_zero_in_shape(node):
                    del node.attributes["allowzero"]  # (added in 14; the same without it)
            elif node.op_type == "Resize":
                for name, default in _RESIZE_18.items():  # (at their defaults: carried)
                    if name in node.attributes and _attr(node, name) == default:
                        del node.attributes[name]
            elif target < 14 and node.op_type == "BatchNormalization":
                if _attr(node, "training_mode") == 0:
                    del node.attributes["training_mode"]  # (added in 14; 0 is inference)


def _attr(node: ir.Node, name: str, default: object = None) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


#: Operator -> (the oldest opset whose version reads the opset-18 node the same, what the
#: node must be for that): ``Pad`` took its pads as an input from 11 (18 added ``axes``),
#: ``Split`` its sizes from 13 (18 added ``num_outputs``), ``Reshape`` is the same from 5
#: but for 14's ``allowzero``, ``Shape`` from 1 but for 15's ``start``/``end``, ``Constant``
#: from 9 with a ``value``, an inference ``BatchNormalization`` from 9 (14 added
#: ``training_mode``, 15 only types), ``GatherND`` from 12 (13 only types).
_SAME_SINCE: dict[str, tuple[int, Callable[[ir.Node], bool]]] = {
    "Pad": (11, lambda n: len(n.inputs) < 4 or n.inputs[3] is None),
    "Split": (13, lambda n: "num_outputs" not in n.attributes),
    "LpPool": (11, lambda n: _attr(n, "ceil_mode", 0) == 0),
    "Reshape": (5, lambda n: _attr(n, "allowzero", 0) == 0 or _no_zero_in_shape(n)),
    "Shape": (1, lambda n: "start" not in n.attributes and "end" not in n.attributes),
    "Constant": (9, lambda n: set(n.attributes) == {"value"}),
    "BatchNormalization": (9, lambda n: _attr(n, "training_mode", 0) == 0 and len(n.outputs) == 1),
    "GatherND": (12, lambda n: True),
    # 13 and 16 only took more types (bfloat16, optionals); 11 let the branches' shapes differ
    "If": (11, lambda n: True),
    # 13 made roi and scales optional, 18 added antialias, axes, keep_aspect_ratio_policy
    "Resize": (11, lambda n: _resize_as_11(n)),
}

#: Operators whose versions from the given opset to 18 only took more types (bfloat16, small
#: integers, optionals) or reworded their documentation (ONNX's Changelog.md): their
#: opset-18 node reads the same at any opset from there, when its types are ones that
#: opset takes. ONNX's converter has no adapter down for most of them ("No Adapter From
#: Version 14 for Mul"). Left out on purpose: the versions that changed what a node means
#: with the same inputs and attributes (Softmax 13, Gather's and Concat's negative indices
#: and axes before 11, Max/Min's broadcasting before 8, PRelu's before 9).
_TYPES_ONLY_SINCE = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Pow"), 7),
    **dict.fromkeys(("Abs", "Ceil", "Exp", "Floor", "Log", "Neg", "Reciprocal"), 6),
    **dict.fromkeys(("Relu", "Sigmoid", "Sqrt", "Tanh", "LeakyRelu", "Tile"), 6),
    **dict.fromkeys(("Less", "Greater", "Where", "Erf", "IsNaN", "Sign", "MatMul"), 9),
    **dict.fromkeys(("Equal", "Gemm", "Clip", "Concat", "Gather", "Flatten", "Slice"), 11),
    **dict.fromkeys(("CumSum", "GatherElements", "Cast", "Expand", "Sum", "Range"), 11),
    **dict.fromkeys(("ConstantOfShape",), 9),
    **dict.fromkeys(("LessOrEqual", "GreaterOrEqual", "Max", "Min"), 12),
    **dict.fromkeys(("Transpose", "Identity", "Size", "Not", "And", "Or"), 7),
}


#: Resize's attributes of 18 and their defaults, which a node read at 11 must leave so.
_RESIZE_18 = {"antialias": 0, "axes": None, "keep_aspect_ratio_policy": "stretch"}


def _resize_as_11(node: ir.Node) -> bool:
    """A ``Resize`` with its roi and scales given (11 requires them, empty or not) and the
    attributes of 18 at their defaults (ONNX Runtime takes none of them below 18)."""
    given = len(node.inputs) >= 3 and node.inputs[1] is not None and node.inputs[2] is not None
    mode = _attr(node, "coordinate_transformation_mode", "half_pixel")
    return (
        given
        and mode != "half_pixel_symmetric"
        and all(_attr(node, name, default) == default for name, default in _RESIZE_18.items())
    )


def _no_zero_in_shape(node: ir.Node) -> bool:
    """A ``Reshape`` to a constant shape without a 0: ``allowzero`` changes nothing."""
    shape = ir.convenience.get_const_tensor(node.inputs[1]) if len(node.inputs) > 1 else None
    return shape is not None and 0 not in shape.numpy().reshape(-1).tolist()


def inferred_types(model: ir.Model) -> dict[str, str]:
    """Value name -> ONNX's name of its tensor type (``tensor(float)``), as ONNX's shape
    inference finds them on a copy of ``model`` without its weights: what the conversion
    checks each node's types against. The model is not changed; empty when inference fails."""
    with weights_as_inputs(model):
        proto = ir.to_proto(model)
    try:
        graph = onnx.shape_inference.infer_shapes(proto, strict_mode=False).graph
    except Exception:  # then only the types the model declares are known
        return {}
    types: dict[str, str] = {}
    for info in (*graph.value_info, *graph.input, *graph.output):
        kind = info.type.WhichOneof("value")
        if kind == "tensor_type" and info.type.tensor_type.elem_type:
            name = ir.DataType(info.type.tensor_type.elem_type).name.lower()
            types[info.name] = f"tensor({name})"
        elif kind is not None:
            types[info.name] = kind  # a sequence or an optional: never a tensor's name
    return types


def _type_name(value: ir.Value | None, types: Mapping[str, str]) -> str | None:
    """ONNX's name of a value's tensor type (``tensor(float)``), or None when unknown."""
    if value is None:
        return None
    if value.dtype is not None and value.name not in types:
        return f"tensor({value.dtype.name.lower()})"
    return types.get(str(value.name))


def _types_taken(node: ir.Node, target: int, types: Mapping[str, str]) -> bool:
    """Whether the operator's schema at ``target`` takes the node's input and output types
    (``types``: the inferred ones, for values the model leaves untyped)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, target)
    except onnx.defs.SchemaError:
        return False
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for formals, values in ((schema.inputs, node.inputs), (schema.outputs, node.outputs)):
        if len(values) > len(formals) and (not formals or not _variadic(formals[-1])):
            return False
        for index, value in enumerate(values):
            if value is None:
                continue
            formal = formals[min(index, len(formals) - 1)]  # a variadic last one repeats
            name = _type_name(value, types)
            if name is None or name not in allowed.get(formal.type_str, {formal.type_str}):
                return False
    return True


def _variadic(formal: onnx.defs.OpSchema.FormalParameter) -> bool:
    return formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic


def _same_below_18(node: ir.Node, target: int, types: Mapping[str, str]) -> bool:
    """An opset-18 node that reads as its version at ``target`` < 18: one of
    :data:`_SAME_SINCE` in the form it names, or an operator whose later versions only took
    more types (:data:`_TYPES_ONLY_SINCE`), on types ``target`` takes."""
    if node.domain not in ("", "ai.onnx"):
        return False
    since = _TYPES_ONLY_SINCE.get(node.op_type)
    form: Callable[[ir.Node], bool] = lambda n: True  # noqa: E731 - the default the table may replace
    if since is None and node.op_type in _SAME_SINCE:
        since, form = _SAME_SINCE[node.op_type]
    return (
        since is not None and target >= since and form(node) and _types_taken(node, target, types)
    )


def carried_over(node: ir.Node, target: int, types: Mapping[str, str]) -> bool:
    """Whether ``node`` passes the conversion down to ``target`` unchanged
    (:func:`hidden_from_converter` carries it): never what blocks a conversion. ``types``:
    :func:`inferred_types` of its model."""
    return target < 18 and (
        _same_below_18(node, target, types)
        or _reduction_axes(node, target, types) is not None
        or _split_sizes(node, target) is not None
    )


@contextlib.contextmanager
def hidden_from_converter(model: ir.Model, target: int) -> Iterator[None]:
    """While converting ``model`` down to ``target`` (< 18), the nodes that mean the same
    at ``target`` sit in a domain of their own, so the converter neither refuses the model
    ("No Adapter To Version 17 for Pad": a ``LocalResponseNorm`` at opset 17) nor touches
    them; they are put back after, converted or not. torch.onnx keeps such a model at
    opset 18 when the user asked 17."""
    hidden = False
    if 11 <= target < 15:
        _shape_ranges_sliced(model)
    if target < 18:
        types = inferred_types(model)
        for node in _nodes(model):
            if _same_below_18(node, target, types) or _axes_as_attribute(node, target, types):
                node.domain = _HIDDEN
                hidden = True
    if hidden:
        model.opset_imports[_HIDDEN] = 1
    try:
        yield
    finally:
        # found again: the C API's fallback converts a copy, whose nodes replace these
        for node in _nodes(model) if hidden else ():
            if node.domain == _HIDDEN:
                node.domain = ""
        model.opset_imports.pop(_HIDDEN, None)
        for function in model.functions.values():
            function.opset_imports.pop(_HIDDEN, None)


def _shape_ranges_sliced(model: ir.Model) -> None:
    """``Shape(x, start=i, end=j)`` (15; torch_lib's ``sym_size``) becomes ``Shape(x)`` and a
    ``Slice`` of it from ``i`` to ``j``, which opsets 11-14 read: the converter has no
    adapter for it."""
    for node in _nodes(model):
        if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or node.graph is None:
            continue
        start, end = _attr(node, "start"), _attr(node, "end")
        if start is None and end is None:
            continue
        graph = node.graph
        bounds = [
            ir.node("Constant", [], attributes={"value": ir.tensor([v], dtype=ir.DataType.INT64)})
            for v in (start or 0, end if end is not None else 2**62, 0)
        ]
        whole = ir.node("Shape", [node.inputs[0]])
        whole.outputs[0].dtype = ir.DataType.INT64
        graph.insert_before(node, [*bounds, whole])
        part = ir.node("Slice", [whole.outputs[0], *(b.outputs[0] for b in bounds)])
        graph.insert_after(node, part)
        node.outputs[0].replace_all_uses_with(part.outputs[0], replace_graph_outputs=True)
        part.outputs[0].dtype = ir.DataType.INT64
        part.outputs[0].shape = node.outputs[0].shape
        part.metadata_props.update(node.metadata_props)
        whole.metadata_props.update(node.metadata_props)
        graph.remove(node, safe=True)


def _reduction_axes(node: ir.Node, target: int, types: Mapping[str, str]) -> list[int] | None:
    """The axes of an opset-18 reduction (``ReduceSum``'s of 13) that reads as its
    version at ``target`` (11 to 17) with them as its ``axes`` attribute (12 and 13 only
    took more types; ``[]``: no axes, every one): the converter goes down to 13 only, with
    no adapter from 13 down. None when it does not (computed axes, types ``target`` lacks)."""
    reduction = node.op_type in _REDUCTIONS_18 or (target < 13 and node.op_type == "ReduceSum")
    if not reduction or node.domain not in ("", "ai.onnx") or not 11 <= target < 18:
        return None
    if _attr(node, "noop_with_empty_axes", 0) != 0 or not 1 <= len(node.inputs) <= 2:
        return None
    axes: list[int] = []
    if len(node.inputs) == 2 and node.inputs[1] is not None:
        constant = ir.convenience.get_const_tensor(node.inputs[1])
        if constant is None:
            return None
        axes = constant.numpy().reshape(-1).tolist()
    try:
        schema = onnx.defs.get_schema(node.op_type, target)
    except onnx.defs.SchemaError:
        return None
    (allowed,) = (set(c.allowed_type_strs) for c in schema.type_constraints)
    if {_type_name(node.inputs[0], types), _type_name(node.outputs[0], types)} - allowed:
        return None
    return axes


def _split_sizes(node: ir.Node, target: int) -> list[int] | None:
    """The constant sizes of an opset-13 ``Split`` that reads as its opset-11 version
    with them as its ``split`` attribute (12 only took more types), below 13."""
    if node.op_type != "Split" or node.domain not in ("", "ai.onnx") or not 11 <= target < 13:
        return None
    if "num_outputs" in node.attributes or len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    sizes = ir.convenience.get_const_tensor(node.inputs[1])
    return None if sizes is None else sizes.numpy().reshape(-1).tolist()


def _axes_as_attribute(node: ir.Node, target: int, types: Mapping[str, str]) -> bool:
    """Rewrite a reduction :func:`_reduction_axes` reads, or a ``Split``
    :func:`_split_sizes` reads, into its form at ``target``."""
    sizes = _split_sizes(node, target)
    if sizes is not None:
        node.attributes["split"] = ir.AttrInt64s("split", sizes)
        node.resize_inputs(1)
        return True
    axes = _reduction_axes(node, target, types)
    if axes is None:
        return False
    node.attributes.pop("noop_with_empty_axes", None)
    if axes:
        node.attributes["axes"] = ir.AttrInt64s("axes", axes)
    node.resize_inputs(1)
    return True


def _nodes(model: ir.Model) -> list[ir.Node]:
    return [
        node
        for graph in [model.graph, *model.functions.values()]
        for node in ir.traversal.RecursiveGraphIterator(graph)
    ]


def _split_sizes_as_attribute(node: ir.Node) -> None:
    """Below 13 ``Split`` takes its sizes as the ``split`` attribute: a constant sizes
    input (which the optimizer writes whatever the opset) moves there."""
    sizes = ir.convenience.get_const_tensor(node.inputs[1]) if node.inputs[1] else None
    if sizes is None:
        return  # (the checker then names the node)
    node.attributes["split"] = ir.AttrInt64s("split", sizes.numpy().reshape(-1).tolist())
    node.resize_inputs(1)


def split_sizes_as_input(node: ir.Node) -> None:
    """Replace ``Split``'s ``num_outputs`` by the sizes, when its input's axis is static."""
    parts = node.attributes.pop("num_outputs").value
    data = node.inputs[0]
    axis = node.attributes["axis"].value if "axis" in node.attributes else 0
    shape = data.shape if data is not None else None
    size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
    if not isinstance(size, int) or len(node.inputs) > 1:
        return
    chunk = -(-size // parts)  # ceil: the last part is smaller, as in opset 18
    sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
    if len(sizes) != len(node.outputs):
        return
    constant = ir.node(
        "Constant", [], attributes={"value": ir.tensor(sizes, dtype=ir.DataType.INT64)}
    )
    constant.outputs[0].name = f"{node.name}_sizes"
    node.graph.insert_before(node, constant)
    node.resize_inputs(2)
    node.replace_input_with(1, constant.outputs[0])
