"""The FX rewrites of the decompose pass: what makes a captured graph translatable.

* ``aten.view`` becomes ``aten.reshape`` before decomposing. torch 2.13 re-traces the graph
  with fake tensors; some decompositions (attention) yield other strides than at capture,
  and a ``view`` that was valid then fails ("Cannot view a tensor with shape ... and strides
  ..."), which breaks the export of whole language models. ONNX has no strides: both become ``Reshape``.
* ``aten.to`` overloads (in the captured graph, not in the decomposed one) become
  ``prims.convert_element_type`` or disappear when they change nothing ONNX can see (device,
  layout); ``__and__``/``__or__``/``__xor__`` become their ``bitwise_*`` operators.
* After decomposing, explicit casts replace ATen's implicit type promotion, because ONNX
  operators require matching input types.
* A symbolic number (a SymInt, SymFloat or SymBool from a dynamic size) used by a tensor
  operator (``x * x.shape[0]``) is cast to the dtype the operator computes in: in ONNX it is
  a 0-d int64, float or bool tensor, and ``Mul`` will not take a float and an int64.
* A lifted constant's fresh copy and its ``detach_`` (``torch.tensor([])`` in a forward:
  a KV cache may start each layer so) become the constant itself. Re-tracing would
  functionalize the in-place ``detach_`` into a new constant that
  ``ExportedProgram.run_decompositions`` does not register ("Constant tensor
  lifted_tensor_4 is not in the constants dictionary"); for inference neither op does
  anything.
* ``squeeze`` of a dimension the graph does not have at size 1 (a dynamic one) squeezes
  nothing in torch but fails in ONNX: it becomes an ``alias``, or squeezes only the
  dimensions of size 1.
* An in-place operator on a tensor the graph itself made (an attention's ``bias += mask``,
  ``nn.ReLU(inplace=True)`` after a convolution) becomes its out-of-place form, and the
  later readers of that tensor read the new node: the graph is then functional and needs
  no re-trace, which would cost a second trace of the whole model.
  Only where nothing else can see the write: the tensor is no input, weight or view, no
  view is taken of it, it is not returned, and the out-of-place result has its dtype.
* Reshapes to a statically known shape get that shape instead of one with ``-1`` in it
  (``view(x, [1, -1, 128, 64])``): the ONNX optimizer can then see that a reshape to the
  shape its input already has is an ``Identity`` and remove it.

Each rewrite works in place on graph modules the pass owns (never the caller's program)
and returns how many nodes it changed. A graph module it changed gets its Python code again
(``recompile``), unless the caller asks ``recompile=False`` and recompiles once after several
rewrites: the code of a whole model is generated and compiled each time.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from dynamo_onnx.passes.fx import graph_modules
from dynamo_onnx.passes.fx import meta_value as _val

__all__ = [
    "recompile_all",
    "bypass_lifted_copies",
    "squeeze_only_size_one",
    "cast_symbolic_operands",
    "functionalize_inplace",
    "insert_type_promotion",
    "rewrite_aliases",
    "rewrite_views",
    "static_reshape_sizes",
]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

_BITWISE = {
    torch.ops.aten.__and__.Tensor: torch.ops.aten.bitwise_and.Tensor,
    torch.ops.aten.__or__.Tensor: torch.ops.aten.bitwise_or.Tensor,
    torch.ops.aten.__xor__.Tensor: torch.ops.aten.bitwise_xor.Tensor,
}
_TO = frozenset(
    {
        torch.ops.aten.to.dtype,
        torch.ops.aten.to.dtype_layout,
        torch.ops.aten.to.device,
        torch.ops.aten.to.other,
    }
)

_CAST = torch.ops.prims.convert_element_type.default
# Operators whose job is the cast itself.
_CASTS = frozenset({_CAST, torch.ops.aten._to_copy.default})

# Inputs that take part in no promotion: condition and mask arguments.
_NON_PROMOTING_ARGS: dict[Any, frozenset[int]] = {
    torch.ops.aten.where.self: frozenset({0}),
    torch.ops.aten.where.ScalarOther: frozenset({0}),
    torch.ops.aten.where.ScalarSelf: frozenset({0}),
    torch.ops.aten.masked_fill.Scalar: frozenset({1}),
    torch.ops.aten.masked_fill.Tensor: frozenset({1}),
}


# Reductions that accumulate bool and integer inputs in int64 (ATen promotes implicitly).
_ACCUMULATING = frozenset(
    {
        torch.ops.aten.cumsum.default,
        torch.ops.aten.cumprod.default,
        torch.ops.aten.sum.default,
        torch.ops.aten.sum.dim_IntList,
        torch.ops.aten.prod.default,
        torch.ops.aten.prod.dim_int,
    }
)


_RESHAPES = frozenset(
    {
        torch.ops.aten.reshape.default,
        torch.ops.aten.view.default,
        torch.ops.aten._unsafe_view.default,
    }
)


_FRESH = frozenset({torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.lift_fresh.default})
_DETACH = frozenset({torch.ops.aten.detach_.default, torch.ops.aten.detach.default})


def bypass_lifted_copies(ep: torch.export.ExportedProgram, *, recompile: bool = True) -> int:
    """Uses of ``lift_fresh_copy(constant)`` and of any ``detach``/``detach_`` chained on it
    read the constant instead; the copies are removed. Returns how many nodes went."""
    count = 0
    for gm in graph_modules(ep):
        constant_of: dict[torch.fx.Node, Any] = {}
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in _FRESH or (node.target in _DETACH and node.args[0] in constant_of):
                source = node.args[0]
                constant_of[node] = constant_of.get(source, source)
        # a chain that ends in an output stays: the signature names its last node
        kept = {constant_of[n] for n in constant_of if any(u.op == "output" for u in n.users)}
        chain = [n for n in constant_of if constant_of[n] not in kept]
        for node in reversed(chain):
            node.replace_all_uses_with(constant_of[node])
            gm.graph.erase_node(node)
            count += 1
        if chain and recompile:
            gm.recompile()
    return count


def functionalize_inplace(ep: torch.export.ExportedProgram, *, recompile: bool = True) -> int:
    """In-place operators writing a tensor no one else can see become out-of-place ones
    (module docstring); returns how many."""
    count = 0
    for gm in graph_modules(ep):
        position = {node: index for index, node in enumerate(gm.graph.nodes)}
        changed = False
        for node in list(gm.graph.nodes):
            functional = _out_of_place(node)
            if functional is None or not _only_writer(node, functional):
                continue
            written = node.args[0]
            with gm.graph.inserting_before(node):
                fresh = gm.graph.call_function(functional, node.args, node.kwargs)
            fresh.meta = dict(node.meta)
            for user in list(written.users):  # the readers after the write read its result
                if position.get(user, -1) > position[node]:
                    user.replace_input_with(written, fresh)
            node.replace_all_uses_with(fresh)
            gm.graph.erase_node(node)
            count += 1
            changed = True
        if changed and recompile:
            gm.recompile()
    return count


def _returns_alias(target: Any) -> bool:
    """Whether an operator's result may share memory with an argument (a view, or an
    in-place operator's ``self``); True for what has no ATen schema to say otherwise."""
    schema = getattr(target, "_schema", None)
    if schema is None or not hasattr(target, "overloadpacket"):  # not an ATen OpOverload
        return True
    return schema.is_mutable or any(r.alias_info is not None for r in schema.returns)


