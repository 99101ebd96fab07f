"""The ``*_copy`` forms of view operators (``permute_copy``, ``narrow_copy``...).

Functionalization and some OpInfo operators produce them: the same result as the view, as a
new tensor. ONNX has no views, so each translates exactly as its view does: the registry
gives it the view's torch_lib functions when it has no function of its own.
"""

from __future__ import annotations

__all__ = ["COPY_OF_VIEW"]

#: ``aten::<view>_copy`` -> ``aten::<view>``
COPY_OF_VIEW: dict[str, str] = {
    "aten::alias_copy": "aten::alias",
    "aten::as_strided_copy": "aten::as_strided",
    "aten::detach_copy": "aten::detach",
    "aten::expand_copy": "aten::expand",
    "aten::narrow_copy": "aten::narrow",
    "aten::permute_copy": "aten::permute",
    "aten::select_copy.int": "aten::select.int",
    "aten::slice_copy.Tensor": "aten::slice.Tensor",
    "aten::split_copy.Tensor": "aten::split.Tensor",
    "aten::split_with_sizes_copy": "aten::split_with_sizes",
    "aten::squeeze_copy": "aten::squeeze",
    "aten::squeeze_copy.dim": "aten::squeeze.dim",
    "aten::squeeze_copy.dims": "aten::squeeze.dims",
    "aten::t_copy": "aten::t",
    "aten::transpose_copy.int": "aten::transpose.int",
    "aten::unbind_copy.int": "aten::unbind.int",
    "aten::unfold_copy": "aten::unfold",
    "aten::unsqueeze_copy": "aten::unsqueeze",
}
