"""Dispatch: choose the ONNX function that translates one FX node."""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from dynamo_onnx.registry import ONNXFunction, OnnxRegistry, target_name
from dynamo_onnx.tensors import has_onnx_dtype, onnx_dtype

__all__ = ["Dispatch", "dispatch", "is_complex_node"]


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """The outcome of dispatching one node: the chosen function (or None) and why.

    ``mismatches`` is empty for a perfect match; otherwise it says, for the nearest
    candidate, which inputs or attributes do not fit its signature.
    """

    op: str
    function: ONNXFunction | None
    reason: str
    mismatches: tuple[str, ...] = ()
    candidates: int = 0


_ATTR_PY_TYPES: dict[ir.AttributeType, tuple[type, ...]] = {
    ir.AttributeType.INT: (int, bool),
    ir.AttributeType.FLOAT: (float, int),
    ir.AttributeType.STRING: (str,),
    ir.AttributeType.INTS: (list, tuple),
    ir.AttributeType.FLOATS: (list, tuple),
    ir.AttributeType.STRINGS: (list, tuple),
}


def _arg_type(arg: Any) -> ir.TypeProtocol | None:
    """The ONNX type an FX argument will have, when it is a node (None for constants)."""
    if not isinstance(arg, torch.fx.Node):
        return None
    val = arg.meta.get("val")
    if isinstance(val, torch.Tensor):
        dtype = val.dtype.to_real() if val.is_complex() else val.dtype
        return ir.TensorType(onnx_dtype(dtype)) if has_onnx_dtype(dtype) else None
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return ir.TensorType(ir.DataType.INT64)
    if isinstance(val, (torch.SymBool, bool)):
        return ir.TensorType(ir.DataType.BOOL)
    if isinstance(val, (torch.SymFloat, float)):
        return ir.TensorType(ir.DataType.FLOAT)
    return None


def _mismatches(node: torch.fx.Node, signature: ir.schemas.OpSignature) -> list[str]:
    """What in the node's arguments does not fit the signature (empty: a perfect match)."""
    problems: list[str] = []
    positional = list(node.args)
    bound: dict[str, ir.TypeProtocol] = {}
    for param in signature.params:
        if positional:
            arg = positional.pop(0)
        elif param.name in node.kwargs:
            arg = node.kwargs[param.name]
        else:
            continue
        if isinstance(param, ir.schemas.AttributeParameter):
            allowed = _ATTR_PY_TYPES.get(param.type)
            if (
                arg is not None
                and allowed
                and not isinstance(arg, allowed)
                and not isinstance(
                    arg, (torch.dtype, torch.device, torch.layout, torch.memory_format)
                )
            ):
                problems.append(
                    f"attribute {param.name} is {type(arg).__name__}, the function takes {param.type.name}"
                )
            continue
        arg_type = _arg_type(arg)
        if arg_type is None:
            continue
        constraint = param.type_constraint
        if arg_type not in constraint.allowed_types:
            problems.append(
                f"input {param.name} is {arg_type.dtype.name.lower()}, "
                f"not one of the types {constraint.name} allows"
            )
        previous = bound.setdefault(constraint.name, arg_type)
        if previous != arg_type:
            problems.append(
                f"input {param.name} is {arg_type.dtype.name.lower()} while another "
                f"{constraint.name} input is {previous.dtype.name.lower()}"
            )
    return problems


def _is_complex_arg(arg: Any) -> bool:
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        return isinstance(val, torch.Tensor) and val.is_complex()
    if isinstance(arg, (list, tuple)):
        return any(_is_complex_arg(a) for a in arg)
    return False


def is_complex_node(node: torch.fx.Node) -> bool:
    """Whether any tensor input of the node is complex-valued."""
    return any(_is_complex_arg(a) for a in node.args) or any(
        _is_complex_arg(a) for a in node.kwargs.values()
    )


def dispatch(node: torch.fx.Node, registry: OnnxRegistry, opset: int | None = None) -> Dispatch:
    """Pick the ONNX function for ``node`` in an export that targets ``opset``.

    Candidates are the operator's functions that exist at that opset (default: the
    registry's), custom ones first, then the newest; complex-valued ones for complex inputs. The first whose signature the node's dtypes and attributes fit is a
    perfect match; when none fits, the nearest (fewest mismatches) is chosen and the
    mismatches are returned so that translation can warn about them.
    """
    op = target_name(node.target)
    candidates = registry.functions_for(op, opset)
    if not candidates:
        return Dispatch(op, None, "no ONNX function is registered for this operator")
    complex_inputs = is_complex_node(node)
    matching = [c for c in candidates if c.is_complex == complex_inputs]
    if not matching:
        kind = "complex" if complex_inputs else "real"
        return Dispatch(op, None, f"no ONNX function handles {kind}-valued inputs")
    scored = []
    for index, candidate in enumerate(matching):
        signature = candidate.signature
        problems = _mismatches(node, signature) if signature is not None else []
        if not problems:
            kind = (
                "custom function"
                if candidate.is_custom
                else f"dynamo-onnx function for opset {candidate.opset_introduced}"
                if candidate.is_extra
                else "torch_lib function"
            )
            return Dispatch(op, candidate, f"perfect match ({kind})", (), len(matching))
        scored.append((len(problems), index, candidate, problems))
    _, _, nearest, problems = min(scored, key=lambda item: item[:2])
    if len(matching) == 1:
        # No choice was made: the annotation is likely narrower than what the function handles.
        detail = "; ".join(problems)
        return Dispatch(
            op, nearest, f"only function (its annotations do not list: {detail})", (), 1
        )
    return Dispatch(op, nearest, "nearest match", tuple(problems), len(matching))
