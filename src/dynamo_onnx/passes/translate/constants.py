"""Tensors made from constants alone, in a dtype ONNX Runtime stores but computes nothing
with (float8, float4): computed by torch at export time and saved as initializers.

torch_lib makes ``torch.empty([2, 3], dtype=torch.float8_e4m3fn)`` an ``Expand`` of a
constant, and no ONNX Runtime kernel expands float8 or float4: the model would not load.
A tensor that depends on no input is the same at every run, so the exported model holds
it as a weight instead (torch.onnx's optimizer folds it the same way). ``empty``'s memory
is unspecified; it is exported as zeros, so the model is deterministic.
"""

from __future__ import annotations

import torch
import torch.fx

from dynamo_onnx.registry import target_name

__all__ = ["STORAGE_ONLY", "eager_constant"]

#: Dtypes ONNX Runtime's CPU kernels hold and cast but do not compute with.
STORAGE_ONLY = frozenset(
    {
        torch.float8_e4m3fn,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2,
        torch.float8_e5m2fnuz,
        torch.float8_e8m0fnu,
        torch.float4_e2m1fn_x2,
    }
)


def eager_constant(node: torch.fx.Node) -> torch.Tensor | None:
    """The node's tensor computed by torch, when it takes no FX value (only constants), has
    a static shape and a storage-only dtype; None otherwise (or if torch cannot compute
    it on the CPU, then translation goes on as usual)."""
    val = node.meta.get("val")
    if (
        node.all_input_nodes
        or not isinstance(val, torch.Tensor)
        or val.dtype not in STORAGE_ONLY
        or not all(isinstance(d, int) for d in val.shape)
    ):
        return None
    if target_name(node.target).split("::")[-1].startswith("empty"):
        zeros = torch.empty(tuple(val.shape), dtype=val.dtype)
        zeros.view(torch.uint8).zero_()  # every storage-only dtype is one byte
        return zeros
    kwargs = {**node.kwargs, "device": "cpu"} if "device" in node.kwargs else node.kwargs
    try:
        result = node.target(*node.args, **kwargs)
    except Exception:  # not computable here: the ONNX function's turn
        return None
    if not isinstance(result, torch.Tensor) or result.dtype != val.dtype:
        return None
    return result.contiguous()