def _made_by_the_graph(value: torch.fx.Node) -> bool:
    """Whether ``value`` is a new tensor an operator made: no input, weight or view, also
    one output of several (``topk``'s values, through ``getitem``)."""
    if value.op != "call_function":
        return False
    if value.target is operator.getitem:
        source, index = value.args
        schema = getattr(getattr(source, "target", None), "_schema", None)
        return (
            isinstance(source, torch.fx.Node)
            and source.op == "call_function"
            and schema is not None
            and not schema.is_mutable
            and isinstance(index, int)
            and index < len(schema.returns)
            and schema.returns[index].alias_info is None
        )
    return not _returns_alias(value.target)


def _out_of_place(node: torch.fx.Node) -> Any:
    """``aten.add.Tensor`` for a node of ``aten.add_.Tensor`` (the in-place operator writes
    ``self`` only, its out-of-place twin exists and makes a new tensor), else None."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not hasattr(node.target, "overloadpacket"):
        return None
    name = schema.name.split("::")[-1]
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if not name.endswith("_") or [a.name for a in written] != ["self"]:
        return None
    packet = getattr(getattr(torch.ops, node.target.namespace), name[:-1], None)
    functional = getattr(packet, node.target._overloadname, None)
    if functional is None or _returns_alias(functional):
        return None
    arguments = [a.name for a in functional._schema.arguments]
    return functional if arguments == [a.name for a in schema.arguments] else None


def _only_writer(node: torch.fx.Node, functional: Any) -> bool:
    """Whether the tensor ``node`` writes is one the graph made (no input, weight or view),
    seen by no view and no output, and whether the out-of-place result keeps its dtype."""
    written = node.args[0]
    if not isinstance(written, torch.fx.Node) or not _made_by_the_graph(written):
        return False
    if any(u.op == "output" for u in (*written.users, *node.users)):
        return False  # the signature names the returned node
    if any(_returns_alias(u.target) for u in written.users if u is not node):
        return False
    value = _val(written)
    return isinstance(value, torch.Tensor) and _result_dtype(functional, node) == value.dtype


def _result_dtype(functional: Any, node: torch.fx.Node) -> torch.dtype | None:
    """The dtype ``functional`` makes from the node's arguments, computed on their trace-time
    (fake) values: an in-place ``add_`` keeps ``self``'s dtype, ``add`` promotes. None when
    it cannot be told."""
    args = torch.fx.node.map_arg(node.args, _val)
    kwargs = torch.fx.node.map_arg(node.kwargs, _val)
    mode = getattr(_val(node.args[0]), "fake_mode", None)
    if mode is None:
        return None
    try:
        with mode:
            out = functional(*args, **kwargs)
    except Exception:  # then the write is left to the re-trace
        return None
    return out.dtype if isinstance(out, torch.Tensor) else None


def recompile_all(ep: torch.export.ExportedProgram) -> None:
    """The Python code of every graph module of ``ep`` generated again from its graph: after
    rewrites run with ``recompile=False``, before the code runs (a re-trace) or is handed on."""
    for gm in graph_modules(ep):
        gm.recompile()


def rewrite_views(ep: torch.export.ExportedProgram) -> int:
    count = 0
    for gm in graph_modules(ep):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.view.default:
                node.target = torch.ops.aten.reshape.default
                count += 1
        gm.recompile()
    return count


def rewrite_aliases(ep: torch.export.ExportedProgram, *, recompile: bool = True) -> int:
    """``aten.to`` as a cast (or nothing), ``__and__`` and friends as ``bitwise_*``."""
    count = 0
    for gm in graph_modules(ep):
        changed = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in _BITWISE:
                node.target = _BITWISE[node.target]
                count += 1
                changed = True
            elif node.target in _TO:
                source, out = node.args[0], node.meta.get("val")
                if not isinstance(out, torch.Tensor) or not isinstance(source, torch.fx.Node):
                    continue
                if _val(source).dtype == out.dtype and all(u.op != "output" for u in node.users):
                    # (an output must stay a node of its own: the signature names it)
                    node.replace_all_uses_with(source)
                    gm.graph.erase_node(node)
                else:
                    node.target, node.args, node.kwargs = _CAST, (source, out.dtype), {}
                count += 1
                changed = True
        if changed and recompile:
            gm.recompile()
    return count


def static_reshape_sizes(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Give reshapes whose result has a static shape that shape, with no ``-1`` left."""
    count = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _RESHAPES or len(node.args) != 2:
            continue
        out, sizes = node.meta.get("val"), node.args[1]
        if not isinstance(out, torch.Tensor) or not isinstance(sizes, (list, tuple)):
            continue
        shape = list(out.shape)
        if list(sizes) != shape and all(type(d) is int for d in shape):
            node.args = (node.args[0], shape)
            count += 1
    if count and recompile:
        gm.recompile()
    return count


