"""``torch.onnx.ops``: the ONNX nodes a model asks for by name.

Code written for ``torch.onnx.export`` emits ONNX nodes from its ``forward`` with
``torch.onnx.ops.symbolic`` / ``symbolic_multi_out`` (any operator, any domain) and
``torch.onnx.ops.rotary_embedding`` / ``attention`` (ONNX's ``RotaryEmbedding`` and
``Attention``, opset 23). torch.export keeps each call as one operator:

* ``onnx_symbolic::_symbolic`` and ``onnx_symbolic::_symbolic_multi_out``, whose eager and
  fake kernels return zeros of the declared dtype and shape: placeholders, never to be traced
  through. They carry the node: domain, op_type, the attributes encoded as parallel lists
  (``attr_keys``, ``attr_types`` of "i", "f", "s", "is", "fs", "ss", ``attr_pos`` slices
  into ``attr_ints``/``attr_floats``/``attr_strs``), the output dtypes as ONNX type numbers,
  the opset version of the domain and metadata properties. Each becomes that one node; its
  outputs are typed by the dtypes and shapes the call declared (the FX node's value).
* ``onnx::RotaryEmbedding.opset23`` and ``onnx::Attention.opset23``: ONNX-standard operators
  with a torch implementation. At opset 23 and newer they are the ONNX node; below, the
  registry has no function for them and the decompose pass lowers them with torch's own
  implementation of the ONNX semantics (``torch.onnx.ops.aten_decompositions()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import onnx_ir as ir
from onnxscript import INT64, opset23
from onnxscript import values as onnxscript_values
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TTensor

from dynamo_onnx.defaults import TORCHLIB_OPSET

__all__ = [
    "attention_23",
    "decode_attributes",
    "rotary_embedding_23",
    "symbolic",
    "symbolic_multi_out",
]

#: The opset translation writes the default domain at (torch_lib's, converted to the target
#: afterwards): a standard operator named without a version is recorded with its schema there.
_DEFAULT_DOMAIN_OPSET = TORCHLIB_OPSET
_DEFAULT_DOMAINS = ("", "ai.onnx")

_SCALAR_KINDS = {"i": int, "f": float, "s": str}
_LIST_KINDS = {"is": int, "fs": float, "ss": str}


def decode_attributes(
    keys: Sequence[str],
    kinds: Sequence[str],
    positions: Sequence[Sequence[int]],
    ints: Sequence[int],
    floats: Sequence[float],
    strings: Sequence[str],
) -> dict[str, Any]:
    """The attributes ``torch.onnx.ops.symbolic`` encoded as lists (FX has no dict), by name.

    ``kinds[i]`` says which list ``keys[i]``'s value is in and whether it is one element
    (``"i"``, ``"f"``, ``"s"``) or the slice ``positions[i]`` (``"is"``, ``"fs"``, ``"ss"``).
    """
    pools = {int: list(ints), float: list(floats), str: list(strings)}
    attributes: dict[str, Any] = {}
    for key, kind, (start, end) in zip(keys, kinds, positions, strict=True):
        if kind in _SCALAR_KINDS:
            attributes[key] = pools[_SCALAR_KINDS[kind]][start]
        elif kind in _LIST_KINDS:
            attributes[key] = pools[_LIST_KINDS[kind]][start:end]
        else:
            raise ValueError(f"attribute {key!r} has the unknown encoding {kind!r}")
    return attributes


_ATTRIBUTE_TYPES = {
    int: ir.AttributeType.INT,
    float: ir.AttributeType.FLOAT,
    str: ir.AttributeType.STRING,
}
_LIST_ATTRIBUTE_TYPES = {
    int: ir.AttributeType.INTS,
    float: ir.AttributeType.FLOATS,
    str: ir.AttributeType.STRINGS,
}


def _attribute_type(value: Any) -> ir.AttributeType:
    if isinstance(value, list):
        return _LIST_ATTRIBUTE_TYPES[type(value[0])]
    return _ATTRIBUTE_TYPES[type(value)]


def _operator(
    domain: str,
    op_type: str,
    version: int | None,
    inputs: int,
    attributes: dict[str, Any],
    outputs: int,
) -> onnxscript_values.Op:
    """An onnxscript op for a node no schema describes: its signature is the call itself
    (each input of any tensor type, optional; the attributes with their values' types), so
    the evaluator that records the translation emits it like any other operator."""
    any_tensor = ir.schemas.TypeConstraintParam.any_tensor
    params: list[ir.schemas.Parameter | ir.schemas.AttributeParameter] = [
        ir.schemas.Parameter(f"input_{i}", any_tensor(f"T{i}"), required=False, variadic=False)
        for i in range(inputs)
    ]
    params += [
        ir.schemas.AttributeParameter(name, _attribute_type(value), required=True)
        for name, value in attributes.items()
    ]
    results = [
        ir.schemas.Parameter(f"output_{i}", any_tensor(f"O{i}"), required=True, variadic=False)
        for i in range(outputs)
    ]
    # A standard operator (``"Reshape"``, domain "") is recorded with ONNX's schema at the
    # opset: the call's, or translation's when it gives none (as torch.onnx leaves it to the
    # model's). Any other has the signature above; its node keeps the call's version, None
    # included, which becomes the domain's import (1 for None).
    if version is None and domain in _DEFAULT_DOMAINS:
        version = _DEFAULT_DOMAIN_OPSET
    op = onnxscript_values.Op(onnxscript_values.Opset(domain, version or 1), op_type)
    op.op_signature = ir.schemas.OpSignature(
        domain,
        op_type,
        "",
        params,
        results,
        since_version=version,  # type: ignore[arg-type]
    )
    return op


def _symbolic_node(
    inputs: Sequence[Any],
    op_type: str,
    dtypes: Sequence[int],
    attributes: dict[str, Any],
    metadata: dict[str, str],
    domain: str,
    version: int | None,
) -> list[ir.Value]:
    """The node a ``torch.onnx.ops.symbolic*`` call names, each output of the ONNX type the
    call declared (the shapes come from the FX node, which holds the declared ones)."""
    op = _operator(domain, op_type, version, len(inputs), attributes, len(dtypes))
    outputs = op(*inputs, **attributes)
    values = list(outputs) if isinstance(outputs, tuple) else [outputs]
    node = values[0].producer()
    if node is not None:
        node.metadata_props.update(metadata)
    for value, dtype in zip(values, dtypes):
        value.dtype = ir.DataType(dtype)
    return values


def symbolic(
    inputs: Sequence[TTensor],
    op_type: str,
    onnx_dtype: int,
    *,
    shape: Sequence[INT64],
    attr_keys: Sequence[str],
    attr_types: Sequence[str],
    attr_pos: Sequence[Sequence[int]],
    attr_ints: Sequence[int],
    attr_floats: Sequence[float],
    attr_strs: Sequence[str],
    metadata_props_keys: Sequence[str] = (),
    metadata_props_values: Sequence[str] = (),
    domain: str = "",
    version: Optional[int] = None,  # onnxscript reads these annotations
) -> TTensor:
    """_symbolic(Tensor?[] inputs, str op_type, int onnx_dtype, *, SymInt[] shape, ...) -> Tensor"""
    del shape  # the FX node's value has it, with the user's dim names
    attributes = decode_attributes(
        attr_keys, attr_types, attr_pos, attr_ints, attr_floats, attr_strs
    )
    metadata = dict(zip(metadata_props_keys, metadata_props_values))
    return _symbolic_node(inputs, op_type, [onnx_dtype], attributes, metadata, domain, version)[0]


def symbolic_multi_out(
    inputs: Sequence[TTensor],
    op_type: str,
    onnx_dtypes: Sequence[int],
    *,
    shapes: Sequence[Sequence[INT64]],
    attr_keys: Sequence[str],
    attr_types: Sequence[str],
    attr_pos: Sequence[Sequence[int]],
    attr_ints: Sequence[int],
    attr_floats: Sequence[float],
    attr_strs: Sequence[str],
    metadata_props_keys: Sequence[str] = (),
    metadata_props_values: Sequence[str] = (),
    domain: str = "",
    version: Optional[int] = None,
) -> Sequence[TTensor]:
    """_symbolic_multi_out(Tensor?[] inputs, str op_type, int[] onnx_dtypes, *,
    SymInt[][] shapes, ...) -> Tensor[]"""
    del shapes
    attributes = decode_attributes(
        attr_keys, attr_types, attr_pos, attr_ints, attr_floats, attr_strs
    )
    metadata = dict(zip(metadata_props_keys, metadata_props_values))
    return _symbolic_node(inputs, op_type, onnx_dtypes, attributes, metadata, domain, version)


def rotary_embedding_23(
    x: TFloat,
    cos_cache: TFloat,
    sin_cache: TFloat,
    position_ids: TTensor | None = None,
    *,
    interleaved: bool = False,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
) -> TFloat:
    """RotaryEmbedding-23(X, cos_cache, sin_cache, position_ids?) -> Y"""
    return opset23.RotaryEmbedding(
        x,
        cos_cache,
        sin_cache,
        position_ids,
        interleaved=int(interleaved),
        num_heads=num_heads or None,  # 0 is torch's "not given" (4-D inputs carry it)
        rotary_embedding_dim=rotary_embedding_dim,
    )


def attention_23(
    q: TFloat,
    k: TFloat,
    v: TFloat,
    attn_mask: TTensor | None = None,
    past_key: TFloat | None = None,
    past_value: TFloat | None = None,
    *,
    is_causal: bool = False,
    kv_num_heads: int = 0,
    q_num_heads: int = 0,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
) -> tuple[TFloat, TFloat, TFloat, TFloat]:
    """Attention-23(Q, K, V, attn_mask?, past_key?, past_value?) -> (Y, present_key,
    present_value, qk_matmul_output): the four outputs torch's op returns."""
    return opset23.Attention(
        q,
        k,
        v,
        attn_mask,
        past_key,
        past_value,
        is_causal=int(is_causal),
        # 0 is torch's "not given": ONNX wants the head counts for 3-D inputs only, and
        # refuses them (even 0) on 4-D ones from opset 24's shape inference on
        kv_num_heads=kv_num_heads or None,
        q_num_heads=q_num_heads or None,
        qk_matmul_output_mode=qk_matmul_output_mode,
        scale=scale,
        softcap=softcap,
        softmax_precision=softmax_precision,
    )