_SQUEEZES = (torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims)


def squeeze_only_size_one(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """``squeeze`` of named dimensions keeps only those the graph has at size 1.

    torch squeezes a named dimension only when its size is 1: traced with a dynamic
    dimension (at least 2, or a size-1 example traced at 2), ``x.squeeze(0)`` changes
    nothing, and the node stays in the graph. ONNX's ``Squeeze`` fails on a dimension that
    is not 1 ("Dimension of input 0 must be 1 instead of 2"), so the ONNX model would
    not run at any size but 1. The node becomes ``alias`` (an ``Identity``) when it
    removes nothing, or a squeeze of the static size-1 dimensions the result drops.
    """
    count = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SQUEEZES or not node.args:
            continue
        source, out = _val(node.args[0]), node.meta.get("val")
        if not isinstance(source, torch.Tensor) or not isinstance(out, torch.Tensor):
            continue
        rank = source.dim()
        asked = node.args[1] if len(node.args) > 1 else ()
        dims = [asked] if isinstance(asked, int) else list(asked)
        if rank == 0 or not all(isinstance(d, int) for d in dims):
            continue
        dims = sorted({d % rank for d in dims})
        ones = [d for d in dims if type(source.shape[d]) is int and source.shape[d] == 1]
        if ones == dims or out.dim() != rank - len(ones):
            continue  # squeezes what it names, or the result says otherwise: as it is
        if ones:
            node.target, node.args = torch.ops.aten.squeeze.dims, (node.args[0], ones)
        else:
            node.target, node.args = torch.ops.aten.alias.default, (node.args[0],)
        count += 1
    if count and recompile:
        gm.recompile()
    return count


def _promotion_dtype(node: torch.fx.Node, positions: list[int]) -> torch.dtype | None:
    """The dtype the promoting inputs must share, or None when nothing needs a cast."""
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return None
    tensors = [_val(node.args[i]) for i in positions]
    dtypes = {t.dtype for t in tensors}
    if out.dtype != torch.bool and not out.is_complex():
        # Arithmetic: inputs are computed in the output's dtype (int / int -> float too).
        target = out.dtype
    else:
        # Comparisons: inputs are promoted among themselves, scalars included.
        if len(dtypes) <= 1:
            return None
        probe = [
            torch.empty((1,) if t.dim() else (), dtype=t.dtype, device="meta") for t in tensors
        ]
        target = probe[0].dtype
        for other in probe[1:]:
            target = torch.promote_types(target, other.dtype)
    return None if dtypes == {target} else target


def insert_type_promotion(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Cast the tensor inputs of pointwise operators to the dtype ATen computes in."""
    count = 0
    for node in list(gm.graph.nodes):
        target = node.target
        if node.op != "call_function" or not hasattr(target, "tags"):
            continue
        if target in _CASTS or node.kwargs.get("dtype") is not None:
            continue
        if target in _ACCUMULATING:
            positions = [0]
            out = node.meta.get("val")
            dtype = out.dtype if isinstance(out, torch.Tensor) else None
            if dtype is None or _val(node.args[0]).dtype == dtype:
                continue
        elif torch.Tag.pointwise in target.tags:
            skip = _NON_PROMOTING_ARGS.get(target, frozenset())
            positions = [
                i
                for i, a in enumerate(node.args)
                if i not in skip and isinstance(_val(a), torch.Tensor)
            ]
            if not positions or any(_val(node.args[i]).is_complex() for i in positions):
                continue
            dtype = _promotion_dtype(node, positions)
        else:
            continue
        if dtype is None:
            continue
        args = list(node.args)
        for i in positions:
            arg = args[i]
            if _val(arg).dtype == dtype:
                continue
            args[i] = _cast_before(gm, node, arg, dtype, _val(arg).to(dtype))
            count += 1
        node.args = tuple(args)
    if count and recompile:
        gm.recompile()
    return count


def _cast_before(
    gm: torch.fx.GraphModule, node: torch.fx.Node, arg: Any, dtype: torch.dtype, val: Any
) -> torch.fx.Node:
    """A cast of ``arg`` to ``dtype`` inserted before ``node``, with the node's origin (its
    findings and ONNX nodes point at the user's line) and ``val`` as its value."""
    with gm.graph.inserting_before(node):
        cast = gm.graph.call_function(_CAST, (arg, dtype))
    cast.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    cast.meta["val"] = val
    return cast


def _integer_argument(target: Any, index: int) -> bool:
    """Whether the operator's schema takes an integer (a size, an index) at ``index``:
    ``int``, ``SymInt`` or an optional one (``slice_scatter``'s ``SymInt? start``, which
    torch prints as ``Optional[int]``)."""
    schema = getattr(target, "_schema", None)
    arguments = schema.arguments if schema is not None else []
    if index >= len(arguments):
        return False
    kind = arguments[index].type
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, (torch.IntType, torch.SymIntType))


def cast_symbolic_operands(gm: torch.fx.GraphModule, *, recompile: bool = True) -> int:
    """Cast symbolic numbers used by tensor operators to the dtype the operator computes in.

    Arithmetic computes in the output's dtype; a comparison in its tensor operand's dtype.
    A size or index argument (``SymInt`` in the schema: ``narrow``'s length, ``slice``'s
    end) is an integer whatever the tensor's dtype, and stays one.
    """
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not hasattr(node.target, "tags"):
            continue
        if node.target in _CASTS:
            continue
        out = node.meta.get("val")
        if not isinstance(out, torch.Tensor):
            continue
        symbolic = [
            i
            for i, a in enumerate(node.args)
            if isinstance(a, torch.fx.Node)
            and isinstance(_val(a), _SYMBOLIC)
            and not _integer_argument(node.target, i)
        ]
        if not symbolic:
            continue
        tensors = [_val(a) for a in node.args if isinstance(_val(a), torch.Tensor)]
        dtype = out.dtype if out.dtype != torch.bool or not tensors else tensors[0].dtype
        if out.is_complex():
            continue
        args = list(node.args)
        for i in symbolic:
            scalar = torch.empty((), dtype=dtype, device="meta")
            args[i] = _cast_before(gm, node, args[i], dtype, scalar)
            count += 1
        node.args = tuple(args)
    if count and recompile:
        gm.recompile()
    return count
